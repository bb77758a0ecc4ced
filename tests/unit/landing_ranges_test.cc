// landingRanges: the slot bytes a staged rollout moves to the device each version.
#include "runtime/landing_ranges.h"

#include <gtest/gtest.h>

#include <vector>

namespace wsync {
namespace {

// A write op into rollout buffer `buffer` covering `region` (element offsets/strides, float32
// unless `dtype` says otherwise).
WriteOp op(RankPlan& plan, int32_t buffer, const Region& region, DType dtype = DType::kFloat32) {
  WriteOp w;
  w.tensor = 0;
  w.src_rank = 0;
  w.src_buffer = 0;
  w.dst_rank = 0;
  w.dst_buffer = buffer;
  w.src_dtype = dtype;
  w.dst_dtype = dtype;
  setRegion(w, region, plan.shapes);
  return w;
}

Region rows(int64_t dst_offset, int64_t run, int64_t count, int64_t dst_stride) {
  Region r;
  r.dst_offset = dst_offset;
  r.count[0] = run;
  r.count[1] = count;
  r.src_stride[0] = run;
  r.dst_stride[0] = dst_stride;
  return r;
}

TEST(LandingRanges, InterleavedHalvesMergeIntoOneRange) {
  RankPlan plan;
  // An 4 x 8 float32 buffer filled by two trainers, 4 columns each (a TP split on the last dim).
  plan.writes.push_back(op(plan, 0, rows(4, 4, 4, 8)));  // right halves first: order is free
  plan.writes.push_back(op(plan, 0, rows(0, 4, 4, 8)));
  const std::vector<ByteRange> got = landingRanges(plan, {0});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], (ByteRange{0, 128}));
}

TEST(LandingRanges, GapsStaySeparateAndBuffersUseTheirOffsets) {
  RankPlan plan;
  plan.writes.push_back(op(plan, 0, rows(0, 8, 1, 0)));  // bytes [0, 32) of buffer 0
  // Buffer 1 starts at byte 256; 10 bfloat16 elements at element 3: bytes [262, 282).
  plan.writes.push_back(op(plan, 1, rows(3, 10, 1, 0), DType::kBFloat16));
  plan.writes.push_back(op(plan, 0, rows(0, 0, 1, 0)));  // an empty op lands nothing
  const std::vector<ByteRange> got = landingRanges(plan, {0, 256});
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], (ByteRange{0, 32}));
  EXPECT_EQ(got[1], (ByteRange{262, 20}));
}

// A delta version's patched ops are rebuilt from the base slot: left out, the others as before.
TEST(LandingRanges, SkippedOpsAreLeftOut) {
  RankPlan plan;
  plan.writes.push_back(op(plan, 0, rows(0, 8, 1, 0)));  // bytes [0, 32) of buffer 0
  plan.writes.push_back(op(plan, 0, rows(8, 8, 1, 0)));  // bytes [32, 64): touches the first
  plan.writes.push_back(op(plan, 1, rows(0, 4, 1, 0)));  // bytes [256, 272)
  EXPECT_EQ(landingRanges(plan, {0, 256}, {false, true, false}),
            (std::vector<ByteRange>{{0, 32}, {256, 16}}));
  EXPECT_EQ(landingRanges(plan, {0, 256}, {true}), (std::vector<ByteRange>{{32, 32}, {256, 16}}));
  EXPECT_EQ(landingRanges(plan, {0, 256}, {false, false, false}),
            (std::vector<ByteRange>{{0, 64}, {256, 16}}));
  EXPECT_TRUE(landingRanges(plan, {0, 256}, {true, true, true}).empty());
}

TEST(LandingRanges, ThreeDimensionalRegionsLandRowByRow) {
  RankPlan plan;
  Region r = rows(0, 2, 2, 4);  // 2 rows of 2 floats, rows 4 elements apart
  r.count[2] = 2;               // 2 planes, 16 elements apart
  r.src_stride[1] = 4;
  r.dst_stride[1] = 16;
  plan.writes.push_back(op(plan, 0, r));
  const std::vector<ByteRange> got = landingRanges(plan, {1024});
  const std::vector<ByteRange> want = {{1024, 8}, {1024 + 16, 8}, {1024 + 64, 8}, {1024 + 80, 8}};
  EXPECT_EQ(got, want);
}

TEST(LandingRanges, OverlappingAndTouchingRowsMerge) {
  RankPlan plan;
  plan.writes.push_back(op(plan, 0, rows(0, 10, 1, 0)));  // [0, 40)
  plan.writes.push_back(op(plan, 0, rows(5, 10, 1, 0)));  // [20, 60): overlaps
  plan.writes.push_back(op(plan, 0, rows(15, 5, 1, 0)));  // [60, 80): touches
  plan.writes.push_back(op(plan, 0, rows(21, 1, 1, 0)));  // [84, 88): a gap before it
  const std::vector<ByteRange> got = landingRanges(plan, {0});
  const std::vector<ByteRange> want = {{0, 80}, {84, 4}};
  EXPECT_EQ(got, want);
  EXPECT_TRUE(landingRanges(RankPlan{}, {}).empty());
}

}  // namespace
}  // namespace wsync
