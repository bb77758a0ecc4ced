// The batched shard checksum of checksum_kernels.h. nvcc, C++17.
#include <cuda_runtime.h>

#include <algorithm>
#include <cub/block/block_reduce.cuh>
#include <string>

#include "checksum/checksum_math.h"
#include "common/cuda_check.h"
#include "kernels/batched_tiles.cuh"
#include "kernels/checksum_kernels.h"

namespace wsync {
namespace {

namespace cm = checksum_math;
constexpr int kThreads = 256;

// How a span splits into tiles (in words of its runs; a run's last word may be partial).
struct TileShape {
  uint64_t run_words;      // words per run: ceil(row_bytes / 8)
  uint64_t segments;       // tiles per run (1 unless a run is longer than a tile)
  uint64_t rows_per_tile;  // runs per tile (1 when a run fills a tile or more)
  uint64_t row_tiles;      // tiles down one plane's runs
};

__host__ __device__ inline TileShape tileShape(const ChecksumSpan& s) {
  TileShape t;
  t.run_words = (s.row_bytes + 7) / 8;
  t.segments = (t.run_words + kChecksumTileWords - 1) / kChecksumTileWords;
  t.rows_per_tile = t.run_words >= kChecksumTileWords ? 1 : kChecksumTileWords / t.run_words;
  t.row_tiles = (s.rows + t.rows_per_tile - 1) / t.rows_per_tile;
  return t;
}

// The little-endian word of `bytes` (1..8) bytes at p, zero-padded, with the widest loads p's
// alignment allows.
__device__ __forceinline__ uint64_t loadWord(const uint8_t* p, uint64_t bytes) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  if (bytes == 8) {
    if ((address & 7u) == 0) return *reinterpret_cast<const uint64_t*>(p);
    if ((address & 3u) == 0) {
      const auto* q = reinterpret_cast<const uint32_t*>(p);
      return static_cast<uint64_t>(q[0]) | (static_cast<uint64_t>(q[1]) << 32);
    }
    if ((address & 1u) == 0) {
      const auto* q = reinterpret_cast<const uint16_t*>(p);
      return static_cast<uint64_t>(q[0]) | (static_cast<uint64_t>(q[1]) << 16) |
             (static_cast<uint64_t>(q[2]) << 32) | (static_cast<uint64_t>(q[3]) << 48);
    }
  }
  uint64_t word = 0;
  for (uint64_t b = 0; b < bytes; ++b)
    word |= static_cast<uint64_t>(p[b]) << (8 * b);
  return word;
}

__global__ void __launch_bounds__(kThreads)
    checksumKernel(const ChecksumSpan* __restrict__ spans, int64_t num_spans, uint64_t total_tiles,
                   const uint8_t* base, const uint8_t* __restrict__ active,
                   unsigned long long* __restrict__ sums) {
  using Reduce = cub::BlockReduce<unsigned long long, kThreads>;
  __shared__ typename Reduce::TempStorage scratch;
  for (uint64_t tile = blockIdx.x; tile < total_tiles; tile += gridDim.x) {
    const ChecksumSpan& s = spans[kernels::tileOwner(spans, num_spans, tile)];
    if (active[s.output] == 0) continue;  // the same for every thread of the block
    const TileShape shape = tileShape(s);
    const uint64_t local = tile - s.first_tile;
    const uint64_t per_plane = shape.row_tiles * shape.segments;
    const uint64_t plane = local / per_plane;
    const uint64_t row_tile = (local % per_plane) / shape.segments;
    const uint64_t first_word = (local % shape.segments) * kChecksumTileWords;
    const uint64_t first_row = row_tile * shape.rows_per_tile;
    const auto rows = static_cast<uint32_t>(min(shape.rows_per_tile, s.rows - first_row));
    const auto words = static_cast<uint32_t>(min(kChecksumTileWords, shape.run_words - first_word));
    const uint8_t* src =
        (base == nullptr ? reinterpret_cast<const uint8_t*>(s.src) : base + s.src) +
        plane * s.src_plane_pitch + first_row * s.src_pitch + 8 * first_word;
    const uint64_t dst =
        s.dst_offset + plane * s.dst_plane_pitch + first_row * s.dst_pitch + 8 * first_word;
    const uint64_t run_left = s.row_bytes - 8 * first_word;  // bytes of each run from first_word
    unsigned long long sum = 0;
    for (uint32_t u = threadIdx.x; u < words * rows; u += kThreads) {
      const uint32_t row = u / words;
      const uint32_t word = u - row * words;
      const uint64_t at = 8ull * word;
      const uint64_t word_bytes = min(uint64_t{8}, run_left - at);
      const uint64_t value = loadWord(src + row * s.src_pitch + at, word_bytes);
      sum += cm::term(value, cm::key(s.dst_buffer, dst + row * s.dst_pitch + at));
    }
    const unsigned long long tile_sum = Reduce(scratch).Sum(sum);
    if (threadIdx.x == 0) atomicAdd(&sums[s.output], tile_sum);
    __syncthreads();  // scratch is reused by the next tile
  }
}

}  // namespace

uint64_t checksumTilesOf(const ChecksumSpan& span) {
  if (span.row_bytes == 0 || span.rows == 0 || span.planes == 0) return 0;
  const TileShape t = tileShape(span);
  return span.planes * t.row_tiles * t.segments;
}

uint64_t planChecksumTiles(std::vector<ChecksumSpan>& spans) {
  return kernels::numberTiles(spans, [](const ChecksumSpan& s) { return checksumTilesOf(s); });
}

Status launchChecksums(const ChecksumSpan* device_spans, int64_t num_spans, uint64_t total_tiles,
                       const uint8_t* base, const uint8_t* device_active, uint64_t* device_sums,
                       cudaStream_t stream) {
  if (num_spans == 0 || total_tiles == 0) return Status::ok();
  if (device_spans == nullptr || device_active == nullptr || device_sums == nullptr ||
      num_spans < 0) {
    return invalidArgument("checksum kernel: null span, active or sum array");
  }
  WSYNC_ASSIGN_OR_RETURN(
      const unsigned blocks,
      kernels::oneWaveBlocks(checksumKernel, kThreads, total_tiles, "checksum kernel"));
  static_assert(sizeof(unsigned long long) == sizeof(uint64_t), "64-bit atomics");
  checksumKernel<<<blocks, kThreads, 0, stream>>>(
      device_spans, num_spans, total_tiles, base, device_active,
      reinterpret_cast<unsigned long long*>(device_sums));
  return cudaCheck(cudaGetLastError(),
                   "checksum kernel: launch over " + std::to_string(num_spans) + " spans");
}

}  // namespace wsync
