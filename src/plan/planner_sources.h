// The trainer source boxes of one tensor and where a rollout box finds them (private to src/plan,
// planner_internal.h). Part of makePlan's contract (planner.h): trainer pieces with identical
// boxes form one source box whose holders are alternative senders; partially overlapping source
// boxes are resolved so that every element has one source box: the one whose first holder comes
// first in scan order (rank, buffer, piece) keeps the overlap, later ones lose it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "plan/planner_internal.h"

namespace wsync::plan_internal {

// A trainer piece of the tensor being processed.
struct Holder {
  const Piece* piece;
  int32_t rank;
  int32_t buffer;
  DType dtype;
  bool row_major;  // rowMajorContiguous (only computed for broadcasts)
};

// Identical trainer boxes of the tensor being processed (holders [holder_begin, +holder_count)).
// The last three fields are pass A's notes (PlanEmitter).
struct Source {
  int32_t holder_begin = 0;
  int32_t holder_count = 0;
  int32_t row_major_count = 0;  // holders laid out row-major over the box (broadcast senders)
  int32_t group_head = -1;      // first group of this box, chained by PlanEmitter::group_next_
  int32_t write_cands = -1;     // balancer candidates of its holders (on first use)
  int32_t bcast_cands = -1;     // balancer candidates of its row-major holders (on first use)
};

// A disjoint part of a source box (the whole box unless another source box owns some of it).
struct Resolved {
  const Box* box;  // a holder's piece box, or an entry of TensorSources::fragment_pool_
  int32_t source;
};

// The sources of one tensor at a time; build() replaces them. Memory is reused across tensors.
class TensorSources {
 public:
  // The sources of `count` trainer pieces of one tensor of rank `rank` (`refs`: sorted by box,
  // ties in scan order, as UnifiedInput::trainer_refs), their holders' row_major flags only when
  // `for_groups`. Cost: O(count) plus the overlapping pairs (sources are sorted by offset along
  // dim 0, so only boxes starting before one's end along it are compared).
  void build(const PieceRef* refs, int32_t count, int rank, bool for_groups);

  // The index of the source box equal to `box`, or -1. O(log sources).
  int32_t find(const Box& box) const;

  // Calls f(resolved index, intersection) for every resolved box meeting `box`, in offset order.
  template <typename F>
  void forEachIntersection(const Box& box, F&& f) const {
    size_t lo = 0;
    size_t hi = resolved_.size();
    if (box.rank() > 0) {
      const int64_t begin0 = box.offset[0];
      const int64_t end0 = box.end(0);
      lo = static_cast<size_t>(std::upper_bound(prefix_end0_.begin(), prefix_end0_.end(), begin0) -
                               prefix_end0_.begin());
      hi = static_cast<size_t>(
          std::lower_bound(resolved_.begin(), resolved_.end(), end0,
                           [](const Resolved& r, int64_t v) { return r.box->offset[0] < v; }) -
          resolved_.begin());
    }
    Box i;
    for (size_t k = lo; k < hi; ++k) {
      if (intersectInto(box, *resolved_[k].box, &i)) f(static_cast<int32_t>(k), i);
    }
  }

  Source& source(int32_t s) { return sources_[static_cast<size_t>(s)]; }
  // The source owning resolved box `r`.
  Source& sourceOf(int32_t r) { return source(resolved_[static_cast<size_t>(r)].source); }
  const Source& sourceOf(int32_t r) const {
    return sources_[static_cast<size_t>(resolved_[static_cast<size_t>(r)].source)];
  }
  const Holder& holder(int32_t h) const { return holders_[static_cast<size_t>(h)]; }
  const Holder* holdersOf(const Source& s) const { return holders_.data() + s.holder_begin; }

  // The MISMATCH for rollout piece `ref` (of `rollout`, tensor `tensor`) that the resolved boxes
  // do not cover: names its box and the first missing box.
  Status coverageError(std::string_view tensor, const Registration& rollout, const PieceRef& ref);

  void freeMemory();

 private:
  void collectHolders(const PieceRef* refs, int32_t count, bool for_groups);
  void findConflicts();
  void resolveConflicts();
  void indexEnds();
  const Box& boxOf(int32_t s) const {
    return holders_[static_cast<size_t>(sources_[static_cast<size_t>(s)].holder_begin)].piece->box;
  }
  bool earlier(int32_t a, int32_t b) const;

  std::vector<Holder> holders_;
  std::vector<Source> sources_;     // sorted by box
  std::vector<Resolved> resolved_;  // disjoint, sorted by offset
  std::vector<Box> fragment_pool_;  // resolved parts of source boxes that lost an overlap
  std::vector<int32_t> fragment_source_;
  std::vector<int64_t> prefix_end0_;  // per resolved_ entry: the largest end along dim 0 so far
  std::vector<std::pair<int32_t, int32_t>> conflicts_;  // overlapping (loser, winner) sources
  std::vector<Box> fragments_;
  std::vector<Box> scratch_;
};

}  // namespace wsync::plan_internal
