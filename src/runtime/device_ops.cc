#include "runtime/device_ops.h"

#include <thread>
#include <utility>

#ifdef WSYNC_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <unistd.h>

#include "kernels/convert_kernels.h"
#endif

namespace wsync {

#ifdef WSYNC_HAVE_CUDA
namespace {
Status cudaStatus(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return Status::ok();
  return systemError(what + ": " + cudaGetErrorString(e));
}
}  // namespace

bool deviceUsable(int device) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return device >= 0 && device < count;
}

Result<std::string> deviceIdentity(int device) {
  cudaDeviceProp prop{};
  WSYNC_RETURN_IF_ERROR(
      cudaStatus(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties"));
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::string id = std::string(host) + "/GPU-";
  static const char* kHex = "0123456789abcdef";
  for (unsigned char c : prop.uuid.bytes) {
    id += kHex[c >> 4];
    id += kHex[c & 15];
  }
  return id;
}

Status checkDevicePointer(const void* p, int device, const std::string& what) {
  cudaPointerAttributes attr{};
  const cudaError_t e = cudaPointerGetAttributes(&attr, p);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return invalidArgument(what + ": not a CUDA pointer (" + cudaGetErrorString(e) + ")");
  }
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) {
    return invalidArgument(what + ": registered as device memory but the pointer is host memory");
  }
  if (attr.device != device) {
    return invalidArgument(what + ": memory of CUDA device " + std::to_string(attr.device) +
                           ", but the context uses device " + std::to_string(device));
  }
  return Status::ok();
}

Status setDevice(int device) {
  return cudaStatus(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
}

Result<DeviceBuffer> DeviceBuffer::allocate(size_t bytes, int device) {
  WSYNC_RETURN_IF_ERROR(setDevice(device));
  DeviceBuffer b;
  void* p = nullptr;
  WSYNC_RETURN_IF_ERROR(cudaStatus(cudaMalloc(&p, bytes == 0 ? 1 : bytes),
                                   "cudaMalloc of " + std::to_string(bytes) + " bytes"));
  b.data_ = static_cast<uint8_t*>(p);
  b.size_ = bytes;
  b.device_ = device;
  return b;
}
DeviceBuffer::~DeviceBuffer() {
  if (data_) {
    cudaSetDevice(device_);
    cudaFree(data_);
  }
}

Result<PinnedHostBuffer> PinnedHostBuffer::allocate(size_t bytes) {
  PinnedHostBuffer b;
  void* p = nullptr;
  WSYNC_RETURN_IF_ERROR(cudaStatus(cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocPortable),
                                   "cudaHostAlloc of " + std::to_string(bytes) + " bytes"));
  b.data_ = static_cast<uint8_t*>(p);
  b.size_ = bytes;
  return b;
}
PinnedHostBuffer::~PinnedHostBuffer() {
  if (data_) cudaFreeHost(data_);
}

Result<HostRegistration> HostRegistration::pin(void* data, size_t bytes) {
  HostRegistration r;
  if (bytes == 0) return r;
  WSYNC_RETURN_IF_ERROR(cudaStatus(cudaHostRegister(data, bytes, cudaHostRegisterPortable),
                                   "cudaHostRegister of " + std::to_string(bytes) + " bytes"));
  r.data_ = data;
  return r;
}
HostRegistration::~HostRegistration() {
  if (data_) cudaHostUnregister(data_);
}

Result<DeviceStream> DeviceStream::create(int device) {
  WSYNC_RETURN_IF_ERROR(setDevice(device));
  DeviceStream s;
  WSYNC_RETURN_IF_ERROR(
      cudaStatus(cudaStreamCreateWithFlags(&s.stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
  s.device_ = device;
  return s;
}
DeviceStream::~DeviceStream() {
  if (stream_) {
    cudaSetDevice(device_);
    cudaStreamDestroy(stream_);
  }
}

Status streamWaitFor(CudaStreamHandle waiter, CudaStreamHandle producer) {
  cudaEvent_t ev = nullptr;
  WSYNC_RETURN_IF_ERROR(
      cudaStatus(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate"));
  Status s = cudaStatus(cudaEventRecord(ev, producer), "cudaEventRecord");
  if (s.isOk()) s = cudaStatus(cudaStreamWaitEvent(waiter, ev, 0), "cudaStreamWaitEvent");
  cudaEventDestroy(ev);  // safe: destruction is deferred until the event completes
  return s;
}

Status streamSync(CudaStreamHandle stream, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const cudaError_t e = cudaStreamQuery(stream);
    if (e == cudaSuccess) return Status::ok();
    if (e != cudaErrorNotReady) return cudaStatus(e, "device work failed");
    if (std::chrono::steady_clock::now() >= deadline) {
      return timeoutError("device work did not finish within " + std::to_string(timeout.count()) +
                          " ms");
    }
    std::this_thread::yield();
  }
}

Status copyAsync(void* dst, const void* src, size_t bytes, CudaStreamHandle stream) {
  if (bytes == 0) return Status::ok();
  return cudaStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream), "cudaMemcpyAsync");
}

Status convertRegionAsync(const void* src, DType from, void* dst, DType to, const Region& region,
                          float scale, CudaStreamHandle stream) {
  return launchCopyRegion(src, from, dst, to, region, scale, stream);
}

bool deviceCanConvertTypes(DType from, DType to) {
  return deviceCanConvert(from, to);
}

#else  // no CUDA in this build

namespace {
Status noCuda() {
  return Status(WSYNC_ERR_UNSUPPORTED, "this build of wsync has no CUDA");
}
}  // namespace
bool deviceUsable(int) {
  return false;
}
Result<std::string> deviceIdentity(int) {
  return noCuda();
}
Status checkDevicePointer(const void*, int, const std::string&) {
  return noCuda();
}
Status setDevice(int) {
  return noCuda();
}
Result<DeviceBuffer> DeviceBuffer::allocate(size_t, int) {
  return noCuda();
}
DeviceBuffer::~DeviceBuffer() = default;
Result<DeviceStream> DeviceStream::create(int) {
  return noCuda();
}
Result<PinnedHostBuffer> PinnedHostBuffer::allocate(size_t) {
  return noCuda();
}
PinnedHostBuffer::~PinnedHostBuffer() = default;
Result<HostRegistration> HostRegistration::pin(void*, size_t) {
  return noCuda();
}
HostRegistration::~HostRegistration() = default;
DeviceStream::~DeviceStream() = default;
Status streamWaitFor(CudaStreamHandle, CudaStreamHandle) {
  return noCuda();
}
Status streamSync(CudaStreamHandle, std::chrono::milliseconds) {
  return noCuda();
}
Status copyAsync(void*, const void*, size_t, CudaStreamHandle) {
  return noCuda();
}
Status convertRegionAsync(const void*, DType, void*, DType, const Region&, float,
                          CudaStreamHandle) {
  return noCuda();
}
bool deviceCanConvertTypes(DType, DType) {
  return false;
}

#endif

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      device_(o.device_) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    DeviceBuffer old(std::move(*this));
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    device_ = o.device_;
  }
  return *this;
}
PinnedHostBuffer::PinnedHostBuffer(PinnedHostBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
PinnedHostBuffer& PinnedHostBuffer::operator=(PinnedHostBuffer&& o) noexcept {
  if (this != &o) {
    PinnedHostBuffer old(std::move(*this));
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}
HostRegistration::HostRegistration(HostRegistration&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)) {}
HostRegistration& HostRegistration::operator=(HostRegistration&& o) noexcept {
  if (this != &o) {
    HostRegistration old(std::move(*this));
    data_ = std::exchange(o.data_, nullptr);
  }
  return *this;
}
DeviceStream::DeviceStream(DeviceStream&& o) noexcept
    : stream_(std::exchange(o.stream_, nullptr)), device_(o.device_) {}
DeviceStream& DeviceStream::operator=(DeviceStream&& o) noexcept {
  if (this != &o) {
    DeviceStream old(std::move(*this));
    stream_ = std::exchange(o.stream_, nullptr);
    device_ = o.device_;
  }
  return *this;
}

}  // namespace wsync
