#include <algorithm>
#include <iterator>
#include <numeric>

#include "plan/plan.h"

namespace wsync {

double PlanStats::senderImbalance() const {
  if (bytes_per_sender.empty()) return 1.0;
  const int64_t most = *std::max_element(bytes_per_sender.begin(), bytes_per_sender.end());
  if (most <= 0) return 1.0;
  const double total = std::accumulate(bytes_per_sender.begin(), bytes_per_sender.end(), 0.0);
  const double mean = total / static_cast<double>(bytes_per_sender.size());
  return static_cast<double>(most) / mean;
}

// ---- compact write regions -------------------------------------------------------------------

namespace {

// Copies the counts and strides (the shape) between a Region and a RegionShape.
template <typename From, typename To>
void copyShape(const From& from, To& to) {
  std::copy(std::begin(from.count), std::end(from.count), std::begin(to.count));
  std::copy(std::begin(from.src_stride), std::end(from.src_stride), std::begin(to.src_stride));
  std::copy(std::begin(from.dst_stride), std::end(from.dst_stride), std::begin(to.dst_stride));
}

}  // namespace

bool RegionShape::oneD() const {
  return count[0] >= 0 && count[1] == 1 && count[2] == 1 && src_stride[0] == 0 &&
         src_stride[1] == 0 && dst_stride[0] == 0 && dst_stride[1] == 0;
}

Region regionOf(const WriteOp& op, const std::vector<RegionShape>& shapes) {
  Region r;
  r.src_offset = op.src_offset;
  r.dst_offset = op.dst_offset;
  if (op.oneD()) {
    r.count[0] = op.run;
    return r;
  }
  copyShape(shapes[static_cast<size_t>(op.shapeIndex())], r);
  return r;
}

int64_t numElementsOf(const WriteOp& op, const std::vector<RegionShape>& shapes) {
  if (op.oneD()) return op.run;
  const RegionShape& s = shapes[static_cast<size_t>(op.shapeIndex())];
  return s.count[0] * s.count[1] * s.count[2];
}

namespace {

RegionShape shapeOf(const Region& region) {
  RegionShape s;
  copyShape(region, s);
  return s;
}

uint64_t hashOf(const RegionShape& s) {
  const int64_t v[7] = {s.count[0],      s.count[1],      s.count[2],     s.src_stride[0],
                        s.src_stride[1], s.dst_stride[0], s.dst_stride[1]};
  uint64_t h = 0x84222325cbf29ce4ull;
  for (const int64_t x : v) {
    h ^= static_cast<uint64_t>(x);
    h *= 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
  }
  return h;
}

}  // namespace

void setRegion(WriteOp& op, const Region& region, std::vector<RegionShape>& shapes) {
  op.src_offset = region.src_offset;
  op.dst_offset = region.dst_offset;
  const RegionShape s = shapeOf(region);
  if (s.oneD()) {
    op.run = s.count[0];
    return;
  }
  op.run = -1 - static_cast<int64_t>(shapes.size());
  shapes.push_back(s);
}

RegionShapeIndex::RegionShapeIndex(std::vector<RegionShape>& table) : table_(table) {
  rehash();
}

void RegionShapeIndex::rehash() {
  size_t capacity = 16;
  while (capacity < 2 * (table_.size() + 1))
    capacity *= 2;
  slots_.assign(capacity, Slot{});
  const size_t mask = capacity - 1;
  for (size_t id = 0; id < table_.size(); ++id) {
    const uint64_t h = hashOf(table_[id]);
    size_t i = h & mask;
    while (slots_[i].id >= 0)
      i = (i + 1) & mask;
    slots_[i] = {h, static_cast<int64_t>(id)};
  }
}

int64_t RegionShapeIndex::index(const RegionShape& shape) {
  if (last_ >= 0 && table_[static_cast<size_t>(last_)] == shape) return last_;
  const uint64_t h = hashOf(shape);
  const size_t mask = slots_.size() - 1;
  size_t i = h & mask;
  for (; slots_[i].id >= 0; i = (i + 1) & mask) {
    if (slots_[i].hash == h && table_[static_cast<size_t>(slots_[i].id)] == shape) {
      return last_ = slots_[i].id;
    }
  }
  last_ = static_cast<int64_t>(table_.size());
  table_.push_back(shape);
  if (2 * table_.size() > slots_.size()) {
    rehash();
  } else {
    slots_[i] = {h, last_};
  }
  return last_;
}

void RegionShapeIndex::setRegion(WriteOp& op, const Region& region) {
  op.src_offset = region.src_offset;
  op.dst_offset = region.dst_offset;
  const RegionShape s = shapeOf(region);
  op.run = s.oneD() ? s.count[0] : -1 - index(s);
}

}  // namespace wsync
