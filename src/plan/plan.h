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
// Unused outer dims have count 1 and stride 0. The expanded form of a write op's region (see
// WriteOp), as the data plane consumes it.
struct Region {
  int64_t src_offset = 0;
  int64_t dst_offset = 0;
  int64_t count[3] = {0, 1, 1};
  int64_t src_stride[2] = {0, 0};  // elements between rows, between planes (source side)
  int64_t dst_stride[2] = {0, 0};  // same on the destination side
  int64_t numElements() const { return count[0] * count[1] * count[2]; }
  bool operator==(const Region&) const = default;
};

// A Region without its offsets: what the strided write ops of a plan share through its `shapes`
// table.
struct RegionShape {
  int64_t count[3] = {0, 1, 1};
  int64_t src_stride[2] = {0, 0};
  int64_t dst_stride[2] = {0, 0};
  bool oneD() const;  // count[1] == count[2] == 1, strides 0, count[0] >= 0: a single run
  bool operator==(const RegionShape&) const = default;
};

// One one-sided write: a region of a trainer buffer into a region of a rollout buffer. 48 bytes
// (plans of large MoE models hold millions): a region that is one contiguous run is stored inline;
// a strided region keeps its offsets inline and its counts and strides in the owning Plan's /
// RankPlan's `shapes` table. Plan::region / RankPlan::region give the expanded Region.
struct WriteOp {
  int32_t tensor = -1;
  int32_t src_rank = -1;  // trainer
  int32_t src_buffer = -1;
  int32_t dst_rank = -1;  // rollout
  int32_t dst_buffer = -1;
  DType src_dtype = DType::kFloat32;
  DType dst_dtype = DType::kFloat32;
  int64_t src_offset = 0;  // Region::src_offset
  int64_t dst_offset = 0;  // Region::dst_offset
  // >= 0: the region is one contiguous run of `run` elements (Region::count[0]; count 1 and
  // stride 0 outside it). < 0: a strided region whose counts and strides are entry
  // shapeIndex() == -1 - run of the owning plan's `shapes` table.
  int64_t run = 0;

  bool converts() const { return src_dtype != dst_dtype; }
  bool oneD() const { return run >= 0; }
  int64_t shapeIndex() const { return -1 - run; }  // when !oneD()
};
static_assert(sizeof(WriteOp) == 48, "WriteOp is the bulk of a plan: keep it compact");

// The expanded region of `op`, whose shape (when strided) is an entry of `shapes` (unchecked).
Region regionOf(const WriteOp& op, const std::vector<RegionShape>& shapes);
// The number of elements `op` moves.
int64_t numElementsOf(const WriteOp& op, const std::vector<RegionShape>& shapes);
// Sets op's region to `region`: inline when it is one run, else with its shape appended to
// `shapes` (RegionShapeIndex shares equal shapes).
void setRegion(WriteOp& op, const Region& region, std::vector<RegionShape>& shapes);

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
  std::vector<RegionShape> shapes;     // of the strided writes (WriteOp::shapeIndex)
  PlanStats stats;

  Region region(const WriteOp& op) const { return regionOf(op, shapes); }
  int64_t numElements(const WriteOp& op) const { return numElementsOf(op, shapes); }
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
  std::vector<RegionShape> shapes;     // of this view's strided writes (WriteOp::shapeIndex)
  std::vector<int32_t> peers;          // ranks of the other role this rank exchanges data with
  PlanStats stats;                     // the whole plan's stats

  Region region(const WriteOp& op) const { return regionOf(op, shapes); }
  int64_t numElements(const WriteOp& op) const { return numElementsOf(op, shapes); }
};

// Builds a `shapes` table whose equal entries are shared: index(s) is the index of the entry equal
// to `s`, appended when new (entries already in the table are indexed at construction). The table
// must not change otherwise while the index lives. Not thread-safe.
class RegionShapeIndex {
 public:
  explicit RegionShapeIndex(std::vector<RegionShape>& table);
  RegionShapeIndex(const RegionShapeIndex&) = delete;
  RegionShapeIndex& operator=(const RegionShapeIndex&) = delete;
  int64_t index(const RegionShape& shape);
  // setRegion, sharing the shape entry.
  void setRegion(WriteOp& op, const Region& region);

 private:
  struct Slot {
    uint64_t hash = 0;
    int64_t id = -1;
  };
  void rehash();
  std::vector<RegionShape>& table_;
  std::vector<Slot> slots_;
  int64_t last_ = -1;  // the entry returned last (runs of equal shapes skip the hash)
};

}  // namespace wsync
