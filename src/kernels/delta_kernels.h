// Delta patches (delta/delta_patch.h) built and applied by the GPU: the patch of two versions that
// live in device memory, byte for byte the one the host's encodePatch writes (the same chunk forms,
// chosen by the same rule, delta::smallestKind), and a patch applied to a device-resident base.
//
// Encoding, three launches on `stream` and one small device-to-host copy:
//   1. one thread block per chunk compares base and next 32 elements per warp (a ballot is one
//      32-bit word of the chunk's change bitmap, kept in the scratch), counts the changes, picks
//      the chunk's form and writes its table entry (block 0 also writes the header);
//   2. an exclusive scan (CUB) of the chunks' payload sizes gives each payload's offset;
//   3. one thread block per chunk writes its payload at its offset: the bitmap words as bytes, the
//      changed values (and 16-bit indices) at their rank among the chunk's changes (a block-wide
//      scan of the words' popcounts), or the whole chunk.
// Applying: the payload offsets from the table (a scan again), then one thread block per chunk
// copies base to out (skipped in place) and writes the changed values.
//
// Memory: `base`, `next` and `out` are device memory (or any memory the device reads / writes
// through unified addressing), each aligned to elem_bytes; the patch may be device memory or
// mapped pinned host memory, any alignment. The scratch is device memory (256-byte aligned, as
// cudaMalloc gives it) of the size the *ScratchBytes functions give for the shape (allocate once
// per region, reuse every version); one scratch per concurrent call. Encoding keeps the change
// bitmap in it: about num_elements / 8 bytes, plus 20 bytes per chunk.
// Errors: INVALID_ARGUMENT for a bad shape, null or misaligned pointers, a short patch buffer or
// scratch, checked before anything is launched; CUDA errors as cudaCheck gives them.
// Thread-safety: calls on different scratch areas may run concurrently.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "delta/delta_patch.h"

namespace wsync::delta {

// Device scratch bytes encodePatchOnDevice needs for `shape` (queries CUB, so it needs a device).
Status deviceEncodeScratchBytes(const PatchShape& shape, size_t* bytes);

// Device scratch bytes applyPatchOnDevice needs for `shape` (queries CUB, so it needs a device).
Status deviceApplyScratchBytes(const PatchShape& shape, size_t* bytes);

// Writes the patch of `next` against `base` to `patch` (capacity at least maxPatchBytes(shape)),
// sets *patch_bytes to its length (and *stats, when given) and returns once it is complete
// (the stream is synchronized). The bytes equal what encodePatch(shape, base, next) gives on the
// host. `patch` must not overlap base or next.
Status encodePatchOnDevice(const PatchShape& shape, const void* base, const void* next,
                           uint8_t* patch, size_t patch_capacity, void* scratch,
                           size_t scratch_bytes, cudaStream_t stream, size_t* patch_bytes,
                           PatchStats* stats = nullptr);

// encodePatchOnDevice, and `base` becomes `next` (only the changed elements are written), as the
// host's encodePatchAndAdvance: a sender's kept copy of the version it encodes against. `base` and
// `next` must not overlap.
Status encodePatchAndAdvanceOnDevice(const PatchShape& shape, void* base, const void* next,
                                     uint8_t* patch, size_t patch_capacity, void* scratch,
                                     size_t scratch_bytes, cudaStream_t stream, size_t* patch_bytes,
                                     PatchStats* stats = nullptr);

// out = base with `patch` (`patch_bytes` bytes, device-readable) applied, enqueued on `stream`
// (returns after the launches; errors during execution surface at the stream's next
// synchronization). The patch MUST have passed validatePatch(shape, ...) on the host: the device
// trusts its table and indices (a malformed one writes out of bounds). `out` may equal `base`
// (in place: only the changed elements are written) but must not otherwise overlap it; the patch
// overlaps neither.
Status applyPatchOnDevice(const PatchShape& shape, const uint8_t* patch, size_t patch_bytes,
                          const void* base, void* out, void* scratch, size_t scratch_bytes,
                          cudaStream_t stream);

}  // namespace wsync::delta
