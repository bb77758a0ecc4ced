// Layout builders: split rules, replicated tensors and TP / DTensor Shard splits.
#include <algorithm>
#include <string>
#include <utility>

#include "layout/builders.h"
#include "layout/builders_internal.h"

namespace wsync {
using namespace layout_internal;  // the builders' shared helpers (builders_internal.h)

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

}  // namespace wsync
