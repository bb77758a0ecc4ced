// CUDA runtime results as wsync::Status, and the device checks every CUDA entry point makes.
// Runtime API only (never the driver library). Only included where WSYNC_HAVE_CUDA is set.
// Thread-safety: all functions are safe to call from any thread (the current device is per thread).
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "common/status.h"

namespace wsync {

// Success stays success; an error becomes "<context>: <cudaGetErrorName> (<cudaGetErrorString>)"
// with WSYNC_ERR_UNSUPPORTED for "no usable device/driver/feature" errors and WSYNC_ERR_SYSTEM for
// the rest. Also clears the thread's last-error state (cudaGetLastError), so a failed call does not
// resurface in a later, unrelated cudaGetLastError() check (sticky errors stay, as CUDA keeps
// them).
inline Status cudaCheck(cudaError_t error, const std::string& context) {
  if (error == cudaSuccess) return Status::ok();
  (void)cudaGetLastError();
  std::string message =
      context + ": " + cudaGetErrorName(error) + " (" + cudaGetErrorString(error) + ")";
  switch (error) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
    case cudaErrorNotSupported:
    case cudaErrorDevicesUnavailable:
    case cudaErrorSystemNotReady:
    case cudaErrorCompatNotSupportedOnDevice:
      return {WSYNC_ERR_UNSUPPORTED, std::move(message)};
    default:
      return systemError(std::move(message));
  }
}

// Returns the Status of a CUDA call from the enclosing function when it failed. `context` (a
// std::string expression) is only evaluated on failure, so hot paths pay nothing for messages.
#define WSYNC_CUDA_RETURN_IF_ERROR(call, context)              \
  do {                                                         \
    const cudaError_t wsync_cuda_error_ = (call);              \
    if (wsync_cuda_error_ != cudaSuccess) {                    \
      return ::wsync::cudaCheck(wsync_cuda_error_, (context)); \
    }                                                          \
  } while (0)

// True when CUDA device ordinal `device` exists and the runtime works; false on any error (no GPU:
// cudaGetDeviceCount fails with cudaErrorInsufficientDriver or cudaErrorNoDevice). Never throws,
// never leaves an error behind for cudaGetLastError().
inline bool cudaDeviceAvailable(int device) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return device >= 0 && device < count;
}

// Makes `device` the calling thread's current device (cudaSetDevice) unless it already is. Every
// wsync entry point that touches CUDA calls this first: callers' threads may differ. It does not
// restore the previous device (restoring would create a context on a device this process may
// never use).
inline Status cudaUseDevice(int device) {
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current == device) return Status::ok();
  (void)cudaGetLastError();
  return cudaCheck(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
}

// OK when this process sees at least one CUDA device; UNSUPPORTED saying why otherwise (the
// viability check of device backends).
inline Status cudaDevicesPresent() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) return cudaCheck(error, "no usable CUDA device: cudaGetDeviceCount");
  if (count <= 0) return {WSYNC_ERR_UNSUPPORTED, "no CUDA device"};
  return Status::ok();
}

}  // namespace wsync
