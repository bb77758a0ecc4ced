// CUDA helpers of the staged UCX backend (staged_cuda.h).
#include "transport/ucx_staged/staged_cuda.h"

#include <thread>

#include "common/cuda_check.h"

namespace wsync::staged_internal {

Result<StreamPtr> makeStream(const std::string& what) {
  cudaStream_t s = nullptr;
  WSYNC_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                             what + ": cudaStreamCreateWithFlags");
  return StreamPtr(s);
}

Result<EventPtr> makeEvent(const std::string& what) {
  cudaEvent_t e = nullptr;
  WSYNC_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
                             what + ": cudaEventCreateWithFlags");
  return EventPtr(e);
}

Status waitEvent(cudaEvent_t event, std::chrono::milliseconds timeout, const std::string& what) {
  const Clock::time_point deadline = Clock::now() + timeout;
  while (true) {
    const cudaError_t error = cudaEventQuery(event);
    if (error == cudaSuccess) return Status::ok();
    if (error != cudaErrorNotReady) return cudaCheck(error, what + ": cudaEventQuery");
    if (Clock::now() >= deadline) {
      return timeoutError(what + ": device copies not complete after " +
                          std::to_string(timeout.count()) + " ms");
    }
    std::this_thread::yield();
  }
}

bool isDeviceMemory(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

}  // namespace wsync::staged_internal
