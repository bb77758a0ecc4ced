// Dims and Box: n-d index arithmetic over a tensor's global shape. Sizes are in elements.
// Fixed-capacity arrays (no heap) because the planner handles millions of them.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace wsync {

inline constexpr int kMaxRank = 6;  // the highest tensor rank wsync accepts

// A list of up to kMaxRank int64 values (a shape, an offset, strides). Entries past rank are 0.
struct Dims {
  std::array<int64_t, kMaxRank> v{};
  uint8_t rank = 0;

  Dims() = default;
  Dims(std::initializer_list<int64_t> values);  // rank = values.size() (at most kMaxRank)
  static Dims zeros(int rank);
  static Dims filled(int rank, int64_t value);

  int64_t& operator[](int i) { return v[static_cast<size_t>(i)]; }
  int64_t operator[](int i) const { return v[static_cast<size_t>(i)]; }
  int size() const { return rank; }
  int64_t product() const {  // 1 for rank 0
    int64_t p = 1;
    for (int i = 0; i < rank; ++i)
      p *= v[static_cast<size_t>(i)];
    return p;
  }
  bool operator==(const Dims& o) const {
    if (rank != o.rank) return false;
    for (int i = 0; i < rank; ++i) {
      if (v[static_cast<size_t>(i)] != o.v[static_cast<size_t>(i)]) return false;
    }
    return true;
  }
  bool operator!=(const Dims& o) const { return !(*this == o); }
  std::string toString() const;  // "[4096, 4096]"
};

// Row-major (C-order) strides in elements for `shape`; a stride past INT64_MAX saturates there.
Dims rowMajorStrides(const Dims& shape);

// An n-d box: [offset, offset + extent) per dimension of a global tensor.
struct Box {
  Dims offset;
  Dims extent;

  static Box whole(const Dims& shape);  // offset 0, extent = shape
  int rank() const { return extent.rank; }
  int64_t volume() const { return extent.product(); }
  bool empty() const {  // some extent is 0 (or negative)
    for (int i = 0; i < extent.rank; ++i) {
      if (extent[i] <= 0) return true;
    }
    return false;
  }
  int64_t end(int d) const { return offset[d] + extent[d]; }
  bool operator==(const Box& o) const { return offset == o.offset && extent == o.extent; }
  bool operator!=(const Box& o) const { return !(*this == o); }
  bool contains(const Box& inner) const;
  bool fitsIn(const Dims& shape) const;  // non-negative, and inside [0, shape)
  std::string toString() const;          // "[0:128, 0:4096]"
};

// The intersection of two boxes of equal rank; empty() when they do not overlap.
Box intersect(const Box& a, const Box& b);
bool overlaps(const Box& a, const Box& b);

// The intersection of two boxes of equal rank into *out, for hot loops: false (and *out
// unspecified) when it is empty. Rank-0 boxes always intersect.
inline bool intersectInto(const Box& a, const Box& b, Box* out) {
  const int r = a.rank();
  out->offset.rank = static_cast<uint8_t>(r);
  out->extent.rank = static_cast<uint8_t>(r);
  for (int d = 0; d < r; ++d) {
    const int64_t lo = a.offset[d] > b.offset[d] ? a.offset[d] : b.offset[d];
    const int64_t hi = a.end(d) < b.end(d) ? a.end(d) : b.end(d);
    if (lo >= hi) return false;
    out->offset[d] = lo;
    out->extent[d] = hi - lo;
  }
  return true;
}

// Lexicographic order of boxes of equal rank by (offset, extent): < 0, 0 or > 0.
inline int compareBoxes(const Box& a, const Box& b) {
  const int r = a.rank();
  for (int d = 0; d < r; ++d) {
    if (a.offset[d] != b.offset[d]) return a.offset[d] < b.offset[d] ? -1 : 1;
  }
  for (int d = 0; d < r; ++d) {
    if (a.extent[d] != b.extent[d]) return a.extent[d] < b.extent[d] ? -1 : 1;
  }
  return 0;
}
inline bool boxLess(const Box& a, const Box& b) {
  return compareBoxes(a, b) < 0;
}

// Lexicographic order of boxes of equal rank by offset alone (their first elements).
inline bool offsetLess(const Box& a, const Box& b) {
  for (int d = 0; d < a.rank(); ++d) {
    if (a.offset[d] != b.offset[d]) return a.offset[d] < b.offset[d];
  }
  return false;
}

// Appends a \ b (equal ranks) to *out as disjoint boxes: `a` itself when they do not overlap,
// else at most 2 * rank boxes, cut dim by dim from dim 0 (per dim: the part below b, then the
// part above b).
void appendDifference(const Box& a, const Box& b, std::vector<Box>* out);

// Replaces every box of *boxes by its parts outside `b` (appendDifference, in order); `scratch`
// is working space (its contents are lost).
void subtractFromEach(std::vector<Box>* boxes, const Box& b, std::vector<Box>* scratch);

}  // namespace wsync
