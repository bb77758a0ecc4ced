// Internal to src/kernels: what the batched kernels (batched copy, checksums) share about tiles:
// numbering a task list's tiles, finding the task of a tile, and a grid of one full wave of
// blocks. nvcc, C++17.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
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

// tileOwner() for a block that walks its tiles in increasing order: `previous` is the owner of its
// previous tile (0 before the first). One or two task entries are read when the tile lies in the
// same task or the next one, else it falls back to the binary search.
template <typename Task>
__device__ int64_t nextTileOwner(const Task* tasks, int64_t num_tasks, uint64_t tile,
                                 int64_t previous) {
  if (previous + 1 >= num_tasks || tasks[previous + 1].first_tile > tile) return previous;
  if (previous + 2 >= num_tasks || tasks[previous + 2].first_tile > tile) return previous + 1;
  return tileOwner(tasks, num_tasks, tile);
}

// Blocks of `threads` threads for `kernel` over `tiles` tiles: one full wave of the current
// device (blocks resident on every multiprocessor at once), at most one per tile. The wave of
// each (kernel, threads, device) is computed once and remembered (the occupancy query costs tens
// of microseconds, which every version's launch would pay). Thread-safe.
template <typename Kernel>
Result<unsigned> oneWaveBlocks(Kernel kernel, int threads, uint64_t tiles,
                               const std::string& what) {
  int device = 0;
  WSYNC_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device), what + ": cudaGetDevice");
  static std::mutex mu;
  static std::map<std::tuple<const void*, int, int>, uint64_t> waves;
  const auto key = std::make_tuple(reinterpret_cast<const void*>(kernel), threads, device);
  uint64_t wave = 0;
  {
    std::lock_guard lock(mu);
    auto it = waves.find(key);
    if (it != waves.end()) wave = it->second;
  }
  if (wave == 0) {
    int sms = 0;
    int resident = 0;
    WSYNC_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
                               what + ": cudaDeviceGetAttribute");
    WSYNC_CUDA_RETURN_IF_ERROR(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, threads, 0),
        what + ": cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    wave = static_cast<uint64_t>(std::max(sms, 1)) * static_cast<uint64_t>(std::max(resident, 1));
    std::lock_guard lock(mu);
    waves[key] = wave;
  }
  return static_cast<unsigned>(std::min<uint64_t>(tiles, wave));
}

}  // namespace wsync::kernels
