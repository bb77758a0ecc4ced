// One kernel launch that copies many 2-D/3-D byte regions (the same-dtype write ops of a version
// into peers' IPC-mapped device memory), instead of one cudaMemcpy2DAsync per op: a version of a
// large model is thousands of ops, and enqueuing them one by one costs more host time than the
// copies take on the device.
//
// Contract: every task's src and dst are device addresses valid on `stream`'s device (dst may be
// an IPC-mapped peer pointer); regions of different tasks do not overlap on the destination, and no
// destination overlaps a source. The tasks live in device memory (device_tasks), sorted by
// first_tile, with first_tile the running sum of tilesOf() of the tasks before (planBatchedCopy
// fills it). Launches return at once; errors during execution surface at the stream's next
// synchronization. Thread-safe.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace wsync {

// A region of `planes` x `rows` rows of `row_bytes` bytes.
struct CopyTask {
  const uint8_t* src = nullptr;
  uint8_t* dst = nullptr;
  uint64_t row_bytes = 0;
  uint64_t rows = 1;
  uint64_t planes = 1;
  uint64_t src_pitch = 0;  // bytes between rows
  uint64_t dst_pitch = 0;
  uint64_t src_plane_pitch = 0;  // bytes between planes
  uint64_t dst_plane_pitch = 0;
  uint64_t first_tile = 0;  // set by planBatchedCopy
};

// Bytes of one tile: what one thread block copies in one go: floor(kCopyTileBytes / row_bytes)
// consecutive rows of a plane when rows are shorter, else a kCopyTileBytes piece of one row.
inline constexpr uint64_t kCopyTileBytes = 16 * 1024;

// The tiles of `task` (0 for an empty task).
uint64_t tilesOf(const CopyTask& task);

// Sets first_tile of every task (in order) and returns the total number of tiles.
uint64_t planBatchedCopy(std::vector<CopyTask>& tasks);

// Copies every task of `device_tasks` (num_tasks, total_tiles as planBatchedCopy returned) on
// `stream`. INVALID_ARGUMENT for a null task array with num_tasks > 0.
Status launchBatchedCopy(const CopyTask* device_tasks, int64_t num_tasks, uint64_t total_tiles,
                         cudaStream_t stream);

}  // namespace wsync
