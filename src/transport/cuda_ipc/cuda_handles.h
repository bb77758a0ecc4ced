// Owned CUDA streams and events for the CUDA IPC backend, and the bounded wait on an event every
// part of it uses. Callers make the right device current first. Thread-safe functions.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <memory>
#include <string>
#include <type_traits>

#include "common/status.h"

namespace wsync {

struct CudaStreamDeleter {
  void operator()(cudaStream_t stream) const;
};
struct CudaEventDeleter {
  void operator()(cudaEvent_t event) const;
};
using CudaStreamPtr = std::unique_ptr<std::remove_pointer_t<cudaStream_t>, CudaStreamDeleter>;
using CudaEventPtr = std::unique_ptr<std::remove_pointer_t<cudaEvent_t>, CudaEventDeleter>;

// A non-blocking stream (it waits for no other stream, the legacy default stream included).
Result<CudaStreamPtr> makeCudaStream(const std::string& what);
// An event; `timing`: it can be an end point of cudaEventElapsedTime (else cheaper, no timing).
Result<CudaEventPtr> makeCudaEvent(bool timing, const std::string& what);

// Polls `event` until it completed (success), `timeout` passed (TIMEOUT "not complete after N
// ms", which callers reword; nothing else returns TIMEOUT) or CUDA reports an error (the
// cudaCheck status). Yields for the first 200 ms (a transfer of tens of GB ends within them), then
// sleeps 20 us between polls.
Status waitCudaEvent(cudaEvent_t event, std::chrono::milliseconds timeout);

}  // namespace wsync
