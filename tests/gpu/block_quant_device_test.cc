// Block quantization on the device (kernels/block_quant_kernels.h) against the host quantizer
// (quant/block_quant.h): argument checks everywhere; on a GPU, random weights (2-D and 3-D, bf16 /
// fp16 / fp32, inf and NaN), block shapes and formats, cut into strided trainer pieces: the
// device amax of every piece, the device scales of the merged amax and the device bytes of every
// piece equal the host's bit for bit, and the assembled result equals the full-tensor reference.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/cuda_check.h"
#include "gpu/device_bytes.h"
#include "kernels/block_quant_kernels.h"
#include "quant/block_quant.h"
#include "quant/block_quant_geometry.h"
#include "support/block_quant_testing.h"

namespace wsync {
namespace {

namespace bqt = block_quant_testing;

#define SKIP_WITHOUT_GPU() \
  if (!cudaDeviceAvailable(0)) GTEST_SKIP() << "no usable CUDA device"

BlockScaling scheme(ScaleFormat f, int64_t rows, int64_t cols) {
  BlockScaling s;
  s.format = f;
  s.block_rows = rows;
  s.block_cols = cols;
  s.scale_tensor = "w.scale";
  return s;
}

TEST(BlockQuantDevice, BadArgumentsAreRefusedWithoutTouchingTheDevice) {
  const BlockScaling s = scheme(ScaleFormat::kFloat32, 2, 2);
  float x = 0;
  PieceView p{&x, DType::kInt32, Box::whole({4, 4}), Dims{4, 1}};
  EXPECT_EQ(launchBlockAmax(p, {4, 4}, s, nullptr, nullptr).code(), WSYNC_ERR_INVALID_ARGUMENT);
  p.dtype = DType::kFloat32;
  p.strides = {1, 4};
  EXPECT_EQ(launchQuantizeBlocks(p, {4, 4}, s, &x, nullptr, nullptr).code(),
            WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(launchScalesFromAmax(&x, 1, static_cast<ScaleFormat>(9), &x, nullptr).code(),
            WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(launchScaleAndQuantize(p, {4, 4}, s, &x, &x, nullptr, nullptr).code(),
            WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(launchQuantizeFused(p, {4, 4}, s, nullptr, &x, nullptr, nullptr).code(),
            WSYNC_ERR_INVALID_ARGUMENT);
  p.strides = {4, 1};
  EXPECT_EQ(launchQuantizeFused(p, {4, 4}, s, nullptr, nullptr, nullptr, nullptr).code(),
            WSYNC_ERR_INVALID_ARGUMENT);
  namespace bk = block_quant_kernels;
  const bk::QuantTask host_task;
  EXPECT_EQ(launchBlockQuantBatch(&host_task, nullptr, 1, 4, 256, bk::QuantMode::kFused, nullptr, 0,
                                  nullptr, nullptr)
                .code(),
            WSYNC_ERR_INVALID_ARGUMENT);
  const auto* table = reinterpret_cast<const bk::QuantTask*>(&x);
  EXPECT_EQ(launchBlockQuantBatch(nullptr, table, 1, 4, 256, bk::QuantMode::kFused, nullptr, 0,
                                  nullptr, nullptr)
                .code(),
            WSYNC_ERR_INVALID_ARGUMENT);
  const uint64_t unit = 0;
  EXPECT_EQ(launchBlockQuantBatch(&host_task, table, 1, 4, 256, bk::QuantMode::kFused, &unit, 1, &x,
                                  nullptr)
                .code(),
            WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(launchBlockQuantBatch(&host_task, table, 1, 4, 7, bk::QuantMode::kAmax, nullptr, 0,
                                  nullptr, nullptr)
                .code(),
            WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(launchScatterAmax(nullptr, &x, 1, &x, nullptr).code(), WSYNC_ERR_INVALID_ARGUMENT);
}

struct Case {
  Dims shape;
  BlockScaling s;
  DType dtype;
  std::vector<int> parts;
  int specials_per_million;
};

Case randomCase(std::mt19937_64& rng, int it) {
  auto dim = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  Case c;
  const ScaleFormat formats[] = {ScaleFormat::kFloat32, ScaleFormat::kPow2Float32,
                                 ScaleFormat::kE8M0, ScaleFormat::kFloat32Gpu};
  const DType dtypes[] = {DType::kBFloat16, DType::kFloat32, DType::kFloat16};
  const ScaleFormat f = formats[it % 4];
  c.dtype = dtypes[(it / 3) % 3];
  if (f == ScaleFormat::kE8M0) {
    c.s = scheme(f, 1, 32);
  } else if (it % 2 == 0) {
    c.s = scheme(f, 128, 128);
  } else {
    c.s = scheme(f, dim(1, 9), dim(1, 70));
  }
  const int64_t rows = dim(1, 400);
  const int64_t cols = f == ScaleFormat::kE8M0 ? 32 * dim(1, 10) : dim(1, 400);
  c.shape = dim(0, 3) == 0 ? Dims{dim(1, 4), rows, cols} : Dims{rows, cols};
  for (int d = 0; d < c.shape.size(); ++d)
    c.parts.push_back(static_cast<int>(dim(1, 4)));
  c.specials_per_million = it % 4 == 3 ? 2000 : 0;
  return c;
}

// What each thread of the legacy kernels (block_quant_legacy.cu) computes, run on the host (the
// block-parallel kernel's walk: tests/unit/block_quant_kernel_geometry_test.cc):
// blockAmaxKernel's 32 lanes of every cover
// block (then the warp max and NaN vote), quantizeKernel's (row, col) of every element, with the
// 32- and 64-bit block column; equal to blockAmaxHost and quantizeBlocksHost for random layouts.
TEST(BlockQuantDevice, KernelIndexArithmeticRunOnTheHostEqualsTheHost) {
  namespace bk = block_quant_kernels;
  std::mt19937_64 rng(777);
  for (int it = 0; it < 90; ++it) {
    const Case c = randomCase(rng, it);
    const bqt::HostTensor t = bqt::randomTensor(rng, c.dtype, c.shape, c.specials_per_million);
    std::vector<bqt::HeldPiece> pieces;
    for (const Box& b : bqt::randomPartition(rng, c.shape, c.parts))
      pieces.push_back(bqt::holdPiece(rng, t, b, 5));
    bqt::Quantized host;
    ASSERT_TRUE(
        bqt::quantizePiecewiseHost(HostQuantKernel::kScalar, pieces, c.shape, c.s, &host).isOk());
    const Dims grid = scaleShape(c.shape, c.s);
    const size_t ssize = bqt::scaleSize(c.s.format);
    for (const bqt::HeldPiece& piece : pieces) {
      const bk::Geometry g = bk::geometryOf(piece.view(), c.s);
      std::vector<float> expected_amax(static_cast<size_t>(g.cover_volume));
      ASSERT_TRUE(blockAmaxHost(piece.view(), c.shape, c.s, expected_amax.data()).isOk());
      for (int64_t b = 0; b < g.cover_volume; ++b) {
        const bk::BlockPart p = bk::blockPart(g, b);
        float warp_best = 0.0f;
        bool warp_nan = false;
        for (int lane = 0; lane < 32; ++lane) {
          float best = 0.0f;
          for (int64_t row = p.row_lo; row < p.row_hi; ++row) {
            for (int64_t col = p.col_lo + lane; col < p.col_hi; col += 32) {
              const float a =
                  quant_math::absOf(bk::loadElement(g, p.base + row * p.row_stride + col));
              warp_nan |= quant_math::isNaN(a);
              best = a > best ? a : best;
            }
          }
          warp_best = std::max(warp_best, best);
        }
        const float amax = warp_nan ? quant_math::nanValue() : warp_best;
        ASSERT_EQ(quant_math::bitsOf(amax),
                  quant_math::bitsOf(expected_amax[static_cast<size_t>(b)]))
            << "case " << it << " block " << b;
      }
      const std::vector<uint8_t> scales =
          bqt::gather(host.scales, grid, blockCover(piece.box, c.s), ssize);
      std::vector<uint8_t> expected(static_cast<size_t>(g.volume));
      ASSERT_TRUE(
          quantizeBlocksHost(piece.view(), c.shape, c.s, scales.data(), expected.data()).isOk());
      for (bool narrow : {true, false}) {
        const int64_t width = g.extent[g.rank - 1];
        std::vector<uint8_t> q(static_cast<size_t>(g.volume));
        for (int64_t row = 0; row < g.volume / width; ++row) {
          const bk::RowPlace place = bk::rowPlace(g, row);
          for (int64_t col = 0; col < width; ++col) {
            const int64_t k = bk::scaleIndex(g, place, col, narrow);
            ASSERT_GE(k, 0);
            ASSERT_LT(k, g.cover_volume);
            const float m = bk::multiplierAt(scales.data(), c.s.format == ScaleFormat::kE8M0, k);
            q[static_cast<size_t>(row * width + col)] =
                quant_math::quantizeElement(bk::loadElement(g, place.src + col), m);
          }
        }
        ASSERT_EQ(q, expected) << "case " << it << " narrow " << narrow;
      }
    }
  }
}

// Scales of amaxes beside every power of two (amax / 448 within 64 ulps of 2^k, k = -149..127,
// where torch's ceil(log2) is not the exact ceiling), of subnormals, 0, inf and NaN: the
// device's log2 / division give the host's bits for all three formats.
TEST(BlockQuantDevice, ScalesEqualTheHostBesidePowersOfTwo) {
  SKIP_WITHOUT_GPU();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  std::vector<float> amax = {0.0f,
                             quant_math::floatOf(1u),
                             quant_math::floatOf(0x7f800000u),
                             quant_math::nanValue(),
                             1e-4f,
                             448.0f};
  for (int k = -149; k <= 127; ++k) {
    const float center = std::ldexp(448.0f, k);
    const uint32_t bits = quant_math::bitsOf(center);
    for (int d = -64; d <= 64; ++d) {
      const int64_t b = static_cast<int64_t>(bits) + d;
      if (b > 0 && b < 0x7f800000) amax.push_back(quant_math::floatOf(static_cast<uint32_t>(b)));
    }
  }
  const int64_t n = static_cast<int64_t>(amax.size());
  DeviceBytes device_amax(amax.size() * 4), device_scales(amax.size() * 4);
  ASSERT_EQ(cudaMemcpy(device_amax.data, amax.data(), amax.size() * 4, cudaMemcpyHostToDevice),
            cudaSuccess);
  for (ScaleFormat f : {ScaleFormat::kFloat32, ScaleFormat::kPow2Float32, ScaleFormat::kE8M0,
                        ScaleFormat::kFloat32Gpu}) {
    const size_t bytes = amax.size() * bqt::scaleSize(f);
    std::vector<uint8_t> host(bytes), device(bytes);
    scalesFromAmax(amax.data(), n, f, host.data());
    ASSERT_TRUE(launchScalesFromAmax(static_cast<const float*>(device_amax.data), n, f,
                                     device_scales.data, nullptr)
                    .isOk());
    ASSERT_EQ(cudaMemcpy(device.data(), device_scales.data, bytes, cudaMemcpyDeviceToHost),
              cudaSuccess);
    ASSERT_EQ(device, host) << scaleFormatName(f);
  }
}

TEST(BlockQuantDevice, PiecesEqualTheHostBitForBit) {
  SKIP_WITHOUT_GPU();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  std::mt19937_64 rng(424242);
  for (int it = 0; it < 60; ++it) {
    const Case c = randomCase(rng, it);
    const bqt::HostTensor t = bqt::randomTensor(rng, c.dtype, c.shape, c.specials_per_million);
    std::vector<bqt::HeldPiece> pieces;
    for (const Box& b : bqt::randomPartition(rng, c.shape, c.parts))
      pieces.push_back(bqt::holdPiece(rng, t, b, 5));
    bqt::Quantized host;
    ASSERT_TRUE(
        bqt::quantizePiecewiseHost(bestHostQuantKernel(), pieces, c.shape, c.s, &host).isOk());
    const std::string where = "case " + std::to_string(it) + " shape " + c.shape.toString() + " " +
                              describe(c.s) + " " + dtypeName(c.dtype);

    // the pieces on the device, amax per piece, merged on the host
    const Dims grid = scaleShape(c.shape, c.s);
    std::vector<float> amax(static_cast<size_t>(grid.product()), 0.0f);
    std::vector<std::unique_ptr<DeviceBytes>> device_pieces;
    for (const bqt::HeldPiece& p : pieces) {
      device_pieces.push_back(std::make_unique<DeviceBytes>(p.buffer.size()));
      ASSERT_EQ(cudaMemcpy(device_pieces.back()->data, p.buffer.data(), p.buffer.size(),
                           cudaMemcpyHostToDevice),
                cudaSuccess);
      PieceView v = p.view();
      v.data = device_pieces.back()->data;
      const Box cover = blockCover(p.box, c.s);
      const size_t blocks = static_cast<size_t>(cover.volume());
      DeviceBytes device_amax(blocks * sizeof(float));
      ASSERT_TRUE(
          launchBlockAmax(v, c.shape, c.s, static_cast<float*>(device_amax.data), stream).isOk());
      std::vector<float> part(blocks), host_part(blocks);
      ASSERT_EQ(cudaMemcpyAsync(part.data(), device_amax.data, blocks * sizeof(float),
                                cudaMemcpyDeviceToHost, stream),
                cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      ASSERT_TRUE(blockAmaxHost(p.view(), c.shape, c.s, host_part.data()).isOk());
      ASSERT_EQ(std::memcmp(part.data(), host_part.data(), blocks * sizeof(float)), 0) << where;
      size_t j = 0;
      bqt::forEachIndex(cover, [&](const Dims& b) {
        float& a = amax[static_cast<size_t>(bqt::linearIndex(b, grid))];
        a = mergeAmax(a, part[j++]);
      });
    }

    // scales on the device from the merged amax
    const size_t ssize = bqt::scaleSize(c.s.format);
    const size_t nblocks = amax.size();
    DeviceBytes device_all_amax(nblocks * sizeof(float)), device_scales(nblocks * ssize);
    ASSERT_EQ(cudaMemcpy(device_all_amax.data, amax.data(), nblocks * sizeof(float),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
    ASSERT_TRUE(launchScalesFromAmax(static_cast<float*>(device_all_amax.data),
                                     static_cast<int64_t>(nblocks), c.s.format, device_scales.data,
                                     stream)
                    .isOk());
    std::vector<uint8_t> scales(nblocks * ssize);
    ASSERT_EQ(cudaMemcpyAsync(scales.data(), device_scales.data, scales.size(),
                              cudaMemcpyDeviceToHost, stream),
              cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    ASSERT_EQ(scales, host.scales) << where;

    // bytes per piece on the device, with its cover's scales
    std::vector<uint8_t> values(static_cast<size_t>(c.shape.product()), 0);
    for (size_t k = 0; k < pieces.size(); ++k) {
      const bqt::HeldPiece& p = pieces[k];
      const std::vector<uint8_t> cover_scales =
          bqt::gather(scales, grid, blockCover(p.box, c.s), ssize);
      DeviceBytes device_cover_scales(cover_scales.size()),
          device_q(static_cast<size_t>(p.box.volume()));
      ASSERT_EQ(cudaMemcpy(device_cover_scales.data, cover_scales.data(), cover_scales.size(),
                           cudaMemcpyHostToDevice),
                cudaSuccess);
      PieceView v = p.view();
      v.data = device_pieces[k]->data;
      ASSERT_TRUE(
          launchQuantizeBlocks(v, c.shape, c.s, device_cover_scales.data, device_q.bytes(), stream)
              .isOk());
      std::vector<uint8_t> q(device_q.size);
      ASSERT_EQ(cudaMemcpyAsync(q.data(), device_q.data, q.size(), cudaMemcpyDeviceToHost, stream),
                cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      bqt::scatter(q, p.box, &values, c.shape, 1);
    }
    ASSERT_EQ(values, host.values) << where;
    const bqt::Quantized reference = bqt::referenceQuantize(t, c.s);
    ASSERT_EQ(values, reference.values) << where;
    ASSERT_EQ(scales, reference.scales) << where;
  }
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

}  // namespace
}  // namespace wsync
