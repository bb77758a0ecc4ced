// The write-transport backends this build has, chosen by kind (an explicit table, no string
// matching). A rollout exposes its slots through the backend that fits its memory; trainers create
// the same backend to reach it.
#pragma once

#include <cstdint>
#include <memory>

#include "common/status.h"
#include "layout/dtype.h"
#include "transport/write_transport.h"

namespace wsync {

enum class TransportKind : uint8_t {
  kUcx = 0,      // host memory, any node (shared memory within a node, the network across)
  kCudaIpc = 1,  // device memory within a node (CUDA IPC, copy engines)
  // Device memory reached with UCX from any node: registered with UCX when UCX handles CUDA,
  // otherwise behind a pinned host landing area with writers staging device data through pinned
  // host chunks (transport/ucx_staged/).
  kUcxStaged = 2,
};
inline constexpr int kNumTransportKinds = 3;

const char* transportName(TransportKind kind);
bool validTransportKind(uint8_t value);

// The backend that holds a target's (a rollout's slots) `memory`. Host memory: UCX. Device memory,
// by the environment variable WSYNC_DEVICE_TRANSPORT: unset or "cuda_ipc": CUDA IPC (one node);
// "staged": kUcxStaged through pinned host memory; "ucx_cuda": kUcxStaged with UCX's own device
// puts when the UCX loaded handles CUDA, staged otherwise (createTransport reads the same
// variable, so writers of device memory stage unless it says "ucx_cuda").
// INVALID_ARGUMENT naming the value when it is anything else.
Result<TransportKind> targetTransportFor(MemoryKind memory);

// The backend a writer whose sources are `source` memory uses to reach a target of kind `target`:
// CUDA IPC targets through CUDA IPC; UCX-described targets (host slots, staged landing areas)
// through UCX from host memory and through staged UCX from device memory.
TransportKind writerTransportFor(TransportKind target, MemoryKind source);

// Creates a backend; UNSUPPORTED when this build or machine does not have it (CUDA IPC without
// CUDA or without a device). `cuda_device` is used by device backends; `writer_rank` (a trainer's
// rank, -1 for targets) is the rank a staged writer reports under in its targets' progress logs.
Result<std::unique_ptr<WriteTransport>> createTransport(TransportKind kind, int cuda_device,
                                                        int32_t writer_rank = -1);

}  // namespace wsync
