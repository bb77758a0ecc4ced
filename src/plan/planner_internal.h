// Private to src/plan: the phases of makePlan (planner.h states the contract) and what they share.
// makePlan (planner.cc) runs them in this order:
//  1. unify (planner_unify.cc): checks the ranks and every piece, unifies tensors by name, checks
//     the dtypes, and buckets the non-empty pieces of the tensors some rollout wants
//     (UnifiedInput).
//  2. PlanEmitter (planner_emit.cc), per wanted tensor over its TensorSources (planner_sources.cc:
//     the trainer source boxes, overlaps resolved, and their intersections with a rollout box):
//     pass A forms the broadcast groups, checks coverage, charges single-holder transfers and
//     lists the balancing choices; the SenderBalancer (planner_balance.cc) then makes the choices;
//     pass B counts and pass C stores the write ops per (trainer, rollout) pair; finishWrites
//     sorts and merges them.
//  3. finishPlan (planner.cc): the tensor table and the stats.
// rankView (planner_rank_view.cc) cuts one rank's part out of a finished plan.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "layout/dtype.h"
#include "layout/registration.h"
#include "plan/plan.h"
#include "plan/scratch.h"

namespace wsync::plan_internal {

// "trainer 3", "rollout 0" (for error messages).
inline std::string who(Role role, int32_t rank) {
  return std::string(roleName(role)) + " " + std::to_string(rank);
}

// 'name' (for error messages).
inline std::string quoted(std::string_view s) {
  std::string q;
  q.reserve(s.size() + 2);
  q += '\'';
  q += s;
  q += '\'';
  return q;
}

inline uint16_t dtypeBit(DType t) {
  return static_cast<uint16_t>(1u << static_cast<unsigned>(t));
}

// True when the piece's elements are one run, row-major over its box (the stride of a dim of
// extent 1 does not matter).
inline bool rowMajorContiguous(const Piece& p) {
  int64_t expect = 1;
  for (int d = p.box.rank() - 1; d >= 0; --d) {
    if (p.box.extent[d] != 1 && p.local_strides[d] != expect) return false;
    expect *= p.box.extent[d];
  }
  return true;
}

// dtypeSize of every valid DType, as a table for hot loops.
class DTypeBytes {
 public:
  DTypeBytes() {
    for (int t = 0; t < kNumDTypes; ++t)
      bytes_[t] = static_cast<int64_t>(dtypeSize(static_cast<DType>(t)));
  }
  int64_t operator()(DType t) const { return bytes_[static_cast<size_t>(t)]; }

 private:
  int64_t bytes_[kNumDTypes] = {};
};

// PieceRef packs the buffer index (kBufferBits) and the dtype (8 bits) in 32 bits.
constexpr int kBufferBits = 24;
constexpr int64_t kMaxBuffersPerRank = int64_t{1} << kBufferBits;

// A piece of some rank: the piece, the rank, and its buffer index and dtype packed.
struct PieceRef {
  const Piece* piece;
  int32_t rank;
  uint32_t buffer_dtype;  // buffer << 8 | dtype
  int32_t buffer() const { return static_cast<int32_t>(buffer_dtype >> 8); }
  DType dtype() const { return static_cast<DType>(buffer_dtype & 0xff); }
};

inline PieceRef makeRef(const Piece& piece, int32_t rank, size_t buffer, DType dtype) {
  return {&piece, rank, static_cast<uint32_t>(buffer << 8) | static_cast<uint32_t>(dtype)};
}

struct TensorInfo {
  std::string_view name;  // both point into a registration (which outlives the planner)
  const Dims* shape = nullptr;
  Role first_role = Role::kTrainer;  // who declared it first (for mismatch messages)
  int32_t first_rank = 0;            // trainers are declared first: first_role == kTrainer iff some
                                     // trainer declares the tensor
  uint16_t trainer_dtypes = 0;       // one bit per DType some trainer holds a piece of it in
  int32_t proc = -1;                 // processing index, -1 when no rollout wants any of it
};

// What unify gives the later phases: every declared tensor, and the non-empty pieces of the
// wanted ones bucketed by processing index (the order in which rollouts first want them).
struct UnifiedInput {
  int32_t num_trainers = 0;
  int32_t num_rollouts = 0;
  ScratchVector<TensorInfo> tensors;     // by global id: trainers' in rank/declaration order, then
                                         // names only rollouts declare
  ScratchVector<int32_t> proc_tensor;    // processing index -> global id
  ScratchVector<int64_t> trainer_begin;  // per processing index, and the end
  ScratchVector<PieceRef> trainer_refs;  // each tensor's sorted by box, ties in scan order
  ScratchVector<int64_t> rollout_begin;  // per processing index, and the end
  ScratchVector<PieceRef> rollout_refs;  // each tensor's in scan order (rank, buffer, piece)

  size_t numWanted() const { return proc_tensor.size(); }
  const TensorInfo& wanted(size_t proc) const {
    return tensors[static_cast<size_t>(proc_tensor[proc])];
  }
  // Frees the piece buckets (the tensor table stays).
  void freePieces() {
    release(trainer_begin);
    release(trainer_refs);
    release(rollout_begin);
    release(rollout_refs);
  }
};

// Phase 1 (planner_unify.cc): the checks of makePlan's contract on its input, then *out. Errors:
// INVALID_ARGUMENT (ranks, shapes, pieces), MISMATCH (shapes, undeclared wanted tensors, dtypes).
Status unify(const std::vector<Registration>& trainers, const std::vector<Registration>& rollouts,
             UnifiedInput* out);

// Points the strided writes at a new table `to` holding the entries of `from` they use, in the
// order of first use (so equal plans have equal tables, and a codec round trip is exact).
// planner_emit.cc.
void renumberShapes(std::vector<WriteOp>& writes, const std::vector<RegionShape>& from,
                    std::vector<RegionShape>& to);

}  // namespace wsync::plan_internal
