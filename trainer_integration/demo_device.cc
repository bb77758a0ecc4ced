#include "trainer_integration/demo_device.h"

#ifdef WSYNC_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <cstdio>
#endif

namespace wsync_demo {

#ifdef WSYNC_HAVE_CUDA
int deviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
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
bool copyToHost(void* dst, const void* src, size_t bytes) {
  const cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) {
    std::fprintf(stderr, "cudaMemcpy to the host: %s\n", cudaGetErrorString(e));
    return false;
  }
  return true;
}
void* demoStream() {
  thread_local cudaStream_t stream = [] {
    cudaStream_t s = nullptr;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    return s;
  }();
  return stream;
}
bool syncStream(void* stream) {
  return cudaStreamSynchronize(static_cast<cudaStream_t>(stream)) == cudaSuccess;
}
#else
int deviceCount() {
  return 0;
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
#endif

}  // namespace wsync_demo
