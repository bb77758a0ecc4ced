// The block-parallel quantization kernels' host-side arithmetic (quant/block_quant_geometry.h),
// without a GPU: block parts map every element of a piece to its source and output once; the
// vector helpers equal the element-wise math; and the kernel's per-block walk (emulated here
// lane by lane with the same functions: vectors where vectorizable() says so, else elements)
// gives blockAmaxHost's maxima and quantizeBlocksHost's scales and bytes in every mode, layout,
// dtype and scale format. The kernels themselves: tests/gpu/block_quant_device_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "quant/block_quant.h"
#include "quant/block_quant_geometry.h"
#include "quant/block_quant_math.h"
#include "support/block_quant_layouts.h"

namespace wsync {
namespace {

namespace bk = block_quant_kernels;
namespace bqt = block_quant_testing;
namespace qm = quant_math;

const ScaleFormat kFormats[] = {ScaleFormat::kFloat32, ScaleFormat::kPow2Float32,
                                ScaleFormat::kE8M0, ScaleFormat::kFloat32Gpu};
const DType kDTypes[] = {DType::kBFloat16, DType::kFloat32, DType::kFloat16};

// blockQuantKernel's work on block `b` of `t` (block_quant_kernels.cu: processUnit), lane by lane
// for a group of `group` threads. Counts the vectors and elements it walked.
struct Walked {
  int64_t vectors = 0;
  int64_t scalars = 0;
};

void emulateBlock(const bk::QuantTask& t, int64_t b, bk::QuantMode mode, int group, Walked* w) {
  const bk::Geometry& g = t.g;
  const bk::BlockPart p = bk::blockPart(g, b);
  const int64_t rows = p.row_hi - p.row_lo;
  const int64_t cols = p.col_hi - p.col_lo;
  const int64_t width = g.out_pitch;
  const int per = bk::vectorElements(g);
  const int esize = bk::elementBytes(g);
  const bool vec =
      rows * cols < (int64_t{1} << 31) &&
      bk::vectorizable(g, p, reinterpret_cast<uint64_t>(g.data), reinterpret_cast<uint64_t>(t.dst));
  const int64_t per_row = vec ? cols / per : 1;
  const int64_t vectors = vec ? rows * per_row : 0;
  const int64_t scalars = vec ? 0 : rows * cols;
  w->vectors += vectors;
  w->scalars += scalars;
  const auto* src = static_cast<const uint8_t*>(g.data);
  const auto srcAt = [&](int64_t r, int64_t c) {
    return p.base + (p.row_lo + r) * p.row_stride + p.col_lo + c;
  };
  const auto dstAt = [&](int64_t r, int64_t c) {
    return p.dst_base + (p.row_lo + r) * width + p.col_lo + c;
  };
  const auto loadVector = [&](int64_t v, uint32_t(&words)[4]) {
    const uint8_t* at = src + srcAt(v / per_row, v % per_row * per) * esize;
    ASSERT_EQ(reinterpret_cast<uintptr_t>(at) % 16, 0u);
    std::memcpy(words, at, 16);
  };
  float amax = 0.0f;
  if (mode == bk::QuantMode::kAmax || mode == bk::QuantMode::kFused) {
    uint32_t group_bits = 0;
    for (int lane = 0; lane < group; ++lane) {
      uint32_t acc = 0;
      uint32_t bits = 0;
      for (int64_t v = lane; v < vectors; v += group) {
        uint32_t words[4];
        loadVector(v, words);
        acc = bk::absMaxOfVector(words, g.dtype, acc);
      }
      for (int64_t e = lane; e < scalars; e += group) {
        const float x = bk::loadElement(g, srcAt(e / cols, e % cols));
        bits = std::max(bits, qm::bitsOf(qm::absOf(x)));
      }
      group_bits = std::max(group_bits, std::max(bits, bk::floatBitsOfAccumulator(acc, g.dtype)));
    }
    amax = bk::amaxOfBits(group_bits);
  }
  if (mode == bk::QuantMode::kAmax) {
    t.amax_out[b] = amax;
    return;
  }
  const bool e8m0 = t.format == static_cast<int>(ScaleFormat::kE8M0);
  float m;
  if (mode == bk::QuantMode::kQuantizeWithScales) {
    m = bk::multiplierAt(t.scales, e8m0, b);
  } else {
    float a = mode == bk::QuantMode::kScaleAndQuantize ? t.amax_in[b] : amax;
    if (mode == bk::QuantMode::kFused && t.amax_in != nullptr) a = qm::mergeAmax(a, t.amax_in[b]);
    if (e8m0) {
      static_cast<uint8_t*>(t.scales)[b] = qm::e8m0Scale(a);
    } else {
      static_cast<float*>(t.scales)[b] = qm::floatScale(t.format, a);
    }
    m = bk::multiplierAt(t.scales, e8m0, b);
  }
  for (int64_t v = 0; v < vectors; ++v) {
    uint32_t words[4];
    loadVector(v, words);
    uint32_t q[2];
    bk::quantizeVector(words, g.dtype, m, q);
    uint8_t* out = t.dst + dstAt(v / per_row, v % per_row * per);
    ASSERT_EQ(reinterpret_cast<uintptr_t>(out) % static_cast<uintptr_t>(per), 0u);
    std::memcpy(out, q, static_cast<size_t>(per));
  }
  for (int64_t e = 0; e < scalars; ++e) {
    const int64_t r = e / cols;
    const int64_t c = e % cols;
    t.dst[dstAt(r, c)] = qm::quantizeElement(bk::loadElement(g, srcAt(r, c)), m);
  }
}

void emulate(const bk::QuantTask& t, bk::QuantMode mode, Walked* w) {
  const int group = bk::groupSizeFor(t.g.block_rows, t.g.block_cols, t.g.dtype);
  for (int64_t b = 0; b < t.g.cover_volume; ++b)
    emulateBlock(t, b, mode, group, w);
}

TEST(BlockQuantKernelGeometry, BlockPartsMapEveryElementOnce) {
  std::mt19937_64 rng(31);
  for (int it = 0; it < 120; ++it) {
    const bqt::LayoutCase c = bqt::layoutCase(rng, static_cast<bqt::Layout>(it % 4),
                                              kFormats[it % 4], kDTypes[(it / 4) % 3], 0);
    for (const bqt::LaidPiece& piece : c.pieces) {
      const bk::Geometry g = bk::geometryOf(piece.view(), c.s);
      const int r = g.rank;
      const int64_t width = g.extent[r - 1];
      std::vector<int> seen(static_cast<size_t>(g.volume), 0);
      for (int64_t b = 0; b < g.cover_volume; ++b) {
        const bk::BlockPart p = bk::blockPart(g, b);
        ASSERT_LT(p.row_lo, p.row_hi) << c.where;
        ASSERT_LT(p.col_lo, p.col_hi) << c.where;
        for (int64_t row = p.row_lo; row < p.row_hi; ++row) {
          for (int64_t col = p.col_lo; col < p.col_hi; ++col) {
            const int64_t out = p.dst_base + row * width + col;
            ASSERT_GE(out, 0) << c.where;
            ASSERT_LT(out, g.volume) << c.where;
            ++seen[static_cast<size_t>(out)];
            int64_t rest = out;  // the element's index in the piece, from its output position
            int64_t src = 0;
            for (int d = r - 1; d >= 0; --d) {
              src += rest % g.extent[d] * g.stride[d];
              rest /= g.extent[d];
            }
            ASSERT_EQ(p.base + row * p.row_stride + col, src) << c.where << " block " << b;
          }
        }
      }
      for (int n : seen)
        ASSERT_EQ(n, 1) << c.where;
    }
  }
}

TEST(BlockQuantKernelGeometry, VectorHelpersEqualTheElementMath) {
  std::mt19937_64 rng(5);
  for (int dtype = 0; dtype < 3; ++dtype) {
    const DType dt = dtype == 0 ? DType::kFloat32 : dtype == 1 ? DType::kBFloat16 : DType::kFloat16;
    for (int it = 0; it < 20000; ++it) {
      uint32_t words[4];
      for (uint32_t& w : words) {
        const int pick = static_cast<int>(rng() % 16);
        const int bias = dt == DType::kFloat16 ? 15 : 127;
        if (dt == DType::kFloat32) {
          w = pick == 0
                  ? bqt::specialBits(dt, static_cast<int>(rng() % 4))
                  : bqt::randomFiniteBits(rng, dt, bias + static_cast<int>(rng() % 40) - 20, 30);
        } else {
          const auto half = [&] {
            return pick == 0 ? bqt::specialBits(dt, static_cast<int>(rng() % 4))
                             : bqt::randomFiniteBits(rng, dt,
                                                     bias + static_cast<int>(rng() % 20) - 10, 12);
          };
          w = (half() & 0xffffu) | half() << 16;
        }
      }
      const int n = dt == DType::kFloat32 ? 4 : 8;
      float x[8];
      for (int i = 0; i < n; ++i) {
        if (dt == DType::kFloat32) {
          x[i] = qm::floatOf(words[i]);
        } else {
          const auto h =
              static_cast<uint16_t>(i % 2 == 0 ? words[i / 2] & 0xffffu : words[i / 2] >> 16);
          x[i] = dt == DType::kBFloat16 ? qm::floatOfBFloat16(h) : qm::floatOfFloat16(h);
        }
      }
      float best = 0.0f;
      bool nan = false;
      for (int i = 0; i < n; ++i) {
        const float a = qm::absOf(x[i]);
        nan |= qm::isNaN(a);
        best = a > best ? a : best;
      }
      const float expected = nan ? qm::nanValue() : best;
      const float got =
          bk::amaxOfBits(bk::floatBitsOfAccumulator(bk::absMaxOfVector(words, dtype, 0), dtype));
      ASSERT_EQ(qm::bitsOf(got), qm::bitsOf(expected)) << dtypeName(dt) << " " << it;
      const float m = qm::multiplierOfFloatScale(qm::float32Scale(expected));
      uint32_t q[2];
      bk::quantizeVector(words, dtype, m, q);
      uint8_t bytes[8];
      std::memcpy(bytes, q, 8);
      for (int i = 0; i < n; ++i)
        ASSERT_EQ(bytes[i], qm::quantizeElement(x[i], m)) << dtypeName(dt) << " " << it;
    }
  }
}

TEST(BlockQuantKernelGeometry, GroupSizesAndTaskNumbering) {
  EXPECT_EQ(bk::groupSizeFor(128, 128, 1), 256);
  EXPECT_EQ(bk::groupSizeFor(128, 128, 0), 256);
  EXPECT_EQ(bk::groupSizeFor(1, 32, 1), 1);  // MXFP8: 4 vectors, one thread
  EXPECT_EQ(bk::groupSizeFor(1, 32, 0), 1);
  EXPECT_EQ(bk::groupSizeFor(1, 128, 1), 4);
  EXPECT_EQ(bk::groupSizeFor(32, 32, 2), 32);
  EXPECT_EQ(bk::groupSizeFor(1, 1, 0), 1);
  std::vector<bk::QuantTask> tasks(3);
  tasks[0].g.cover_volume = 5;
  tasks[1].g.cover_volume = 0;
  tasks[2].g.cover_volume = 7;
  EXPECT_EQ(bk::numberQuantTasks(tasks), 12u);
  EXPECT_EQ(tasks[0].first_tile, 0u);
  EXPECT_EQ(tasks[1].first_tile, 5u);
  EXPECT_EQ(tasks[2].first_tile, 5u);
}

// Every mode of the kernel, emulated, against the host functions; the aligned layouts take the
// vector path for most blocks, the shifted and odd ones the element path.
TEST(BlockQuantKernelGeometry, EmulatedKernelEqualsTheHostInEveryMode) {
  std::mt19937_64 rng(2026);
  Walked walked[4];
  for (int it = 0; it < 96; ++it) {
    const auto layout = static_cast<bqt::Layout>(it % 4);
    const ScaleFormat f = kFormats[(it / 4) % 4];
    const DType dtype = kDTypes[(it / 16) % 3];
    const bqt::LayoutCase c = bqt::layoutCase(rng, layout, f, dtype, it % 3 == 0 ? 3000 : 0);
    const Dims grid = scaleShape(c.shape, c.s);
    const std::vector<float> merged = bqt::mergedAmax(c);
    ASSERT_FALSE(merged.empty()) << c.where;
    const size_t ssize = bqt::scaleSize(f);
    std::vector<uint8_t> all_scales(merged.size() * ssize);
    scalesFromAmax(merged.data(), static_cast<int64_t>(merged.size()), f, all_scales.data());
    Walked& w = walked[it % 4];
    for (const bqt::LaidPiece& piece : c.pieces) {
      const Box cover = blockCover(piece.box, c.s);
      const auto blocks = static_cast<size_t>(cover.volume());
      const auto volume = static_cast<size_t>(piece.box.volume());
      // the maxima
      std::vector<float> expected_amax(blocks), amax(blocks);
      ASSERT_TRUE(blockAmaxHost(piece.view(), c.shape, c.s, expected_amax.data()).isOk());
      bk::QuantTask t = bk::quantTaskOf(piece.view(), c.s);
      t.amax_out = amax.data();
      emulate(t, bk::QuantMode::kAmax, &w);
      ASSERT_EQ(std::memcmp(amax.data(), expected_amax.data(), blocks * 4), 0) << c.where;
      // the bytes and scales, from the merged maxima in each way the kernel takes them
      const std::vector<float> cover_amax = bqt::gatherAmax(merged, grid, cover);
      const std::vector<uint8_t> expected_scales = bqt::gather(all_scales, grid, cover, ssize);
      std::vector<uint8_t> expected(volume);
      ASSERT_TRUE(
          quantizeBlocksHost(piece.view(), c.shape, c.s, expected_scales.data(), expected.data())
              .isOk());
      std::vector<uint8_t> out_storage(volume + 16);
      uint8_t* out = out_storage.data() + (8 - reinterpret_cast<uintptr_t>(out_storage.data()) % 8);
      for (bk::QuantMode mode : {bk::QuantMode::kQuantizeWithScales,
                                 bk::QuantMode::kScaleAndQuantize, bk::QuantMode::kFused}) {
        std::vector<uint8_t> scales = mode == bk::QuantMode::kQuantizeWithScales
                                          ? expected_scales
                                          : std::vector<uint8_t>(blocks * ssize, 0);
        std::memset(out, 0, volume);
        t.amax_in = cover_amax.data();
        t.scales = scales.data();
        t.dst = out;
        emulate(t, mode, &w);
        ASSERT_EQ(scales, expected_scales) << c.where << " mode " << static_cast<int>(mode);
        ASSERT_EQ(std::memcmp(out, expected.data(), volume), 0)
            << c.where << " mode " << static_cast<int>(mode);
      }
    }
    // a whole weight in one piece, fused without maxima from elsewhere: the reference
    const bqt::LaidPiece whole = bqt::layPiece(c.t, Box::whole(c.shape), 0, 0);
    const bqt::Quantized reference = bqt::referenceQuantize(c.t, c.s);
    std::vector<uint8_t> scales(reference.scales.size()), values(reference.values.size());
    bk::QuantTask t = bk::quantTaskOf(whole.view(), c.s);
    t.scales = scales.data();
    t.dst = values.data();
    Walked whole_walk;
    emulate(t, bk::QuantMode::kFused, &whole_walk);
    ASSERT_EQ(scales, reference.scales) << c.where;
    ASSERT_EQ(values, reference.values) << c.where;
  }
  // both paths taken where expected
  EXPECT_GT(walked[static_cast<int>(bqt::Layout::kAligned)].vectors, 0);
  EXPECT_GT(walked[static_cast<int>(bqt::Layout::kStrided)].vectors, 0);
  EXPECT_EQ(walked[static_cast<int>(bqt::Layout::kShifted)].vectors, 0);
  EXPECT_GT(walked[static_cast<int>(bqt::Layout::kShifted)].scalars, 0);
  EXPECT_GT(walked[static_cast<int>(bqt::Layout::kOddWidths)].scalars, 0);
}

// The whole-width walk of task `t` by `group` threads: every lane's vectors, over all its blocks,
// are exactly the elements of the blocks' parts inside the piece (blockPart). Counts the blocks
// the piece cuts in height.
void checkWholeWidthPlaces(const bk::QuantTask& t, int group, const std::string& where,
                           int64_t* cut_rows) {
  const int64_t br = t.g.block_rows, bc = t.g.block_cols;
  const int vectors = bk::wholeWidthVectors(t.g, group);
  ASSERT_EQ(vectors * group * 8, br * bc) << where;
  const int64_t width = t.g.out_pitch;
  const bk::WholeWidthPlace step = bk::wholeWidthStep(t.g, group);
  for (int64_t b = 0; b < t.g.cover_volume; ++b) {
    const bk::BlockPart p = bk::blockPart(t.g, b);
    ASSERT_LE(p.row_hi - p.row_lo, br);
    ASSERT_EQ(p.col_hi - p.col_lo, bc);
    *cut_rows += p.row_hi - p.row_lo < br ? 1 : 0;
    std::vector<std::pair<int64_t, int64_t>> expected_places, walked;
    for (int64_t r = p.row_lo; r < p.row_hi; ++r)
      for (int64_t col = p.col_lo; col < p.col_hi; ++col)
        expected_places.emplace_back(p.base + r * p.row_stride + col, p.dst_base + r * width + col);
    for (uint32_t lane = 0; lane < static_cast<uint32_t>(group); ++lane) {
      const bk::WholeWidthPlace at =
          bk::wholeWidthPlace(t.g, static_cast<uint32_t>(b), lane, group);
      ASSERT_LE(at.vectors, vectors);
      for (int k = 0; k < at.vectors; ++k)
        for (int e = 0; e < 8; ++e)
          walked.emplace_back(at.src + k * step.src + e, at.dst + k * step.dst + e);
    }
    std::sort(expected_places.begin(), expected_places.end());
    std::sort(walked.begin(), walked.end());
    ASSERT_EQ(walked, expected_places) << where << " block " << b << " group " << group;
  }
}

// The whole-width walk's places (bk::wholeWidthPlace, wholeWidthStep) for every group a piece
// takes it with: the lanes' vectors of 8 elements of each block are exactly the elements of the
// block's part inside the piece, at the source and output offsets blockPart gives them. 128 x 128
// tiles (256 threads, up to 8 vectors a lane) whole or cut in height by the piece (a row cut at a
// multiple of 64, and rows cut anywhere), MXFP8's 1 x 32 (1 thread and 4 vectors, or 4 threads and
// 1) and the random shapes of the other layouts; pieces cut through blocks' width, rows padded off
// 16 bytes, float32 and outputs off 8 bytes are refused.
TEST(BlockQuantKernelGeometry, WholeWidthPlacesAreEachBlockOnce) {
  std::mt19937_64 rng(128);
  int held[4] = {0, 0, 0, 0};
  int refused = 0;
  int64_t cut_rows = 0;  // blocks whose rows the piece cuts
  const int groups[] = {1, 4, 32, 256};
  for (int it = 0; it < 120; ++it) {
    const auto layout = static_cast<bqt::Layout>(it % 5);  // every layout, format and dtype
    const DType dtype = kDTypes[(it / 20) % 3];
    const bqt::LayoutCase c = bqt::layoutCase(rng, layout, kFormats[(it / 5) % 4], dtype, 0);
    for (const bqt::LaidPiece& piece : c.pieces) {
      for (int gi = 0; gi < 4; ++gi) {
        const int group = groups[gi];
        bk::QuantTask t = bk::quantTaskOf(piece.view(), c.s);
        const auto data = reinterpret_cast<uint64_t>(t.g.data);
        const int64_t br = c.s.block_rows, bc = c.s.block_cols;
        const int64_t per_row = bc / 8;
        const bool expected = piece.box.rank() == 2 && dtype != DType::kFloat32 &&
                              piece.strides[0] % 8 == 0 && data % 16 == 0 && bc % 8 == 0 &&
                              piece.box.offset[1] % bc == 0 && piece.box.extent[1] % bc == 0 &&
                              (group % per_row == 0 || (br == 1 && per_row % group == 0)) &&
                              br * per_row % group == 0 &&
                              br * per_row / group <= bk::kCachedVectors;
        ASSERT_EQ(bk::holdsWholeWidthBlocks(t.g, group, data, 0), expected)
            << c.where << " " << group;
        EXPECT_FALSE(bk::holdsWholeWidthBlocks(t.g, group, data, 4)) << c.where;
        if (!expected) {
          ++refused;
          continue;
        }
        ++held[gi];
        if (it % 4 == 1) t.g.out_pitch += 8 * (it % 3 + 1);  // an output inside a wider tensor
        ASSERT_TRUE(bk::holdsWholeWidthBlocks(t.g, group, data, 0)) << c.where;
        checkWholeWidthPlaces(t, group, c.where, &cut_rows);
        if (HasFatalFailure()) return;
      }
    }
  }
  // 16 x 64 blocks (4 vectors a lane with 32 threads), a piece cutting rows 5-69 of 80
  const bqt::HostTensor w = bqt::randomTensor(rng, DType::kBFloat16, Dims{80, 128}, 0);
  const bqt::LaidPiece piece = bqt::layPiece(w, Box{Dims{5, 0}, Dims{65, 128}}, 0, 0);
  BlockScaling s16;
  s16.format = ScaleFormat::kFloat32;
  s16.block_rows = 16;
  s16.block_cols = 64;
  s16.scale_tensor = "w.scale";
  const bk::QuantTask t16 = bk::quantTaskOf(piece.view(), s16);
  ASSERT_TRUE(bk::holdsWholeWidthBlocks(t16.g, 32, reinterpret_cast<uint64_t>(t16.g.data), 0));
  checkWholeWidthPlaces(t16, 32, "16 x 64 blocks, rows 5-69", &cut_rows);
  EXPECT_GT(held[0], 0);  // 1 x 32 with 1 thread
  EXPECT_GT(held[1], 0);  // 1 x 32 with 4 threads
  EXPECT_GT(held[3], 0);  // 128 x 128 with 256
  EXPECT_GT(cut_rows, 0);
  EXPECT_GT(refused, 0);
}

// An output inside a larger row-major tensor (a rollout's slot written in place: Geometry's
// out_pitch above the piece's width): the emulated kernel's bytes equal the packed output's, row
// by row, and the bytes between the rows stay untouched; a pitch off the vector size takes the
// element path.
TEST(BlockQuantKernelGeometry, PitchedOutputsHoldThePackedRows) {
  std::mt19937_64 rng(77);
  Walked walked;
  for (int it = 0; it < 48; ++it) {
    const auto layout = static_cast<bqt::Layout>(it % 5);
    const bqt::LayoutCase c = bqt::layoutCase(rng, layout, kFormats[it % 4], kDTypes[it % 3], 0);
    const int64_t pad = it % 6 == 5 ? 3 : 8 * (it % 3 + 1);
    for (const bqt::LaidPiece& piece : c.pieces) {
      const Box cover = blockCover(piece.box, c.s);
      const auto blocks = static_cast<size_t>(cover.volume());
      const auto volume = static_cast<size_t>(piece.box.volume());
      const int64_t width = piece.box.extent[piece.box.rank() - 1];
      const int64_t rows = piece.box.volume() / width;
      const size_t ssize = bqt::scaleSize(c.s.format);
      std::vector<uint8_t> packed(volume + 8), packed_scales(blocks * ssize);
      bk::QuantTask t = bk::quantTaskOf(piece.view(), c.s);
      t.scales = packed_scales.data();
      t.dst = packed.data() + (8 - reinterpret_cast<uintptr_t>(packed.data()) % 8) % 8;
      emulate(t, bk::QuantMode::kFused, &walked);
      const uint8_t* expected = t.dst;
      const int64_t pitch = width + pad;
      std::vector<uint8_t> slot(static_cast<size_t>(rows * pitch) + 8, 0xa5),
          scales(blocks * ssize);
      t.g.out_pitch = pitch;
      t.scales = scales.data();
      t.dst = slot.data() + (8 - reinterpret_cast<uintptr_t>(slot.data()) % 8) % 8;
      emulate(t, bk::QuantMode::kFused, &walked);
      ASSERT_EQ(scales, packed_scales) << c.where;
      for (int64_t r = 0; r < rows; ++r) {
        ASSERT_EQ(std::memcmp(t.dst + r * pitch, expected + r * width, static_cast<size_t>(width)),
                  0)
            << c.where << " row " << r << " pitch " << pitch;
        if (r + 1 < rows) {
          for (int64_t gap = width; gap < pitch; ++gap)
            ASSERT_EQ(t.dst[r * pitch + gap], 0xa5) << c.where << " row " << r;
        }
      }
    }
  }
  EXPECT_GT(walked.vectors, 0);
  EXPECT_GT(walked.scalars, 0);
}

}  // namespace
}  // namespace wsync
