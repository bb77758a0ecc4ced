// Dims and Box: n-d index arithmetic over a tensor's global shape. Sizes are in elements.
// Fixed-capacity arrays (no heap) because the planner handles millions of them.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

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
  int64_t product() const;  // 1 for rank 0
  bool operator==(const Dims& o) const;
  bool operator!=(const Dims& o) const { return !(*this == o); }
  std::string toString() const;  // "[4096, 4096]"
};

// Row-major (C-order) strides in elements for `shape`.
Dims rowMajorStrides(const Dims& shape);

// An n-d box: [offset, offset + extent) per dimension of a global tensor.
struct Box {
  Dims offset;
  Dims extent;

  static Box whole(const Dims& shape);  // offset 0, extent = shape
  int rank() const { return extent.rank; }
  int64_t volume() const { return extent.product(); }
  bool empty() const;  // some extent is 0
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

}  // namespace wsync
