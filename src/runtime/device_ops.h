// The runtime's CUDA operations (device memory, streams, copies, conversion kernels), behind plain
// C++ types so that the rest of wsync builds without CUDA. In a build without CUDA every function
// returns WSYNC_ERR_UNSUPPORTED (and deviceUsable() is false).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"
#include "layout/dtype.h"
#include "plan/plan.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*
using CudaStreamHandle = CUstream_st*;

namespace wsync {

// Whether CUDA device `device` can be used (false on any error, or without CUDA).
bool deviceUsable(int device);
// "hostname/GPU-uuid": equal for two ranks exactly when they share a GPU.
Result<std::string> deviceIdentity(int device);
// INVALID_ARGUMENT (naming `what`) unless `p` is device memory of `device`.
Status checkDevicePointer(const void* p, int device, const std::string& what);

// Owned device memory (cudaMalloc / cudaFree).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static Result<DeviceBuffer> allocate(size_t bytes, int device);
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();  // NOLINT(performance-trivially-destructible): cudaFree with CUDA
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  int device_ = 0;
};

// An owned non-blocking stream.
class DeviceStream {
 public:
  DeviceStream() = default;
  static Result<DeviceStream> create(int device);
  DeviceStream(DeviceStream&& o) noexcept;
  DeviceStream& operator=(DeviceStream&& o) noexcept;
  DeviceStream(const DeviceStream&) = delete;
  DeviceStream& operator=(const DeviceStream&) = delete;
  ~DeviceStream();  // NOLINT(performance-trivially-destructible): cudaStreamDestroy
  CudaStreamHandle get() const { return stream_; }

 private:
  CudaStreamHandle stream_ = nullptr;
  int device_ = 0;
};

// Owned page-locked host memory (cudaHostAlloc / cudaFreeHost). Copies between it and the
// device run at PCIe speed; from pageable memory they go through a driver bounce buffer.
class PinnedHostBuffer {
 public:
  PinnedHostBuffer() = default;
  static Result<PinnedHostBuffer> allocate(size_t bytes);
  PinnedHostBuffer(PinnedHostBuffer&& o) noexcept;
  PinnedHostBuffer& operator=(PinnedHostBuffer&& o) noexcept;
  PinnedHostBuffer(const PinnedHostBuffer&) = delete;
  PinnedHostBuffer& operator=(const PinnedHostBuffer&) = delete;
  ~PinnedHostBuffer();  // NOLINT(performance-trivially-destructible): cudaFreeHost with CUDA
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Page-locks an existing host range for CUDA copies (cudaHostRegister, portable) until it goes.
// The range must outlive the registration.
class HostRegistration {
 public:
  HostRegistration() = default;
  static Result<HostRegistration> pin(void* data, size_t bytes);
  HostRegistration(HostRegistration&& o) noexcept;
  HostRegistration& operator=(HostRegistration&& o) noexcept;
  HostRegistration(const HostRegistration&) = delete;
  HostRegistration& operator=(const HostRegistration&) = delete;
  ~HostRegistration();  // NOLINT(performance-trivially-destructible): cudaHostUnregister
  bool pinned() const { return data_ != nullptr; }

 private:
  void* data_ = nullptr;
};

Status setDevice(int device);
// Work enqueued on `waiter` after this call starts after the work enqueued on `producer` so far
// (an event; no host wait). A null stream is the legacy default stream.
Status streamWaitFor(CudaStreamHandle waiter, CudaStreamHandle producer);
// Waits until `stream` is idle, polling, up to `timeout` (TIMEOUT then).
Status streamSync(CudaStreamHandle stream, std::chrono::milliseconds timeout);
// cudaMemcpyAsync with cudaMemcpyDefault (device or host on either side).
Status copyAsync(void* dst, const void* src, size_t bytes, CudaStreamHandle stream);
// Converts and packs `region` (plan.h; src/dst already offset) on the device; `scale` applies to
// float8 conversions (kernels/convert_kernels.h), 1 elsewhere.
Status convertRegionAsync(const void* src, DType from, void* dst, DType to, const Region& region,
                          float scale, CudaStreamHandle stream);
bool deviceCanConvertTypes(DType from, DType to);

}  // namespace wsync
