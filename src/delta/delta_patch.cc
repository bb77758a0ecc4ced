// Delta patches (delta_patch.h). Per chunk, a scan (delta_scan.h) gives the changed elements as a
// bitmap 64 bytes at a time; the kind, the bitmap payload, the index list and the values all come
// from that bitmap's set bits (no per-element pass). Applying copies each chunk from the base (or
// the patch, kDense) and then writes only the changed elements.
#include "delta/delta_patch.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>

#include "common/wire.h"
#include "delta/delta_scan.h"

namespace wsync::delta {
namespace {

// Bitmaps are copied between the scans' words and the wire as bytes.
static_assert(std::endian::native == std::endian::little,
              "delta patches assume a little-endian host");

constexpr int64_t kMaxChunkWords = kMaxChunkElements / 64;

bool validElemBytes(int e) {
  return e == 1 || e == 2 || e == 4 || e == 8;
}

DeltaKernel usable(DeltaKernel wanted) {
  if (scan::cpuHas(wanted)) return wanted;
  if (wanted == DeltaKernel::kAvx512 && scan::cpuHas(DeltaKernel::kAvx2)) return DeltaKernel::kAvx2;
  return DeltaKernel::kScalar;
}

int64_t chunkLength(const PatchShape& s, int64_t chunk) {
  return std::min(s.chunk_elements, s.num_elements - chunk * s.chunk_elements);
}

// A validated kIndex payload of `count` elements written into `o` (one element per index).
template <int E>
void scatterIndexed(const uint8_t* p, int64_t count, uint8_t* o) {
  const uint8_t* values = p + 2 * count;
  for (int64_t i = 0; i < count; ++i)
    std::memcpy(o + getFixed16(p + 2 * i) * E, values + i * E, E);
}
using ScatterIndexedFn = void (*)(const uint8_t*, int64_t, uint8_t*);
ScatterIndexedFn scatterIndexedFor(int e) {
  switch (e) {
    case 1:
      return scatterIndexed<1>;
    case 2:
      return scatterIndexed<2>;
    case 4:
      return scatterIndexed<4>;
    default:
      return scatterIndexed<8>;
  }
}

// Chunk c's table entry: its kind, its count and its length in elements.
struct ChunkEntry {
  ChunkKind kind;
  int64_t count;
  int64_t len;
};
ChunkEntry chunkEntry(const PatchShape& shape, const uint8_t* patch, int64_t c) {
  const uint32_t entry = getFixed32(patch + kPatchHeaderBytes + 4 * c);
  return {static_cast<ChunkKind>(entry >> 30), entry & 0x3fffffffu, chunkLength(shape, c)};
}

Status malformed(int64_t chunk, const std::string& what) {
  return protocolError("delta patch: chunk " + std::to_string(chunk) + ": " + what);
}

// A kIndex payload's indices: strictly increasing and below len, else the first culprit.
Status checkIndices(int64_t c, const uint8_t* p, int64_t count, int64_t len) {
  int64_t prev = -1;
  bool ordered = true;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t idx = getFixed16(p + 2 * i);
    ordered &= idx > prev;
    prev = idx;
  }
  if (ordered && prev < len) return Status::ok();
  prev = -1;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t idx = getFixed16(p + 2 * i);
    if (idx <= prev || idx >= len)
      return malformed(
          c, "index " + std::to_string(idx) + " out of order or past " + std::to_string(len));
    prev = idx;
  }
  return Status::ok();
}

// encodePatch; with `advance` (base's writable address), base := next after each chunk.
Status encode(DeltaKernel kernel, const PatchShape& shape, const uint8_t* base, uint8_t* advance,
              const uint8_t* next, std::vector<uint8_t>* out, PatchStats* stats) {
  WSYNC_RETURN_IF_ERROR(checkPatchShape(shape));
  const int e = shape.elem_bytes;
  const int64_t chunks = shape.numChunks();
  if (chunks > UINT32_MAX) return invalidArgument("delta patch: more than 2^32 chunks");
  kernel = usable(kernel);
  const scan::DiffFn diff = scan::diffFor(kernel, e);
  const scan::Movers& mv = scan::moversFor(kernel, e);
  PatchStats st;
  st.dense_bytes = shape.num_elements * e;
  // `out` grows geometrically and is cut to the patch at the end: its bytes past `at` are not
  // zeroed per chunk, and a vector reused across versions keeps its storage.
  size_t at = kPatchHeaderBytes + 4 * static_cast<size_t>(chunks);
  if (out->size() < at) out->resize(at);
  uint8_t* h = out->data();
  std::memset(h, 0, kPatchHeaderBytes);
  putFixed32(h, kPatchMagic);
  h[4] = kPatchVersion;
  h[5] = static_cast<uint8_t>(e);
  putFixed32(h + 8, static_cast<uint32_t>(shape.chunk_elements));
  putFixed32(h + 12, static_cast<uint32_t>(chunks));
  const auto n = static_cast<uint64_t>(shape.num_elements);
  putFixed32(h + 16, static_cast<uint32_t>(n));
  putFixed32(h + 20, static_cast<uint32_t>(n >> 32));
  uint64_t bits[kMaxChunkWords];
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t len = chunkLength(shape, c);
    const int64_t first = c * shape.chunk_elements * e;
    const uint8_t* x = next + first;
    const int64_t count = diff(base + first, x, len, bits);
    const ChunkKind kind = smallestKind(count, len, e);
    const auto bytes = static_cast<size_t>(payloadBytes(kind, count, len, e));
    if (out->size() < at + bytes) out->resize(std::max(at + bytes, 2 * out->size()));
    uint8_t* p = out->data() + at;
    const int64_t words = (len + 63) / 64;
    if (kind == ChunkKind::kDense) {
      std::memcpy(p, x, static_cast<size_t>(len * e));
    } else if (kind == ChunkKind::kBitmap) {
      std::memcpy(p, bits, static_cast<size_t>((len + 7) / 8));
      mv.gather(bits, words, x, p + (len + 7) / 8);
    } else if (kind == ChunkKind::kIndex) {
      mv.gather_indexed(bits, words, x, p, p + 2 * count);
    }
    if (advance && kind == ChunkKind::kDense) {
      std::memcpy(advance + first, x, static_cast<size_t>(len * e));
    } else if (advance && count > 0) {
      mv.copy_changed(bits, words, x, advance + first);
    }
    const uint32_t entry = (static_cast<uint32_t>(kind) << 30) |
                           static_cast<uint32_t>(kind == ChunkKind::kDense ? len : count);
    putFixed32(out->data() + kPatchHeaderBytes + 4 * c, entry);
    st.chunks[static_cast<int>(kind)]++;
    st.changed_elements += count;
    at += bytes;
  }
  out->resize(at);
  st.patch_bytes = static_cast<int64_t>(at);
  if (stats) *stats = st;
  return Status::ok();
}

}  // namespace

Status checkPatchShape(const PatchShape& s) {
  if (!validElemBytes(s.elem_bytes))
    return invalidArgument("delta patch: element size " + std::to_string(s.elem_bytes) +
                           " bytes (1, 2, 4 or 8)");
  if (s.chunk_elements < 1 || s.chunk_elements > kMaxChunkElements)
    return invalidArgument("delta patch: " + std::to_string(s.chunk_elements) +
                           " elements per chunk (1 .. 65536)");
  if (s.num_elements < 0) return invalidArgument("delta patch: a negative element count");
  return Status::ok();
}

DeltaKernel deltaKernel() {
  static const DeltaKernel kernel = usable(DeltaKernel::kAvx512);
  return kernel;
}

const char* deltaKernelName(DeltaKernel kernel) {
  switch (kernel) {
    case DeltaKernel::kScalar:
      return "scalar";
    case DeltaKernel::kAvx2:
      return "avx2";
    case DeltaKernel::kAvx512:
      return "avx512";
  }
  return "?";
}

PatchShape shapeFor(int64_t num_elements, int elem_bytes, int64_t chunk_bytes) {
  PatchShape s;
  s.num_elements = num_elements;
  s.elem_bytes = elem_bytes;
  const int64_t e = std::max(1, elem_bytes);
  s.chunk_elements = std::clamp<int64_t>(chunk_bytes / e, 1, kMaxChunkElements);
  return s;
}

int64_t maxPatchBytes(const PatchShape& shape) {
  return static_cast<int64_t>(kPatchHeaderBytes) + 4 * shape.numChunks() +
         shape.num_elements * shape.elem_bytes;
}

Status encodePatch(const PatchShape& shape, const void* base, const void* next,
                   std::vector<uint8_t>* out, PatchStats* stats, DeltaKernel kernel) {
  return encode(kernel, shape, static_cast<const uint8_t*>(base), nullptr,
                static_cast<const uint8_t*>(next), out, stats);
}

Status encodePatchAndAdvance(const PatchShape& shape, void* base, const void* next,
                             std::vector<uint8_t>* out, PatchStats* stats, DeltaKernel kernel) {
  auto* b = static_cast<uint8_t*>(base);
  return encode(kernel, shape, b, b, static_cast<const uint8_t*>(next), out, stats);
}

Status validatePatch(const PatchShape& shape, const uint8_t* patch, size_t patch_bytes,
                     DeltaKernel kernel) {
  WSYNC_RETURN_IF_ERROR(checkPatchShape(shape));
  kernel = usable(kernel);
  if (patch_bytes < kPatchHeaderBytes)
    return protocolError("delta patch: " + std::to_string(patch_bytes) +
                         " bytes, shorter than its header");
  if (getFixed32(patch) != kPatchMagic) return protocolError("delta patch: bad magic");
  if (patch[4] != kPatchVersion)
    return protocolError("delta patch: version " + std::to_string(patch[4]) + ", this side reads " +
                         std::to_string(kPatchVersion));
  const uint64_t n = getFixed32(patch + 16) | (static_cast<uint64_t>(getFixed32(patch + 20)) << 32);
  if (patch[5] != shape.elem_bytes || getFixed32(patch + 8) != shape.chunk_elements ||
      getFixed32(patch + 12) != shape.numChunks() || n != static_cast<uint64_t>(shape.num_elements))
    return protocolError(
        "delta patch: shape (" + std::to_string(patch[5]) + "-byte elements, " + std::to_string(n) +
        " elements, " + std::to_string(getFixed32(patch + 8)) +
        " per chunk) differs from the region's (" + std::to_string(shape.elem_bytes) + ", " +
        std::to_string(shape.num_elements) + ", " + std::to_string(shape.chunk_elements) + ")");
  const int64_t chunks = shape.numChunks();
  const int e = shape.elem_bytes;
  if (static_cast<uint64_t>(patch_bytes - kPatchHeaderBytes) < 4 * static_cast<uint64_t>(chunks))
    return protocolError("delta patch: truncated chunk table");
  size_t at = kPatchHeaderBytes + 4 * static_cast<size_t>(chunks);
  for (int64_t c = 0; c < chunks; ++c) {
    const auto [kind, count, len] = chunkEntry(shape, patch, c);
    if (count > len || (kind == ChunkKind::kDense && count != len) ||
        (kind == ChunkKind::kSame && count != 0))
      return malformed(
          c, "count " + std::to_string(count) + " for " + std::to_string(len) + " elements");
    const auto bytes = static_cast<size_t>(payloadBytes(kind, count, len, e));
    if (bytes > patch_bytes - at) return malformed(c, "payload runs past the patch's end");
    const uint8_t* p = patch + at;
    if (kind == ChunkKind::kBitmap) {
      const int64_t ones = scan::countBits(kernel, p, (len + 7) / 8);
      const int64_t tail_bits = len % 8;
      if (tail_bits != 0 && (p[(len - 1) / 8] >> tail_bits) != 0)
        return malformed(c, "bitmap bits set past the chunk's end");
      if (ones != count)
        return malformed(
            c, "bitmap has " + std::to_string(ones) + " bits set, count " + std::to_string(count));
    } else if (kind == ChunkKind::kIndex) {
      WSYNC_RETURN_IF_ERROR(checkIndices(c, p, count, len));
    }
    at += bytes;
  }
  if (at != patch_bytes)
    return protocolError("delta patch: " + std::to_string(patch_bytes - at) +
                         " bytes after the last chunk");
  return Status::ok();
}

Status applyPatch(const PatchShape& shape, const uint8_t* patch, size_t patch_bytes,
                  const void* base_ptr, void* out_ptr, DeltaKernel kernel) {
  kernel = usable(kernel);
  WSYNC_RETURN_IF_ERROR(validatePatch(shape, patch, patch_bytes, kernel));
  const auto* base = static_cast<const uint8_t*>(base_ptr);
  auto* out = static_cast<uint8_t*>(out_ptr);
  const int e = shape.elem_bytes;
  const scan::Movers& mv = scan::moversFor(kernel, e);
  const ScatterIndexedFn scatter_indexed = scatterIndexedFor(e);
  const int64_t chunks = shape.numChunks();
  size_t at = kPatchHeaderBytes + 4 * static_cast<size_t>(chunks);
  for (int64_t c = 0; c < chunks; ++c) {
    const auto [kind, count, len] = chunkEntry(shape, patch, c);
    const uint8_t* p = patch + at;
    uint8_t* o = out + c * shape.chunk_elements * e;
    const uint8_t* b = base + c * shape.chunk_elements * e;
    if (kind == ChunkKind::kDense) {
      std::memcpy(o, p, static_cast<size_t>(len * e));
    } else {
      if (o != b) std::memcpy(o, b, static_cast<size_t>(len * e));
      if (kind == ChunkKind::kBitmap) {
        mv.scatter_bitmap(p, len, o);
      } else if (kind == ChunkKind::kIndex) {
        scatter_indexed(p, count, o);
      }
    }
    at += static_cast<size_t>(payloadBytes(kind, count, len, e));
  }
  return Status::ok();
}

}  // namespace wsync::delta
