#include "plan/planner_sources.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <string>

namespace wsync::plan_internal {

void TensorSources::build(const PieceRef* refs, int32_t count, int rank, bool for_groups) {
  holders_.clear();
  sources_.clear();
  resolved_.clear();
  if (count == 0) return;
  collectHolders(refs, count, for_groups);
  conflicts_.clear();
  if (rank > 0) findConflicts();
  if (conflicts_.empty()) {
    for (int32_t s = 0; s < static_cast<int32_t>(sources_.size()); ++s)
      resolved_.push_back({&boxOf(s), s});
  } else {
    resolveConflicts();
  }
  indexEnds();
}

// Holders in the order of `refs`; runs of equal boxes form the sources, so a source's first
// holder is the first in scan order.
void TensorSources::collectHolders(const PieceRef* refs, int32_t count, bool for_groups) {
  for (int32_t k = 0; k < count; ++k) {
    const PieceRef& ref = refs[k];
    if (k + 4 < count) __builtin_prefetch(&refs[k + 4].piece->box);
    const bool row_major = for_groups && rowMajorContiguous(*ref.piece);
    if (k == 0 || compareBoxes(ref.piece->box, holders_.back().piece->box) != 0) {
      Source s;
      s.holder_begin = k;
      sources_.push_back(s);
    }
    Source& s = sources_.back();
    ++s.holder_count;
    s.row_major_count += row_major ? 1 : 0;
    holders_.push_back({ref.piece, ref.rank, ref.buffer(), ref.dtype(), row_major});
  }
}

// The overlapping pairs of sources as (loser, winner). Sources are sorted by offset along dim 0,
// so only boxes starting before one's end along dim 0 can overlap it.
void TensorSources::findConflicts() {
  const int32_t num_sources = static_cast<int32_t>(sources_.size());
  for (int32_t a = 0; a < num_sources; ++a) {
    const Box& x = boxOf(a);
    for (int32_t b = a + 1; b < num_sources && boxOf(b).offset[0] < x.end(0); ++b) {
      if (!overlaps(x, boxOf(b))) continue;
      const bool a_wins = earlier(a, b);
      conflicts_.push_back(a_wins ? std::pair{b, a} : std::pair{a, b});
    }
  }
}

// resolved_: each source box less what its winners hold, sorted by offset.
void TensorSources::resolveConflicts() {
  std::sort(conflicts_.begin(), conflicts_.end(),
            [this](const std::pair<int32_t, int32_t>& x, const std::pair<int32_t, int32_t>& y) {
              if (x.first != y.first) return x.first < y.first;
              return earlier(x.second, y.second);
            });
  size_t c = 0;
  fragment_pool_.clear();
  fragment_source_.clear();
  for (int32_t s = 0; s < static_cast<int32_t>(sources_.size()); ++s) {
    fragments_.assign(1, boxOf(s));
    for (; c < conflicts_.size() && conflicts_[c].first == s; ++c)
      subtractFromEach(&fragments_, boxOf(conflicts_[c].second), &scratch_);
    for (const Box& f : fragments_) {
      fragment_pool_.push_back(f);
      fragment_source_.push_back(s);
    }
  }
  for (size_t f = 0; f < fragment_pool_.size(); ++f)
    resolved_.push_back({&fragment_pool_[f], fragment_source_[f]});
  std::sort(resolved_.begin(), resolved_.end(),
            [](const Resolved& x, const Resolved& y) { return offsetLess(*x.box, *y.box); });
}

void TensorSources::indexEnds() {
  prefix_end0_.resize(resolved_.size());
  int64_t most = std::numeric_limits<int64_t>::min();
  for (size_t k = 0; k < resolved_.size(); ++k) {
    if (resolved_[k].box->rank() > 0) most = std::max(most, resolved_[k].box->end(0));
    prefix_end0_[k] = most;
  }
}

// True when source a's first holder comes before source b's in scan order (rank, buffer, piece):
// a owns what they both hold.
bool TensorSources::earlier(int32_t a, int32_t b) const {
  const Holder& x = holders_[static_cast<size_t>(sources_[static_cast<size_t>(a)].holder_begin)];
  const Holder& y = holders_[static_cast<size_t>(sources_[static_cast<size_t>(b)].holder_begin)];
  if (x.rank != y.rank) return x.rank < y.rank;
  if (x.buffer != y.buffer) return x.buffer < y.buffer;
  return std::less<const Piece*>()(x.piece, y.piece);  // one buffer's pieces are one array
}

int32_t TensorSources::find(const Box& box) const {
  auto it = std::lower_bound(
      sources_.begin(), sources_.end(), box, [this](const Source& s, const Box& b) {
        return boxLess(holders_[static_cast<size_t>(s.holder_begin)].piece->box, b);
      });
  if (it == sources_.end() || holders_[static_cast<size_t>(it->holder_begin)].piece->box != box) {
    return -1;
  }
  return static_cast<int32_t>(it - sources_.begin());
}

Status TensorSources::coverageError(std::string_view tensor, const Registration& rollout,
                                    const PieceRef& ref) {
  const LocalBuffer& buf = rollout.buffers[static_cast<size_t>(ref.buffer())];
  const Box& want = ref.piece->box;
  fragments_.assign(1, want);
  for (const Resolved& r : resolved_)
    subtractFromEach(&fragments_, *r.box, &scratch_);
  std::string missing = "part of it";
  if (!fragments_.empty()) {
    missing = fragments_.front().toString() + " (first element " +
              fragments_.front().offset.toString() + ")";
  }
  return mismatch(who(Role::kRollout, ref.rank) + " wants " + want.toString() + " of tensor " +
                  quoted(tensor) + " (buffer " + quoted(buf.name) + "), but no trainer holds " +
                  missing);
}

void TensorSources::freeMemory() {
  release(holders_);
  release(sources_);
  release(resolved_);
  release(fragment_pool_);
  release(fragment_source_);
  release(prefix_end0_);
  release(conflicts_);
  release(fragments_);
  release(scratch_);
}

}  // namespace wsync::plan_internal
