// The batched region copy of batched_copy.h. nvcc, C++17.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "common/cuda_check.h"
#include "kernels/batched_copy.h"
#include "kernels/batched_tiles.cuh"

namespace wsync {
namespace {

// One warp per block, 32 blocks resident per multiprocessor, 16 KiB tiles (kCopyTileBytes):
// measured on the H200 against 64-1024 threads, 16-256 KiB tiles and TMA bulk copies
// (benchmarks/README.md, session 7), the fastest on the Llama-3-8B shapes (0.92 x cudaMemcpy of
// the same bytes, whole tensors and TP-2 column halves alike).
constexpr int kThreads = 32;
constexpr int kMinBlocksPerSm = 32;

// How a task splits into tiles: rows shorter than a tile are grouped (rows_per_tile of them),
// rows longer than a tile are cut into `segments` pieces.
struct TileShape {
  uint64_t segments;       // tiles per row (1 unless a row is longer than a tile)
  uint64_t rows_per_tile;  // rows per tile (1 when a row fills a tile or more)
  uint64_t row_tiles;      // tiles down one plane's rows
};

__host__ __device__ inline TileShape tileShape(const CopyTask& t) {
  TileShape s;
  s.segments = (t.row_bytes + kCopyTileBytes - 1) / kCopyTileBytes;
  s.rows_per_tile = t.row_bytes >= kCopyTileBytes ? 1 : kCopyTileBytes / t.row_bytes;
  s.row_tiles = (t.rows + s.rows_per_tile - 1) / s.rows_per_tile;
  return s;
}

// Copies `bytes` contiguous bytes (a multiple of sizeof(Unit), at most kCopyTileBytes) with the
// block's threads, four loads in flight per thread before their stores.
template <typename Unit>
__device__ void copyRunIn(const uint8_t* __restrict__ src, uint8_t* __restrict__ dst,
                          uint32_t bytes) {
  constexpr int kUnroll = 4;
  const Unit* __restrict__ s = reinterpret_cast<const Unit*>(src);
  Unit* __restrict__ d = reinterpret_cast<Unit*>(dst);
  const uint32_t units = bytes / static_cast<uint32_t>(sizeof(Unit));
  uint32_t u = threadIdx.x;
  for (; u + (kUnroll - 1) * kThreads < units; u += kUnroll * kThreads) {
    Unit v[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k)
      v[k] = s[u + k * kThreads];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k)
      d[u + k * kThreads] = v[k];
  }
  for (; u < units; u += kThreads)
    d[u] = s[u];
}

// Copies `rows` rows of `bytes` (src/dst rows `src_pitch`/`dst_pitch` apart; rows * bytes at most
// kCopyTileBytes, so unit indices fit 32 bits) with the block's threads in units of `Unit` (every
// address, pitch and the row length are multiples of its size), four loads in flight per thread
// before their stores.
template <typename Unit>
__device__ void copyRowsIn(const uint8_t* __restrict__ src, uint64_t src_pitch,
                           uint8_t* __restrict__ dst, uint64_t dst_pitch, uint32_t bytes,
                           uint32_t rows) {
  constexpr int kUnroll = 4;
  const uint32_t per_row = bytes / static_cast<uint32_t>(sizeof(Unit));
  const uint32_t units = per_row * rows;
  auto at = [&](uint32_t u, uint64_t pitch) {
    const uint32_t row = u / per_row;
    return row * pitch + (u - row * per_row) * sizeof(Unit);
  };
  uint32_t u = threadIdx.x;
  for (; u + (kUnroll - 1) * kThreads < units; u += kUnroll * kThreads) {
    Unit v[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k)
      v[k] = *reinterpret_cast<const Unit*>(src + at(u + k * kThreads, src_pitch));
#pragma unroll
    for (int k = 0; k < kUnroll; ++k)
      *reinterpret_cast<Unit*>(dst + at(u + k * kThreads, dst_pitch)) = v[k];
  }
  for (; u < units; u += kThreads)
    *reinterpret_cast<Unit*>(dst + at(u, dst_pitch)) =
        *reinterpret_cast<const Unit*>(src + at(u, src_pitch));
}

// copyRunIn / copyRowsIn with the widest unit (16, 8, 4, 2 or 1 bytes) that the addresses, pitches
// and row length allow; rows packed back to back on both sides are one run.
template <typename Unit>
__device__ void copyTileIn(const uint8_t* __restrict__ src, uint64_t src_pitch,
                           uint8_t* __restrict__ dst, uint64_t dst_pitch, uint32_t bytes,
                           uint32_t rows) {
  if (rows == 1 || (src_pitch == bytes && dst_pitch == bytes)) {
    copyRunIn<Unit>(src, dst, bytes * rows);
  } else {
    copyRowsIn<Unit>(src, src_pitch, dst, dst_pitch, bytes, rows);
  }
}

__device__ void copyTile(const uint8_t* __restrict__ src, uint64_t src_pitch,
                         uint8_t* __restrict__ dst, uint64_t dst_pitch, uint32_t bytes,
                         uint32_t rows) {
  const uint64_t bits = reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst) |
                        bytes | (rows > 1 ? (src_pitch | dst_pitch) : 0);
  if ((bits & 15u) == 0) return copyTileIn<uint4>(src, src_pitch, dst, dst_pitch, bytes, rows);
  if ((bits & 7u) == 0) return copyTileIn<uint2>(src, src_pitch, dst, dst_pitch, bytes, rows);
  if ((bits & 3u) == 0) return copyTileIn<uint32_t>(src, src_pitch, dst, dst_pitch, bytes, rows);
  if ((bits & 1u) == 0) return copyTileIn<uint16_t>(src, src_pitch, dst, dst_pitch, bytes, rows);
  copyTileIn<uint8_t>(src, src_pitch, dst, dst_pitch, bytes, rows);
}

__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm)
    batchedCopyKernel(const CopyTask* __restrict__ tasks, int64_t num_tasks, uint64_t total_tiles) {
  int64_t owner = 0;
  for (uint64_t tile = blockIdx.x; tile < total_tiles; tile += gridDim.x) {
    owner = kernels::nextTileOwner(tasks, num_tasks, tile, owner);
    const CopyTask& t = tasks[owner];
    const TileShape shape = tileShape(t);
    const uint64_t local = tile - t.first_tile;
    const uint64_t per_plane = shape.row_tiles * shape.segments;
    const uint64_t plane = local / per_plane;
    const uint64_t row_tile = (local % per_plane) / shape.segments;
    const uint64_t segment = local % shape.segments;
    const uint64_t first_row = row_tile * shape.rows_per_tile;
    const uint64_t rows = min(shape.rows_per_tile, t.rows - first_row);
    const uint64_t begin = segment * kCopyTileBytes;
    const uint64_t bytes = min(kCopyTileBytes, t.row_bytes - begin);
    copyTile(t.src + plane * t.src_plane_pitch + first_row * t.src_pitch + begin, t.src_pitch,
             t.dst + plane * t.dst_plane_pitch + first_row * t.dst_pitch + begin, t.dst_pitch,
             static_cast<uint32_t>(bytes), static_cast<uint32_t>(rows));
  }
}

}  // namespace

uint64_t tilesOf(const CopyTask& task) {
  if (task.row_bytes == 0 || task.rows == 0 || task.planes == 0) return 0;
  const TileShape s = tileShape(task);
  return task.planes * s.row_tiles * s.segments;
}

uint64_t planBatchedCopy(std::vector<CopyTask>& tasks) {
  return kernels::numberTiles(tasks, [](const CopyTask& t) { return tilesOf(t); });
}

Status launchBatchedCopy(const CopyTask* device_tasks, int64_t num_tasks, uint64_t total_tiles,
                         cudaStream_t stream) {
  if (num_tasks == 0 || total_tiles == 0) return Status::ok();
  if (device_tasks == nullptr || num_tasks < 0) {
    return invalidArgument("batched copy: null task array or negative task count");
  }
  WSYNC_ASSIGN_OR_RETURN(
      const unsigned blocks,
      kernels::oneWaveBlocks(batchedCopyKernel, kThreads, total_tiles, "batched copy"));
  batchedCopyKernel<<<blocks, kThreads, 0, stream>>>(device_tasks, num_tasks, total_tiles);
  return cudaCheck(cudaGetLastError(),
                   "batched copy: kernel launch of " + std::to_string(num_tasks) + " regions");
}

}  // namespace wsync
