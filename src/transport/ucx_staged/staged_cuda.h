// Private to the staged UCX backend: the CUDA stream, event and pointer helpers that its target
// side (staged_exposed_memory.cc) and its writer side (staged_chunk_ring.cc,
// staged_ucx_transport.cc) share.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "common/status.h"

namespace wsync::staged_internal {

using Clock = std::chrono::steady_clock;

constexpr size_t kChunkAlign = 256;  // bytes; every staged piece starts aligned in its chunk

inline size_t alignUp(size_t n) {
  return (n + kChunkAlign - 1) / kChunkAlign * kChunkAlign;
}

struct StreamDeleter {
  void operator()(cudaStream_t s) const { (void)cudaStreamDestroy(s); }
};
using StreamPtr = std::unique_ptr<CUstream_st, StreamDeleter>;
struct EventDeleter {
  void operator()(cudaEvent_t e) const { (void)cudaEventDestroy(e); }
};
using EventPtr = std::unique_ptr<CUevent_st, EventDeleter>;

Result<StreamPtr> makeStream(const std::string& what);
Result<EventPtr> makeEvent(const std::string& what);

// Polls `event` until it completed or `timeout` passed (the host thread yields in between).
Status waitEvent(cudaEvent_t event, std::chrono::milliseconds timeout, const std::string& what);

// Whether `p` is memory the device copies must read (device or managed memory).
bool isDeviceMemory(const void* p);

}  // namespace wsync::staged_internal
