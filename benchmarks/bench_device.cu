// wsync-sync-bench's device helpers on the CUDA runtime API (see bench_device.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "bench_device.h"

namespace wsync_bench {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 16384;
constexpr uint32_t kModulus = 257;  // demo_policy.h expectedValue: (131 t + 7 flat + 13 v) % 257

bool check(cudaError_t e, const std::string& what, std::string* error) {
  if (e == cudaSuccess) return true;
  (void)cudaGetLastError();
  if (error) *error = what + ": " + cudaGetErrorString(e);
  return false;
}

cudaStream_t raw(const DeviceStream& s) {
  return reinterpret_cast<cudaStream_t>(s.handle());
}

// The key of element 0 of row r: expectedValue's (131 t + 7 flat + 13 v) % 257 for the row's
// first flat index (exact: no term overflows 64 bits for real tensors).
__device__ uint32_t rowKey(const PatternPiece& p, int64_t r, uint64_t version) {
  const uint64_t flat = static_cast<uint64_t>(p.flat_base + r * p.global_row_stride);
  return static_cast<uint32_t>(
      (static_cast<uint64_t>(p.tensor) * 131u + flat * 7u + version * 13u) % kModulus);
}

// expectedValue for key k: (k - 128) / 64, exact in every dtype here.
template <typename T>
__device__ T valueOf(uint32_t key);
template <>
__device__ float valueOf<float>(uint32_t key) {
  return static_cast<float>(static_cast<int32_t>(key) - 128) / 64.0f;
}
template <>
__device__ __nv_bfloat16 valueOf<__nv_bfloat16>(uint32_t key) {
  return __float2bfloat16_rn(valueOf<float>(key));
}
template <>
__device__ __half valueOf<__half>(uint32_t key) {
  return __float2half_rn(valueOf<float>(key));
}

template <typename T>
__device__ bool sameBits(T a, T b) {
  if constexpr (sizeof(T) == 4) {
    uint32_t x, y;
    memcpy(&x, &a, 4);
    memcpy(&y, &b, 4);
    return x == y;
  } else {
    uint16_t x, y;
    memcpy(&x, &a, 2);
    memcpy(&y, &b, 2);
    return x == y;
  }
}

// Blocks stride over the rows, threads over the columns; each thread steps its key by
// 7 * blockDim.x (mod 257) from column to column.
template <typename T>
__global__ void fillKernel(PatternPiece p, uint64_t version) {
  T* base = static_cast<T*>(p.data) + p.local_offset;
  const uint32_t step = (7u * blockDim.x) % kModulus;
  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    uint32_t key = (rowKey(p, r, version) + 7u * threadIdx.x) % kModulus;
    T* row = base + r * p.local_row_stride;
    for (int64_t c = threadIdx.x; c < p.cols; c += blockDim.x) {
      row[c] = valueOf<T>(key);
      key += step;
      if (key >= kModulus) key -= kModulus;
    }
  }
}

// counters[0]: wrong elements; counters[1]: the lowest (piece << 40 | element) that was wrong.
template <typename T>
__global__ void countKernel(PatternPiece p, uint64_t piece_index, uint64_t version,
                            unsigned long long* counters) {
  __shared__ unsigned long long block_bad;
  if (threadIdx.x == 0) block_bad = 0;
  __syncthreads();
  const T* base = static_cast<const T*>(p.data) + p.local_offset;
  const uint32_t step = (7u * blockDim.x) % kModulus;
  unsigned long long bad = 0;
  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    uint32_t key = (rowKey(p, r, version) + 7u * threadIdx.x) % kModulus;
    const T* row = base + r * p.local_row_stride;
    for (int64_t c = threadIdx.x; c < p.cols; c += blockDim.x) {
      if (!sameBits(row[c], valueOf<T>(key))) {
        if (bad == 0) {
          atomicMin(&counters[1], static_cast<unsigned long long>(
                                      (piece_index << 40) | static_cast<uint64_t>(r * p.cols + c)));
        }
        ++bad;
      }
      key += step;
      if (key >= kModulus) key -= kModulus;
    }
  }
  if (bad) atomicAdd(&block_bad, bad);
  __syncthreads();
  if (threadIdx.x == 0 && block_bad) atomicAdd(&counters[0], block_bad);
}

unsigned blocksFor(const PatternPiece& p) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(p.rows, kMaxBlocks)));
}

bool validPiece(const PatternPiece& p, size_t i, std::string* error) {
  if (p.data && p.rows >= 0 && p.cols >= 0 && p.local_offset >= 0 &&
      (p.rows <= 1 || p.local_row_stride >= p.cols) && p.cols < (int64_t{1} << 31) &&
      p.rows * p.cols < (int64_t{1} << 40)) {
    return true;
  }
  if (error) *error = "pattern piece " + std::to_string(i) + " is malformed";
  return false;
}

double toDouble(wsync_dtype_t dtype, const uint8_t* bytes) {
  if (dtype == WSYNC_DTYPE_FLOAT32) {
    float f;
    std::memcpy(&f, bytes, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, bytes, 2);
  if (dtype == WSYNC_DTYPE_BFLOAT16) {
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  __half_raw raw_half;
  raw_half.x = h;
  return static_cast<double>(__half2float(__half(raw_half)));
}

size_t elementBytes(wsync_dtype_t dtype) {
  return dtype == WSYNC_DTYPE_FLOAT32 ? 4 : 2;
}

bool supported(wsync_dtype_t dtype, std::string* error) {
  if (dtype == WSYNC_DTYPE_FLOAT32 || dtype == WSYNC_DTYPE_BFLOAT16 ||
      dtype == WSYNC_DTYPE_FLOAT16) {
    return true;
  }
  if (error) *error = "device pattern kernels handle float32, bfloat16 and float16 only";
  return false;
}

}  // namespace

int deviceCount(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    if (why)
      *why =
          std::string("no usable CUDA device (cudaGetDeviceCount: ") + cudaGetErrorString(e) + ")";
    return 0;
  }
  if (n == 0 && why) *why = "no CUDA device";
  return n;
}

bool setDevice(int device, std::string* error) {
  return check(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")", error);
}

bool deviceMemoryInfo(size_t* free_bytes, size_t* total_bytes, std::string* error) {
  return check(cudaMemGetInfo(free_bytes, total_bytes), "cudaMemGetInfo", error);
}

bool copyToHost(void* dst, const void* src, size_t bytes, std::string* error) {
  return check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to the host",
               error);
}

bool copyToDevice(void* dst, const void* src, size_t bytes, std::string* error) {
  return check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to the device",
               error);
}

bool copyOnDevice(void* dst, const void* src, size_t bytes, std::string* error) {
  // A device-to-device cudaMemcpy may return before the copy is done: wait for it.
  return check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy device to device",
               error) &&
         check(cudaDeviceSynchronize(), "the device-to-device copy", error);
}

std::unique_ptr<DeviceMemory> DeviceMemory::allocate(size_t bytes, const std::string& what,
                                                     std::string* error) {
  void* p = nullptr;
  if (!check(cudaMalloc(&p, std::max<size_t>(bytes, 1)),
             "cudaMalloc of " + std::to_string(bytes) + " bytes for " + what, error)) {
    return nullptr;
  }
  return std::unique_ptr<DeviceMemory>(new DeviceMemory(static_cast<uint8_t*>(p), bytes));
}

DeviceMemory::~DeviceMemory() {
  cudaFree(data_);
}

std::unique_ptr<DeviceStream> DeviceStream::create(std::string* error) {
  cudaStream_t s = nullptr;
  if (!check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate", error)) {
    return nullptr;
  }
  return std::unique_ptr<DeviceStream>(new DeviceStream(reinterpret_cast<wsync_cuda_stream_t>(s)));
}

DeviceStream::~DeviceStream() {
  cudaStreamDestroy(reinterpret_cast<cudaStream_t>(handle_));
}

bool DeviceStream::synchronize(std::string* error) const {
  return check(cudaStreamSynchronize(raw(*this)), "cudaStreamSynchronize", error);
}

bool DeviceStream::memsetAsync(void* data, int value, size_t bytes, std::string* error) const {
  return check(cudaMemsetAsync(data, value, bytes, raw(*this)), "cudaMemsetAsync", error);
}

bool timeDeviceCopy(void* dst, const void* src, size_t chunk, uint64_t total, int repeats,
                    double* best_seconds, std::string* error) {
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  bool ok =
      check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate", error) &&
      check(cudaEventCreate(&start), "cudaEventCreate", error) &&
      check(cudaEventCreate(&stop), "cudaEventCreate", error);
  double best = std::numeric_limits<double>::infinity();
  for (int round = 0; ok && round <= repeats; ++round) {  // round 0 is not timed
    ok = check(cudaEventRecord(start, stream), "cudaEventRecord", error);
    for (uint64_t done = 0; ok && done < total;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk, total - done));
      ok = check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream),
                 "cudaMemcpyAsync device to device", error);
      done += n;
    }
    ok = ok && check(cudaEventRecord(stop, stream), "cudaEventRecord", error) &&
         check(cudaEventSynchronize(stop), "the timed device copy", error);
    float ms = 0;
    ok = ok && check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime", error);
    if (ok && round > 0) best = std::min(best, static_cast<double>(ms) / 1e3);
  }
  if (stop) cudaEventDestroy(stop);
  if (start) cudaEventDestroy(start);
  if (stream) cudaStreamDestroy(stream);
  if (ok) *best_seconds = best;
  return ok;
}

bool timePinnedCopies(size_t bytes, int repeats, double* h2d_seconds, double* d2h_seconds,
                      std::string* error) {
  constexpr size_t kChunk = size_t{64} << 20;
  void* host = nullptr;
  void* device = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  bool ok =
      check(cudaHostAlloc(&host, bytes, cudaHostAllocDefault), "cudaHostAlloc", error) &&
      check(cudaMalloc(&device, bytes), "cudaMalloc", error) &&
      check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate", error) &&
      check(cudaEventCreate(&start), "cudaEventCreate", error) &&
      check(cudaEventCreate(&stop), "cudaEventCreate", error);
  if (ok) std::memset(host, 1, bytes);
  double best[2] = {std::numeric_limits<double>::infinity(),
                    std::numeric_limits<double>::infinity()};
  for (int direction = 0; ok && direction < 2; ++direction) {
    const cudaMemcpyKind kind = direction == 0 ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
    for (int round = 0; ok && round <= repeats; ++round) {  // round 0 is not timed
      ok = check(cudaEventRecord(start, stream), "cudaEventRecord", error);
      for (size_t done = 0; ok && done < bytes; done += kChunk) {
        const size_t n = std::min(kChunk, bytes - done);
        char* h = static_cast<char*>(host) + done;
        char* d = static_cast<char*>(device) + done;
        ok = check(direction == 0 ? cudaMemcpyAsync(d, h, n, kind, stream)
                                  : cudaMemcpyAsync(h, d, n, kind, stream),
                   "cudaMemcpyAsync pinned", error);
      }
      ok = ok && check(cudaEventRecord(stop, stream), "cudaEventRecord", error) &&
           check(cudaEventSynchronize(stop), "the timed pinned copy", error);
      float ms = 0;
      ok = ok && check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime", error);
      if (ok && round > 0) best[direction] = std::min(best[direction], ms / 1e3);
    }
  }
  if (stop) cudaEventDestroy(stop);
  if (start) cudaEventDestroy(start);
  if (stream) cudaStreamDestroy(stream);
  if (device) cudaFree(device);
  if (host) cudaFreeHost(host);
  if (ok) {
    *h2d_seconds = best[0];
    *d2h_seconds = best[1];
  }
  return ok;
}

bool fillExpected(const std::vector<PatternPiece>& pieces, wsync_dtype_t dtype, uint64_t version,
                  const DeviceStream& stream, std::string* error) {
  if (!supported(dtype, error)) return false;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const PatternPiece& p = pieces[i];
    if (!validPiece(p, i, error)) return false;
    if (p.rows == 0 || p.cols == 0) continue;
    if (dtype == WSYNC_DTYPE_FLOAT32) {
      fillKernel<float><<<blocksFor(p), kThreads, 0, raw(stream)>>>(p, version);
    } else if (dtype == WSYNC_DTYPE_BFLOAT16) {
      fillKernel<__nv_bfloat16><<<blocksFor(p), kThreads, 0, raw(stream)>>>(p, version);
    } else {
      fillKernel<__half><<<blocksFor(p), kThreads, 0, raw(stream)>>>(p, version);
    }
    if (!check(cudaGetLastError(), "fill kernel launch", error)) return false;
  }
  return true;
}

bool countMismatches(const std::vector<PatternPiece>& pieces, wsync_dtype_t dtype, uint64_t version,
                     const DeviceStream& stream, int64_t* mismatches, Mismatch* first,
                     std::string* error) {
  if (!supported(dtype, error)) return false;
  auto counters =
      DeviceMemory::allocate(2 * sizeof(unsigned long long), "mismatch counters", error);
  if (!counters) return false;
  const unsigned long long init[2] = {0, std::numeric_limits<unsigned long long>::max()};
  auto* dev = reinterpret_cast<unsigned long long*>(counters->data());
  if (!check(cudaMemcpyAsync(dev, init, sizeof(init), cudaMemcpyHostToDevice, raw(stream)),
             "cudaMemcpyAsync of the counters", error)) {
    return false;
  }
  for (size_t i = 0; i < pieces.size(); ++i) {
    const PatternPiece& p = pieces[i];
    if (!validPiece(p, i, error)) return false;
    if (p.rows == 0 || p.cols == 0) continue;
    const uint64_t index = static_cast<uint64_t>(i);
    if (dtype == WSYNC_DTYPE_FLOAT32) {
      countKernel<float><<<blocksFor(p), kThreads, 0, raw(stream)>>>(p, index, version, dev);
    } else if (dtype == WSYNC_DTYPE_BFLOAT16) {
      countKernel<__nv_bfloat16>
          <<<blocksFor(p), kThreads, 0, raw(stream)>>>(p, index, version, dev);
    } else {
      countKernel<__half><<<blocksFor(p), kThreads, 0, raw(stream)>>>(p, index, version, dev);
    }
    if (!check(cudaGetLastError(), "count kernel launch", error)) return false;
  }
  unsigned long long result[2] = {0, 0};
  if (!check(cudaMemcpyAsync(result, dev, sizeof(result), cudaMemcpyDeviceToHost, raw(stream)),
             "cudaMemcpyAsync of the counters", error) ||
      !stream.synchronize(error)) {
    return false;
  }
  *mismatches = static_cast<int64_t>(result[0]);
  if (first && result[0] > 0) {
    first->piece = static_cast<size_t>(result[1] >> 40);
    first->element = static_cast<int64_t>(result[1] & ((uint64_t{1} << 40) - 1));
    const PatternPiece& p = pieces[first->piece];
    const int64_t r = first->element / std::max<int64_t>(p.cols, 1);
    const int64_t c = first->element % std::max<int64_t>(p.cols, 1);
    const size_t esz = elementBytes(dtype);
    uint8_t bytes[4] = {};
    const auto* at = static_cast<const uint8_t*>(p.data) +
                     static_cast<size_t>(p.local_offset + r * p.local_row_stride + c) * esz;
    if (!copyToHost(bytes, at, esz, error)) return false;
    first->got = toDouble(dtype, bytes);
  }
  return true;
}

}  // namespace wsync_bench
