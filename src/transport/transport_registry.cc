#include "transport/transport_registry.h"

#include "transport/ucx/ucx_transport.h"
#ifdef WSYNC_HAVE_CUDA
#include "transport/cuda_ipc/cuda_ipc_transport.h"
#endif

namespace wsync {

const char* transportName(TransportKind kind) {
  switch (kind) {
    case TransportKind::kUcx:
      return "ucx";
    case TransportKind::kCudaIpc:
      return "cuda_ipc";
  }
  return "unknown";
}

bool validTransportKind(uint8_t value) {
  return value < kNumTransportKinds;
}

TransportKind transportFor(MemoryKind memory) {
  return memory == MemoryKind::kDevice ? TransportKind::kCudaIpc : TransportKind::kUcx;
}

Result<std::unique_ptr<WriteTransport>> createTransport(TransportKind kind, int cuda_device) {
  switch (kind) {
    case TransportKind::kUcx:
      return createUcxTransport();
    case TransportKind::kCudaIpc: {
#ifdef WSYNC_HAVE_CUDA
      CudaIpcTransportOptions options;
      options.device = cuda_device;
      return createCudaIpcTransport(options);
#else
      (void)cuda_device;
      return Status(WSYNC_ERR_UNSUPPORTED,
                    "this build of wsync has no CUDA (device memory needs it)");
#endif
    }
  }
  return internalError("unknown transport kind");
}

}  // namespace wsync
