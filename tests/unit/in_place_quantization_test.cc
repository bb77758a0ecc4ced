// Where in-place quantization (runtime/in_place_quantization.h) may write a source's float8 values
// straight into a rollout's slot: placeInPlace accepts exactly the write regions that copy the
// whole packed buffer with the box's rows at one destination pitch, and every element it places
// lands where the region's own copy would have put it. The kernel side of the pitch:
// block_quant_kernel_geometry_test.cc (PitchedOutputsHoldThePackedRows); on a GPU, the
// block-fp8 bench's checked versions (tests/gpu/run_gpu_suite.sh).
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <random>

#include "layout/box.h"
#include "plan/plan.h"
#include "runtime/in_place_quantization.h"

namespace wsync {
namespace {

Box box2(int64_t rows, int64_t cols) {
  Box b;
  b.offset = Dims{0, 0};
  b.extent = Dims{rows, cols};
  return b;
}
Box box3(int64_t e, int64_t rows, int64_t cols) {
  Box b;
  b.offset = Dims{0, 0, 0};
  b.extent = Dims{e, rows, cols};
  return b;
}

Region run(int64_t n, int64_t dst_offset) {
  Region r;
  r.count[0] = n;
  r.dst_offset = dst_offset;
  return r;
}
Region rows(int64_t n0, int64_t n1, int64_t n2, int64_t dst_offset, int64_t ds0, int64_t ds1) {
  Region r;
  r.count[0] = n0;
  r.count[1] = n1;
  r.count[2] = n2;
  r.src_stride[0] = n1 > 1 ? n0 : 0;
  r.src_stride[1] = n2 > 1 ? n0 * n1 : 0;
  r.dst_offset = dst_offset;
  r.dst_stride[0] = ds0;
  r.dst_stride[1] = ds1;
  return r;
}

// The destination of source element `l` (row-major over the box) as the region copies it.
int64_t regionDestination(const Region& r, int64_t l) {
  const int64_t within = l % r.count[0];
  const int64_t row = l / r.count[0] % r.count[1];
  const int64_t plane = l / (r.count[0] * r.count[1]);
  return r.dst_offset + plane * r.dst_stride[1] + row * r.dst_stride[0] + within;
}

// Every element of the box lands where the region would put it.
void expectSameDestinations(const Region& r, const Box& box) {
  const std::optional<InPlaceRows> at = placeInPlace(r, box);
  ASSERT_TRUE(at.has_value());
  const int64_t width = box.extent[box.rank() - 1];
  for (int64_t l = 0; l < box.volume(); ++l) {
    ASSERT_EQ(at->offset + l / width * at->pitch + l % width, regionDestination(r, l))
        << "element " << l;
  }
}

TEST(InPlaceQuantization, AWholeBufferRunIsPlacedAtItsOwnWidth) {
  // 1 -> 1, the same layout: one contiguous run into the slot
  const std::optional<InPlaceRows> at = placeInPlace(run(256 * 384, 4096), box2(256, 384));
  ASSERT_TRUE(at.has_value());
  EXPECT_EQ(at->offset, 4096);
  EXPECT_EQ(at->pitch, 384);
  expectSameDestinations(run(256 * 384, 4096), box2(256, 384));
}

TEST(InPlaceQuantization, RowsIntoAWiderTensorTakeItsPitch) {
  // a trainer's column shard [256, 128] into a rollout holding the whole [256, 512] weight
  expectSameDestinations(rows(128, 256, 1, 256, 512, 0), box2(256, 128));
  EXPECT_EQ(placeInPlace(rows(128, 256, 1, 256, 512, 0), box2(256, 128))->pitch, 512);
  // experts [4, 64, 96] into a [4, 64, 192] tensor: planes at rows * pitch
  expectSameDestinations(rows(96, 64, 4, 96, 192, 64 * 192), box3(4, 64, 96));
  // one row per plane: the plane pitch is the row pitch
  expectSameDestinations(rows(96, 1, 64, 0, 0, 200), box2(64, 96));
  // several box rows per region row, contiguous everywhere
  expectSameDestinations(rows(2 * 96, 32, 1, 7, 2 * 96, 0), box2(64, 96));
}

TEST(InPlaceQuantization, WritesTheKernelCannotAddressAreRefused) {
  const Box box = box2(64, 96);
  // part of the buffer, or not from its start
  EXPECT_FALSE(placeInPlace(run(64 * 96 - 1, 0), box));
  Region shifted = run(64 * 96, 0);
  shifted.src_offset = 96;
  EXPECT_FALSE(placeInPlace(shifted, box));
  // region rows shorter than the box's rows
  EXPECT_FALSE(placeInPlace(rows(48, 128, 1, 0, 96, 0), box));
  // planes not at rows * pitch
  EXPECT_FALSE(placeInPlace(rows(96, 32, 2, 0, 100, 32 * 100 + 8), box));
  // several box rows per region row, but region rows apart in the destination
  EXPECT_FALSE(placeInPlace(rows(2 * 96, 32, 1, 0, 2 * 96 + 8, 0), box));
  // a source that is not contiguous
  Region gappy = rows(96, 64, 1, 0, 96, 0);
  gappy.src_stride[0] = 100;
  EXPECT_FALSE(placeInPlace(gappy, box));
}

// Random boxes and pitches: what is placed lands where the region puts it.
TEST(InPlaceQuantization, RandomRowRegionsLandWhereTheirCopiesWould) {
  std::mt19937_64 rng(5);
  for (int it = 0; it < 200; ++it) {
    const int64_t e = 1 + static_cast<int64_t>(rng() % 3);
    const int64_t r = 1 + static_cast<int64_t>(rng() % 40);
    const int64_t c = 1 + static_cast<int64_t>(rng() % 70);
    const int64_t pitch = c + static_cast<int64_t>(rng() % 9);
    const int64_t offset = static_cast<int64_t>(rng() % 1000);
    const Box box = e > 1 ? box3(e, r, c) : box2(r, c);
    const Region region = rows(c, r, e, offset, pitch, r * pitch + (it % 4 == 0 ? 1 : 0));
    if (e > 1 && r > 1 && it % 4 == 0) {
      EXPECT_FALSE(placeInPlace(region, box)) << "iteration " << it;
    } else {
      expectSameDestinations(region, box);
    }
  }
}

}  // namespace
}  // namespace wsync
