// Planner unit tests on hand-built registrations: validation errors and their messages, overlap
// resolution, broadcast groups, regions and merging, sender balancing, stats and rankView. Every
// plan that succeeds is also run by the reference executor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "layout/registration.h"
#include "plan/plan.h"
#include "plan/planner.h"
#include "support/reference_executor.h"

namespace wsync {
namespace {

Registration makeTrainer(int32_t rank) {
  Registration r;
  r.role = Role::kTrainer;
  r.rank = rank;
  return r;
}

Registration makeRollout(int32_t rank, int32_t replica) {
  Registration r;
  r.role = Role::kRollout;
  r.rank = rank;
  r.replica = replica;
  return r;
}

struct PieceSpec {
  std::string buffer;         // default: the tensor's name
  Dims strides;               // default: row-major over the box
  int64_t local_offset = 0;   // elements
  int64_t num_elements = -1;  // default: just enough
};

// Adds one buffer holding `box` of `tensor`; returns its index.
int32_t addBox(Registration& reg, const std::string& tensor, const Dims& shape, const Box& box,
               DType dtype, PieceSpec spec = {}) {
  const int32_t t = reg.declareTensor(tensor, shape);
  EXPECT_GE(t, 0) << tensor;
  Piece piece;
  piece.tensor = t;
  piece.box = box;
  piece.local_offset = spec.local_offset;
  piece.local_strides =
      spec.strides.rank == 0 && box.rank() > 0 ? rowMajorStrides(box.extent) : spec.strides;
  int64_t last = piece.local_offset;
  for (int d = 0; d < box.rank(); ++d)
    last += (box.extent[d] - 1) * piece.local_strides[d];
  LocalBuffer buf;
  buf.name = spec.buffer.empty() ? tensor : spec.buffer;
  buf.dtype = dtype;
  buf.num_elements = spec.num_elements >= 0 ? spec.num_elements : last + 1;
  buf.pieces.push_back(piece);
  reg.buffers.push_back(std::move(buf));
  return static_cast<int32_t>(reg.buffers.size() - 1);
}

Box box2(int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  return Box{{r0, c0}, {r1 - r0, c1 - c0}};
}

// makePlan must succeed and the reference executor must verify it.
Plan planAndVerify(const std::vector<Registration>& trainers,
                   const std::vector<Registration>& rollouts, PlannerOptions options = {}) {
  Result<Plan> plan = makePlan(trainers, rollouts, options);
  EXPECT_TRUE(plan.isOk()) << plan.status().toString();
  if (!plan.isOk()) return {};
  const Status verified = executeAndVerify(trainers, rollouts, *plan);
  EXPECT_TRUE(verified.isOk()) << verified.toString();
  Result<Plan> again = makePlan(trainers, rollouts, options);
  EXPECT_TRUE(again.isOk());
  if (again.isOk()) {
    const Status same = comparePlans(*plan, *again);
    EXPECT_TRUE(same.isOk()) << same.toString();
  }
  return std::move(plan).value();
}

void expectError(const Result<Plan>& plan, wsync_status_t code,
                 const std::vector<std::string>& needles) {
  ASSERT_FALSE(plan.isOk());
  EXPECT_EQ(plan.status().code(), code) << plan.status().toString();
  for (const std::string& n : needles) {
    EXPECT_NE(plan.status().message().find(n), std::string::npos)
        << "'" << n << "' not in: " << plan.status().message();
  }
}

const Dims kShape{4, 8};

// ---- validation ------------------------------------------------------------------------------

TEST(PlannerValidation, ShapeMismatchBetweenTrainersNamesTensorRanksAndShapes) {
  std::vector<Registration> trainers{makeTrainer(0), makeTrainer(1)};
  addBox(trainers[0], "w", {4, 8}, box2(0, 2, 0, 8), DType::kFloat32);
  addBox(trainers[1], "w", {8, 4}, box2(2, 4, 0, 4), DType::kFloat32);
  std::vector<Registration> rollouts{makeRollout(0, 0)};
  expectError(makePlan(trainers, rollouts), WSYNC_ERR_MISMATCH,
              {"'w'", "trainer 0", "trainer 1", "[4, 8]", "[8, 4]"});
}

TEST(PlannerValidation, ShapeMismatchWithRolloutNamesBothSides) {
  std::vector<Registration> trainers{makeTrainer(0)};
  addBox(trainers[0], "w", kShape, Box::whole(kShape), DType::kFloat32);
  std::vector<Registration> rollouts{makeRollout(0, 0), makeRollout(1, 0)};
  addBox(rollouts[0], "w", kShape, Box::whole(kShape), DType::kFloat32);
  addBox(rollouts[1], "w", {4, 9}, box2(0, 4, 0, 9), DType::kFloat32);
  expectError(makePlan(trainers, rollouts), WSYNC_ERR_MISMATCH,
              {"'w'", "trainer 0", "rollout 1", "[4, 8]", "[4, 9]"});
}

TEST(PlannerValidation, TensorNoTrainerDeclaresNamesTensorAndRollout) {
  std::vector<Registration> trainers{makeTrainer(0)};
  addBox(trainers[0], "w", kShape, Box::whole(kShape), DType::kFloat32);
  std::vector<Registration> rollouts{makeRollout(0, 0), makeRollout(1, 0)};
  addBox(rollouts[0], "w", kShape, Box::whole(kShape), DType::kFloat32);
  addBox(rollouts[1], "lm_head.weight", {2, 2}, box2(0, 2, 0, 2), DType::kFloat32);
  expectError(makePlan(trainers, rollouts), WSYNC_ERR_MISMATCH,
              {"'lm_head.weight'", "rollout 1", "no trainer"});
}

TEST(PlannerValidation, DtypeNotConvertibleNamesTensorRanksAndDtypes) {
  std::vector<Registration> trainers{makeTrainer(0), makeTrainer(1)};
  addBox(trainers[0], "step", {4}, Box{{0}, {2}}, DType::kInt32);
  addBox(trainers[1], "step", {4}, Box{{2}, {2}}, DType::kInt32);
  std::vector<Registration> rollouts{makeRollout(0, 0)};
  addBox(rollouts[0], "step", {4}, Box{{0}, {4}}, DType::kFloat32);
  expectError(makePlan(trainers, rollouts), WSYNC_ERR_MISMATCH,
              {"'step'", "trainer 0", "rollout 0", "int32", "float32"});
}

TEST(PlannerValidation, CoverageHoleNamesTensorRolloutBoxAndMissingElement) {
  std::vector<Registration> trainers{makeTrainer(0), makeTrainer(1)};
  addBox(trainers[0], "w", kShape, box2(0, 2, 0, 8), DType::kFloat32);
  addBox(trainers[1], "w", kShape, box2(3, 4, 0, 8), DType::kFloat32);
  std::vector<Registration> rollouts{makeRollout(0, 0), makeRollout(1, 0)};
  addBox(rollouts[0], "w", kShape, box2(0, 2, 0, 8), DType::kFloat32);
  addBox(rollouts[1], "w", kShape, box2(0, 4, 0, 8), DType::kFloat32);
  expectError(makePlan(trainers, rollouts), WSYNC_ERR_MISMATCH,
              {"'w'", "rollout 1", "[0:4, 0:8]", "[2:3, 0:8]", "[2, 0]"});
}

TEST(PlannerValidation, TensorDeclaredButHeldByNoTrainerIsACoverageError) {
  std::vector<Registration> trainers{makeTrainer(0)};
  trainers[0].declareTensor("w", kShape);
  std::vector<Registration> rollouts{makeRollout(0, 0)};
  addBox(rollouts[0], "w", kShape, Box::whole(kShape), DType::kFloat32);
  expectError(makePlan(trainers, rollouts), WSYNC_ERR_MISMATCH, {"'w'", "rollout 0", "[0:4, 0:8]"});
}

// A trainer/rollout pair where the trainer holds `w` whole; `mutate` breaks one piece.
void expectBadPiece(bool on_rollout, const std::function<void(Registration&)>& mutate,
                    const std::vector<std::string>& needles) {
  std::vector<Registration> trainers{makeTrainer(0), makeTrainer(1)};
  addBox(trainers[0], "w", kShape, box2(0, 2, 0, 8), DType::kFloat32, {.buffer = "flat0"});
  addBox(trainers[1], "w", kShape, box2(2, 4, 0, 8), DType::kFloat32, {.buffer = "flat1"});
  std::vector<Registration> rollouts{makeRollout(0, 0), makeRollout(1, 0)};
  addBox(rollouts[0], "w", kShape, box2(0, 4, 0, 4), DType::kFloat32, {.buffer = "w_tp0"});
  addBox(rollouts[1], "w", kShape, box2(0, 4, 4, 8), DType::kFloat32, {.buffer = "w_tp1"});
  mutate(on_rollout ? rollouts[1] : trainers[1]);
  expectError(makePlan(trainers, rollouts), WSYNC_ERR_INVALID_ARGUMENT, needles);
}

TEST(PlannerValidation, BadPiecesNameRankBufferAndTensor) {
  // Box outside the shape.
  expectBadPiece(false, [](Registration& r) { r.buffers[0].pieces[0].box = box2(2, 5, 0, 8); },
                 {"trainer 1", "'flat1'", "'w'", "[2:5, 0:8]", "[4, 8]"});
  // Innermost stride not 1.
  expectBadPiece(true,
                 [](Registration& r) {
                   r.buffers[0].pieces[0].local_strides = {8, 2};
                 },
                 {"rollout 1", "'w_tp1'", "'w'", "innermost"});
  // Elements past the buffer's end.
  expectBadPiece(false, [](Registration& r) { r.buffers[0].num_elements = 15; },
                 {"trainer 1", "'flat1'", "'w'", "15 elements"});
  expectBadPiece(true, [](Registration& r) { r.buffers[0].pieces[0].local_offset = -1; },
                 {"rollout 1", "'w_tp1'", "'w'"});
  // Undeclared tensor index.
  expectBadPiece(true, [](Registration& r) { r.buffers[0].pieces[0].tensor = 3; },
                 {"rollout 1", "'w_tp1'", "tensor index 3"});
  // Ranks that disagree with the tensor's.
  expectBadPiece(false, [](Registration& r) { r.buffers[0].pieces[0].local_strides = {1}; },
                 {"trainer 1", "'flat1'", "'w'", "ranks"});
  // A declared rank above kMaxRank.
  expectBadPiece(false, [](Registration& r) { r.tensors[0].shape.rank = kMaxRank + 1; },
                 {"trainer 1", "'w'", "rank 7"});
  // Negative strides.
  expectBadPiece(false,
                 [](Registration& r) {
                   r.buffers[0].pieces[0].local_strides = {-8, 1};
                 },
                 {"trainer 1", "'flat1'", "'w'", "negative"});
}

TEST(PlannerValidation, RanksRolesAndReplicasAreChecked) {
  std::vector<Registration> trainers{makeTrainer(0), makeTrainer(0)};
  std::vector<Registration> rollouts{makeRollout(0, 0)};
  expectError(makePlan(trainers, rollouts), WSYNC_ERR_INVALID_ARGUMENT, {"trainers[1]"});
  trainers.pop_back();
  rollouts[0].replica = -1;
  expectError(makePlan(trainers, rollouts), WSYNC_ERR_INVALID_ARGUMENT, {"rollout 0", "replica"});
  rollouts[0] = makeTrainer(0);
  expectError(makePlan(trainers, rollouts), WSYNC_ERR_INVALID_ARGUMENT, {"rollouts[0]"});
}

// ---- overlap resolution ---------------------------------------------------------------------

TEST(PlannerOverlap, LowestRankOwnsTheOverlap) {
  for (const bool low_rank_first : {true, false}) {
    std::vector<Registration> trainers{makeTrainer(0), makeTrainer(1)};
    // Rows [0:3] and [2:4]: row 2 is held by both.
    addBox(trainers[low_rank_first ? 0 : 1], "w", kShape, box2(0, 3, 0, 8), DType::kFloat32);
    addBox(trainers[low_rank_first ? 1 : 0], "w", kShape, box2(2, 4, 0, 8), DType::kFloat32);
    std::vector<Registration> rollouts{makeRollout(0, 0)};
    addBox(rollouts[0], "w", kShape, Box::whole(kShape), DType::kFloat32);
    const Plan plan = planAndVerify(trainers, rollouts);
    ASSERT_EQ(plan.writes.size(), 2u);
    // Trainer 0 sends its whole box; trainer 1 only what trainer 0 lacks.
    const std::vector<int64_t> expected_bytes =
        low_rank_first ? std::vector<int64_t>{24 * 4, 8 * 4} : std::vector<int64_t>{16 * 4, 16 * 4};
    EXPECT_EQ(plan.stats.bytes_per_sender, expected_bytes);
    EXPECT_EQ(plan.writes[0].src_rank, 0);
    EXPECT_EQ(plan.numElements(plan.writes[0]), expected_bytes[0] / 4);
  }
}

TEST(PlannerOverlap, TwoDimensionalOverlapsAreCutByBoxDifference) {
  const Dims shape{6, 6};
  std::vector<Registration> trainers{makeTrainer(0), makeTrainer(1), makeTrainer(2)};
  addBox(trainers[0], "w", shape, box2(0, 4, 0, 4), DType::kFloat32);
  addBox(trainers[1], "w", shape, box2(2, 6, 2, 6), DType::kFloat32);
  addBox(trainers[2], "w", shape, box2(0, 6, 0, 6), DType::kFloat32);
  std::vector<Registration> rollouts{makeRollout(0, 0)};
  addBox(rollouts[0], "w", shape, Box::whole(shape), DType::kFloat32);
  const Plan writes = planAndVerify(trainers, rollouts, {.allow_broadcast = false});
  EXPECT_EQ(writes.stats.bytes_per_sender, (std::vector<int64_t>{16 * 4, 12 * 4, 8 * 4}));
  // With broadcast, the box equal to the rollout's (trainer 2's, whole) still serves it whole.
  const Plan plan = planAndVerify(trainers, rollouts);
  ASSERT_EQ(plan.groups.size(), 1u);
  EXPECT_EQ(plan.groups[0].src.rank, 2);
  EXPECT_TRUE(plan.writes.empty());
}

TEST(PlannerOverlap, IdenticalBoxesAreAlternativesNotOverlaps) {
  std::vector<Registration> trainers{makeTrainer(0), makeTrainer(1)};
  addBox(trainers[0], "w", kShape, Box::whole(kShape), DType::kFloat32);
  addBox(trainers[1], "w", kShape, Box::whole(kShape), DType::kFloat32);
  std::vector<Registration> rollouts{makeRollout(0, 0), makeRollout(1, 1)};
  addBox(rollouts[0], "w", kShape, box2(0, 2, 0, 8), DType::kFloat32);
  addBox(rollouts[1], "w", kShape, box2(0, 2, 0, 8), DType::kFloat32);
  const Plan plan = planAndVerify(trainers, rollouts);
  ASSERT_EQ(plan.writes.size(), 2u);
  // Equal loads: one op from each holder, the first choice (a tie) to the lowest rank.
  EXPECT_EQ(plan.writes[0].src_rank, 0);
  EXPECT_EQ(plan.writes[0].dst_rank, 0);
  EXPECT_EQ(plan.writes[1].src_rank, 1);
  EXPECT_EQ(plan.writes[1].dst_rank, 1);
  EXPECT_DOUBLE_EQ(plan.stats.senderImbalance(), 1.0);
}

// ---- broadcast groups ------------------------------------------------------------------------

TEST(PlannerBroadcast, RanksOfAReplicaWantingTheTrainersBoxShareAGroup) {
  // Two trainers hold the tensor whole (DP replicas); two rollout replicas of two ranks each want
  // it whole in bfloat16 (DP attention).
  std::vector<Registration> trainers{makeTrainer(0), makeTrainer(1)};
  for (Registration& t : trainers)
    addBox(t, "w", kShape, Box::whole(kShape), DType::kFloat32);
  std::vector<Registration> rollouts;
  for (int32_t j = 0; j < 4; ++j) {
    rollouts.push_back(makeRollout(j, j / 2));
    addBox(rollouts.back(), "w", kShape, Box::whole(kShape), DType::kBFloat16,
           {.local_offset = 3 * j, .num_elements = 64});
  }
  const Plan plan = planAndVerify(trainers, rollouts);
  EXPECT_TRUE(plan.writes.empty());
  ASSERT_EQ(plan.groups.size(), 2u);
  for (int32_t g = 0; g < 2; ++g) {
    const BroadcastGroup& group = plan.groups[static_cast<size_t>(g)];
    EXPECT_EQ(group.replica, g);
    EXPECT_EQ(group.box, Box::whole(kShape));
    EXPECT_EQ(group.num_elements, 32);
    EXPECT_EQ(group.src_dtype, DType::kFloat32);
    EXPECT_EQ(group.dst_dtype, DType::kBFloat16);
    EXPECT_EQ(group.src.offset, 0);
    ASSERT_EQ(group.dst.size(), 2u);
    EXPECT_EQ(group.dst[0].rank, 2 * g);
    EXPECT_EQ(group.dst[1].rank, 2 * g + 1);
    EXPECT_EQ(group.dst[1].offset, 3 * (2 * g + 1));
  }
  // One group per sender: balanced.
  EXPECT_NE(plan.groups[0].src.rank, plan.groups[1].src.rank);
  EXPECT_EQ(plan.stats.bytes_per_sender, (std::vector<int64_t>{128, 128}));
  EXPECT_EQ(plan.stats.broadcast_bytes, 4 * 32 * 2);
  EXPECT_EQ(plan.stats.bytes_total, plan.stats.broadcast_bytes);
  EXPECT_EQ(plan.stats.write_bytes, 0);
  EXPECT_EQ(plan.stats.replicas, 2);

  // Without broadcast: one write per rollout rank.
  const Plan writes = planAndVerify(trainers, rollouts, {.allow_broadcast = false});
  EXPECT_TRUE(writes.groups.empty());
  EXPECT_EQ(writes.writes.size(), 4u);
  EXPECT_EQ(writes.stats.write_bytes, 4 * 32 * 2);
}

TEST(PlannerBroadcast, OnlyRowMajorLayoutsOnBothSidesBroadcast) {
  std::vector<Registration> trainers{makeTrainer(0), makeTrainer(1)};
  // Trainer 0 holds rows [0:2] padded (row stride 10): not a broadcast sender.
  addBox(trainers[0], "w", kShape, box2(0, 2, 0, 8), DType::kFloat32, {.strides = {10, 1}});
  addBox(trainers[1], "w", kShape, box2(2, 4, 0, 8), DType::kFloat32);
  std::vector<Registration> rollouts{makeRollout(0, 0), makeRollout(1, 0)};
  // Rollout 0 wants rows [0:2] row-major (its only holder is padded), rows [2:4] padded.
  addBox(rollouts[0], "w", kShape, box2(0, 2, 0, 8), DType::kFloat32, {.buffer = "a"});
  addBox(rollouts[0], "w", kShape, box2(2, 4, 0, 8), DType::kFloat32,
         {.buffer = "b", .strides = {9, 1}});
  // Rollout 1 wants rows [2:4] row-major twice (two buffers): one copy joins the group.
  addBox(rollouts[1], "w", kShape, box2(2, 4, 0, 8), DType::kFloat32, {.buffer = "c"});
  addBox(rollouts[1], "w", kShape, box2(2, 4, 0, 8), DType::kFloat32, {.buffer = "d"});
  const Plan plan = planAndVerify(trainers, rollouts);
  ASSERT_EQ(plan.groups.size(), 1u);
  EXPECT_EQ(plan.groups[0].src.rank, 1);
  ASSERT_EQ(plan.groups[0].dst.size(), 1u);
  EXPECT_EQ(plan.groups[0].dst[0].rank, 1);
  EXPECT_EQ(plan.groups[0].dst[0].buffer, 0);
  ASSERT_EQ(plan.writes.size(), 3u);
  // Sorted by (src_rank, dst_rank, dst_buffer, dst_offset).
  EXPECT_EQ(plan.writes[0].src_rank, 0);  // padded rows [0:2] -> rollout 0 "a"
  const Region padded = plan.region(plan.writes[0]);
  EXPECT_EQ(padded.count[0], 8);
  EXPECT_EQ(padded.count[1], 2);
  EXPECT_EQ(padded.src_stride[0], 10);
  EXPECT_EQ(padded.dst_stride[0], 8);
  EXPECT_EQ(plan.writes[1].src_rank, 1);  // rows [2:4] -> rollout 0 "b" (padded)
  EXPECT_EQ(plan.writes[1].dst_rank, 0);
  EXPECT_EQ(plan.writes[1].dst_buffer, 1);
  EXPECT_EQ(plan.writes[2].dst_rank, 1);  // the second copy on rollout 1, buffer "d"
  EXPECT_EQ(plan.writes[2].dst_buffer, 1);
}

TEST(PlannerBroadcast, ScalarTensorsWork) {
  std::vector<Registration> trainers{makeTrainer(0)};
  addBox(trainers[0], "scale", Dims::zeros(0), Box::whole(Dims::zeros(0)), DType::kFloat32);
  std::vector<Registration> rollouts{makeRollout(0, 0), makeRollout(1, 0)};
  addBox(rollouts[0], "scale", Dims::zeros(0), Box::whole(Dims::zeros(0)), DType::kFloat16);
  addBox(rollouts[1], "scale", Dims::zeros(0), Box::whole(Dims::zeros(0)), DType::kFloat16);
  const Plan plan = planAndVerify(trainers, rollouts);
  ASSERT_EQ(plan.groups.size(), 1u);
  EXPECT_EQ(plan.groups[0].num_elements, 1);
  const Plan writes = planAndVerify(trainers, rollouts, {.allow_broadcast = false});
  ASSERT_EQ(writes.writes.size(), 2u);
  EXPECT_EQ(writes.numElements(writes.writes[0]), 1);
}

// ---- regions and merging ---------------------------------------------------------------------

TEST(PlannerRegions, ColumnSplitIsOneTwoDimensionalOp) {
  std::vector<Registration> trainers{makeTrainer(0)};
  addBox(trainers[0], "w", kShape, Box::whole(kShape), DType::kFloat32);
  std::vector<Registration> rollouts{makeRollout(0, 0), makeRollout(1, 0)};
  addBox(rollouts[0], "w", kShape, box2(0, 4, 0, 4), DType::kFloat32);
  addBox(rollouts[1], "w", kShape, box2(0, 4, 4, 8), DType::kFloat32);
  const Plan plan = planAndVerify(trainers, rollouts);
  ASSERT_EQ(plan.writes.size(), 2u);
  const Region r = plan.region(plan.writes[1]);
  EXPECT_EQ(plan.writes[1].dst_rank, 1);
  EXPECT_EQ(r.src_offset, 4);
  EXPECT_EQ(r.dst_offset, 0);
  EXPECT_EQ(r.count[0], 4);
  EXPECT_EQ(r.count[1], 4);
  EXPECT_EQ(r.count[2], 1);
  EXPECT_EQ(r.src_stride[0], 8);
  EXPECT_EQ(r.dst_stride[0], 4);
  EXPECT_EQ(r.src_stride[1], 0);
  EXPECT_EQ(r.dst_stride[1], 0);
}

TEST(PlannerRegions, StridedOpsShareOneShapeEntry) {
  // Four rollouts each want a column block of the same width: four 2-D ops of one shape.
  std::vector<Registration> trainers{makeTrainer(0)};
  addBox(trainers[0], "w", kShape, Box::whole(kShape), DType::kFloat32);
  std::vector<Registration> rollouts;
  for (int j = 0; j < 4; ++j) {
    rollouts.push_back(makeRollout(j, 0));
    addBox(rollouts.back(), "w", kShape, box2(0, 4, 2 * j, 2 * j + 2), DType::kFloat32);
  }
  const Plan plan = planAndVerify(trainers, rollouts);
  ASSERT_EQ(plan.writes.size(), 4u);
  ASSERT_EQ(plan.shapes.size(), 1u);
  EXPECT_EQ(plan.shapes[0], (RegionShape{{2, 4, 1}, {8, 0}, {2, 0}}));
  for (size_t j = 0; j < 4; ++j) {
    const WriteOp& w = plan.writes[j];
    EXPECT_FALSE(w.oneD());
    EXPECT_EQ(w.shapeIndex(), 0);
    EXPECT_EQ(w.src_offset, 2 * static_cast<int64_t>(j));
    EXPECT_EQ(plan.numElements(w), 8);
  }
  // A rank's view carries the shapes its writes use, renumbered from 0.
  const RankPlan view = rankView(plan, Role::kRollout, 2);
  ASSERT_EQ(view.writes.size(), 1u);
  ASSERT_EQ(view.shapes.size(), 1u);
  EXPECT_EQ(view.region(view.writes[0]), plan.region(plan.writes[2]));
}

// ---- compact write ops -----------------------------------------------------------------------

TEST(WriteOpRegion, OneRunIsInlineAndStridedShapesGoToTheTable) {
  std::vector<RegionShape> shapes;
  WriteOp run;
  setRegion(run, Region{7, 9, {100, 1, 1}, {0, 0}, {0, 0}}, shapes);
  EXPECT_TRUE(run.oneD());
  EXPECT_EQ(run.run, 100);
  EXPECT_TRUE(shapes.empty());
  EXPECT_EQ(regionOf(run, shapes), (Region{7, 9, {100, 1, 1}, {0, 0}, {0, 0}}));
  EXPECT_EQ(numElementsOf(run, shapes), 100);

  // Count 1 with a stride is not a single run in the encoding sense: kept exactly.
  const Region odd{0, 0, {4, 1, 1}, {5, 0}, {0, 0}};
  WriteOp w;
  setRegion(w, odd, shapes);
  EXPECT_FALSE(w.oneD());
  EXPECT_EQ(regionOf(w, shapes), odd);

  const Region planes{1, 2, {3, 4, 5}, {10, 100}, {3, 12}};
  setRegion(w, planes, shapes);
  ASSERT_EQ(shapes.size(), 2u);
  EXPECT_EQ(w.shapeIndex(), 1);
  EXPECT_EQ(regionOf(w, shapes), planes);
  EXPECT_EQ(numElementsOf(w, shapes), 60);
}

TEST(WriteOpRegion, ShapeIndexSharesEqualShapesAndIndexesExistingOnes) {
  std::vector<RegionShape> shapes;
  const Region a{0, 0, {3, 4, 1}, {10, 0}, {3, 0}};
  const Region b{5, 6, {3, 4, 2}, {10, 40}, {3, 12}};
  WriteOp first;
  setRegion(first, a, shapes);  // an entry made before the index
  RegionShapeIndex index(shapes);
  WriteOp x;
  index.setRegion(x, a);
  EXPECT_EQ(x.shapeIndex(), 0);  // found, not appended
  WriteOp y;
  index.setRegion(y, b);
  EXPECT_EQ(y.shapeIndex(), 1);
  for (int i = 0; i < 1000; ++i) {  // many distinct shapes: the index grows
    WriteOp z;
    index.setRegion(z, Region{0, 0, {i + 1, 2, 1}, {i + 7, 0}, {i + 1, 0}});
    ASSERT_EQ(z.shapeIndex(), 2 + i);
  }
  WriteOp again;
  index.setRegion(again, b);
  EXPECT_EQ(again.shapeIndex(), 1);
  index.setRegion(again, Region{0, 0, {501, 2, 1}, {507, 0}, {501, 0}});
  EXPECT_EQ(again.shapeIndex(), 502);
  EXPECT_EQ(shapes.size(), 1002u);
  WriteOp run;
  index.setRegion(run, Region{4, 4, {8, 1, 1}, {0, 0}, {0, 0}});
  EXPECT_TRUE(run.oneD());
  EXPECT_EQ(shapes.size(), 1002u);
}

TEST(PlannerRegions, DimsContiguousOnBothSidesMerge) {
  // [2, 3, 4, 5] held whole; the rollout wants [:, :, 1:3, :] row-major over its box: the inner
  // two dims merge into runs of 10; the outer two merge into one strided dim of 6 rows.
  const Dims shape{2, 3, 4, 5};
  std::vector<Registration> trainers{makeTrainer(0)};
  addBox(trainers[0], "w", shape, Box::whole(shape), DType::kFloat32);
  std::vector<Registration> rollouts{makeRollout(0, 0)};
  addBox(rollouts[0], "w", shape, Box{{0, 0, 1, 0}, {2, 3, 2, 5}}, DType::kFloat32);
  const Plan plan = planAndVerify(trainers, rollouts);
  ASSERT_EQ(plan.writes.size(), 1u);
  const Region r = plan.region(plan.writes[0]);
  EXPECT_EQ(r.src_offset, 5);
  EXPECT_EQ(r.count[0], 10);
  EXPECT_EQ(r.count[1], 6);
  EXPECT_EQ(r.count[2], 1);
  EXPECT_EQ(r.src_stride[0], 20);
  EXPECT_EQ(r.dst_stride[0], 10);
}

TEST(PlannerRegions, MoreThanThreeDimsLoopOverTheOuterOnes) {
  const Dims shape{2, 3, 4, 5};
  std::vector<Registration> trainers{makeTrainer(0)};
  addBox(trainers[0], "w", shape, Box::whole(shape), DType::kFloat32);
  std::vector<Registration> rollouts{makeRollout(0, 0)};
  addBox(rollouts[0], "w", shape, Box{{0, 0, 0, 0}, {2, 2, 2, 2}}, DType::kFloat32);
  const Plan plan = planAndVerify(trainers, rollouts);
  ASSERT_EQ(plan.writes.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const Region r = plan.region(plan.writes[static_cast<size_t>(i)]);
    EXPECT_EQ(r.src_offset, 60 * i);
    EXPECT_EQ(r.dst_offset, 8 * i);
    EXPECT_EQ(r.count[0], 2);
    EXPECT_EQ(r.count[1], 2);
    EXPECT_EQ(r.count[2], 2);
    EXPECT_EQ(r.src_stride[0], 5);
    EXPECT_EQ(r.src_stride[1], 20);
    EXPECT_EQ(r.dst_stride[0], 2);
    EXPECT_EQ(r.dst_stride[1], 4);
  }
}

// FSDP flat ranges [0, 13) and [13, 32) of a [4, 8] tensor, as row boxes in one buffer each.
std::vector<Registration> flatTrainers(DType dtype) {
  std::vector<Registration> trainers{makeTrainer(0), makeTrainer(1)};
  auto flat = [&](Registration& reg, std::vector<std::pair<Box, int64_t>> pieces, int64_t n) {
    const int32_t t = reg.declareTensor("w", kShape);
    LocalBuffer buf;
    buf.name = "flat";
    buf.dtype = dtype;
    buf.num_elements = n;
    for (const auto& [box, offset] : pieces)
      buf.pieces.push_back({t, box, offset, {8, 1}});
    reg.buffers.push_back(buf);
  };
  flat(trainers[0], {{box2(0, 1, 0, 8), 0}, {box2(1, 2, 0, 5), 8}}, 13);
  flat(trainers[1], {{box2(1, 2, 5, 8), 0}, {box2(2, 4, 0, 8), 3}}, 19);
  return trainers;
}

TEST(PlannerRegions, AdjacentOpsMergeIntoOne) {
  const std::vector<Registration> trainers = flatTrainers(DType::kFloat32);
  std::vector<Registration> rollouts{makeRollout(0, 0)};
  addBox(rollouts[0], "w", kShape, Box::whole(kShape), DType::kBFloat16);
  const Plan plan = planAndVerify(trainers, rollouts);
  ASSERT_EQ(plan.writes.size(), 2u);
  EXPECT_EQ(plan.writes[0].src_rank, 0);
  EXPECT_TRUE(plan.writes[0].oneD());
  EXPECT_EQ(plan.writes[0].run, 13);
  EXPECT_EQ(plan.writes[0].dst_offset, 0);
  EXPECT_EQ(plan.writes[1].src_rank, 1);
  EXPECT_EQ(plan.writes[1].run, 19);
  EXPECT_EQ(plan.writes[1].src_offset, 0);
  EXPECT_EQ(plan.writes[1].dst_offset, 13);
  EXPECT_EQ(plan.stats.write_bytes, 32 * 2);
  EXPECT_EQ(plan.stats.bytes_per_sender, (std::vector<int64_t>{13 * 4, 19 * 4}));
}

TEST(PlannerRegions, OpsMergeAcrossTensorsOfAFusedBuffer) {
  // Trainer: q then k in one flat buffer; rollout: [q; k] fused. One op moves both.
  std::vector<Registration> trainers{makeTrainer(0)};
  {
    Registration& t = trainers[0];
    const int32_t q = t.declareTensor("q", {2, 4});
    const int32_t k = t.declareTensor("k", {1, 4});
    t.buffers.push_back({"flat",
                         DType::kBFloat16,
                         MemoryKind::kHost,
                         12,
                         {{q, box2(0, 2, 0, 4), 0, {4, 1}}, {k, box2(0, 1, 0, 4), 8, {4, 1}}}});
  }
  std::vector<Registration> rollouts{makeRollout(0, 0)};
  {
    Registration& r = rollouts[0];
    const int32_t q = r.declareTensor("q", {2, 4});
    const int32_t k = r.declareTensor("k", {1, 4});
    r.buffers.push_back({"qk",
                         DType::kBFloat16,
                         MemoryKind::kHost,
                         12,
                         {{q, box2(0, 2, 0, 4), 0, {4, 1}}, {k, box2(0, 1, 0, 4), 8, {4, 1}}}});
  }
  const Plan plan = planAndVerify(trainers, rollouts, {.allow_broadcast = false});
  ASSERT_EQ(plan.writes.size(), 1u);
  EXPECT_TRUE(plan.writes[0].oneD());
  EXPECT_EQ(plan.writes[0].run, 12);
  EXPECT_EQ(plan.tensors[static_cast<size_t>(plan.writes[0].tensor)].name, "q");
}

// ---- balancing -------------------------------------------------------------------------------

TEST(PlannerBalance, ReplicatedTrainersShareTheLoad) {
  // 8 trainers each hold every tensor whole (pure DP); 2 rollout replicas of TP2 (row split).
  const int kTrainers = 8;
  const int kTensors = 40;
  std::vector<Registration> trainers;
  for (int t = 0; t < kTrainers; ++t)
    trainers.push_back(makeTrainer(t));
  std::vector<Registration> rollouts;
  for (int j = 0; j < 4; ++j)
    rollouts.push_back(makeRollout(j, j / 2));
  for (int i = 0; i < kTensors; ++i) {
    const std::string name = "layers." + std::to_string(i) + ".w";
    const Dims shape{16 + 2 * (i % 5), 8};
    for (Registration& t : trainers)
      addBox(t, name, shape, Box::whole(shape), DType::kFloat32);
    for (int j = 0; j < 4; ++j) {
      const int64_t half = shape[0] / 2;
      addBox(rollouts[static_cast<size_t>(j)], name, shape,
             box2(j % 2 == 0 ? 0 : half, j % 2 == 0 ? half : shape[0], 0, 8), DType::kBFloat16);
    }
  }
  const Plan plan = planAndVerify(trainers, rollouts);
  ASSERT_EQ(plan.stats.bytes_per_sender.size(), static_cast<size_t>(kTrainers));
  int64_t sent = 0;
  for (const int64_t b : plan.stats.bytes_per_sender)
    sent += b;
  EXPECT_EQ(sent, 2 * plan.stats.bytes_total);  // float32 sent, bfloat16 delivered
  EXPECT_LE(plan.stats.senderImbalance(), 1.05);
  EXPECT_EQ(plan.stats.trainer_ranks, kTrainers);
  EXPECT_EQ(plan.stats.rollout_ranks, 4);
  EXPECT_EQ(plan.stats.replicas, 2);
}

TEST(PlannerBalance, FixedSendersAreChargedBeforeChoices) {
  // Trainer 0 alone holds a big tensor; both hold a small one: the small one goes to trainer 1.
  std::vector<Registration> trainers{makeTrainer(0), makeTrainer(1)};
  addBox(trainers[0], "big", {64}, Box{{0}, {64}}, DType::kFloat32);
  for (Registration& t : trainers)
    addBox(t, "small", {8}, Box{{0}, {8}}, DType::kFloat32);
  std::vector<Registration> rollouts{makeRollout(0, 0)};
  addBox(rollouts[0], "small", {8}, Box{{0}, {8}}, DType::kFloat32);
  addBox(rollouts[0], "big", {64}, Box{{0}, {64}}, DType::kFloat32);
  const Plan plan = planAndVerify(trainers, rollouts);
  ASSERT_EQ(plan.groups.size(), 2u);
  EXPECT_EQ(plan.tensors[static_cast<size_t>(plan.groups[0].tensor)].name, "small");
  EXPECT_EQ(plan.groups[0].src.rank, 1);
  EXPECT_EQ(plan.stats.bytes_per_sender, (std::vector<int64_t>{256, 32}));
}

TEST(PlannerBalance, ManyDistinctTransferSizesAreOrderedToo) {
  // 4200 rollout pieces of distinct lengths 1..4200 of one tensor both trainers hold: more distinct
  // sizes than the counting sort takes, so the comparison sort orders the choices.
  constexpr int64_t kPieces = 4200;
  const int64_t n = kPieces * (kPieces + 1) / 2;
  std::vector<Registration> trainers{makeTrainer(0), makeTrainer(1)};
  for (Registration& t : trainers)
    addBox(t, "w", {n}, Box{{0}, {n}}, DType::kUInt8);
  std::vector<Registration> rollouts{makeRollout(0, 0)};
  Registration& r = rollouts[0];
  const int32_t id = r.declareTensor("w", {n});
  LocalBuffer buf{"w", DType::kUInt8, MemoryKind::kHost, n, {}};
  int64_t start = 0;
  for (int64_t len = 1; len <= kPieces; ++len) {
    buf.pieces.push_back({id, Box{{start}, {len}}, start, {1}});
    start += len;
  }
  r.buffers.push_back(std::move(buf));
  const Plan plan = planAndVerify(trainers, rollouts, {.allow_broadcast = false});
  ASSERT_EQ(plan.stats.bytes_per_sender.size(), 2u);
  EXPECT_EQ(plan.stats.bytes_per_sender[0] + plan.stats.bytes_per_sender[1], n);
  // Largest first, alternating to the least loaded: the two loads differ by at most one piece.
  EXPECT_LE(std::abs(plan.stats.bytes_per_sender[0] - plan.stats.bytes_per_sender[1]), kPieces);
  EXPECT_LT(plan.writes.size(), static_cast<size_t>(kPieces));  // neighbours from one sender merge
}

TEST(PlanStats, SenderImbalanceIsMaxOverMean) {
  PlanStats stats;
  EXPECT_DOUBLE_EQ(stats.senderImbalance(), 1.0);
  stats.bytes_per_sender = {0, 0};
  EXPECT_DOUBLE_EQ(stats.senderImbalance(), 1.0);
  stats.bytes_per_sender = {10, 30};
  EXPECT_DOUBLE_EQ(stats.senderImbalance(), 1.5);
  stats.bytes_per_sender = {5, 5, 5, 5};
  EXPECT_DOUBLE_EQ(stats.senderImbalance(), 1.0);
}

// ---- the executor catches wrong plans --------------------------------------------------------

TEST(ReferenceExecutor, DetectsWrongOffsetsMissingAndDoubleWrites) {
  const std::vector<Registration> trainers = flatTrainers(DType::kFloat32);
  std::vector<Registration> rollouts{makeRollout(0, 0)};
  addBox(rollouts[0], "w", kShape, Box::whole(kShape), DType::kFloat32);
  const Plan good = planAndVerify(trainers, rollouts);
  ASSERT_EQ(good.writes.size(), 2u);

  Plan bad = good;
  bad.writes[1].src_offset = 1;  // reads the wrong elements
  bad.writes[1].run = 18;
  Status s = executeAndVerify(trainers, rollouts, bad);
  EXPECT_EQ(s.code(), WSYNC_ERR_MISMATCH) << s.toString();
  EXPECT_NE(s.message().find("tensor 'w'"), std::string::npos) << s.message();

  bad = good;
  bad.writes.pop_back();  // elements never written
  s = executeAndVerify(trainers, rollouts, bad);
  EXPECT_NE(s.message().find("written 0 time(s)"), std::string::npos) << s.message();

  bad = good;
  bad.writes.push_back(good.writes[0]);  // written twice
  s = executeAndVerify(trainers, rollouts, bad);
  EXPECT_NE(s.message().find("written 2 time(s)"), std::string::npos) << s.message();

  bad = good;
  bad.writes[0].run = 100;  // outside both buffers
  s = executeAndVerify(trainers, rollouts, bad);
  EXPECT_EQ(s.code(), WSYNC_ERR_INVALID_ARGUMENT) << s.toString();

  EXPECT_FALSE(comparePlans(good, bad).isOk());
  EXPECT_NE(comparePlans(good, bad).message().find("writes[0].region.count[0]: 13 vs 100"),
            std::string::npos);
}

// ---- rankView --------------------------------------------------------------------------------

TEST(PlannerRankView, EachRankGetsItsPartWithLocalTensorIndices) {
  // Tensors a (broadcast to replica 0's two ranks) and b (column split by writes).
  std::vector<Registration> trainers{makeTrainer(0), makeTrainer(1), makeTrainer(2)};
  addBox(trainers[2], "a", {4}, Box{{0}, {4}}, DType::kFloat32);
  addBox(trainers[0], "b", kShape, box2(0, 2, 0, 8), DType::kFloat32);
  addBox(trainers[1], "b", kShape, box2(2, 4, 0, 8), DType::kFloat32);
  std::vector<Registration> rollouts{makeRollout(0, 0), makeRollout(1, 0), makeRollout(2, 1)};
  for (Registration& r : rollouts)
    addBox(r, "a", {4}, Box{{0}, {4}}, DType::kFloat32);
  addBox(rollouts[0], "b", kShape, box2(0, 4, 0, 4), DType::kFloat32);
  addBox(rollouts[1], "b", kShape, box2(0, 4, 4, 8), DType::kFloat32);
  const Plan plan = planAndVerify(trainers, rollouts);
  ASSERT_EQ(plan.groups.size(), 2u);
  ASSERT_EQ(plan.writes.size(), 4u);

  const RankPlan t2 = rankView(plan, Role::kTrainer, 2);
  EXPECT_EQ(t2.groups.size(), 2u);
  EXPECT_TRUE(t2.writes.empty());
  ASSERT_EQ(t2.tensors.size(), 1u);
  EXPECT_EQ(t2.tensors[0].name, "a");
  EXPECT_EQ(t2.groups[0].tensor, 0);
  EXPECT_EQ(t2.peers, (std::vector<int32_t>{0, 1, 2}));

  const RankPlan t1 = rankView(plan, Role::kTrainer, 1);
  EXPECT_TRUE(t1.groups.empty());
  ASSERT_EQ(t1.writes.size(), 2u);
  ASSERT_EQ(t1.tensors.size(), 1u);
  EXPECT_EQ(t1.tensors[0].name, "b");
  for (const WriteOp& w : t1.writes) {
    EXPECT_EQ(w.src_rank, 1);
    EXPECT_EQ(w.tensor, 0);
  }
  EXPECT_EQ(t1.peers, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(t1.stats.bytes_total, plan.stats.bytes_total);

  const RankPlan r1 = rankView(plan, Role::kRollout, 1);
  EXPECT_EQ(r1.role, Role::kRollout);
  EXPECT_EQ(r1.rank, 1);
  ASSERT_EQ(r1.groups.size(), 1u);
  EXPECT_EQ(r1.groups[0].dst.size(), 2u);  // the whole group, every receiver
  ASSERT_EQ(r1.writes.size(), 2u);
  EXPECT_EQ(r1.writes[0].src_rank, 0);
  EXPECT_EQ(r1.writes[1].src_rank, 1);
  ASSERT_EQ(r1.tensors.size(), 2u);
  EXPECT_EQ(r1.tensors[static_cast<size_t>(r1.groups[0].tensor)].name, "a");
  EXPECT_EQ(r1.tensors[static_cast<size_t>(r1.writes[0].tensor)].name, "b");
  EXPECT_EQ(r1.peers, (std::vector<int32_t>{0, 1, 2}));

  const RankPlan r2 = rankView(plan, Role::kRollout, 2);
  EXPECT_EQ(r2.groups.size(), 1u);
  EXPECT_TRUE(r2.writes.empty());
  EXPECT_EQ(r2.peers, (std::vector<int32_t>{2}));

  // Every write reaches exactly one trainer view and one rollout view.
  size_t trainer_writes = 0;
  size_t rollout_writes = 0;
  for (int32_t t = 0; t < 3; ++t)
    trainer_writes += rankView(plan, Role::kTrainer, t).writes.size();
  for (int32_t r = 0; r < 3; ++r)
    rollout_writes += rankView(plan, Role::kRollout, r).writes.size();
  EXPECT_EQ(trainer_writes, plan.writes.size());
  EXPECT_EQ(rollout_writes, plan.writes.size());
}

TEST(PlannerEdgeCases, EmptyPiecesAndUnwantedTensorsAreIgnored) {
  std::vector<Registration> trainers{makeTrainer(0)};
  addBox(trainers[0], "w", kShape, Box::whole(kShape), DType::kFloat32);
  addBox(trainers[0], "optimizer_only", {3}, Box{{0}, {3}}, DType::kFloat32);
  addBox(trainers[0], "w", kShape, box2(0, 0, 0, 8), DType::kFloat32,
         {.buffer = "empty", .num_elements = 0});
  std::vector<Registration> rollouts{makeRollout(0, 0), makeRollout(1, 0)};
  addBox(rollouts[0], "w", kShape, Box::whole(kShape), DType::kFloat32);
  addBox(rollouts[1], "w", kShape, box2(4, 4, 0, 8), DType::kFloat32, {.num_elements = 0});
  const Plan plan = planAndVerify(trainers, rollouts);
  EXPECT_EQ(plan.tensors.size(), 2u);
  EXPECT_EQ(plan.stats.bytes_total, 32 * 4);
  const Result<Plan> none = makePlan({}, {});
  ASSERT_TRUE(none.isOk()) << none.status().toString();
  EXPECT_TRUE(none->writes.empty());
  EXPECT_DOUBLE_EQ(none->stats.senderImbalance(), 1.0);
}

}  // namespace
}  // namespace wsync
