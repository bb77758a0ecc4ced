#include "transport/transport_registry.h"

#include <cstdlib>
#include <string>
#include "transport/ucx/ucx_transport.h"

#ifdef WSYNC_HAVE_CUDA
#include "transport/cuda_ipc/cuda_ipc_transport.h"
#include "transport/ucx_staged/staged_ucx_transport.h"
#endif

namespace wsync {

const char* transportName(TransportKind kind) {
  switch (kind) {
    case TransportKind::kUcx:
      return "ucx";
    case TransportKind::kCudaIpc:
      return "cuda_ipc";
    case TransportKind::kUcxStaged:
      return "ucx_staged";
  }
  return "unknown";
}

bool validTransportKind(uint8_t value) {
  return value < kNumTransportKinds;
}

Result<TransportKind> targetTransportFor(MemoryKind memory) {
  if (memory != MemoryKind::kDevice) return TransportKind::kUcx;
  const char* chosen = std::getenv("WSYNC_DEVICE_TRANSPORT");
  const std::string value = chosen != nullptr ? chosen : "";
  if (value.empty() || value == "cuda_ipc") return TransportKind::kCudaIpc;
  if (value == "staged" || value == "ucx_cuda") return TransportKind::kUcxStaged;
  return invalidArgument("WSYNC_DEVICE_TRANSPORT='" + value +
                         "': expected 'cuda_ipc' (within a node), 'staged' (any node, through "
                         "pinned host memory) or 'ucx_cuda' (any node, UCX device puts when the "
                         "UCX loaded handles CUDA, else staged)");
}

TransportKind writerTransportFor(TransportKind target, MemoryKind source) {
  if (target == TransportKind::kCudaIpc) return TransportKind::kCudaIpc;
  return source == MemoryKind::kDevice ? TransportKind::kUcxStaged : TransportKind::kUcx;
}

Result<std::unique_ptr<WriteTransport>> createTransport(TransportKind kind, int cuda_device,
                                                        int32_t writer_rank) {
  switch (kind) {
    case TransportKind::kUcx:
      return createUcxTransport();
    case TransportKind::kCudaIpc: {
#ifdef WSYNC_HAVE_CUDA
      CudaIpcTransportOptions options;
      options.device = cuda_device;
      const char* exports = std::getenv("WSYNC_CUDA_IPC_EXPORT");
      options.vmm_exports = exports == nullptr || std::string(exports) != "legacy";
      return createCudaIpcTransport(options);
#else
      (void)cuda_device;
      return Status(WSYNC_ERR_UNSUPPORTED,
                    "this build of wsync has no CUDA (device memory needs it)");
#endif
    }
    case TransportKind::kUcxStaged: {
#ifdef WSYNC_HAVE_CUDA
      StagedUcxTransportOptions options;
      options.device = cuda_device;
      const char* chosen = std::getenv("WSYNC_DEVICE_TRANSPORT");
      options.use_ucx_cuda = chosen != nullptr && std::string(chosen) == "ucx_cuda";
      // WSYNC_DEBUG_NO_EARLY_LANDING=1: no progress reports (A/B runs of early landing).
      const char* no_early = std::getenv("WSYNC_DEBUG_NO_EARLY_LANDING");
      const bool early = no_early == nullptr || std::string(no_early) != "1";
      options.writer_rank = early ? writer_rank : -1;
      return createStagedUcxTransport(options);
#else
      (void)cuda_device;
      (void)writer_rank;
      return Status(WSYNC_ERR_UNSUPPORTED,
                    "this build of wsync has no CUDA (staged device transfers need it)");
#endif
    }
  }
  return internalError("unknown transport kind");
}

}  // namespace wsync
