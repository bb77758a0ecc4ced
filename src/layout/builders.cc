#include "layout/builders.h"

#include <algorithm>
#include <array>
#include <string_view>
#include <utility>

namespace wsync {
namespace {

// Status messages are built only on the error path: the hot path formats nothing.

std::string quoted(std::string_view s) {
  std::string q;
  q.reserve(s.size() + 2);
  q += '"';
  q += s;
  q += '"';
  return q;
}

bool mulOverflows(int64_t a, int64_t b, int64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}
bool addOverflows(int64_t a, int64_t b, int64_t* out) {
  return __builtin_add_overflow(a, b, out);
}

// Empty when `shape` has a rank in [min_rank, kMaxRank], every dim >= 1 and a product that fits
// in int64; otherwise the reason.
std::string shapeProblem(const Dims& shape, int min_rank) {
  if (shape.rank > kMaxRank) {
    return "rank " + std::to_string(shape.rank) + " exceeds kMaxRank " + std::to_string(kMaxRank);
  }
  if (shape.rank < min_rank) {
    return "rank " + std::to_string(shape.rank) + " is below " + std::to_string(min_rank);
  }
  int64_t product = 1;
  for (int d = 0; d < shape.rank; ++d) {
    if (shape[d] < 1) {
      return "dim " + std::to_string(d) + " has size " + std::to_string(shape[d]) +
             " (sizes must be >= 1)";
    }
    if (mulOverflows(product, shape[d], &product)) return "element count overflows int64";
  }
  return {};
}

// Empty when dtype and memory are valid enum values; otherwise the reason.
std::string kindProblem(DType dtype, MemoryKind memory) {
  if (!validDType(static_cast<int>(dtype))) {
    return "unknown dtype " + std::to_string(static_cast<int>(dtype));
  }
  if (memory != MemoryKind::kHost && memory != MemoryKind::kDevice) {
    return "unknown memory kind " + std::to_string(static_cast<int>(memory));
  }
  return {};
}

// Tensor ids of one call, inline for the usual handful (qkv, gate_up, a few experts).
class IdList {
 public:
  explicit IdList(size_t n) : n_(n) {
    if (n > kInline) heap_.resize(n);
  }
  int32_t& operator[](size_t i) { return n_ > kInline ? heap_[i] : inline_[i]; }

 private:
  static constexpr size_t kInline = 8;
  size_t n_;
  std::array<int32_t, kInline> inline_{};
  std::vector<int32_t> heap_;
};

// Removes the tensors declared after the first `keep` (a failed call's own declarations) and makes
// the registration's name index forget them: declareTensor rebuilds the index when its size differs
// from tensors.size(), so one lookup of an existing tensor rebuilds it now (and declares nothing).
void undeclareAfter(Registration& reg, size_t keep) {
  if (reg.tensors.size() == keep) return;
  reg.tensors.resize(keep);
  if (!reg.tensors.empty()) {
    const TensorDecl first = reg.tensors.front();
    reg.declareTensor(first.name, first.shape);
  }
}

Status shapeConflict(const Registration& reg, const char* fn, const std::string& name,
                     const Dims& shape) {
  std::string existing = "another shape";
  for (const TensorDecl& t : reg.tensors) {
    if (t.name == name) {
      existing = t.shape.toString();
      break;
    }
  }
  return mismatch(std::string(fn) + ": tensor " + quoted(name) +
                  " is already declared with shape " + existing +
                  ", this layout declares it with shape " + shape.toString());
}

// Declares tensors name_at(i) / shape_at(i) for i < n into ids. On a shape conflict, undoes this
// call's declarations and returns MISMATCH naming the tensor and both shapes.
template <typename NameAt, typename ShapeAt>
Status declareAll(Registration& reg, const char* fn, size_t n, NameAt name_at, ShapeAt shape_at,
                  IdList& ids) {
  const size_t before = reg.tensors.size();
  for (size_t i = 0; i < n; ++i) {
    const int32_t id = reg.declareTensor(name_at(i), shape_at(i));
    if (id < 0) {
      Status s = shapeConflict(reg, fn, name_at(i), shape_at(i));
      undeclareAfter(reg, before);
      return s;
    }
    ids[i] = id;
  }
  return {};
}

Result<int32_t> declareOne(Registration& reg, const char* fn, const std::string& name,
                           const Dims& shape) {
  const int32_t id = reg.declareTensor(name, shape);
  if (id < 0) return shapeConflict(reg, fn, name, shape);
  return id;
}

// The first name that occurs twice among name_at(i), i < n, or nullptr.
template <typename NameAt>
const std::string* duplicateName(size_t n, NameAt name_at) {
  if (n <= 16) {
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = i + 1; j < n; ++j) {
        if (name_at(i) == name_at(j)) return &name_at(i);
      }
    }
    return nullptr;
  }
  std::vector<const std::string*> sorted(n);
  for (size_t i = 0; i < n; ++i)
    sorted[i] = &name_at(i);
  std::sort(sorted.begin(), sorted.end(),
            [](const std::string* a, const std::string* b) { return *a < *b; });
  for (size_t i = 1; i < n; ++i) {
    if (*sorted[i] == *sorted[i - 1]) return sorted[i];
  }
  return nullptr;
}

int32_t appendBuffer(Registration& reg, const std::string& name, DType dtype, MemoryKind memory,
                     int64_t num_elements, PieceList&& pieces) {
  const auto index = static_cast<int32_t>(reg.buffers.size());
  LocalBuffer& b = reg.buffers.emplace_back();
  b.name = name;
  b.dtype = dtype;
  b.memory = memory;
  b.num_elements = num_elements;
  b.pieces = std::move(pieces);
  return index;
}

// Visits the minimal boxes covering elements [b, e) of the row-major flattening of `shape`
// (0 <= b <= e <= numel, strides = rowMajorStrides(shape)): visit(box, flat index of the box's
// first element). At most 2*(rank-1)+1 boxes, in increasing flat order.
//  Ascending: from the innermost dim outwards, finish the partial block of each dim so that the
//  cursor reaches a multiple of the next outer stride (one box per dim). Stops at the first dim
//  whose block extends past e.
//  Descending: from that dim inwards, take whole indices of each dim up to e (one box per dim).
template <typename Visit>
void forEachFlatBox(const Dims& shape, const Dims& strides, int64_t b, int64_t e, Visit visit) {
  if (b >= e) return;
  const int rank = shape.rank;
  if (rank == 0) {
    visit(Box{}, b);
    return;
  }
  // The box at dim k covering [cur, end): indices of dims < k fixed by cur, dim k partial, dims
  // > k whole. Requires cur and end multiples of strides[k] inside one block of strides[k-1].
  auto boxAt = [&](int k, int64_t cur, int64_t end) {
    Box box;
    box.offset = Dims::zeros(rank);
    box.extent = shape;
    for (int d = 0; d <= k; ++d) {
      box.offset[d] = (cur / strides[d]) % shape[d];
      box.extent[d] = 1;
    }
    box.extent[k] = (end - cur) / strides[k];
    return box;
  };
  int64_t cur = b;
  int level = 0;  // where the descending phase starts
  for (int k = rank - 1; k >= 1; --k) {
    const int64_t block = strides[k - 1];  // = strides[k] * shape[k]
    const int64_t block_end = (cur + block - 1) / block * block;
    if (block_end > e) {
      level = k;
      break;
    }
    if (block_end > cur) {
      visit(boxAt(k, cur, block_end), cur);
      cur = block_end;
    }
  }
  for (int k = level; k < rank && cur < e; ++k) {
    const int64_t end = e / strides[k] * strides[k];
    if (end > cur) {
      visit(boxAt(k, cur, end), cur);
      cur = end;
    }
  }
}

int flatBoxCount(const Dims& shape, const Dims& strides, int64_t b, int64_t e) {
  int n = 0;
  forEachFlatBox(shape, strides, b, e, [&](const Box&, int64_t) { ++n; });
  return n;
}

// Appends the pieces of tensor `tensor` for its flat elements [b, e); element b lands at buffer
// element `base`.
void appendFlatPieces(int32_t tensor, const Dims& shape, const Dims& strides, int64_t b, int64_t e,
                      int64_t base, PieceList& out) {
  forEachFlatBox(shape, strides, b, e, [&](const Box& box, int64_t first) {
    Piece& p = out.emplace_back();
    p.tensor = tensor;
    p.box = box;
    p.local_offset = base + (first - b);
    p.local_strides = strides;
  });
}

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

// Shared by addFlatParameter (offsets == nullptr: members packed, padded_numel unused) and
// addFlatParameterWithOffsets.
Result<int32_t> flatParameter(Registration& reg, const char* fn, const std::string& buffer_name,
                              const std::vector<FlatMember>& members, const int64_t* offsets,
                              size_t num_offsets, int64_t padded_numel, DType dtype,
                              int64_t flat_begin, int64_t flat_end, MemoryKind memory) {
  auto header = [&] {
    return std::string(fn) + "(buffer " + quoted(buffer_name) + ", " +
           std::to_string(members.size()) + " members, range [" + std::to_string(flat_begin) +
           ", " + std::to_string(flat_end) + "))";
  };
  auto invalid = [&](const std::string& why) { return invalidArgument(header() + ": " + why); };
  if (buffer_name.empty()) return invalid("empty buffer name");
  if (std::string why = kindProblem(dtype, memory); !why.empty()) return invalid(why);
  if (members.empty()) return invalid("no members");
  if (offsets != nullptr && num_offsets != members.size()) {
    return invalid(std::to_string(num_offsets) + " member offsets for " +
                   std::to_string(members.size()) + " members");
  }
  int64_t end = 0;  // the previous member's end in the flat parameter
  for (size_t i = 0; i < members.size(); ++i) {
    const FlatMember& m = members[i];
    if (m.tensor.empty()) return invalid("member " + std::to_string(i) + " has an empty name");
    if (std::string why = shapeProblem(m.shape, 0); !why.empty()) {
      return invalid("member " + quoted(m.tensor) + " shape " + m.shape.toString() + ": " + why);
    }
    int64_t start = end;
    if (offsets != nullptr) {
      start = offsets[i];
      if (start < end) {
        return invalid("member " + quoted(m.tensor) + " starts at " + std::to_string(start) +
                       ", before the previous member's end " + std::to_string(end));
      }
    }
    if (addOverflows(start, m.shape.product(), &end)) {
      return invalid("member " + quoted(m.tensor) + " ends past int64");
    }
  }
  const int64_t total = offsets != nullptr ? padded_numel : end;
  if (offsets != nullptr && padded_numel < end) {
    return invalid("padded_numel " + std::to_string(padded_numel) +
                   " is below the last member's end " + std::to_string(end));
  }
  if (flat_begin < 0 || flat_begin > flat_end || flat_end > total) {
    return invalid("range is not inside [0, " + std::to_string(total) + ")");
  }
  if (const std::string* dup = duplicateName(
          members.size(), [&](size_t i) -> const std::string& { return members[i].tensor; })) {
    return invalid("member " + quoted(*dup) + " appears twice");
  }

  IdList ids(members.size());
  WSYNC_RETURN_IF_ERROR(declareAll(
      reg, fn, members.size(), [&](size_t i) -> const std::string& { return members[i].tensor; },
      [&](size_t i) -> const Dims& { return members[i].shape; }, ids));

  // Two passes over the members that intersect the range: count, then emit (exact reserve).
  auto forEachHeld = [&](auto visit) {
    int64_t start = 0;
    for (size_t i = 0; i < members.size(); ++i) {
      if (offsets != nullptr) start = offsets[i];
      const int64_t numel = members[i].shape.product();
      if (start >= flat_end) break;
      const int64_t lo = std::max(flat_begin, start);
      const int64_t hi = std::min(flat_end, start + numel);
      if (lo < hi) {
        const Dims strides = rowMajorStrides(members[i].shape);
        visit(i, strides, lo - start, hi - start, lo - flat_begin);
      }
      start += numel;
    }
  };
  size_t count = 0;
  forEachHeld([&](size_t i, const Dims& strides, int64_t b, int64_t e, int64_t) {
    count += static_cast<size_t>(flatBoxCount(members[i].shape, strides, b, e));
  });
  PieceList pieces;
  pieces.reserve(count);
  forEachHeld([&](size_t i, const Dims& strides, int64_t b, int64_t e, int64_t base) {
    appendFlatPieces(ids[i], members[i].shape, strides, b, e, base, pieces);
  });
  return appendBuffer(reg, buffer_name, dtype, memory, flat_end - flat_begin, std::move(pieces));
}

// Validates the expert arguments shared by addStackedExperts and addSeparateExperts; returns
// this EP rank's experts.
Result<IndexRange> localExperts(const char* fn, const std::string& name_template,
                                const Dims& expert_shape, int num_experts, DType dtype, int ep_size,
                                int ep_rank, MemoryKind memory) {
  auto invalid = [&](const std::string& why) {
    return invalidArgument(
        std::string(fn) + "(template " + quoted(name_template) + ", expert shape " +
        expert_shape.toString() + ", " + std::to_string(num_experts) + " experts, ep_size " +
        std::to_string(ep_size) + ", ep_rank " + std::to_string(ep_rank) + "): " + why);
  };
  if (name_template.find("{}") == std::string::npos) {
    return invalid("the name template has no \"{}\" for the expert index");
  }
  if (std::string why = kindProblem(dtype, memory); !why.empty()) return invalid(why);
  if (std::string why = shapeProblem(expert_shape, 0); !why.empty()) return invalid(why);
  if (num_experts < 1) return invalid("num_experts must be >= 1");
  if (ep_size < 1) return invalid("ep_size must be >= 1");
  if (ep_rank < 0 || ep_rank >= ep_size) return invalid("ep_rank outside [0, ep_size)");
  return splitRange(num_experts, ep_size, ep_rank, SplitRule::kBalanced);
}

}  // namespace

const char* splitRuleName(SplitRule rule) {
  switch (rule) {
    case SplitRule::kBalanced:
      return "balanced";
    case SplitRule::kTorchChunk:
      return "torch_chunk";
    case SplitRule::kEven:
      return "even";
  }
  return "unknown";
}

Result<IndexRange> splitRange(int64_t n, int parts, int index, SplitRule rule) {
  auto invalid = [&](const std::string& why) {
    return invalidArgument("split of " + std::to_string(n) + " into " + std::to_string(parts) +
                           " parts (" + splitRuleName(rule) + "), index " + std::to_string(index) +
                           ": " + why);
  };
  if (n < 0) return invalid("negative size");
  if (parts < 1) return invalid("parts must be >= 1");
  if (index < 0 || index >= parts) return invalid("index outside [0, parts)");
  switch (rule) {
    case SplitRule::kBalanced: {
      const int64_t base = n / parts;
      const int64_t extra = n % parts;
      return IndexRange{index * base + std::min<int64_t>(index, extra), base + (index < extra)};
    }
    case SplitRule::kTorchChunk: {
      const int64_t chunk = n / parts + (n % parts != 0);
      const int64_t begin = std::min(n, index * chunk);
      return IndexRange{begin, std::min(chunk, n - begin)};
    }
    case SplitRule::kEven:
      if (n % parts != 0) return invalid("not divisible");
      return IndexRange{index * (n / parts), n / parts};
  }
  return invalid("unknown split rule " + std::to_string(static_cast<int>(rule)));
}

Result<Box> splitBox(const Dims& shape, int dim, int parts, int index, SplitRule rule) {
  auto invalid = [&](const std::string& why) {
    return invalidArgument("split of shape " + shape.toString() + " along dim " +
                           std::to_string(dim) + " into " + std::to_string(parts) + " parts (" +
                           splitRuleName(rule) + "), index " + std::to_string(index) + ": " + why);
  };
  if (std::string why = shapeProblem(shape, 1); !why.empty()) return invalid(why);
  if (dim < 0 || dim >= shape.rank) return invalid("dim outside [0, rank)");
  Result<IndexRange> r = splitRange(shape[dim], parts, index, rule);
  if (!r.isOk()) {
    return r.status().withContext("shape " + shape.toString() + " along dim " +
                                  std::to_string(dim));
  }
  Box box = Box::whole(shape);
  box.offset[dim] = r->begin;
  box.extent[dim] = r->size;
  return box;
}

Result<int32_t> addReplicated(Registration& reg, const std::string& tensor, const Dims& shape,
                              DType dtype, MemoryKind memory) {
  auto invalid = [&](const std::string& why) {
    return invalidArgument("addReplicated(tensor " + quoted(tensor) + ", shape " +
                           shape.toString() + "): " + why);
  };
  if (tensor.empty()) return invalid("empty tensor name");
  if (std::string why = shapeProblem(shape, 0); !why.empty()) return invalid(why);
  if (std::string why = kindProblem(dtype, memory); !why.empty()) return invalid(why);
  WSYNC_ASSIGN_OR_RETURN(const int32_t id, declareOne(reg, "addReplicated", tensor, shape));
  PieceList pieces(1);
  pieces[0].tensor = id;
  pieces[0].box = Box::whole(shape);
  pieces[0].local_strides = rowMajorStrides(shape);
  return appendBuffer(reg, tensor, dtype, memory, shape.product(), std::move(pieces));
}

Result<int32_t> addSplit(Registration& reg, const std::string& tensor, const Dims& shape,
                         DType dtype, int dim, int parts, int index, SplitRule rule,
                         MemoryKind memory) {
  auto header = [&] {
    return "addSplit(tensor " + quoted(tensor) + ", shape " + shape.toString() + ", dim " +
           std::to_string(dim) + ", parts " + std::to_string(parts) + ", index " +
           std::to_string(index) + ", " + splitRuleName(rule) + ")";
  };
  auto invalid = [&](const std::string& why) { return invalidArgument(header() + ": " + why); };
  if (tensor.empty()) return invalid("empty tensor name");
  if (std::string why = kindProblem(dtype, memory); !why.empty()) return invalid(why);
  Result<Box> box = splitBox(shape, dim, parts, index, rule);
  if (!box.isOk()) return box.status().withContext(header());
  WSYNC_ASSIGN_OR_RETURN(const int32_t id, declareOne(reg, "addSplit", tensor, shape));
  PieceList pieces;
  if (!box->empty()) {
    pieces.resize(1);
    pieces[0].tensor = id;
    pieces[0].box = *box;
    pieces[0].local_strides = rowMajorStrides(box->extent);
  }
  return appendBuffer(reg, tensor, dtype, memory, box->volume(), std::move(pieces));
}

Result<int32_t> addFlatRange(Registration& reg, const std::string& tensor, const Dims& shape,
                             DType dtype, int64_t flat_begin, int64_t flat_end, MemoryKind memory) {
  auto invalid = [&](const std::string& why) {
    return invalidArgument("addFlatRange(tensor " + quoted(tensor) + ", shape " + shape.toString() +
                           ", range [" + std::to_string(flat_begin) + ", " +
                           std::to_string(flat_end) + ")): " + why);
  };
  if (tensor.empty()) return invalid("empty tensor name");
  if (std::string why = shapeProblem(shape, 0); !why.empty()) return invalid(why);
  if (std::string why = kindProblem(dtype, memory); !why.empty()) return invalid(why);
  const int64_t numel = shape.product();
  if (flat_begin < 0 || flat_begin > flat_end || flat_end > numel) {
    return invalid("range is not inside [0, " + std::to_string(numel) + ")");
  }
  WSYNC_ASSIGN_OR_RETURN(const int32_t id, declareOne(reg, "addFlatRange", tensor, shape));
  const Dims strides = rowMajorStrides(shape);
  PieceList pieces;
  pieces.reserve(static_cast<size_t>(flatBoxCount(shape, strides, flat_begin, flat_end)));
  appendFlatPieces(id, shape, strides, flat_begin, flat_end, 0, pieces);
  return appendBuffer(reg, tensor, dtype, memory, flat_end - flat_begin, std::move(pieces));
}

Result<int32_t> addFlatParameter(Registration& reg, const std::string& buffer_name,
                                 const std::vector<FlatMember>& members, DType dtype,
                                 int64_t flat_begin, int64_t flat_end, MemoryKind memory) {
  return flatParameter(reg, "addFlatParameter", buffer_name, members, nullptr, 0, 0, dtype,
                       flat_begin, flat_end, memory);
}

Result<int32_t> addFlatParameterWithOffsets(Registration& reg, const std::string& buffer_name,
                                            const std::vector<FlatMember>& members,
                                            const std::vector<int64_t>& member_offsets,
                                            int64_t padded_numel, DType dtype, int64_t flat_begin,
                                            int64_t flat_end, MemoryKind memory) {
  return flatParameter(reg, "addFlatParameterWithOffsets", buffer_name, members,
                       member_offsets.data(), member_offsets.size(), padded_numel, dtype,
                       flat_begin, flat_end, memory);
}

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

std::string expertName(const std::string& name_template, int expert) {
  const std::string index = std::to_string(expert);
  std::string name;
  name.reserve(name_template.size() + index.size());
  size_t from = 0;
  for (size_t at = name_template.find("{}"); at != std::string::npos;
       at = name_template.find("{}", from)) {
    name.append(name_template, from, at - from);
    name += index;
    from = at + 2;
  }
  name.append(name_template, from, std::string::npos);
  return name;
}

Result<int32_t> addStackedExperts(Registration& reg, const std::string& buffer_name,
                                  const std::string& name_template, const Dims& expert_shape,
                                  int num_experts, DType dtype, int ep_size, int ep_rank,
                                  MemoryKind memory) {
  constexpr const char* kFn = "addStackedExperts";
  if (buffer_name.empty()) {
    return invalidArgument(std::string(kFn) + "(template " + quoted(name_template) +
                           "): empty buffer name");
  }
  WSYNC_ASSIGN_OR_RETURN(
      const IndexRange local,
      localExperts(kFn, name_template, expert_shape, num_experts, dtype, ep_size, ep_rank, memory));
  const int64_t volume = expert_shape.product();
  int64_t num_elements = 0;
  if (mulOverflows(local.size, volume, &num_elements)) {
    return invalidArgument(std::string(kFn) + "(buffer " + quoted(buffer_name) +
                           "): local size overflows int64");
  }
  const auto n = static_cast<size_t>(local.size);
  IdList ids(n);
  std::string name;
  WSYNC_RETURN_IF_ERROR(declareAll(
      reg, kFn, n,
      [&](size_t j) -> const std::string& {
        name = expertName(name_template, static_cast<int>(local.begin + static_cast<int64_t>(j)));
        return name;
      },
      [&](size_t) -> const Dims& { return expert_shape; }, ids));
  const Dims strides = rowMajorStrides(expert_shape);
  PieceList pieces(n);
  for (size_t j = 0; j < n; ++j) {
    pieces[j].tensor = ids[j];
    pieces[j].box = Box::whole(expert_shape);
    pieces[j].local_offset = static_cast<int64_t>(j) * volume;
    pieces[j].local_strides = strides;
  }
  return appendBuffer(reg, buffer_name, dtype, memory, num_elements, std::move(pieces));
}

Result<int32_t> addSeparateExperts(Registration& reg, const std::string& name_template,
                                   const Dims& expert_shape, int num_experts, DType dtype,
                                   int ep_size, int ep_rank, MemoryKind memory) {
  constexpr const char* kFn = "addSeparateExperts";
  WSYNC_ASSIGN_OR_RETURN(
      const IndexRange local,
      localExperts(kFn, name_template, expert_shape, num_experts, dtype, ep_size, ep_rank, memory));
  if (local.size == 0) {
    return invalidArgument(std::string(kFn) + "(template " + quoted(name_template) + ", " +
                           std::to_string(num_experts) + " experts, ep_size " +
                           std::to_string(ep_size) + ", ep_rank " + std::to_string(ep_rank) +
                           "): this EP rank holds no expert");
  }
  const auto n = static_cast<size_t>(local.size);
  IdList ids(n);
  std::string name;
  WSYNC_RETURN_IF_ERROR(declareAll(
      reg, kFn, n,
      [&](size_t j) -> const std::string& {
        name = expertName(name_template, static_cast<int>(local.begin + static_cast<int64_t>(j)));
        return name;
      },
      [&](size_t) -> const Dims& { return expert_shape; }, ids));
  const auto first = static_cast<int32_t>(reg.buffers.size());
  const Dims strides = rowMajorStrides(expert_shape);
  const int64_t volume = expert_shape.product();
  for (size_t j = 0; j < n; ++j) {
    PieceList pieces(1);
    pieces[0].tensor = ids[j];
    pieces[0].box = Box::whole(expert_shape);
    pieces[0].local_strides = strides;
    // The tensor's declared name is the buffer's name (no second formatting).
    appendBuffer(reg, reg.tensors[static_cast<size_t>(ids[j])].name, dtype, memory, volume,
                 std::move(pieces));
  }
  return first;
}

}  // namespace wsync
