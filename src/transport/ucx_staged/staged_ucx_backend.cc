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
      /*crosses_nodes=*/true,
      [] { return cudaDevicesPresent(); },
      [](MemoryKind memory) { return memory == MemoryKind::kDevice; },
      [](MemoryKind memory) { return memory == MemoryKind::kDevice; },
      // Both staged choices: through pinned host memory, or with UCX's own device puts.
      [](DeviceTransport choice) {
        return choice == DeviceTransport::kStaged || choice == DeviceTransport::kUcxCuda;
      },
      /*reaches=*/nullptr,
      [](const TransportSetup& setup) {
        StagedUcxTransportOptions options;
        options.device = setup.cuda_device;
        options.use_ucx_cuda = setup.device_transport == DeviceTransport::kUcxCuda;
        options.writer_rank = setup.early_landing ? setup.writer_rank : -1;
        return createStagedUcxTransport(options);
      },
  };
  return backend;
}

}  // namespace wsync
