#include "delta/delta_patch.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/wire.h"

namespace wsync::delta {
namespace {

bool validElemBytes(int e) {
  return e == 1 || e == 2 || e == 4 || e == 8;
}

Status checkShape(const PatchShape& s) {
  if (!validElemBytes(s.elem_bytes))
    return invalidArgument("delta patch: element size " + std::to_string(s.elem_bytes) +
                           " bytes (1, 2, 4 or 8)");
  if (s.chunk_elements < 1 || s.chunk_elements > kMaxChunkElements)
    return invalidArgument("delta patch: " + std::to_string(s.chunk_elements) +
                           " elements per chunk (1 .. 65536)");
  if (s.num_elements < 0) return invalidArgument("delta patch: a negative element count");
  return Status::ok();
}

int64_t chunkLength(const PatchShape& s, int64_t chunk) {
  return std::min(s.chunk_elements, s.num_elements - chunk * s.chunk_elements);
}

int64_t payloadBytes(ChunkKind kind, int64_t count, int64_t len, int e) {
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

// Marks changed elements of one chunk in `changed` (len entries); returns their count.
template <class T>
int64_t diffChunk(const uint8_t* base, const uint8_t* next, int64_t len, uint8_t* changed) {
  int64_t count = 0;
  for (int64_t i = 0; i < len; ++i) {
    T a, b;
    std::memcpy(&a, base + i * sizeof(T), sizeof(T));
    std::memcpy(&b, next + i * sizeof(T), sizeof(T));
    changed[i] = a != b;
    count += changed[i];
  }
  return count;
}

int64_t diffChunk(int e, const uint8_t* base, const uint8_t* next, int64_t len, uint8_t* changed) {
  switch (e) {
    case 1:
      return diffChunk<uint8_t>(base, next, len, changed);
    case 2:
      return diffChunk<uint16_t>(base, next, len, changed);
    case 4:
      return diffChunk<uint32_t>(base, next, len, changed);
    default:
      return diffChunk<uint64_t>(base, next, len, changed);
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

}  // namespace

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

Status encodePatch(const PatchShape& shape, const void* base_ptr, const void* next_ptr,
                   std::vector<uint8_t>* out, PatchStats* stats) {
  WSYNC_RETURN_IF_ERROR(checkShape(shape));
  const auto* base = static_cast<const uint8_t*>(base_ptr);
  const auto* next = static_cast<const uint8_t*>(next_ptr);
  const int e = shape.elem_bytes;
  const int64_t chunks = shape.numChunks();
  if (chunks > UINT32_MAX) return invalidArgument("delta patch: more than 2^32 chunks");
  PatchStats st;
  st.dense_bytes = shape.num_elements * e;
  out->assign(kPatchHeaderBytes + 4 * chunks, 0);
  uint8_t* h = out->data();
  putFixed32(h, kPatchMagic);
  h[4] = kPatchVersion;
  h[5] = static_cast<uint8_t>(e);
  putFixed32(h + 8, static_cast<uint32_t>(shape.chunk_elements));
  putFixed32(h + 12, static_cast<uint32_t>(chunks));
  const auto n = static_cast<uint64_t>(shape.num_elements);
  putFixed32(h + 16, static_cast<uint32_t>(n));
  putFixed32(h + 20, static_cast<uint32_t>(n >> 32));
  std::vector<uint8_t> changed(static_cast<size_t>(shape.chunk_elements));
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t len = chunkLength(shape, c);
    const uint8_t* b = base + c * shape.chunk_elements * e;
    const uint8_t* x = next + c * shape.chunk_elements * e;
    int64_t count = 0;
    ChunkKind kind = ChunkKind::kSame;
    if (std::memcmp(b, x, static_cast<size_t>(len * e)) != 0) {
      count = diffChunk(e, b, x, len, changed.data());
      kind = ChunkKind::kDense;
      int64_t best = payloadBytes(kind, count, len, e);
      for (ChunkKind k : {ChunkKind::kIndex, ChunkKind::kBitmap}) {
        const int64_t bytes = payloadBytes(k, count, len, e);
        if (bytes < best) {
          best = bytes;
          kind = k;
        }
      }
    }
    st.chunks[static_cast<int>(kind)]++;
    st.changed_elements += count;
    const uint32_t entry = (static_cast<uint32_t>(kind) << 30) |
                           static_cast<uint32_t>(kind == ChunkKind::kDense ? len : count);
    putFixed32(out->data() + kPatchHeaderBytes + 4 * c, entry);
    const size_t at = out->size();
    out->resize(at + static_cast<size_t>(payloadBytes(kind, count, len, e)));
    uint8_t* p = out->data() + at;
    if (kind == ChunkKind::kDense) {
      std::memcpy(p, x, static_cast<size_t>(len * e));
    } else if (kind == ChunkKind::kBitmap) {
      uint8_t* values = p + (len + 7) / 8;
      for (int64_t i = 0; i < len; ++i) {
        if (!changed[i]) continue;
        p[i / 8] = static_cast<uint8_t>(p[i / 8] | (1u << (i % 8)));
        std::memcpy(values, x + i * e, static_cast<size_t>(e));
        values += e;
      }
    } else if (kind == ChunkKind::kIndex) {
      uint8_t* values = p + 2 * count;
      for (int64_t i = 0; i < len; ++i) {
        if (!changed[i]) continue;
        p[0] = static_cast<uint8_t>(i);
        p[1] = static_cast<uint8_t>(i >> 8);
        p += 2;
        std::memcpy(values, x + i * e, static_cast<size_t>(e));
        values += e;
      }
    }
  }
  st.patch_bytes = static_cast<int64_t>(out->size());
  if (stats) *stats = st;
  return Status::ok();
}

Status validatePatch(const PatchShape& shape, const uint8_t* patch, size_t patch_bytes) {
  WSYNC_RETURN_IF_ERROR(checkShape(shape));
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
      int64_t ones = 0;
      for (int64_t i = 0; i < (len + 7) / 8; ++i)
        ones += __builtin_popcount(p[i]);
      const int64_t tail_bits = len % 8;
      if (tail_bits != 0 && (p[(len - 1) / 8] >> tail_bits) != 0)
        return malformed(c, "bitmap bits set past the chunk's end");
      if (ones != count)
        return malformed(
            c, "bitmap has " + std::to_string(ones) + " bits set, count " + std::to_string(count));
    } else if (kind == ChunkKind::kIndex) {
      int64_t prev = -1;
      for (int64_t i = 0; i < count; ++i) {
        const int64_t idx = getFixed16(p + 2 * i);
        if (idx <= prev || idx >= len)
          return malformed(
              c, "index " + std::to_string(idx) + " out of order or past " + std::to_string(len));
        prev = idx;
      }
    }
    at += bytes;
  }
  if (at != patch_bytes)
    return protocolError("delta patch: " + std::to_string(patch_bytes - at) +
                         " bytes after the last chunk");
  return Status::ok();
}

Status applyPatch(const PatchShape& shape, const uint8_t* patch, size_t patch_bytes,
                  const void* base_ptr, void* out_ptr) {
  WSYNC_RETURN_IF_ERROR(validatePatch(shape, patch, patch_bytes));
  const auto* base = static_cast<const uint8_t*>(base_ptr);
  auto* out = static_cast<uint8_t*>(out_ptr);
  const int e = shape.elem_bytes;
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
        const uint8_t* values = p + (len + 7) / 8;
        for (int64_t i = 0; i < len; ++i) {
          if (!(p[i / 8] >> (i % 8) & 1)) continue;
          std::memcpy(o + i * e, values, static_cast<size_t>(e));
          values += e;
        }
      } else if (kind == ChunkKind::kIndex) {
        const uint8_t* values = p + 2 * count;
        for (int64_t i = 0; i < count; ++i)
          std::memcpy(o + getFixed16(p + 2 * i) * e, values + i * e, static_cast<size_t>(e));
      }
    }
    at += static_cast<size_t>(payloadBytes(kind, count, len, e));
  }
  return Status::ok();
}

}  // namespace wsync::delta
