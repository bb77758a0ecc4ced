// Internal to src/kernels: what the batched kernels (batched copy, checksums) share about tiles:
// numbering a task list's tiles, finding the task of a tile, and a grid of one full wave of
// blocks. nvcc, C++17.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "common/cuda_check.h"
#include "common/status.h"

namespace wsync::kernels {

// Sets each task's first_tile to the running sum of tilesOf() of the tasks before it; returns the
// total number of tiles.
template <typename Task, typename TilesOf>
uint64_t numberTiles(std::vector<Task>& tasks, TilesOf tilesOf) {
  uint64_t total = 0;
  for (Task& t : tasks) {
    t.first_tile = total;
    total += tilesOf(t);
  }
  return total;
}

// The last task with first_tile <= tile (tasks sorted by first_tile; binary search).
template <typename Task>
__device__ int64_t tileOwner(const Task* tasks, int64_t num_tasks, uint64_t tile) {
  int64_t lo = 0;
  int64_t hi = num_tasks - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (tasks[mid].first_tile <= tile) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// Blocks of `threads` threads for `kernel` over `tiles` tiles: one full wave of the current
// device (blocks resident on every multiprocessor at once), at most one per tile.
template <typename Kernel>
Result<unsigned> oneWaveBlocks(Kernel kernel, int threads, uint64_t tiles,
                               const std::string& what) {
  int device = 0;
  int sms = 0;
  int resident = 0;
  WSYNC_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device), what + ": cudaGetDevice");
  WSYNC_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
                             what + ": cudaDeviceGetAttribute");
  WSYNC_CUDA_RETURN_IF_ERROR(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, threads, 0),
      what + ": cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  return static_cast<unsigned>(std::min<uint64_t>(
      tiles,
      static_cast<uint64_t>(std::max(sms, 1)) * static_cast<uint64_t>(std::max(resident, 1))));
}

}  // namespace wsync::kernels
