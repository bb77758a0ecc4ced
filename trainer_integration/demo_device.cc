#include "trainer_integration/demo_device.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#ifdef WSYNC_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <cstdio>
#endif

namespace wsync_demo {
namespace {

constexpr int kTimedCopies = 3;  // copies timed for a limit; the fastest counts

}  // namespace

double hostCopyGbps(size_t bytes) {
  bytes = std::max<size_t>(bytes, 1);
  std::vector<char> a(bytes, 1), b(bytes, 2);
  std::memcpy(b.data(), a.data(), bytes);  // touch the pages
  double best_s = 0;
  for (int i = 0; i < kTimedCopies; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i == 0 || s < best_s) best_s = s;
  }
  return best_s > 0 ? static_cast<double>(bytes) / best_s / 1e9 : 0;
}

#ifdef WSYNC_HAVE_CUDA
bool builtWithCuda() {
  return true;
}
int deviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}
std::string deviceName(int device) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return "GPU " + std::to_string(device);
  return std::string(prop.name) + ", GPU " + std::to_string(device);
}
bool selectDevice(int device) {
  return cudaSetDevice(device) == cudaSuccess;
}
void* deviceAlloc(size_t bytes) {
  void* p = nullptr;
  return cudaMalloc(&p, bytes == 0 ? 1 : bytes) == cudaSuccess ? p : nullptr;
}
void deviceFree(void* p) {
  cudaFree(p);
}
// Synchronous on the device too: a cudaMemcpy from pageable memory may return before its DMA has
// landed, and wsync's own streams do not wait for the legacy default stream.
bool copyToDevice(void* dst, const void* src, size_t bytes) {
  return cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice) == cudaSuccess &&
         cudaDeviceSynchronize() == cudaSuccess;
}
void* demoStream() {
  thread_local cudaStream_t stream = [] {
    cudaStream_t s = nullptr;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    return s;
  }();
  return stream;
}
bool copyToHost(void* dst, const void* src, size_t bytes) {
  const auto stream = static_cast<cudaStream_t>(demoStream());
  cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
  if (e != cudaSuccess) {
    std::fprintf(stderr, "cudaMemcpy to the host: %s\n", cudaGetErrorString(e));
    return false;
  }
  return true;
}
bool syncStream(void* stream) {
  return cudaStreamSynchronize(static_cast<cudaStream_t>(stream)) == cudaSuccess;
}
double deviceCopyGbps(size_t bytes) {
  bytes = std::max<size_t>(bytes, 1);
  void* a = deviceAlloc(bytes);
  void* b = deviceAlloc(bytes);
  const auto stream = static_cast<cudaStream_t>(demoStream());
  cudaEvent_t start = nullptr, stop = nullptr;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  float best_ms = 0;
  bool ok = a && b && cudaMemsetAsync(a, 1, bytes, stream) == cudaSuccess &&
            cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream) == cudaSuccess;
  for (int i = 0; ok && i < kTimedCopies; ++i) {
    float ms = 0;
    ok = cudaEventRecord(start, stream) == cudaSuccess &&
         cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream) == cudaSuccess &&
         cudaEventRecord(stop, stream) == cudaSuccess &&
         cudaEventSynchronize(stop) == cudaSuccess &&
         cudaEventElapsedTime(&ms, start, stop) == cudaSuccess;
    if (ok && (i == 0 || ms < best_ms)) best_ms = ms;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  deviceFree(a);
  deviceFree(b);
  return ok && best_ms > 0 ? static_cast<double>(bytes) / (best_ms * 1e-3) / 1e9 : 0;
}
#else
bool builtWithCuda() {
  return false;
}
int deviceCount() {
  return 0;
}
std::string deviceName(int device) {
  return "GPU " + std::to_string(device);
}
bool selectDevice(int) {
  return false;
}
void* deviceAlloc(size_t) {
  return nullptr;
}
void deviceFree(void*) {}
bool copyToDevice(void*, const void*, size_t) {
  return false;
}
bool copyToHost(void*, const void*, size_t) {
  return false;
}
void* demoStream() {
  return nullptr;
}
bool syncStream(void*) {
  return false;
}
double deviceCopyGbps(size_t) {
  return 0;
}
#endif

}  // namespace wsync_demo
