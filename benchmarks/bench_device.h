// Device-memory helpers of wsync-sync-bench (CUDA runtime API): allocations, a stream, timed
// device-to-device copies, and the kernels that fill trainer buffers with the demo policy's
// checkable values (src/models/demo_policy.h, expectedValue) and count the elements of
// rollout buffers that differ from them, on the device.
//
// bench_device.cu implements it in a CUDA build; bench_device_none.cc in a build without CUDA,
// where deviceCount() is 0 and everything else fails with a message saying so. This header is
// plain C++17 (nvcc compiles the .cu as C++17) and names no CUDA type.
// Every function makes no device current by itself: call setDevice() first on each thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "wsync/wsync.h"

namespace wsync_bench {

// Usable CUDA devices; 0 without CUDA in the build or without a usable GPU (`why` says which).
int deviceCount(std::string* why);
bool setDevice(int device, std::string* error);
// Free and total bytes of the current device (all processes' allocations counted).
bool deviceMemoryInfo(size_t* free_bytes, size_t* total_bytes, std::string* error);

// cudaMemcpy device to host (synchronous).
bool copyToHost(void* dst, const void* src, size_t bytes, std::string* error);
// cudaMemcpy host to device (synchronous; `src` may be pageable or mapped file memory).
bool copyToDevice(void* dst, const void* src, size_t bytes, std::string* error);
// cudaMemcpy device to device (synchronous: returns once the bytes are copied).
bool copyOnDevice(void* dst, const void* src, size_t bytes, std::string* error);

// One cudaMalloc allocation, freed on destruction.
class DeviceMemory {
 public:
  // nullptr (and `error` set, naming `what` and the size) when the allocation fails.
  static std::unique_ptr<DeviceMemory> allocate(size_t bytes, const std::string& what,
                                                std::string* error);
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  DeviceMemory(uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t* data_;
  size_t size_;
};

// A non-blocking CUDA stream (the benchmark's "training stream"), destroyed on destruction.
class DeviceStream {
 public:
  static std::unique_ptr<DeviceStream> create(std::string* error);
  ~DeviceStream();
  DeviceStream(const DeviceStream&) = delete;
  DeviceStream& operator=(const DeviceStream&) = delete;
  // The cudaStream_t, as wsync's C API takes it.
  wsync_cuda_stream_t handle() const { return handle_; }
  bool synchronize(std::string* error) const;
  // Sets `bytes` bytes at `data` to `value`, asynchronously on this stream.
  bool memsetAsync(void* data, int value, size_t bytes, std::string* error) const;

 private:
  explicit DeviceStream(wsync_cuda_stream_t handle) : handle_(handle) {}
  wsync_cuda_stream_t handle_;
};

// Seconds of the fastest of `repeats` rounds (after one untimed round) of copying `total` bytes
// device to device from `src` to `dst` as consecutive cudaMemcpyAsync calls of at most `chunk`
// bytes each (both buffers hold at least `chunk` bytes), timed with CUDA events on a private
// stream.
bool timeDeviceCopy(void* dst, const void* src, size_t chunk, uint64_t total, int repeats,
                    double* best_seconds, std::string* error);

// Best-of-`repeats` seconds (after one untimed round) of copying `bytes` from pinned host memory
// to the device (`h2d_seconds`) and back (`d2h_seconds`), each direction alone, in chunks of
// 64 MiB, timed with CUDA events: the PCIe bound of transfers staged through host memory.
bool timePinnedCopies(size_t bytes, int repeats, double* h2d_seconds, double* d2h_seconds,
                      std::string* error);

// A box of a rank-1 or rank-2 tensor inside a device buffer: element (r, c) of the box, r < rows,
// c < cols, sits at buffer element local_offset + r * local_row_stride + c and is element
// flat_base + r * global_row_stride + c (row-major) of tensor `tensor`. Rank 1: rows = 1.
struct PatternPiece {
  void* data = nullptr;  // the buffer's device address (element 0)
  int32_t tensor = 0;    // tensor index, as expectedValue takes it
  int64_t local_offset = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t local_row_stride = 0;
  int64_t flat_base = 0;
  int64_t global_row_stride = 0;
};

// Writes expectedValue(tensor, flat, version) in `dtype` (float32, bfloat16 or float16; exact in
// each) into every element of every piece, on `stream`; returns once the kernels are enqueued.
bool fillExpected(const std::vector<PatternPiece>& pieces, wsync_dtype_t dtype, uint64_t version,
                  const DeviceStream& stream, std::string* error);

// The first wrong element found (for the error message); valid when mismatches > 0. What it
// should hold is expectedValue of its tensor, flat index and version (demo_policy.h).
struct Mismatch {
  size_t piece = 0;     // index into the pieces given
  int64_t element = 0;  // r * cols + c within the piece's box
  double got = 0;
};

// Counts the elements of every piece whose bits differ from expectedValue(version) in `dtype`,
// with kernels on `stream`; waits for them. `first` (may be null) describes the wrong element of
// the lowest piece index and box element.
bool countMismatches(const std::vector<PatternPiece>& pieces, wsync_dtype_t dtype, uint64_t version,
                     const DeviceStream& stream, int64_t* mismatches, Mismatch* first,
                     std::string* error);

}  // namespace wsync_bench
