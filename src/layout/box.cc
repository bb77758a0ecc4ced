#include "layout/box.h"

#include <algorithm>
#include <cassert>

namespace wsync {

Dims::Dims(std::initializer_list<int64_t> values) {
  assert(values.size() <= static_cast<size_t>(kMaxRank));
  rank = static_cast<uint8_t>(values.size());
  std::copy(values.begin(), values.end(), v.begin());
}

Dims Dims::zeros(int r) {
  return filled(r, 0);
}

Dims Dims::filled(int r, int64_t value) {
  assert(r >= 0 && r <= kMaxRank);
  Dims d;
  d.rank = static_cast<uint8_t>(r);
  for (int i = 0; i < r; ++i)
    d[i] = value;
  return d;
}

int64_t Dims::product() const {
  int64_t p = 1;
  for (int i = 0; i < rank; ++i)
    p *= v[static_cast<size_t>(i)];
  return p;
}

bool Dims::operator==(const Dims& o) const {
  if (rank != o.rank) return false;
  for (int i = 0; i < rank; ++i) {
    if ((*this)[i] != o[i]) return false;
  }
  return true;
}

std::string Dims::toString() const {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) {
    if (i) s += ", ";
    s += std::to_string((*this)[i]);
  }
  return s + "]";
}

Dims rowMajorStrides(const Dims& shape) {
  Dims s = Dims::zeros(shape.rank);
  int64_t stride = 1;
  for (int i = shape.rank - 1; i >= 0; --i) {
    s[i] = stride;
    stride *= shape[i];
  }
  return s;
}

Box Box::whole(const Dims& shape) {
  return {Dims::zeros(shape.rank), shape};
}

bool Box::empty() const {
  for (int i = 0; i < extent.rank; ++i) {
    if (extent[i] <= 0) return true;
  }
  return false;
}

bool Box::contains(const Box& inner) const {
  if (inner.rank() != rank()) return false;
  for (int i = 0; i < rank(); ++i) {
    if (inner.offset[i] < offset[i] || inner.end(i) > end(i)) return false;
  }
  return true;
}

bool Box::fitsIn(const Dims& shape) const {
  if (shape.rank != rank() || offset.rank != extent.rank) return false;
  for (int i = 0; i < rank(); ++i) {
    if (offset[i] < 0 || extent[i] < 0 || offset[i] + extent[i] > shape[i]) return false;
  }
  return true;
}

std::string Box::toString() const {
  std::string s = "[";
  for (int i = 0; i < rank(); ++i) {
    if (i) s += ", ";
    s += std::to_string(offset[i]) + ":" + std::to_string(end(i));
  }
  return s + "]";
}

Box intersect(const Box& a, const Box& b) {
  assert(a.rank() == b.rank());
  Box r;
  r.offset = Dims::zeros(a.rank());
  r.extent = Dims::zeros(a.rank());
  for (int i = 0; i < a.rank(); ++i) {
    const int64_t lo = std::max(a.offset[i], b.offset[i]);
    const int64_t hi = std::min(a.end(i), b.end(i));
    r.offset[i] = lo;
    r.extent[i] = std::max<int64_t>(0, hi - lo);
  }
  return r;
}

bool overlaps(const Box& a, const Box& b) {
  if (a.rank() != b.rank()) return false;
  for (int i = 0; i < a.rank(); ++i) {
    if (std::max(a.offset[i], b.offset[i]) >= std::min(a.end(i), b.end(i))) return false;
  }
  return true;
}

}  // namespace wsync
