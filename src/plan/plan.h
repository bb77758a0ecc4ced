// The transfer plan: computed once by the coordinator from every registration, replayed every
// version. Ranks are indices within their role (trainer t, rollout r); buffers are indices into
// that rank's Registration::buffers. Offsets, counts and strides are in elements of the side they
// describe (src: the trainer buffer's dtype, dst: the rollout buffer's dtype).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "layout/box.h"
#include "layout/dtype.h"
#include "layout/registration.h"

namespace wsync {

// A global tensor, unified over all registrations.
struct PlanTensor {
  std::string name;
  Dims shape;
};

// Where a contiguous run lives on one rank.
struct BufferSpan {
  int32_t rank = -1;
  int32_t buffer = -1;
  int64_t offset = 0;  // elements from the buffer start
};

// One sender, the ranks of one rollout replica that want exactly the box the sender holds, laid out
// identically (row-major over the box) on both sides, so the data moves as one contiguous run of
// `num_elements`: a broadcast (NCCL on device memory, MPI on host memory).
struct BroadcastGroup {
  int32_t tensor = -1;
  Box box;
  int32_t replica = -1;  // every receiver belongs to this rollout replica
  int64_t num_elements = 0;
  DType src_dtype = DType::kFloat32;
  DType dst_dtype = DType::kFloat32;  // != src_dtype: the sender converts before sending
  BufferSpan src;                     // a trainer rank
  std::vector<BufferSpan> dst;        // rollout ranks, sorted by rank, each at most once
};

// A strided region of up to 3 dims, identical in shape on both sides. count[0] is the contiguous
// innermost run (stride 1 on both sides); count[1] rows and count[2] planes use the strides.
// Unused outer dims have count 1 and stride 0.
struct Region {
  int64_t src_offset = 0;
  int64_t dst_offset = 0;
  int64_t count[3] = {0, 1, 1};
  int64_t src_stride[2] = {0, 0};  // elements between rows, between planes (source side)
  int64_t dst_stride[2] = {0, 0};  // same on the destination side
  int64_t numElements() const { return count[0] * count[1] * count[2]; }
};

// One one-sided write: a region of a trainer buffer into a region of a rollout buffer.
struct WriteOp {
  int32_t tensor = -1;
  int32_t src_rank = -1;  // trainer
  int32_t src_buffer = -1;
  int32_t dst_rank = -1;  // rollout
  int32_t dst_buffer = -1;
  DType src_dtype = DType::kFloat32;
  DType dst_dtype = DType::kFloat32;
  Region region;
  bool converts() const { return src_dtype != dst_dtype; }
};

struct PlanStats {
  int32_t trainer_ranks = 0;
  int32_t rollout_ranks = 0;
  int32_t replicas = 0;
  int64_t bytes_total = 0;  // bytes delivered to all rollout ranks per version (destination dtype)
  int64_t broadcast_bytes = 0;
  int64_t write_bytes = 0;
  std::vector<int64_t> bytes_per_sender;  // per trainer rank, bytes it sends per version
  double senderImbalance() const;         // max over mean of bytes_per_sender (1.0 is perfect)
};

struct Plan {
  std::vector<PlanTensor> tensors;
  std::vector<BroadcastGroup> groups;  // in a deterministic order every rank replays in
  std::vector<WriteOp> writes;         // sorted by (src_rank, dst_rank, dst_buffer, dst offset)
  PlanStats stats;
};

// The part of a plan one rank needs; computed by the coordinator and sent to that rank.
struct RankPlan {
  Role role = Role::kTrainer;
  int32_t rank = 0;
  // Only the tensors this rank's groups and writes name; in a RankPlan, BroadcastGroup::tensor and
  // WriteOp::tensor index this local table (not the whole plan's).
  std::vector<PlanTensor> tensors;
  std::vector<BroadcastGroup> groups;  // groups where this rank sends or receives, plan order
  std::vector<WriteOp> writes;         // trainers: ops this rank sends; rollouts: ops it receives
  std::vector<int32_t> peers;          // ranks of the other role this rank exchanges data with
  PlanStats stats;                     // the whole plan's stats
};

}  // namespace wsync
