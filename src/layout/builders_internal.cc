// The shared helpers of the layout builders (builders_internal.h).
#include "layout/builders_internal.h"

#include <utility>

namespace wsync::layout_internal {

std::string quoted(std::string_view s) {
  std::string q;
  q.reserve(s.size() + 2);
  q += '"';
  q += s;
  q += '"';
  return q;
}

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

std::string kindProblem(DType dtype, MemoryKind memory) {
  if (!validDType(static_cast<int>(dtype))) {
    return "unknown dtype " + std::to_string(static_cast<int>(dtype));
  }
  if (memory != MemoryKind::kHost && memory != MemoryKind::kDevice) {
    return "unknown memory kind " + std::to_string(static_cast<int>(memory));
  }
  return {};
}

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

Result<int32_t> declareOne(Registration& reg, const char* fn, const std::string& name,
                           const Dims& shape) {
  const int32_t id = reg.declareTensor(name, shape);
  if (id < 0) return shapeConflict(reg, fn, name, shape);
  return id;
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

}  // namespace wsync::layout_internal
