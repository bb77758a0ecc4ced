#include "runtime/device_delta_ops.h"

#ifdef WSYNC_HAVE_CUDA
#include "kernels/delta_kernels.h"
#endif

namespace wsync {

#ifdef WSYNC_HAVE_CUDA
Result<size_t> deviceEncodeScratchBytes(const delta::PatchShape& shape) {
  size_t bytes = 0;
  WSYNC_RETURN_IF_ERROR(delta::deviceEncodeScratchBytes(shape, &bytes));
  return bytes;
}
Result<size_t> deviceApplyScratchBytes(const delta::PatchShape& shape) {
  size_t bytes = 0;
  WSYNC_RETURN_IF_ERROR(delta::deviceApplyScratchBytes(shape, &bytes));
  return bytes;
}
Result<size_t> encodePatchAndAdvanceDevice(const delta::PatchShape& shape, void* kept,
                                           const void* next, uint8_t* patch, size_t capacity,
                                           void* scratch, size_t scratch_bytes,
                                           CudaStreamHandle stream) {
  size_t patch_bytes = 0;
  WSYNC_RETURN_IF_ERROR(delta::encodePatchAndAdvanceOnDevice(
      shape, kept, next, patch, capacity, scratch, scratch_bytes, stream, &patch_bytes));
  return patch_bytes;
}
Status applyPatchDeviceAsync(const delta::PatchShape& shape, const uint8_t* patch,
                             size_t patch_bytes, const void* base, void* out, void* scratch,
                             size_t scratch_bytes, CudaStreamHandle stream) {
  return delta::applyPatchOnDevice(shape, patch, patch_bytes, base, out, scratch, scratch_bytes,
                                   stream);
}
#else
namespace {
Status noCuda() {
  return {WSYNC_ERR_UNSUPPORTED, "delta patches on the device: a build without CUDA"};
}
}  // namespace
Result<size_t> deviceEncodeScratchBytes(const delta::PatchShape&) {
  return noCuda();
}
Result<size_t> deviceApplyScratchBytes(const delta::PatchShape&) {
  return noCuda();
}
Result<size_t> encodePatchAndAdvanceDevice(const delta::PatchShape&, void*, const void*, uint8_t*,
                                           size_t, void*, size_t, CudaStreamHandle) {
  return noCuda();
}
Status applyPatchDeviceAsync(const delta::PatchShape&, const uint8_t*, size_t, const void*, void*,
                             void*, size_t, CudaStreamHandle) {
  return noCuda();
}
#endif

}  // namespace wsync
