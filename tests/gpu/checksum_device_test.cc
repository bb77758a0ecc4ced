// The device shard checksum (kernels/checksum_kernels.h, runtime/version_checksums.h) against the
// host one (checksum/checksum.h): tiling everywhere; on a GPU, random buffers and spans of every
// shape (any alignment, partial last words, runs longer than a tile, 2-D and 3-D regions,
// inactive outputs, absolute addresses) give exactly the host's sums; the throughput of one large
// span is printed (never asserted).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "checksum/checksum.h"
#include "common/cuda_check.h"
#include "gpu/device_bytes.h"
#include "kernels/checksum_kernels.h"
#include "runtime/version_checksums.h"

namespace wsync {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!cudaDeviceAvailable(0)) GTEST_SKIP() << "no usable CUDA device"

TEST(ChecksumTiles, TilesCoverEveryRunSegment) {
  std::vector<ChecksumSpan> spans(4);
  spans[0].row_bytes = 100;  // 13 words: many runs per tile; 3 runs x 2 planes -> 2 tiles
  spans[0].rows = 3;
  spans[0].planes = 2;
  spans[1].row_bytes = 0;                               // empty: no tiles
  spans[2].row_bytes = kChecksumTileWords * 8 * 2 + 1;  // 3 tiles per run
  spans[3].row_bytes = kChecksumTileWords * 8;          // exactly one
  EXPECT_EQ(planChecksumTiles(spans), 2u + 0u + 3u + 1u);
  EXPECT_EQ(spans[2].first_tile, 2u);
  EXPECT_EQ(spans[3].first_tile, 5u);
  EXPECT_EQ(launchChecksums(nullptr, 0, 0, nullptr, nullptr, nullptr, nullptr).code(),
            WSYNC_SUCCESS);
  EXPECT_EQ(launchChecksums(nullptr, 3, 10, nullptr, nullptr, nullptr, nullptr).code(),
            WSYNC_ERR_INVALID_ARGUMENT);
}

// Random spans inside `bytes` bytes, outputs in [0, outputs).
std::vector<ChecksumSpan> randomSpans(std::mt19937_64& rng, uint64_t bytes, uint32_t outputs) {
  std::vector<ChecksumSpan> spans;
  while (spans.size() < 400) {
    ChecksumSpan s;
    const int shape = static_cast<int>(rng() % 4);
    s.row_bytes = shape == 0 ? rng() % 300 : shape == 1 ? rng() % 5000 : rng() % 200000;
    s.rows = shape == 2 ? 1 : 1 + rng() % 20;
    s.planes = shape == 3 ? 1 + rng() % 3 : 1;
    s.src_pitch = s.row_bytes + rng() % 17;
    s.src_plane_pitch = s.src_pitch * s.rows + rng() % 33;
    const uint64_t extent =
        (s.planes - 1) * s.src_plane_pitch + (s.rows - 1) * s.src_pitch + s.row_bytes;
    if (extent >= bytes) continue;
    s.src = rng() % (bytes - extent);  // any alignment
    s.dst_buffer = rng() % 1000;
    s.dst_offset = rng() % (1ull << 36);
    s.dst_pitch = s.row_bytes + rng() % 64;
    s.dst_plane_pitch = s.dst_pitch * s.rows + rng() % 64;
    s.output = static_cast<uint32_t>(rng() % outputs);
    spans.push_back(s);
  }
  return spans;
}

TEST(ChecksumDevice, RandomSpansMatchTheHost) {
  SKIP_WITHOUT_GPU();
  ASSERT_TRUE(cudaUseDevice(0).isOk());
  constexpr uint64_t kBytes = 8 << 20;
  constexpr uint32_t kOutputs = 7;
  std::mt19937_64 rng(11);
  std::vector<uint8_t> host(kBytes);
  for (auto& b : host)
    b = static_cast<uint8_t>(rng());
  DeviceBytes device(kBytes);
  ASSERT_EQ(cudaMemcpy(device.data, host.data(), kBytes, cudaMemcpyHostToDevice), cudaSuccess);
  for (int trial = 0; trial < 5; ++trial) {
    std::vector<ChecksumSpan> spans = randomSpans(rng, kBytes, kOutputs);
    std::vector<uint8_t> active(kOutputs, 1);
    if (trial > 0) active[rng() % kOutputs] = 0;
    std::vector<uint64_t> want(kOutputs, 0);
    accumulateChecksums(host.data(), spans, active, want);
    // Through the runtime's wrapper (its own stream, bounded wait) with a base pointer...
    Result<VersionChecksums> sums =
        VersionChecksums::create(spans, kOutputs, MemoryKind::kDevice, 0);
    ASSERT_TRUE(sums.isOk()) << sums.status().toString();
    Result<std::vector<uint64_t>> got =
        sums->compute(device.bytes(), active, nullptr, std::chrono::milliseconds(60000));
    ASSERT_TRUE(got.isOk()) << got.status().toString();
    EXPECT_EQ(*got, want) << "trial " << trial;
    // ... and with absolute addresses (base null).
    for (ChecksumSpan& s : spans)
      s.src += reinterpret_cast<uintptr_t>(device.bytes());
    Result<VersionChecksums> absolute =
        VersionChecksums::create(spans, kOutputs, MemoryKind::kDevice, 0);
    ASSERT_TRUE(absolute.isOk()) << absolute.status().toString();
    got = absolute->compute(nullptr, active, nullptr, std::chrono::milliseconds(60000));
    ASSERT_TRUE(got.isOk()) << got.status().toString();
    EXPECT_EQ(*got, want) << "trial " << trial << " (absolute addresses)";
  }
}

TEST(ChecksumDevice, OneFlippedByteChangesTheDeviceSum) {
  SKIP_WITHOUT_GPU();
  ASSERT_TRUE(cudaUseDevice(0).isOk());
  constexpr uint64_t kBytes = 1 << 20;
  std::vector<uint8_t> host(kBytes, 0x11);
  DeviceBytes device(kBytes);
  ASSERT_EQ(cudaMemcpy(device.data, host.data(), kBytes, cudaMemcpyHostToDevice), cudaSuccess);
  ChecksumSpan span;
  span.row_bytes = kBytes - 3;
  span.src = 3;
  Result<VersionChecksums> sums = VersionChecksums::create({span}, 1, MemoryKind::kDevice, 0);
  ASSERT_TRUE(sums.isOk()) << sums.status().toString();
  auto clean = sums->compute(device.bytes(), {1}, nullptr, std::chrono::milliseconds(60000));
  ASSERT_TRUE(clean.isOk());
  EXPECT_EQ((*clean)[0], checksumSpan(host.data(), span));
  const uint8_t flipped = 0x11 ^ 0x80;
  ASSERT_EQ(cudaMemcpy(device.bytes() + 700001, &flipped, 1, cudaMemcpyHostToDevice), cudaSuccess);
  auto dirty = sums->compute(device.bytes(), {1}, nullptr, std::chrono::milliseconds(60000));
  ASSERT_TRUE(dirty.isOk());
  EXPECT_NE((*dirty)[0], (*clean)[0]);
}

TEST(ChecksumDevice, ThroughputOfOneLargeSpan) {
  SKIP_WITHOUT_GPU();
  ASSERT_TRUE(cudaUseDevice(0).isOk());
  constexpr uint64_t kBytes = 1ull << 30;
  DeviceBytes device(kBytes);
  ASSERT_EQ(cudaMemset(device.data, 7, kBytes), cudaSuccess);
  ChecksumSpan span;
  span.row_bytes = kBytes;
  Result<VersionChecksums> sums = VersionChecksums::create({span}, 1, MemoryKind::kDevice, 0);
  ASSERT_TRUE(sums.isOk()) << sums.status().toString();
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(
        sums->compute(device.bytes(), {1}, nullptr, std::chrono::milliseconds(60000)).isOk());
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::printf("[checksum] device: %llu bytes in %.3f ms: %.1f GB/s (incl. launch and copies)\n",
              static_cast<unsigned long long>(kBytes), best * 1e3,
              static_cast<double>(kBytes) / best / 1e9);
}

}  // namespace
}  // namespace wsync
