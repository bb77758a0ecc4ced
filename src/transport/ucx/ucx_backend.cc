// Registration of the UCX backend (see transport/backend.h).
#include "transport/backend.h"
#include "transport/ucx/ucx_transport.h"

namespace wsync {

const WriteBackend& ucxWriteBackend() {
  static const WriteBackend backend{
      "ucx",
      "ucx",
      /*priority=*/10,
      /*crosses_nodes=*/true,
      [] { return Status::ok(); },
      [](MemoryKind memory) { return memory == MemoryKind::kHost; },
      [](MemoryKind memory) { return memory == MemoryKind::kHost; },
      [](DeviceTransport) { return false; },  // hosts no device memory
      /*reaches=*/nullptr,                    // UCX picks shared memory, RDMA or TCP for any peer
      [](const TransportSetup&) { return createUcxTransport(); },
  };
  return backend;
}

}  // namespace wsync
