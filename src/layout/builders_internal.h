// Private to src/layout: the argument checks, tensor declaration and buffer helpers that the
// layout builders (builders_split.cc, builders_fsdp.cc, builders_fused.cc, builders_experts.cc)
// share. builders.h is the interface; nothing outside src/layout includes this header.
// Status messages are built only on the error path: the hot path formats nothing.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "layout/box.h"
#include "layout/dtype.h"
#include "layout/registration.h"

namespace wsync::layout_internal {

// "name", quoted for error messages.
std::string quoted(std::string_view s);

inline bool mulOverflows(int64_t a, int64_t b, int64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}
inline bool addOverflows(int64_t a, int64_t b, int64_t* out) {
  return __builtin_add_overflow(a, b, out);
}

// Empty when `shape` has a rank in [min_rank, kMaxRank], every dim >= 1 and a product that fits
// in int64; otherwise the reason.
std::string shapeProblem(const Dims& shape, int min_rank);

// Empty when dtype and memory are valid enum values; otherwise the reason.
std::string kindProblem(DType dtype, MemoryKind memory);

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
void undeclareAfter(Registration& reg, size_t keep);

// MISMATCH naming `fn`, tensor `name`, its declared shape in `reg` and `shape`.
Status shapeConflict(const Registration& reg, const char* fn, const std::string& name,
                     const Dims& shape);

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

// Declares one tensor; MISMATCH (shapeConflict) when it is declared with another shape.
Result<int32_t> declareOne(Registration& reg, const char* fn, const std::string& name,
                           const Dims& shape);

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

// Appends a buffer holding `pieces`; returns its index in reg.buffers.
int32_t appendBuffer(Registration& reg, const std::string& name, DType dtype, MemoryKind memory,
                     int64_t num_elements, PieceList&& pieces);

}  // namespace wsync::layout_internal
