// The batched region copy (kernels/batched_copy.h): tiling arithmetic everywhere; on a GPU, many
// regions of every shape (contiguous, 2-D, 3-D, rows longer than a tile, odd sizes and alignments
// that force the byte path) copied by one launch and compared byte for byte with a host
// reference, bytes outside the regions untouched; and the throughput of one large batch next to
// cudaMemcpy of the same bytes (printed, never asserted).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "common/cuda_check.h"
#include "gpu/device_bytes.h"
#include "kernels/batched_copy.h"

namespace wsync {
namespace {

constexpr uint8_t kSentinel = 0x5A;

#define SKIP_WITHOUT_GPU() \
  if (!cudaDeviceAvailable(0)) GTEST_SKIP() << "no usable CUDA device"

TEST(BatchedCopyPlan, TilesCoverEveryRowSegment) {
  std::vector<CopyTask> tasks(4);
  tasks[0].row_bytes = 100;  // 3 short rows fit one tile: one tile per plane, 2 planes
  tasks[0].rows = 3;
  tasks[0].planes = 2;
  tasks[1].row_bytes = 0;                       // empty: no tiles
  tasks[2].row_bytes = kCopyTileBytes * 2 + 1;  // 3 tiles per row
  tasks[3].row_bytes = kCopyTileBytes;          // exactly one
  EXPECT_EQ(planBatchedCopy(tasks), 2u + 0u + 3u + 1u);
  EXPECT_EQ(tasks[0].first_tile, 0u);
  EXPECT_EQ(tasks[1].first_tile, 2u);
  EXPECT_EQ(tasks[2].first_tile, 2u);
  EXPECT_EQ(tasks[3].first_tile, 5u);
  CopyTask many;  // 1000 rows of 1000 bytes: floor(tile / 1000) rows per tile
  many.row_bytes = 1000;
  many.rows = 1000;
  const uint64_t rows_per_tile = kCopyTileBytes / 1000;
  EXPECT_EQ(tilesOf(many), (1000 + rows_per_tile - 1) / rows_per_tile);
  EXPECT_EQ(launchBatchedCopy(nullptr, 0, 0, nullptr).code(), WSYNC_SUCCESS);
  EXPECT_EQ(launchBatchedCopy(nullptr, 3, 10, nullptr).code(), WSYNC_ERR_INVALID_ARGUMENT);
}

TEST(BatchedCopy, ManyRegionsMatchTheHostReference) {
  SKIP_WITHOUT_GPU();
  ASSERT_TRUE(cudaUseDevice(0).isOk());
  constexpr size_t kSrc = 8 << 20;
  constexpr size_t kDst = 16 << 20;
  std::mt19937_64 rng(7);
  std::vector<uint8_t> src(kSrc);
  for (auto& b : src)
    b = static_cast<uint8_t>(rng());
  DeviceBytes dsrc(kSrc), ddst(kDst);
  ASSERT_EQ(cudaMemcpy(dsrc.data, src.data(), kSrc, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(ddst.data, kSentinel, kDst), cudaSuccess);

  // Regions laid out one after another on the destination (disjoint), sources anywhere.
  std::vector<CopyTask> tasks;
  std::vector<uint8_t> want(kDst, kSentinel);
  size_t cursor = 0;
  auto add = [&](uint64_t row_bytes, uint64_t rows, uint64_t planes, uint64_t src_pitch,
                 uint64_t dst_pitch, size_t src_offset, size_t dst_misalign) {
    CopyTask t;
    t.row_bytes = row_bytes;
    t.rows = rows;
    t.planes = planes;
    t.src_pitch = src_pitch;
    t.dst_pitch = dst_pitch;
    t.src_plane_pitch = src_pitch * rows + 48;
    t.dst_plane_pitch = dst_pitch * rows + 16;
    const size_t dst_offset = cursor + dst_misalign;
    const size_t src_extent = (planes - 1) * t.src_plane_pitch + (rows - 1) * src_pitch + row_bytes;
    const size_t dst_extent = (planes - 1) * t.dst_plane_pitch + (rows - 1) * dst_pitch + row_bytes;
    ASSERT_LE(src_offset + src_extent, kSrc);
    ASSERT_LE(dst_offset + dst_extent, kDst);
    t.src = dsrc.bytes() + src_offset;
    t.dst = ddst.bytes() + dst_offset;
    tasks.push_back(t);
    for (uint64_t p = 0; p < planes; ++p) {
      for (uint64_t r = 0; r < rows; ++r) {
        std::memcpy(want.data() + dst_offset + p * t.dst_plane_pitch + r * dst_pitch,
                    src.data() + src_offset + p * t.src_plane_pitch + r * src_pitch, row_bytes);
      }
    }
    cursor = (dst_offset + dst_extent + 255) / 256 * 256;
  };
  add(1 << 20, 1, 1, 1 << 20, 1 << 20, 0, 0);                   // contiguous, aligned
  add(2048, 64, 1, 4096, 2048, 4096, 0);                        // TP half rows
  add(2048, 64, 1, 4096, 2048, 4096 + 2048, 0);                 // the other half
  add(3 * kCopyTileBytes + 17, 3, 1, 300000, 250000, 1000, 0);  // rows longer than a tile
  add(30, 50, 3, 40, 33, 77, 1);                                // odd: the byte path
  add(96, 10, 4, 128, 96, 16, 0);                               // 3-D, 16-byte units
  add(1, 1, 1, 1, 1, 5, 3);                                     // one byte
  add(48, 3000, 1, 64, 48, 200000, 0);       // short rows grouped, the last tile partial
  add(1000, 150, 1, 1003, 1000, 400000, 5);  // grouped rows, byte path
  add(1000, 40, 2, 1004, 1000, 600000, 4);   // 4-byte units
  add(1000, 40, 1, 1000, 1002, 700002, 2);   // 2-byte units
  add(8200, 30, 1, 8208, 8200, 800008, 8);   // 8-byte units
  ASSERT_FALSE(HasFatalFailure());
  const uint64_t tiles = planBatchedCopy(tasks);
  DeviceBytes table(tasks.size() * sizeof(CopyTask));
  ASSERT_EQ(cudaMemcpy(table.data, tasks.data(), table.size, cudaMemcpyHostToDevice), cudaSuccess);
  const Status s = launchBatchedCopy(static_cast<CopyTask*>(table.data),
                                     static_cast<int64_t>(tasks.size()), tiles, nullptr);
  ASSERT_TRUE(s.isOk()) << s.toString();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint8_t> got(kDst);
  ASSERT_EQ(cudaMemcpy(got.data(), ddst.data, kDst, cudaMemcpyDeviceToHost), cudaSuccess);
  size_t wrong = 0, first = 0;
  for (size_t i = 0; i < kDst; ++i) {
    if (got[i] != want[i] && wrong++ == 0) first = i;
  }
  EXPECT_EQ(wrong, 0u) << "first wrong byte at " << first;
}

// Seconds of the fastest of 3 timed rounds of `enqueue` (after one untimed), by CUDA events on the
// legacy stream.
template <typename Enqueue>
double bestSeconds(Enqueue&& enqueue) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  float best = 1e30f;
  for (int round = 0; round < 4; ++round) {
    cudaEventRecord(a);
    enqueue();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    if (round > 0) best = std::min(best, ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return best / 1e3;
}

// bestSeconds of one launch copying `tasks`.
double batchedCopySeconds(std::vector<CopyTask> tasks) {
  const uint64_t tiles = planBatchedCopy(tasks);
  DeviceBytes table(tasks.size() * sizeof(CopyTask));
  EXPECT_EQ(cudaMemcpy(table.data, tasks.data(), table.size, cudaMemcpyHostToDevice), cudaSuccess);
  return bestSeconds([&] {
    EXPECT_TRUE(launchBatchedCopy(static_cast<CopyTask*>(table.data),
                                  static_cast<int64_t>(tasks.size()), tiles, nullptr)
                    .isOk());
  });
}

// 4 GiB as 2 KiB-row halves of 4 KiB rows (a TP-2 split along the last dim) in one launch, and
// as contiguous 64 MiB regions, next to cudaMemcpy D2D of the same bytes.
TEST(BatchedCopy, Throughput) {
  SKIP_WITHOUT_GPU();
  ASSERT_TRUE(cudaUseDevice(0).isOk());
  constexpr size_t kBytes = size_t{4} << 30;
  DeviceBytes src(kBytes), dst(kBytes);
  ASSERT_EQ(cudaMemset(src.data, 1, kBytes), cudaSuccess);
  std::vector<CopyTask> halves;
  constexpr size_t kRegion = 64 << 20;  // 64 MiB source blocks of 4 KiB rows
  for (size_t off = 0; off < kBytes; off += kRegion) {
    for (int half = 0; half < 2; ++half) {
      CopyTask t;
      t.src = src.bytes() + off + half * 2048;
      t.dst = dst.bytes() + off + half * (kRegion / 2);
      t.row_bytes = 2048;
      t.rows = kRegion / 4096;
      t.src_pitch = 4096;
      t.dst_pitch = 2048;
      halves.push_back(t);
    }
  }
  std::vector<CopyTask> runs;
  for (size_t off = 0; off < kBytes; off += kRegion) {
    CopyTask t;
    t.src = src.bytes() + off;
    t.dst = dst.bytes() + off;
    t.row_bytes = kRegion;
    runs.push_back(t);
  }
  const double strided = batchedCopySeconds(halves);
  const double contiguous = batchedCopySeconds(runs);
  const double memcpy_s =
      bestSeconds([&] { cudaMemcpyAsync(dst.data, src.data, kBytes, cudaMemcpyDeviceToDevice); });
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::printf(
      "[ info ] batched copy of 4 GiB: %zu 2-KiB-row halves %.1f GB/s, %zu contiguous "
      "regions %.1f GB/s; cudaMemcpy D2D %.1f GB/s (best of 3)\n",
      halves.size(), kBytes / strided / 1e9, runs.size(), kBytes / contiguous / 1e9,
      kBytes / memcpy_s / 1e9);
}

// The Llama-3-8B tensors (bfloat16, 16.06 GB) in one launch: every tensor whole (the layouts
// match), and every matrix split in two along its last dim (TP 2 column halves, the strided rows
// of a differing layout), next to cudaMemcpy D2D of the same bytes. Printed, never asserted.
TEST(BatchedCopy, LlamaShapesThroughput) {
  SKIP_WITHOUT_GPU();
  ASSERT_TRUE(cudaUseDevice(0).isOk());
  struct Matrix {
    uint64_t rows, cols;
  };
  std::vector<Matrix> tensors = {{128256, 4096}};
  for (int layer = 0; layer < 32; ++layer) {
    for (const Matrix m : {Matrix{4096, 4096}, Matrix{1024, 4096}, Matrix{1024, 4096},
                           Matrix{4096, 4096}, Matrix{14336, 4096}, Matrix{14336, 4096},
                           Matrix{4096, 14336}, Matrix{1, 4096}, Matrix{1, 4096}})
      tensors.push_back(m);
  }
  tensors.push_back({1, 4096});
  tensors.push_back({128256, 4096});
  constexpr uint64_t kElement = 2;  // bfloat16
  uint64_t total = 0;
  for (const Matrix& m : tensors)
    total += m.rows * m.cols * kElement;
  size_t free_bytes = 0, device_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &device_bytes), cudaSuccess);
  if (free_bytes < 2 * total + (size_t{1} << 30))
    GTEST_SKIP() << "needs 2 x 16 GB of device memory";
  DeviceBytes src(total), dst(total);
  ASSERT_EQ(cudaMemset(src.data, 3, total), cudaSuccess);
  std::vector<CopyTask> whole, halves;
  uint64_t offset = 0;
  for (const Matrix& m : tensors) {
    const uint64_t bytes = m.rows * m.cols * kElement;
    CopyTask t;
    t.src = src.bytes() + offset;
    t.dst = dst.bytes() + offset;
    t.row_bytes = bytes;
    whole.push_back(t);
    if (m.rows == 1) {
      halves.push_back(t);
    } else {
      const uint64_t half_row = m.cols / 2 * kElement;
      for (int h = 0; h < 2; ++h) {
        CopyTask c;
        c.src = src.bytes() + offset + h * half_row;
        c.dst = dst.bytes() + offset + h * (bytes / 2);
        c.row_bytes = half_row;
        c.rows = m.rows;
        c.src_pitch = 2 * half_row;
        c.dst_pitch = half_row;
        halves.push_back(c);
      }
    }
    offset += bytes;
  }
  const double whole_s = batchedCopySeconds(whole);
  const double halves_s = batchedCopySeconds(halves);
  const double memcpy_s =
      bestSeconds([&] { cudaMemcpyAsync(dst.data, src.data, total, cudaMemcpyDeviceToDevice); });
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::printf(
      "[ info ] Llama-3-8B bf16 (%.2f GB) in one launch: %zu whole tensors %.1f GB/s (%.3f x "
      "cudaMemcpy), %zu TP-2 column halves %.1f GB/s (%.3f x); cudaMemcpy D2D %.1f GB/s\n",
      total / 1e9, whole.size(), total / whole_s / 1e9, memcpy_s / whole_s, halves.size(),
      total / halves_s / 1e9, memcpy_s / halves_s, total / memcpy_s / 1e9);
}

}  // namespace
}  // namespace wsync
