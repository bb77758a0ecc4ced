// The block-parallel quantization kernels (kernels/block_quant_kernels.h) on a GPU against the
// host functions, bit for bit, over the layouts of tests/support/block_quant_layouts.h (vector
// path: aligned and strided rows; element path: a base one element off alignment, odd widths and
// pads, an output one byte off alignment), every dtype and scale format, with inf and NaN: per
// piece every launcher (amax, quantize with scales, scale + quantize, fused; the legacy kernels
// too), and all pieces of a weight in one batched launch per mode (table, unit list, scatter).
// Part of wsync_block_quant_device_test; skips without a usable CUDA device.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

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
#include "support/block_quant_layouts.h"

namespace wsync {
namespace {

namespace bk = block_quant_kernels;
namespace bqt = block_quant_testing;

#define SKIP_WITHOUT_GPU() \
  if (!cudaDeviceAvailable(0)) GTEST_SKIP() << "no usable CUDA device"

// `bytes` on the device, at `shift` bytes past a 256-byte boundary.
struct Uploaded {
  Uploaded(const void* src, size_t bytes, size_t shift) : memory(bytes + shift + 1) {
    at = memory.bytes() + shift;
    if (bytes > 0) EXPECT_EQ(cudaMemcpy(at, src, bytes, cudaMemcpyHostToDevice), cudaSuccess);
  }
  DeviceBytes memory;
  uint8_t* at = nullptr;
};

template <typename T>
std::unique_ptr<Uploaded> upload(const std::vector<T>& v, size_t shift = 0) {
  return std::make_unique<Uploaded>(v.data(), v.size() * sizeof(T), shift);
}

std::vector<uint8_t> download(const void* device, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  if (bytes > 0)
    EXPECT_EQ(cudaMemcpy(out.data(), device, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

std::vector<uint8_t> bytesOf(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// A laid piece on the device (same offset from 64-byte alignment) and what the host expects of
// it: its partial maxima, its cover's merged maxima and scales, its bytes.
struct DevicePiece {
  std::unique_ptr<Uploaded> data;
  PieceView view;
  Box cover;
  std::vector<float> amax;      // blockAmaxHost of the piece
  std::vector<float> merged;    // the weight's maxima of its cover
  std::vector<uint8_t> scales;  // their scales
  std::vector<uint8_t> values;  // quantizeBlocksHost with them
  size_t blocks = 0, volume = 0;
};

std::vector<DevicePiece> preparePieces(const bqt::LayoutCase& c) {
  const Dims grid = scaleShape(c.shape, c.s);
  const std::vector<float> merged = bqt::mergedAmax(c);
  const size_t ssize = bqt::scaleSize(c.s.format);
  std::vector<uint8_t> all_scales(merged.size() * ssize);
  scalesFromAmax(merged.data(), static_cast<int64_t>(merged.size()), c.s.format, all_scales.data());
  std::vector<DevicePiece> out;
  for (const bqt::LaidPiece& p : c.pieces) {
    DevicePiece d;
    const auto* begin = static_cast<const uint8_t*>(p.data());
    const size_t span = static_cast<size_t>(p.storage.data() + p.storage.size() - begin);
    d.data = std::make_unique<Uploaded>(begin, span, p.shift);
    d.view = p.view();
    d.view.data = d.data->at;
    d.cover = blockCover(p.box, c.s);
    d.blocks = static_cast<size_t>(d.cover.volume());
    d.volume = static_cast<size_t>(p.box.volume());
    d.amax.resize(d.blocks);
    EXPECT_TRUE(blockAmaxHost(p.view(), c.shape, c.s, d.amax.data()).isOk());
    d.merged = bqt::gatherAmax(merged, grid, d.cover);
    d.scales = bqt::gather(all_scales, grid, d.cover, ssize);
    d.values.resize(d.volume);
    EXPECT_TRUE(
        quantizeBlocksHost(p.view(), c.shape, c.s, d.scales.data(), d.values.data()).isOk());
    out.push_back(std::move(d));
  }
  return out;
}

// Every per-piece launcher against the host, the output `out_shift` bytes off alignment.
void checkPerPieceLaunchers(const bqt::LayoutCase& c, std::vector<DevicePiece>& pieces,
                            size_t out_shift) {
  const size_t ssize = bqt::scaleSize(c.s.format);
  for (DevicePiece& p : pieces) {
    const std::string where = c.where + " piece " + p.view.box.toString();
    DeviceBytes amax(p.blocks * 4), scales(p.blocks * ssize), out(p.volume + 16);
    uint8_t* dst = out.bytes() + out_shift;
    ASSERT_TRUE(
        launchBlockAmax(p.view, c.shape, c.s, static_cast<float*>(amax.data), nullptr).isOk());
    ASSERT_EQ(download(amax.data, p.blocks * 4), bytesOf(p.amax)) << where << " amax";
    ASSERT_TRUE(launchBlockAmaxLegacy(p.view, c.shape, c.s, static_cast<float*>(amax.data), nullptr)
                    .isOk());
    ASSERT_EQ(download(amax.data, p.blocks * 4), bytesOf(p.amax)) << where << " legacy amax";

    const auto device_scales = upload(p.scales);
    ASSERT_TRUE(launchQuantizeBlocks(p.view, c.shape, c.s, device_scales->at, dst, nullptr).isOk());
    ASSERT_EQ(download(dst, p.volume), p.values) << where << " quantize";
    ASSERT_TRUE(
        launchQuantizeBlocksLegacy(p.view, c.shape, c.s, device_scales->at, dst, nullptr).isOk());
    ASSERT_EQ(download(dst, p.volume), p.values) << where << " legacy quantize";

    const auto merged = upload(p.merged);
    const float* merged_at = reinterpret_cast<const float*>(merged->at);
    ASSERT_TRUE(cudaMemset(scales.data, 0, p.blocks * ssize) == cudaSuccess);
    ASSERT_TRUE(cudaMemset(dst, 0, p.volume) == cudaSuccess);
    ASSERT_TRUE(
        launchScaleAndQuantize(p.view, c.shape, c.s, merged_at, scales.data, dst, nullptr).isOk());
    ASSERT_EQ(download(scales.data, p.blocks * ssize), p.scales) << where << " scale+quantize";
    ASSERT_EQ(download(dst, p.volume), p.values) << where << " scale+quantize";

    ASSERT_TRUE(cudaMemset(scales.data, 0, p.blocks * ssize) == cudaSuccess);
    ASSERT_TRUE(cudaMemset(dst, 0, p.volume) == cudaSuccess);
    ASSERT_TRUE(
        launchQuantizeFused(p.view, c.shape, c.s, merged_at, scales.data, dst, nullptr).isOk());
    ASSERT_EQ(download(scales.data, p.blocks * ssize), p.scales) << where << " fused";
    ASSERT_EQ(download(dst, p.volume), p.values) << where << " fused";
  }
}

// All pieces in one table: kAmax, a unit list of every third block, the scatter, kFused.
// Tables of whole-width pieces checkBatched ran (the whole-width kernel), and those of them with a
// piece that cuts its blocks' rows (lanes with fewer vectors than a whole block's, or none).
int g_whole_tables = 0;
int g_whole_cut_tables = 0;

// checkBatched's pieces whose blocks are whole in width for `group` (bk::holdsWholeWidthBlocks;
// their rows may be cut), alone in a table: the whole-width kernel, fused (with the merged maxima
// `tasks` point to) and with the expected scales given, gives each piece's bytes and scales.
void checkWholeWidthTable(const bqt::LayoutCase& c, const std::vector<DevicePiece>& pieces,
                          const std::vector<bk::QuantTask>& tasks, int group, DeviceBytes& scales,
                          DeviceBytes& out, const std::vector<uint8_t>& expected_scales) {
  const size_t ssize = bqt::scaleSize(c.s.format);
  std::vector<bk::QuantTask> whole;
  std::vector<size_t> whole_block_at, whole_value_at, whole_piece;
  size_t blocks = 0, volume = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (bk::holdsWholeWidthBlocks(tasks[i].g, group, reinterpret_cast<uint64_t>(tasks[i].g.data),
                                  reinterpret_cast<uint64_t>(tasks[i].dst))) {
      whole.push_back(tasks[i]);
      whole_block_at.push_back(blocks);
      whole_value_at.push_back(volume);
      whole_piece.push_back(i);
    }
    blocks += pieces[i].blocks;
    volume += pieces[i].volume;
  }
  if (whole.empty()) return;
  ++g_whole_tables;
  const bool cut = std::any_of(whole.begin(), whole.end(), [](const bk::QuantTask& t) {
    return t.g.offset[0] % t.g.block_rows != 0 || t.g.extent[0] % t.g.block_rows != 0;
  });
  g_whole_cut_tables += cut ? 1 : 0;
  const uint64_t whole_total = bk::numberQuantTasks(whole);
  const auto device_whole = upload(whole);
  const auto* whole_table = reinterpret_cast<const bk::QuantTask*>(device_whole->at);
  // the maxima of every other block, listed (what a trainer computes for its exchanged blocks)
  std::vector<uint64_t> units;
  std::vector<float> listed;
  for (size_t k = 0; k < whole.size(); ++k) {
    const DevicePiece& p = pieces[whole_piece[k]];
    for (size_t j = 0; j < p.blocks; ++j) {
      if ((whole[k].first_tile + j) % 2 != 0) continue;
      units.push_back(whole[k].first_tile + j);
      listed.push_back(p.amax[j]);
    }
  }
  if (!units.empty()) {
    const auto device_units = upload(units);
    DeviceBytes compact(units.size() * 4);
    ASSERT_TRUE(launchBlockQuantBatch(whole.data(), whole_table, static_cast<int64_t>(whole.size()),
                                      whole_total, group, bk::QuantMode::kAmax,
                                      reinterpret_cast<const uint64_t*>(device_units->at),
                                      units.size(), static_cast<float*>(compact.data), nullptr)
                    .isOk());
    ASSERT_EQ(download(compact.data, units.size() * 4), bytesOf(listed))
        << c.where << " whole-width table, group " << group << ", listed maxima";
  }
  for (bk::QuantMode mode : {bk::QuantMode::kFused, bk::QuantMode::kQuantizeWithScales}) {
    if (mode == bk::QuantMode::kFused) {
      ASSERT_TRUE(cudaMemset(scales.data, 0, blocks * ssize) == cudaSuccess);
    } else {  // the expected scales in place, as given scales
      ASSERT_EQ(
          cudaMemcpy(scales.data, expected_scales.data(), blocks * ssize, cudaMemcpyHostToDevice),
          cudaSuccess);
    }
    ASSERT_TRUE(cudaMemset(out.data, 0, volume) == cudaSuccess);
    ASSERT_TRUE(launchBlockQuantBatch(whole.data(), whole_table, static_cast<int64_t>(whole.size()),
                                      whole_total, group, mode, nullptr, 0, nullptr, nullptr)
                    .isOk());
    const std::vector<uint8_t> got_scales = download(scales.data, blocks * ssize);
    const std::vector<uint8_t> got_values = download(out.data, volume);
    for (size_t k = 0; k < whole.size(); ++k) {
      const DevicePiece& p = pieces[whole_piece[k]];
      const auto scales_at = static_cast<ptrdiff_t>(whole_block_at[k] * ssize);
      const auto values_at = static_cast<ptrdiff_t>(whole_value_at[k]);
      ASSERT_TRUE(std::equal(p.scales.begin(), p.scales.end(), got_scales.begin() + scales_at))
          << c.where << " whole-width table, group " << group << ", piece " << whole_piece[k];
      ASSERT_TRUE(std::equal(p.values.begin(), p.values.end(), got_values.begin() + values_at))
          << c.where << " whole-width table, group " << group << ", piece " << whole_piece[k]
          << " mode " << static_cast<int>(mode);
    }
  }
}

void checkBatched(const bqt::LayoutCase& c, std::vector<DevicePiece>& pieces) {
  const size_t ssize = bqt::scaleSize(c.s.format);
  size_t blocks = 0, volume = 0;
  for (const DevicePiece& p : pieces) {
    blocks += p.blocks;
    volume += p.volume;
  }
  DeviceBytes amax(blocks * 4), merged(blocks * 4), scales(blocks * ssize), out(volume + 16);
  std::vector<float> expected_amax, merged_host;
  std::vector<uint8_t> expected_scales, expected_values;
  std::vector<bk::QuantTask> tasks;
  size_t b = 0, v = 0;
  for (const DevicePiece& p : pieces) {
    bk::QuantTask t = bk::quantTaskOf(p.view, c.s);
    t.amax_out = static_cast<float*>(amax.data) + b;
    t.amax_in = static_cast<const float*>(merged.data) + b;
    t.scales = scales.bytes() + b * ssize;
    t.dst = out.bytes() + v;
    tasks.push_back(t);
    expected_amax.insert(expected_amax.end(), p.amax.begin(), p.amax.end());
    merged_host.insert(merged_host.end(), p.merged.begin(), p.merged.end());
    expected_scales.insert(expected_scales.end(), p.scales.begin(), p.scales.end());
    expected_values.insert(expected_values.end(), p.values.begin(), p.values.end());
    b += p.blocks;
    v += p.volume;
  }
  const uint64_t total = bk::numberQuantTasks(tasks);
  ASSERT_EQ(total, blocks);
  const auto device_tasks = upload(tasks);
  const auto* table = reinterpret_cast<const bk::QuantTask*>(device_tasks->at);
  const int64_t n = static_cast<int64_t>(tasks.size());
  const int group = bk::groupSizeFor(c.s.block_rows, c.s.block_cols, tasks[0].g.dtype);
  for (int g : {group, 1, 4, 32, 256}) {  // any group gives the same result
    ASSERT_TRUE(cudaMemset(amax.data, 0xff, blocks * 4) == cudaSuccess);
    ASSERT_TRUE(launchBlockQuantBatch(tasks.data(), table, n, total, g, bk::QuantMode::kAmax,
                                      nullptr, 0, nullptr, nullptr)
                    .isOk());
    ASSERT_EQ(download(amax.data, blocks * 4), bytesOf(expected_amax))
        << c.where << " batched amax, group " << g;
  }
  // a unit list: every third block's maximum into a compact array, then scattered back
  std::vector<uint64_t> units;
  std::vector<float> listed;
  for (uint64_t u = 1; u < total; u += 3) {
    units.push_back(u);
    listed.push_back(expected_amax[u]);
  }
  if (!units.empty()) {
    const auto device_units = upload(units);
    DeviceBytes compact(units.size() * 4);
    ASSERT_TRUE(launchBlockQuantBatch(tasks.data(), table, n, total, group, bk::QuantMode::kAmax,
                                      reinterpret_cast<const uint64_t*>(device_units->at),
                                      units.size(), static_cast<float*>(compact.data), nullptr)
                    .isOk());
    ASSERT_EQ(download(compact.data, units.size() * 4), bytesOf(listed)) << c.where << " listed";
    std::vector<float> grid(blocks, 0.0f);
    ASSERT_EQ(cudaMemcpy(merged.data, grid.data(), blocks * 4, cudaMemcpyHostToDevice),
              cudaSuccess);
    ASSERT_TRUE(launchScatterAmax(reinterpret_cast<const uint64_t*>(device_units->at),
                                  static_cast<const float*>(compact.data),
                                  static_cast<int64_t>(units.size()),
                                  static_cast<float*>(merged.data), nullptr)
                    .isOk());
    for (size_t i = 0; i < units.size(); ++i)
      grid[units[i]] = listed[i];
    ASSERT_EQ(download(merged.data, blocks * 4), bytesOf(grid)) << c.where << " scatter";
  }
  // fused with the merged maxima, and scale + quantize from them
  ASSERT_EQ(cudaMemcpy(merged.data, merged_host.data(), blocks * 4, cudaMemcpyHostToDevice),
            cudaSuccess);
  for (bk::QuantMode mode : {bk::QuantMode::kFused, bk::QuantMode::kScaleAndQuantize}) {
    ASSERT_TRUE(cudaMemset(scales.data, 0, blocks * ssize) == cudaSuccess);
    ASSERT_TRUE(cudaMemset(out.data, 0, volume) == cudaSuccess);
    ASSERT_TRUE(launchBlockQuantBatch(tasks.data(), table, n, total, group, mode, nullptr, 0,
                                      nullptr, nullptr)
                    .isOk());
    ASSERT_EQ(download(scales.data, blocks * ssize), expected_scales)
        << c.where << " batched mode " << static_cast<int>(mode);
    ASSERT_EQ(download(out.data, volume), expected_values)
        << c.where << " batched mode " << static_cast<int>(mode);
  }
  // the pieces whose blocks are whole in width for a group, alone in a table: the whole-width
  // kernel
  for (int wg : {1, 4, 32, 256}) {
    checkWholeWidthTable(c, pieces, tasks, wg, scales, out, expected_scales);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(BlockQuantDeviceLayouts, EveryLauncherEqualsTheHostBitForBit) {
  SKIP_WITHOUT_GPU();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  const ScaleFormat formats[] = {ScaleFormat::kFloat32, ScaleFormat::kPow2Float32,
                                 ScaleFormat::kE8M0, ScaleFormat::kFloat32Gpu};
  const DType dtypes[] = {DType::kBFloat16, DType::kFloat32, DType::kFloat16};
  std::mt19937_64 rng(90210);
  const int whole_before = g_whole_tables;
  for (int it = 0; it < 96; ++it) {
    const auto layout = static_cast<bqt::Layout>(it % 4);
    const bqt::LayoutCase c = bqt::layoutCase(rng, layout, formats[(it / 4) % 4],
                                              dtypes[(it / 16) % 3], it % 3 == 0 ? 3000 : 0);
    std::vector<DevicePiece> pieces = preparePieces(c);
    checkPerPieceLaunchers(c, pieces, it % 8 == 5 ? 1 : 0);
    checkBatched(c, pieces);
    if (HasFatalFailure()) return;
    // the whole weight in one piece, fused with no maxima from elsewhere: the reference
    const bqt::LaidPiece whole = bqt::layPiece(c.t, Box::whole(c.shape), 0, 0);
    const bqt::Quantized reference = bqt::referenceQuantize(c.t, c.s);
    const auto data = upload(c.t.bytes);
    PieceView v = whole.view();
    v.data = data->at;
    DeviceBytes scales(reference.scales.size()), values(reference.values.size());
    ASSERT_TRUE(
        launchQuantizeFused(v, c.shape, c.s, nullptr, scales.data, values.bytes(), nullptr).isOk());
    ASSERT_EQ(download(scales.data, scales.size), reference.scales) << c.where << " whole";
    ASSERT_EQ(download(values.data, values.size), reference.values) << c.where << " whole";
  }
  EXPECT_GT(g_whole_tables, whole_before);  // MXFP8 1 x 32 pieces took the whole-width kernel
}

// Weights of whole 128 x 128 blocks of 16-bit elements (the whole-width kernel), some pieces cut
// through blocks' rows (still the whole-width kernel) or with rows padded off its alignment (the
// general kernel for a table holding them), every scale format, with inf and NaN.
TEST(BlockQuantDeviceLayouts, FullTilesEqualTheHostBitForBit) {
  SKIP_WITHOUT_GPU();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  const ScaleFormat formats[] = {ScaleFormat::kFloat32, ScaleFormat::kPow2Float32,
                                 ScaleFormat::kE8M0, ScaleFormat::kFloat32Gpu};
  const DType dtypes[] = {DType::kBFloat16, DType::kFloat16};
  std::mt19937_64 rng(128128);
  const int whole_before = g_whole_tables;
  const int whole_cut_before = g_whole_cut_tables;
  for (int it = 0; it < 32; ++it) {
    const bqt::LayoutCase c = bqt::layoutCase(rng, bqt::Layout::kFullTiles, formats[it % 4],
                                              dtypes[(it / 4) % 2], it % 3 == 0 ? 3000 : 0);
    std::vector<DevicePiece> pieces = preparePieces(c);
    checkPerPieceLaunchers(c, pieces, 0);
    checkBatched(c, pieces);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(g_whole_tables, whole_before);          // the whole-width kernel ran
  EXPECT_GT(g_whole_cut_tables, whole_cut_before);  // on pieces that cut blocks' rows too
}

// Large 128x128 bf16 and fp32 weights (many blocks per launch, the register cache full and, for
// fp32, the second read), and 1x32 blocks with groups of 4.
TEST(BlockQuantDeviceLayouts, LargeWeightsEqualTheReference) {
  SKIP_WITHOUT_GPU();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  std::mt19937_64 rng(4096);
  struct Big {
    Dims shape;
    DType dtype;
    ScaleFormat f;
    int64_t rows, cols;
  };
  const Big bigs[] = {{Dims{1024, 2048}, DType::kBFloat16, ScaleFormat::kFloat32, 128, 128},
                      {Dims{640, 1000}, DType::kFloat32, ScaleFormat::kPow2Float32, 128, 128},
                      {Dims{512, 4096}, DType::kFloat16, ScaleFormat::kE8M0, 1, 32},
                      {Dims{300, 1024}, DType::kFloat32, ScaleFormat::kE8M0, 1, 32}};
  for (const Big& big : bigs) {
    BlockScaling s;
    s.format = big.f;
    s.block_rows = big.rows;
    s.block_cols = big.cols;
    s.scale_tensor = "w.scale";
    const bqt::HostTensor t = bqt::randomTensor(rng, big.dtype, big.shape, 20);
    const bqt::Quantized reference = bqt::referenceQuantize(t, s);
    const auto data = upload(t.bytes);
    const PieceView v{data->at, big.dtype, Box::whole(big.shape), Dims{big.shape[1], 1}};
    DeviceBytes scales(reference.scales.size()), values(reference.values.size());
    ASSERT_TRUE(
        launchQuantizeFused(v, big.shape, s, nullptr, scales.data, values.bytes(), nullptr).isOk());
    const std::string where = big.shape.toString() + " " + describe(s) + " " + dtypeName(big.dtype);
    ASSERT_EQ(download(scales.data, scales.size), reference.scales) << where;
    ASSERT_EQ(download(values.data, values.size), reference.values) << where;
  }
}

}  // namespace
}  // namespace wsync
