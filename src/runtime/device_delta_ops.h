// Delta patches on the device (kernels/delta_kernels.h) behind plain C++ types, like
// device_ops.h: every pointer but the patch is device memory of the calling thread's current
// device. UNSUPPORTED in a build without CUDA.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "delta/delta_patch.h"
#include "runtime/device_ops.h"

namespace wsync {

// Device scratch bytes the encode (apply) of `shape` needs.
Result<size_t> deviceEncodeScratchBytes(const delta::PatchShape& shape);
Result<size_t> deviceApplyScratchBytes(const delta::PatchShape& shape);

// As delta::encodePatchAndAdvance: the patch of `next` against `kept` into the device buffer
// `patch` (capacity at least delta::maxPatchBytes(shape)), and `kept` becomes `next`. Work
// enqueued on `stream` before this call comes first; returns the patch's length once it is
// complete (the stream is synchronized).
Result<size_t> encodePatchAndAdvanceDevice(const delta::PatchShape& shape, void* kept,
                                           const void* next, uint8_t* patch, size_t capacity,
                                           void* scratch, size_t scratch_bytes,
                                           CudaStreamHandle stream);

// As delta::applyPatch, enqueued on `stream`: `patch` (device memory) MUST have passed
// delta::validatePatch on the host. `out` may equal `base`; nothing else may overlap.
Status applyPatchDeviceAsync(const delta::PatchShape& shape, const uint8_t* patch,
                             size_t patch_bytes, const void* base, void* out, void* scratch,
                             size_t scratch_bytes, CudaStreamHandle stream);

}  // namespace wsync
