// Delta patches on the device (delta_kernels.h). nvcc, C++17. The chunk forms and their sizes
// come from delta_patch.h's constexpr payloadBytes / smallestKind (--expt-relaxed-constexpr), so
// the device picks exactly the host's forms. Each thread block works on whole chunks (a grid-stride
// loop over them); within a chunk, word w of its change bitmap is the ballot of elements
// 32w .. 32w+31 (lane i: element 32w+i), stored little-endian, which is the patch's own bitmap
// layout.
#include <cuda_runtime.h>

#include <algorithm>
#include <cub/device/device_scan.cuh>
#include <string>

#include "common/cuda_check.h"
#include "kernels/delta_kernels.h"
#include "kernels/delta_kernels_device.cuh"

namespace wsync::delta {
namespace {

// --- host side -----------------------------------------------------------------------------------

unsigned int gridFor(int64_t chunks) {
  return static_cast<unsigned int>(std::clamp<int64_t>(chunks, 1, kMaxBlocks));
}

bool alignedTo(const void* p, int e) {
  return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(e) == 0;
}

Status scanBytes(int64_t chunks, size_t* bytes) {
  *bytes = 0;
  if (chunks == 0) return Status::ok();
  WSYNC_CUDA_RETURN_IF_ERROR(
      cub::DeviceScan::ExclusiveSum(nullptr, *bytes, static_cast<unsigned long long*>(nullptr),
                                    chunks),
      std::string("delta patch on the device: CUB scan size"));
  return Status::ok();
}

// The encode scratch, carved in this order.
struct EncodeLayout {
  size_t totals = 0, entries = 0, counts = 0, offsets = 0, bits = 0, scan = 0, scan_bytes = 0,
         total = 0;
};
Status encodeLayout(const PatchShape& s, EncodeLayout* l) {
  const auto chunks = static_cast<size_t>(s.numChunks());
  WSYNC_RETURN_IF_ERROR(scanBytes(s.numChunks(), &l->scan_bytes));
  l->totals = 0;
  l->entries = alignUp(sizeof(DeviceTotals));
  l->counts = l->entries + alignUp(4 * chunks);
  l->offsets = l->counts + alignUp(4 * chunks);
  l->bits = l->offsets + alignUp(8 * chunks);
  l->scan = l->bits + alignUp(4 * chunks * static_cast<size_t>(bitmapWordsPerChunk(s)));
  l->total = l->scan + alignUp(l->scan_bytes);
  return Status::ok();
}

Status applyLayout(const PatchShape& s, size_t* scan_bytes, size_t* total) {
  WSYNC_RETURN_IF_ERROR(scanBytes(s.numChunks(), scan_bytes));
  *total = alignUp(8 * static_cast<size_t>(s.numChunks())) + alignUp(*scan_bytes);
  return Status::ok();
}

Status badArgument(const std::string& what) {
  return invalidArgument("delta patch on the device: " + what);
}

// The checks before any launch: shape, pointers, alignment, sizes.
Status checkEncodeArguments(const PatchShape& shape, const void* base, const void* next,
                            const uint8_t* patch, size_t patch_capacity, const void* scratch,
                            size_t* patch_bytes) {
  WSYNC_RETURN_IF_ERROR(checkPatchShape(shape));
  if (shape.numChunks() > UINT32_MAX) return badArgument("more than 2^32 chunks");
  if (patch == nullptr || scratch == nullptr || patch_bytes == nullptr ||
      (shape.num_elements > 0 && (base == nullptr || next == nullptr)))
    return badArgument("a null base, next, patch, scratch or length");
  if (reinterpret_cast<uintptr_t>(scratch) % kAlign != 0)
    return badArgument("scratch not 256-byte aligned (as cudaMalloc gives it)");
  if (!alignedTo(base, shape.elem_bytes) || !alignedTo(next, shape.elem_bytes))
    return badArgument("base or next not aligned to its " + std::to_string(shape.elem_bytes) +
                       "-byte elements");
  if (patch_capacity < static_cast<size_t>(maxPatchBytes(shape)))
    return badArgument("patch buffer of " + std::to_string(patch_capacity) + " bytes, " +
                       std::to_string(maxPatchBytes(shape)) + " needed");
  return Status::ok();
}

template <int E>
void launchClassify(const EncodeArgs& a, const void* base, const void* next, cudaStream_t stream) {
  using T = typename ElementOf<E>::T;
  classifyChunks<E><<<gridFor(a.g.chunks), kThreads, 0, stream>>>(a, static_cast<const T*>(base),
                                                                  static_cast<const T*>(next));
}

template <int E>
void launchPayloads(const EncodeArgs& a, const void* next, void* advance, cudaStream_t stream) {
  using T = typename ElementOf<E>::T;
  writePayloads<E><<<gridFor(a.g.chunks), kThreads, 0, stream>>>(a, static_cast<const T*>(next),
                                                                 static_cast<T*>(advance));
}

Status encode(const PatchShape& shape, const void* base, const void* next, void* advance,
              uint8_t* patch, size_t patch_capacity, void* scratch, size_t scratch_bytes,
              cudaStream_t stream, size_t* patch_bytes, PatchStats* stats) {
  WSYNC_RETURN_IF_ERROR(
      checkEncodeArguments(shape, base, next, patch, patch_capacity, scratch, patch_bytes));
  EncodeLayout l;
  WSYNC_RETURN_IF_ERROR(encodeLayout(shape, &l));
  if (scratch_bytes < l.total)
    return badArgument("encode scratch of " + std::to_string(scratch_bytes) + " bytes, " +
                       std::to_string(l.total) + " needed");
  auto* s = static_cast<uint8_t*>(scratch);
  EncodeArgs a;
  a.g = {shape.num_elements, shape.chunk_elements, shape.numChunks()};
  a.words_per_chunk = bitmapWordsPerChunk(shape);
  a.patch = patch;
  a.entries = reinterpret_cast<uint32_t*>(s + l.entries);
  a.counts = reinterpret_cast<uint32_t*>(s + l.counts);
  a.offsets = reinterpret_cast<unsigned long long*>(s + l.offsets);
  a.bits = reinterpret_cast<uint32_t*>(s + l.bits);
  a.totals = reinterpret_cast<DeviceTotals*>(s + l.totals);
  const std::string where = "delta patch on the device: encode";
  WSYNC_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(a.totals, 0, sizeof(DeviceTotals), stream), where);
  const int e = shape.elem_bytes;
  if (e == 1) launchClassify<1>(a, base, next, stream);
  if (e == 2) launchClassify<2>(a, base, next, stream);
  if (e == 4) launchClassify<4>(a, base, next, stream);
  if (e == 8) launchClassify<8>(a, base, next, stream);
  WSYNC_CUDA_RETURN_IF_ERROR(cudaGetLastError(), where + " (classify)");
  if (a.g.chunks > 0) {
    size_t scan_bytes = l.scan_bytes;
    WSYNC_CUDA_RETURN_IF_ERROR(
        cub::DeviceScan::ExclusiveSum(s + l.scan, scan_bytes, a.offsets, a.g.chunks, stream),
        where + " (scan)");
    if (e == 1) launchPayloads<1>(a, next, advance, stream);
    if (e == 2) launchPayloads<2>(a, next, advance, stream);
    if (e == 4) launchPayloads<4>(a, next, advance, stream);
    if (e == 8) launchPayloads<8>(a, next, advance, stream);
    WSYNC_CUDA_RETURN_IF_ERROR(cudaGetLastError(), where + " (payloads)");
  }
  finishLength<<<1, 1, 0, stream>>>(a, e);
  if (stats != nullptr && a.g.chunks > 0)
    countChunks<<<static_cast<unsigned int>(
                      std::min<int64_t>((a.g.chunks + kThreads - 1) / kThreads, 1024)),
                  kThreads, 0, stream>>>(a);
  WSYNC_CUDA_RETURN_IF_ERROR(cudaGetLastError(), where + " (totals)");
  DeviceTotals totals{};
  WSYNC_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(&totals, a.totals, sizeof totals, cudaMemcpyDeviceToHost, stream), where);
  WSYNC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), where);
  *patch_bytes = static_cast<size_t>(totals.patch_bytes);
  if (stats != nullptr) {
    *stats = PatchStats{};
    stats->dense_bytes = shape.num_elements * e;
    stats->patch_bytes = static_cast<int64_t>(totals.patch_bytes);
    stats->changed_elements = static_cast<int64_t>(totals.changed);
    for (int k = 0; k < 4; ++k)
      stats->chunks[k] = static_cast<int64_t>(totals.chunks[k]);
  }
  return Status::ok();
}

template <int E>
void launchApply(const ApplyArgs& a, const void* base, void* out, cudaStream_t stream) {
  using T = typename ElementOf<E>::T;
  applyChunks<E><<<gridFor(a.g.chunks), kThreads, 0, stream>>>(a, static_cast<const T*>(base),
                                                               static_cast<T*>(out));
}

}  // namespace

Status deviceEncodeScratchBytes(const PatchShape& shape, size_t* bytes) {
  WSYNC_RETURN_IF_ERROR(checkPatchShape(shape));
  EncodeLayout l;
  WSYNC_RETURN_IF_ERROR(encodeLayout(shape, &l));
  *bytes = l.total;
  return Status::ok();
}

Status deviceApplyScratchBytes(const PatchShape& shape, size_t* bytes) {
  WSYNC_RETURN_IF_ERROR(checkPatchShape(shape));
  size_t scan_bytes = 0;
  return applyLayout(shape, &scan_bytes, bytes);
}

Status encodePatchOnDevice(const PatchShape& shape, const void* base, const void* next,
                           uint8_t* patch, size_t patch_capacity, void* scratch,
                           size_t scratch_bytes, cudaStream_t stream, size_t* patch_bytes,
                           PatchStats* stats) {
  return encode(shape, base, next, nullptr, patch, patch_capacity, scratch, scratch_bytes, stream,
                patch_bytes, stats);
}

Status encodePatchAndAdvanceOnDevice(const PatchShape& shape, void* base, const void* next,
                                     uint8_t* patch, size_t patch_capacity, void* scratch,
                                     size_t scratch_bytes, cudaStream_t stream, size_t* patch_bytes,
                                     PatchStats* stats) {
  return encode(shape, base, next, base, patch, patch_capacity, scratch, scratch_bytes, stream,
                patch_bytes, stats);
}

Status applyPatchOnDevice(const PatchShape& shape, const uint8_t* patch, size_t patch_bytes,
                          const void* base, void* out, void* scratch, size_t scratch_bytes,
                          cudaStream_t stream) {
  WSYNC_RETURN_IF_ERROR(checkPatchShape(shape));
  const int64_t chunks = shape.numChunks();
  if (patch == nullptr || scratch == nullptr ||
      (shape.num_elements > 0 && (base == nullptr || out == nullptr)))
    return badArgument("a null patch, base, out or scratch");
  if (reinterpret_cast<uintptr_t>(scratch) % kAlign != 0)
    return badArgument("scratch not 256-byte aligned (as cudaMalloc gives it)");
  if (!alignedTo(base, shape.elem_bytes) || !alignedTo(out, shape.elem_bytes))
    return badArgument("base or out not aligned to its " + std::to_string(shape.elem_bytes) +
                       "-byte elements");
  if (patch_bytes < kPatchHeaderBytes + 4 * static_cast<size_t>(chunks))
    return badArgument("a patch of " + std::to_string(patch_bytes) +
                       " bytes, shorter than its table (validate it with validatePatch first)");
  size_t scan_bytes = 0;
  size_t needed = 0;
  WSYNC_RETURN_IF_ERROR(applyLayout(shape, &scan_bytes, &needed));
  if (scratch_bytes < needed)
    return badArgument("apply scratch of " + std::to_string(scratch_bytes) + " bytes, " +
                       std::to_string(needed) + " needed");
  if (chunks == 0) return Status::ok();
  auto* s = static_cast<uint8_t*>(scratch);
  ApplyArgs a;
  a.g = {shape.num_elements, shape.chunk_elements, chunks};
  a.patch = patch;
  a.offsets = reinterpret_cast<unsigned long long*>(s);
  const std::string where = "delta patch on the device: apply";
  payloadSizes<<<static_cast<unsigned int>(
                     std::min<int64_t>((chunks + kThreads - 1) / kThreads, kMaxBlocks)),
                 kThreads, 0, stream>>>(a, shape.elem_bytes);
  WSYNC_CUDA_RETURN_IF_ERROR(cudaGetLastError(), where + " (sizes)");
  WSYNC_CUDA_RETURN_IF_ERROR(
      cub::DeviceScan::ExclusiveSum(s + alignUp(8 * chunks), scan_bytes, a.offsets, chunks, stream),
      where + " (scan)");
  const int e = shape.elem_bytes;
  if (e == 1) launchApply<1>(a, base, out, stream);
  if (e == 2) launchApply<2>(a, base, out, stream);
  if (e == 4) launchApply<4>(a, base, out, stream);
  if (e == 8) launchApply<8>(a, base, out, stream);
  WSYNC_CUDA_RETURN_IF_ERROR(cudaGetLastError(), where + " (chunks)");
  return Status::ok();
}

}  // namespace wsync::delta
