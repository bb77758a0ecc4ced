#include "layout/box.h"

#include <algorithm>
#include <cassert>
#include <cstdint>

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
    // Saturates instead of overflowing: a shape this large fails the registration checks, which
    // name it, rather than wrapping to a small stride here.
    if (i > 0 && __builtin_mul_overflow(stride, shape[i], &stride)) stride = INT64_MAX;
  }
  return s;
}

Box Box::whole(const Dims& shape) {
  return {Dims::zeros(shape.rank), shape};
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

void appendDifference(const Box& a, const Box& b, std::vector<Box>* out) {
  if (!overlaps(a, b)) {
    out->push_back(a);
    return;
  }
  Box rest = a;  // the part of `a` inside b along the dims cut so far
  for (int d = 0; d < a.rank(); ++d) {
    const int64_t lo = std::max(rest.offset[d], b.offset[d]);
    const int64_t hi = std::min(rest.end(d), b.end(d));
    if (rest.offset[d] < lo) {
      Box part = rest;
      part.extent[d] = lo - rest.offset[d];
      out->push_back(part);
    }
    if (hi < rest.end(d)) {
      Box part = rest;
      part.offset[d] = hi;
      part.extent[d] = rest.end(d) - hi;
      out->push_back(part);
    }
    rest.offset[d] = lo;
    rest.extent[d] = hi - lo;
  }
  // What is left of `rest` lies inside b.
}

void subtractFromEach(std::vector<Box>* boxes, const Box& b, std::vector<Box>* scratch) {
  scratch->clear();
  for (const Box& box : *boxes)
    appendDifference(box, b, scratch);
  boxes->swap(*scratch);
}

}  // namespace wsync
