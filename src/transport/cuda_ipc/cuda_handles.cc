#include "transport/cuda_ipc/cuda_handles.h"

#include <thread>

#include "common/cuda_check.h"

namespace wsync {

void CudaStreamDeleter::operator()(cudaStream_t stream) const {
  (void)cudaCheck(cudaStreamDestroy(stream), "cudaStreamDestroy");
}

void CudaEventDeleter::operator()(cudaEvent_t event) const {
  (void)cudaCheck(cudaEventDestroy(event), "cudaEventDestroy");
}

Result<CudaStreamPtr> makeCudaStream(const std::string& what) {
  cudaStream_t stream = nullptr;
  WSYNC_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                             what + ": cudaStreamCreateWithFlags");
  return CudaStreamPtr(stream);
}

Result<CudaEventPtr> makeCudaEvent(bool timing, const std::string& what) {
  cudaEvent_t event = nullptr;
  WSYNC_CUDA_RETURN_IF_ERROR(
      cudaEventCreateWithFlags(&event, timing ? cudaEventDefault : cudaEventDisableTiming),
      what + ": cudaEventCreateWithFlags");
  return CudaEventPtr(event);
}

Status waitCudaEvent(cudaEvent_t event, std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + timeout;
  // Yields (no sleep) for kSpin: a sleep overshoots by the kernel's timer slack (~50-80 us), which
  // the end of every transfer would pay; past kSpin the wait is long anyway and sleeps.
  constexpr std::chrono::milliseconds kSpin{200};
  const Clock::time_point spin_until = Clock::now() + kSpin;
  for (;;) {
    const cudaError_t error = cudaEventQuery(event);
    if (error == cudaSuccess) return Status::ok();
    if (error != cudaErrorNotReady) return cudaCheck(error, "cudaEventQuery");
    const Clock::time_point now = Clock::now();
    if (now >= deadline) {
      return timeoutError("not complete after " + std::to_string(timeout.count()) + " ms");
    }
    if (now < spin_until) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

}  // namespace wsync
