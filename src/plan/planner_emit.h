// Broadcast groups and write ops (private to src/plan, planner_internal.h). Part of makePlan's
// contract (planner.h): a rollout piece whose box equals a source box, row-major-contiguous on
// the rollout and on at least one holder, joins the group of (tensor, box, replica, destination
// dtype) when broadcasts are allowed (a rank that wants the box twice gets the second copy by
// writes); every other piece is served by write ops, one or more regions per intersection with
// the resolved source boxes, merged when contiguous on both sides.
#pragma once

#include <cstdint>
#include <vector>

#include "plan/planner.h"
#include "plan/planner_balance.h"
#include "plan/planner_internal.h"
#include "plan/planner_sources.h"

namespace wsync::plan_internal {

// What a trainer rank last sent to the rollout piece being processed: ops of one piece from one
// rank merge when 1-D and contiguous on both sides (same dst, so only the source side varies).
struct LastOp {
  uint64_t stamp = 0;  // the piece's stamp; stale -> no merge
  int32_t src_buffer = -1;
  bool one_d = false;
  int64_t src_end = 0;
  int64_t dst_end = 0;
  WriteOp* op = nullptr;  // the stored op (pass C only)
};

// Builds a plan's groups and writes from the unified input, in this order of calls: groupAndCount
// (pass A), chooseSenders, countFlexible (pass B), emitWrites (pass C), freeScratch, finishWrites,
// takePlan. Writes are stored per (src_rank, dst_rank) pair at slots counted in passes A and B,
// so they come out sorted by ranks without sorting millions of ops.
class PlanEmitter {
 public:
  PlanEmitter(const std::vector<Registration>& rollouts, const PlannerOptions& options,
              const UnifiedInput& input);

  // Pass A: per wanted tensor, forms the groups, checks coverage (MISMATCH naming the missing
  // part), charges single-holder transfers, lists the balancing choices, and counts the ops of
  // the write pieces without choices.
  Status groupAndCount();
  // The balancing choices (SenderBalancer::choose).
  void chooseSenders();
  // Pass B: counts the ops of the write pieces with choices.
  void countFlexible();
  // Pass C: every op into its (src_rank, dst_rank) slot range of the plan's writes.
  void emitWrites();
  // Frees the working memory of the passes (call before finishWrites).
  void freeScratch();
  // Sorts each (src_rank, dst_rank) range by (dst_buffer, dst_offset) where needed, merges ops
  // that became adjacent, renumbers the shapes, and sets stats.write_bytes.
  void finishWrites();
  // The plan (groups, writes, shapes, write_bytes) and the loads per trainer rank.
  Plan takePlan(std::vector<int64_t>* loads);

 private:
  enum PieceMode : uint8_t { kGroupMode = 1, kWriteMode = 2, kFlexWriteMode = 3 };

  Status analyzePiece(int32_t id, int64_t k);
  bool joinGroup(int32_t id, const PieceRef& ref);
  void newGroup(int32_t id, const PieceRef& ref, Source& source);
  template <bool kStore, bool kRecord = false>
  void addOps(int32_t id, const Box& box, const Holder& h, const PieceRef& dst);
  template <bool kStore>
  void pieceOps(int32_t id, const PieceRef& ref, size_t* cursor);
  template <bool kStore>
  void writePass(PieceMode first_mode);
  void allocateWrites();

  // The rollout pieces are scattered over the registrations: the passes fetch the one they will
  // reach kLookahead pieces later (its box and strides).
  static constexpr int64_t kLookahead = 3;
  void prefetchRollout(int64_t k) const {
    if (k >= static_cast<int64_t>(input_.rollout_refs.size())) return;
    const char* p =
        reinterpret_cast<const char*>(input_.rollout_refs[static_cast<size_t>(k)].piece);
    for (size_t line = 0; line < sizeof(Piece); line += 64)
      __builtin_prefetch(p + line);
  }
  void buildSources(size_t proc, bool for_groups) {
    const int64_t begin = input_.trainer_begin[proc];
    sources_.build(input_.trainer_refs.data() + begin,
                   static_cast<int32_t>(input_.trainer_begin[proc + 1] - begin),
                   input_.wanted(proc).shape->rank, for_groups);
  }

  const std::vector<Registration>& rollouts_;
  const PlannerOptions options_;
  const UnifiedInput& input_;
  DTypeBytes bytes_of_;
  TensorSources sources_;  // of the tensor being processed
  SenderBalancer balancer_;

  ScratchVector<uint8_t> piece_mode_;  // PieceMode per input_.rollout_refs entry
  ScratchVector<int32_t> group_next_;  // per group: the next group of the same source box
  std::vector<LastOp> last_;           // per trainer rank
  ScratchVector<size_t> counted_;      // pair_count_ entries counted for the current piece (A)
  uint64_t piece_stamp_ = 0;
  ScratchVector<int64_t> pair_count_;        // per (src_rank, dst_rank): op count, then slot cursor
  RegionShapeIndex* shape_index_ = nullptr;  // plan_.shapes' index (pass C only)
  Plan plan_;
};

}  // namespace wsync::plan_internal
