// Registration of the staged UCX backend (see transport/backend.h).
#include "common/cuda_check.h"
#include "transport/backend.h"
#include "transport/ucx_staged/staged_ucx_transport.h"

namespace wsync {

const WriteBackend& stagedUcxWriteBackend() {
  static const WriteBackend backend{
      "ucx_staged",
      "ucx",  // its targets are UCX memory: host writers reach them with plain UCX
      /*priority=*/5,
      [] { return cudaDevicesPresent(); },
      [](MemoryKind memory) { return memory == MemoryKind::kDevice; },
      [](MemoryKind memory) { return memory == MemoryKind::kDevice; },
      /*reaches=*/nullptr,
      [](const TransportSetup& setup) {
        StagedUcxTransportOptions options;
        options.device = setup.cuda_device;
        options.use_ucx_cuda = setup.ucx_device_puts;
        options.writer_rank = setup.early_landing ? setup.writer_rank : -1;
        return createStagedUcxTransport(options);
      },
  };
  return backend;
}

}  // namespace wsync
