// Delta patches (issue 22): the elements of a region that differ between a base version and the
// next one, encoded per chunk in whichever of four forms is smallest, so that only what changed
// crosses the network; the receiver rebuilds the next version from its base plus the patch.
//
// A region is `num_elements` elements of `elem_bytes` (1, 2, 4 or 8) bytes, compared bit for bit
// (so -0.0 vs 0.0 and NaN payloads count as changes: the result is exact). It is cut into chunks
// of `chunk_elements` (1 .. 65536; the last may be shorter). Each chunk is one of:
//   kSame    nothing changed                      payload: none
//   kDense   the whole chunk                      payload: len * e bytes
//   kBitmap  a bit per element + changed values   payload: ceil(len / 8) bytes, then count * e
//   kIndex   16-bit indices + changed values      payload: count * 2 bytes, then count * e
// Wire format (little-endian), all offsets derivable, so a GPU can decode chunks in parallel:
//   header   24 bytes: u32 magic "WSDP", u8 version (1), u8 elem_bytes, u16 0, u32
//            chunk_elements, u32 num_chunks, u64 num_elements
//   table    num_chunks x u32: kind << 30 | count (count: changed elements; len for kDense)
//   payload  each chunk's payload in chunk order, no padding
// The decoder checks every field against the region it is applied to and the patch's length
// (kBitmap: popcount == count; kIndex: indices strictly increasing and < len) and returns
// WSYNC_ERR_PROTOCOL naming the chunk, before it writes anything.
// Speed: a chunk's changed elements are found 64 bytes at a time (AVX-512BW or AVX2 compares,
// picked at run time; the scalar kind compares 8-byte words) into a bitmap, and every form is built
// from that bitmap's set bits; applying copies each chunk and then writes only the changed
// elements. Every kind gives the same patch bytes (tests/unit/delta_patch_kernels_test.cc).
// Thread-safety: pure functions; `out` is written only by applyPatch, only after validation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"

namespace wsync::delta {

enum class ChunkKind : uint8_t { kSame = 0, kDense = 1, kBitmap = 2, kIndex = 3 };

inline constexpr uint32_t kPatchMagic = 0x50445357;  // "WSDP"
inline constexpr uint8_t kPatchVersion = 1;
inline constexpr size_t kPatchHeaderBytes = 24;
inline constexpr int64_t kMaxChunkElements = 65536;

// The unsigned integer that an element of `E` bytes (1, 2, 4 or 8) is compared and moved as, bit
// for bit, on the CPU (delta_scan.cc) and on a GPU (kernels/delta_kernels_device.cuh).
template <int E>
struct ElementOf;
template <>
struct ElementOf<1> {
  using T = uint8_t;
};
template <>
struct ElementOf<2> {
  using T = uint16_t;
};
template <>
struct ElementOf<4> {
  using T = uint32_t;
};
template <>
struct ElementOf<8> {
  using T = unsigned long long;
};
inline constexpr int64_t kDefaultChunkBytes = 4096;

// The shape of a patched region; both sides derive it from the plan.
struct PatchShape {
  int64_t num_elements = 0;
  int elem_bytes = 2;
  int64_t chunk_elements = kDefaultChunkBytes / 2;
  int64_t numChunks() const {
    return chunk_elements > 0 ? (num_elements + chunk_elements - 1) / chunk_elements : 0;
  }
};

// The shape for `chunk_bytes` per chunk (clamped to 1 .. kMaxChunkElements elements).
PatchShape shapeFor(int64_t num_elements, int elem_bytes, int64_t chunk_bytes = kDefaultChunkBytes);

// OK, or INVALID_ARGUMENT naming the field: elem_bytes not 1/2/4/8, chunk_elements out of
// 1 .. kMaxChunkElements, a negative num_elements.
Status checkPatchShape(const PatchShape& shape);

// The payload bytes of a chunk of `len` elements of `e` bytes, `count` of them changed, as `kind`.
// constexpr so that the device encoder (kernels/delta_kernels.h) shares the rule.
constexpr int64_t payloadBytes(ChunkKind kind, int64_t count, int64_t len, int e) {
  switch (kind) {
    case ChunkKind::kSame:
      return 0;
    case ChunkKind::kDense:
      return len * e;
    case ChunkKind::kBitmap:
      return (len + 7) / 8 + count * e;
    case ChunkKind::kIndex:
      return count * (2 + e);
  }
  return 0;
}

// The smallest form of a chunk with `count` of `len` elements changed; ties: dense, then index,
// then bitmap (a form replaces the best so far only when strictly smaller).
constexpr ChunkKind smallestKind(int64_t count, int64_t len, int e) {
  if (count == 0) return ChunkKind::kSame;
  ChunkKind kind = ChunkKind::kDense;
  int64_t best = payloadBytes(ChunkKind::kDense, count, len, e);
  if (payloadBytes(ChunkKind::kIndex, count, len, e) < best) {
    best = payloadBytes(ChunkKind::kIndex, count, len, e);
    kind = ChunkKind::kIndex;
  }
  if (payloadBytes(ChunkKind::kBitmap, count, len, e) < best) kind = ChunkKind::kBitmap;
  return kind;
}

// What one encode produced.
struct PatchStats {
  int64_t dense_bytes = 0;  // num_elements * elem_bytes
  int64_t patch_bytes = 0;  // header + table + payload
  int64_t changed_elements = 0;
  int64_t chunks[4] = {0, 0, 0, 0};  // per ChunkKind
};

// How the host scans for changed elements (the patch is the same for every kind).
enum class DeltaKernel : uint8_t {
  kScalar,  // 8-byte words
  kAvx2,    // 32-byte compares + movemask
  kAvx512,  // 64-byte compares into mask registers (AVX-512BW)
};
// The fastest kind this CPU has; a kind passed below that the CPU lacks falls back to it.
DeltaKernel deltaKernel();
const char* deltaKernelName(DeltaKernel kernel);

// The largest patch any pair of versions of `shape` can produce (every chunk dense): the size of a
// receive area that always fits.
int64_t maxPatchBytes(const PatchShape& shape);

// Encodes `next` against `base` (each shape.num_elements elements) into `out` (replaced; pass the
// same vector every version to reuse its storage). INVALID_ARGUMENT for a bad shape (elem_bytes
// not 1/2/4/8, chunk_elements out of range).
Status encodePatch(const PatchShape& shape, const void* base, const void* next,
                   std::vector<uint8_t>* out, PatchStats* stats = nullptr,
                   DeltaKernel kernel = deltaKernel());

// encodePatch, and `base` becomes `next` as it goes (only the changed elements are written): a
// sender's kept copy of the version it encodes against. `base` and `next` must not overlap. On
// INVALID_ARGUMENT (bad shape) nothing is written.
Status encodePatchAndAdvance(const PatchShape& shape, void* base, const void* next,
                             std::vector<uint8_t>* out, PatchStats* stats = nullptr,
                             DeltaKernel kernel = deltaKernel());

// Checks `patch` against `shape` without applying it (PROTOCOL naming the chunk or field).
Status validatePatch(const PatchShape& shape, const uint8_t* patch, size_t patch_bytes,
                     DeltaKernel kernel = deltaKernel());

// out = base with `patch` applied (shape.num_elements elements each). `out` may equal `base` (in
// place) but must not otherwise overlap it. Validates first: on error nothing is written.
Status applyPatch(const PatchShape& shape, const uint8_t* patch, size_t patch_bytes,
                  const void* base, void* out, DeltaKernel kernel = deltaKernel());

}  // namespace wsync::delta
