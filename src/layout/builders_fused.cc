// Layout builders: fused tensors (parts concatenated along a dim), vLLM qkv with grouped-query
// attention and gate_up.
#include <algorithm>
#include <array>
#include <string>
#include <utility>
#include <vector>

#include "layout/builders.h"
#include "layout/builders_internal.h"

namespace wsync {
using namespace layout_internal;  // the builders' shared helpers (builders_internal.h)

namespace {

// One part of a concatenation along a dim: `box` is the part's local slice of its global tensor.
struct ConcatPart {
  const std::string* tensor = nullptr;
  const Dims* shape = nullptr;
  Box box;
};

// Declares the parts' tensors and appends one buffer holding their boxes concatenated along
// `dim`, row-major over the local shape. Callers have validated everything else: the boxes have
// equal extents except along `dim`, names are distinct, the local size fits int64.
Result<int32_t> appendConcat(Registration& reg, const char* fn, const std::string& buffer_name,
                             const ConcatPart* parts, size_t n, int dim, DType dtype,
                             MemoryKind memory) {
  IdList ids(n);
  WSYNC_RETURN_IF_ERROR(declareAll(
      reg, fn, n, [&](size_t i) -> const std::string& { return *parts[i].tensor; },
      [&](size_t i) -> const Dims& { return *parts[i].shape; }, ids));
  Dims local = parts[0].box.extent;
  local[dim] = 0;
  size_t non_empty = 0;
  for (size_t i = 0; i < n; ++i) {
    local[dim] += parts[i].box.extent[dim];
    if (!parts[i].box.empty()) ++non_empty;
  }
  const Dims strides = rowMajorStrides(local);
  PieceList pieces;
  pieces.reserve(non_empty);
  int64_t along = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!parts[i].box.empty()) {
      Piece& p = pieces.emplace_back();
      p.tensor = ids[i];
      p.box = parts[i].box;
      p.local_offset = along * strides[dim];
      p.local_strides = strides;
    }
    along += parts[i].box.extent[dim];
  }
  return appendBuffer(reg, buffer_name, dtype, memory, local.product(), std::move(pieces));
}

}  // namespace

Result<int32_t> addFused(Registration& reg, const std::string& buffer_name,
                         const std::vector<FusedPart>& parts, int dim, DType dtype, int tp_size,
                         int tp_rank, SplitRule rule, MemoryKind memory) {
  auto invalid = [&](const std::string& why) {
    return invalidArgument("addFused(buffer " + quoted(buffer_name) + ", " +
                           std::to_string(parts.size()) + " parts, dim " + std::to_string(dim) +
                           ", tp_size " + std::to_string(tp_size) + ", tp_rank " +
                           std::to_string(tp_rank) + ", " + splitRuleName(rule) + "): " + why);
  };
  if (buffer_name.empty()) return invalid("empty buffer name");
  if (std::string why = kindProblem(dtype, memory); !why.empty()) return invalid(why);
  if (parts.empty()) return invalid("no parts");
  const Dims& first = parts[0].shape;
  if (dim < 0 || dim >= first.rank) {
    return invalid("dim outside [0, rank) of part " + quoted(parts[0].tensor) + " shape " +
                   first.toString());
  }
  std::vector<ConcatPart> concat(parts.size());
  int64_t along = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const FusedPart& p = parts[i];
    if (p.tensor.empty()) return invalid("part " + std::to_string(i) + " has an empty name");
    if (std::string why = shapeProblem(p.shape, 1); !why.empty()) {
      return invalid("part " + quoted(p.tensor) + " shape " + p.shape.toString() + ": " + why);
    }
    bool consistent = p.shape.rank == first.rank;
    for (int d = 0; consistent && d < first.rank; ++d) {
      consistent = d == dim || p.shape[d] == first[d];
    }
    if (!consistent) {
      return invalid("part " + quoted(p.tensor) + " shape " + p.shape.toString() +
                     " differs from part " + quoted(parts[0].tensor) + " shape " +
                     first.toString() + " outside dim " + std::to_string(dim));
    }
    Result<Box> box = splitBox(p.shape, dim, tp_size, tp_rank, rule);
    if (!box.isOk()) {
      return box.status().withContext(invalid("part " + quoted(p.tensor)).message());
    }
    if (addOverflows(along, box->extent[dim], &along)) return invalid("local size overflows");
    concat[i] = {&p.tensor, &p.shape, *box};
  }
  Dims local = first;
  local[dim] = along;
  int64_t local_elements = 1;
  for (int d = 0; d < local.rank; ++d) {
    if (mulOverflows(local_elements, local[d], &local_elements)) {
      return invalid("local size overflows int64");
    }
  }
  if (const std::string* dup = duplicateName(
          parts.size(), [&](size_t i) -> const std::string& { return parts[i].tensor; })) {
    return invalid("part " + quoted(*dup) + " appears twice");
  }
  return appendConcat(reg, "addFused", buffer_name, concat.data(), concat.size(), dim, dtype,
                      memory);
}

Result<int32_t> addQkv(Registration& reg, const std::string& buffer_name, const std::string& q,
                       const std::string& k, const std::string& v, int num_heads, int num_kv_heads,
                       int head_dim, int hidden, DType dtype, int tp_size, int tp_rank,
                       MemoryKind memory) {
  auto invalid = [&](const std::string& why) {
    return invalidArgument(
        "addQkv(buffer " + quoted(buffer_name) + ", q " + quoted(q) + ", k " + quoted(k) + ", v " +
        quoted(v) + ", num_heads " + std::to_string(num_heads) + ", num_kv_heads " +
        std::to_string(num_kv_heads) + ", head_dim " + std::to_string(head_dim) + ", hidden " +
        std::to_string(hidden) + ", tp_size " + std::to_string(tp_size) + ", tp_rank " +
        std::to_string(tp_rank) + "): " + why);
  };
  if (buffer_name.empty() || q.empty() || k.empty() || v.empty()) return invalid("empty name");
  if (q == k || q == v || k == v) return invalid("q, k and v must be distinct tensors");
  if (std::string why = kindProblem(dtype, memory); !why.empty()) return invalid(why);
  if (num_heads < 1 || num_kv_heads < 1 || head_dim < 1 || hidden < 1) {
    return invalid("head counts, head_dim and hidden must be >= 1");
  }
  if (tp_size < 1) return invalid("tp_size must be >= 1");
  if (tp_rank < 0 || tp_rank >= tp_size) return invalid("tp_rank outside [0, tp_size)");
  if (num_heads % tp_size != 0) return invalid("num_heads is not divisible by tp_size");
  const int64_t q_heads = num_heads / tp_size;
  int64_t kv_heads = 0;  // kv heads per rank
  int64_t kv_first = 0;  // this rank's first kv head
  if (tp_size <= num_kv_heads) {
    if (num_kv_heads % tp_size != 0) return invalid("num_kv_heads is not divisible by tp_size");
    kv_heads = num_kv_heads / tp_size;
    kv_first = tp_rank * kv_heads;
  } else {
    if (tp_size % num_kv_heads != 0) {
      return invalid("tp_size > num_kv_heads but tp_size is not a multiple of num_kv_heads");
    }
    kv_heads = 1;
    kv_first = tp_rank / (tp_size / num_kv_heads);
  }
  const Dims q_shape{int64_t{num_heads} * head_dim, hidden};
  const Dims kv_shape{int64_t{num_kv_heads} * head_dim, hidden};
  const std::array<ConcatPart, 3> parts = {
      ConcatPart{&q, &q_shape,
                 Box{{tp_rank * q_heads * head_dim, 0}, {q_heads * head_dim, hidden}}},
      ConcatPart{&k, &kv_shape, Box{{kv_first * head_dim, 0}, {kv_heads * head_dim, hidden}}},
      ConcatPart{&v, &kv_shape, Box{{kv_first * head_dim, 0}, {kv_heads * head_dim, hidden}}}};
  return appendConcat(reg, "addQkv", buffer_name, parts.data(), parts.size(), 0, dtype, memory);
}

Result<int32_t> addGateUp(Registration& reg, const std::string& buffer_name,
                          const std::string& gate, const std::string& up, int64_t intermediate,
                          int64_t hidden, DType dtype, int tp_size, int tp_rank,
                          MemoryKind memory) {
  auto invalid = [&](const std::string& why) {
    return invalidArgument("addGateUp(buffer " + quoted(buffer_name) + ", gate " + quoted(gate) +
                           ", up " + quoted(up) + ", intermediate " + std::to_string(intermediate) +
                           ", hidden " + std::to_string(hidden) + ", tp_size " +
                           std::to_string(tp_size) + ", tp_rank " + std::to_string(tp_rank) +
                           "): " + why);
  };
  if (buffer_name.empty() || gate.empty() || up.empty()) return invalid("empty name");
  if (gate == up) return invalid("gate and up must be distinct tensors");
  if (std::string why = kindProblem(dtype, memory); !why.empty()) return invalid(why);
  const Dims shape{intermediate, hidden};
  if (std::string why = shapeProblem(shape, 2); !why.empty()) {
    return invalid("shape " + shape.toString() + ": " + why);
  }
  Result<Box> box = splitBox(shape, 0, tp_size, tp_rank, SplitRule::kEven);
  if (!box.isOk()) return invalid(box.status().message());
  const std::array<ConcatPart, 2> parts = {ConcatPart{&gate, &shape, *box},
                                           ConcatPart{&up, &shape, *box}};
  return appendConcat(reg, "addGateUp", buffer_name, parts.data(), parts.size(), 0, dtype, memory);
}

}  // namespace wsync
