// The batched region copy of batched_copy.h. nvcc, C++17.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "common/cuda_check.h"
#include "kernels/batched_copy.h"

namespace wsync {
namespace {

constexpr int kThreads = 256;
constexpr int kBlocksPerSm = 8;

// The task whose tiles include `tile`: the last task with first_tile <= tile (binary search).
__device__ int64_t taskOf(const CopyTask* tasks, int64_t num_tasks, uint64_t tile) {
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

// Copies `bytes` from `src` to `dst` with the block's threads: 16-byte units when both addresses
// and the length allow, bytes otherwise.
__device__ void copySpan(const uint8_t* __restrict__ src, uint8_t* __restrict__ dst,
                         uint64_t bytes) {
  const bool vector =
      ((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst) | bytes) & 15u) == 0;
  if (vector) {
    // kUnroll loads in flight per thread before their stores: enough bytes in flight per SM to
    // cover the memory latency.
    constexpr int kUnroll = 4;
    const uint64_t units = bytes / 16;
    const auto* s = reinterpret_cast<const uint4*>(src);
    auto* d = reinterpret_cast<uint4*>(dst);
    const uint64_t step = blockDim.x;
    uint64_t i = threadIdx.x;
    for (; i + (kUnroll - 1) * step < units; i += kUnroll * step) {
      uint4 v[kUnroll];
#pragma unroll
      for (int k = 0; k < kUnroll; ++k)
        v[k] = s[i + k * step];
#pragma unroll
      for (int k = 0; k < kUnroll; ++k)
        d[i + k * step] = v[k];
    }
    for (; i < units; i += step)
      d[i] = s[i];
    return;
  }
  for (uint64_t i = threadIdx.x; i < bytes; i += blockDim.x)
    dst[i] = src[i];
}

__global__ void __launch_bounds__(kThreads)
    batchedCopyKernel(const CopyTask* __restrict__ tasks, int64_t num_tasks, uint64_t total_tiles) {
  for (uint64_t tile = blockIdx.x; tile < total_tiles; tile += gridDim.x) {
    const CopyTask& t = tasks[taskOf(tasks, num_tasks, tile)];
    const uint64_t segments = (t.row_bytes + kCopyTileBytes - 1) / kCopyTileBytes;
    const uint64_t local = tile - t.first_tile;
    const uint64_t row_index = local / segments;  // over planes * rows
    const uint64_t segment = local % segments;
    const uint64_t plane = row_index / t.rows;
    const uint64_t row = row_index % t.rows;
    const uint64_t begin = segment * kCopyTileBytes;
    const uint64_t bytes = min(kCopyTileBytes, t.row_bytes - begin);
    copySpan(t.src + plane * t.src_plane_pitch + row * t.src_pitch + begin,
             t.dst + plane * t.dst_plane_pitch + row * t.dst_pitch + begin, bytes);
  }
}

}  // namespace

uint64_t tilesOf(const CopyTask& task) {
  if (task.row_bytes == 0) return 0;
  return task.rows * task.planes * ((task.row_bytes + kCopyTileBytes - 1) / kCopyTileBytes);
}

uint64_t planBatchedCopy(std::vector<CopyTask>& tasks) {
  uint64_t total = 0;
  for (CopyTask& t : tasks) {
    t.first_tile = total;
    total += tilesOf(t);
  }
  return total;
}

Status launchBatchedCopy(const CopyTask* device_tasks, int64_t num_tasks, uint64_t total_tiles,
                         cudaStream_t stream) {
  if (num_tasks == 0 || total_tiles == 0) return Status::ok();
  if (device_tasks == nullptr || num_tasks < 0) {
    return invalidArgument("batched copy: null task array or negative task count");
  }
  int device = 0;
  int sms = 0;
  WSYNC_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device), "batched copy: cudaGetDevice");
  WSYNC_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
                             "batched copy: cudaDeviceGetAttribute");
  const uint64_t blocks =
      std::min<uint64_t>(total_tiles, static_cast<uint64_t>(std::max(sms, 1)) * kBlocksPerSm);
  batchedCopyKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(device_tasks, num_tasks,
                                                                            total_tiles);
  return cudaCheck(cudaGetLastError(),
                   "batched copy: kernel launch of " + std::to_string(num_tasks) + " regions");
}

}  // namespace wsync
