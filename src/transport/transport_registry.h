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
};
inline constexpr int kNumTransportKinds = 2;

const char* transportName(TransportKind kind);
bool validTransportKind(uint8_t value);

// The backend that holds `memory` for a target (rollout slots).
TransportKind transportFor(MemoryKind memory);

// Creates a backend; UNSUPPORTED when this build or machine does not have it (CUDA IPC without
// CUDA or without a device). `cuda_device` is used by device backends.
Result<std::unique_ptr<WriteTransport>> createTransport(TransportKind kind, int cuda_device);

}  // namespace wsync
