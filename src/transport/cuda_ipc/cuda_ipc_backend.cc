// Registration of the CUDA IPC backend (see transport/backend.h).
#include "common/cuda_check.h"
#include "transport/backend.h"
#include "transport/cuda_ipc/cuda_ipc_transport.h"

namespace wsync {
namespace {

// Both ends on one node: the same host identity in both addresses (a pure function of the two,
// so both sides agree).
Status sameNode(const std::vector<uint8_t>& local, const std::vector<uint8_t>& remote) {
  WSYNC_ASSIGN_OR_RETURN(const CudaIpcProcessInfo a, decodeCudaIpcAddress(local));
  WSYNC_ASSIGN_OR_RETURN(const CudaIpcProcessInfo b, decodeCudaIpcAddress(remote));
  if (a.host == b.host) return Status::ok();
  return Status(WSYNC_ERR_UNSUPPORTED, "CUDA IPC reaches processes of one node only: " + a.host +
                                           " and " + b.host + " differ");
}

}  // namespace

const WriteBackend& cudaIpcWriteBackend() {
  static const WriteBackend backend{
      "cuda_ipc",
      "cuda_ipc",
      /*priority=*/20,  // the default for device memory: copy engines at the local rate
      /*crosses_nodes=*/false,
      [] { return cudaDevicesPresent(); },
      [](MemoryKind memory) { return memory == MemoryKind::kDevice; },
      [](MemoryKind) { return true; },  // device sources, and host sources (pinned on register)
      [](DeviceTransport choice) { return choice == DeviceTransport::kCudaIpc; },
      &sameNode,
      [](const TransportSetup& setup) {
        CudaIpcTransportOptions options;
        options.device = setup.cuda_device;
        options.vmm_exports = setup.cuda_ipc_export == CudaIpcExport::kVmm;
        options.batch_device_copies = setup.batch_device_copies;
        options.time_batches = setup.time_device_copies;
        return createCudaIpcTransport(options);
      },
  };
  return backend;
}

}  // namespace wsync
