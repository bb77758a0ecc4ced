// Internal to src/kernels: the batched kernels' map from a tile to the task (a copy task, a
// checksum span) that owns it. nvcc, C++17.
#pragma once

#include <cstdint>

namespace wsync::kernels {

// The last task with first_tile <= tile (tasks sorted by first_tile, the running sum of their
// tiles; binary search). Task needs a `first_tile` member.
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

}  // namespace wsync::kernels
