// The device side of delta_kernels.cu (its kernels and device helpers), included by it alone:
// one thread block per chunk (grid-stride), word w of a chunk's change bitmap the ballot of its
// elements 32w .. 32w+31, as the patch's own bitmap layout (delta_kernels.h has the contract).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cub/block/block_scan.cuh>

#include "delta/delta_patch.h"

namespace wsync::delta {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kUnroll = 4;               // bitmap words a warp compares per step (loads in flight)
constexpr int64_t kMaxBlocks = 1 << 20;  // grid cap; blocks loop over the remaining chunks
constexpr size_t kAlign = 256;

// What encoding counts on the device, copied back once at the end.
struct DeviceTotals {
  unsigned long long patch_bytes;
  unsigned long long changed;
  unsigned long long chunks[4];
};

// A little-endian value at any address of the patch: one store / load when aligned, else bytes.
template <typename T>
__device__ __forceinline__ void storeLittle(uint8_t* dst, T v) {
  if ((reinterpret_cast<uintptr_t>(dst) & (sizeof(T) - 1)) == 0) {
    *reinterpret_cast<T*>(dst) = v;
    return;
  }
  for (int b = 0; b < static_cast<int>(sizeof(T)); ++b)
    dst[b] = static_cast<uint8_t>(static_cast<unsigned long long>(v) >> (8 * b));
}
template <typename T>
__device__ __forceinline__ T loadLittle(const uint8_t* src) {
  if ((reinterpret_cast<uintptr_t>(src) & (sizeof(T) - 1)) == 0)
    return *reinterpret_cast<const T*>(src);
  unsigned long long v = 0;
  for (int b = 0; b < static_cast<int>(sizeof(T)); ++b)
    v |= static_cast<unsigned long long>(src[b]) << (8 * b);
  return static_cast<T>(v);
}

// Where chunk c's elements start and how many it has.
struct ChunkGeometry {
  int64_t num_elements;
  int64_t chunk_elements;
  int64_t chunks;
  __device__ int64_t first(int64_t c) const { return c * chunk_elements; }
  __device__ int length(int64_t c) const {
    return static_cast<int>(min(chunk_elements, num_elements - c * chunk_elements));
  }
  __host__ __device__ size_t tableEnd() const {
    return kPatchHeaderBytes + 4 * static_cast<size_t>(chunks);
  }
};

int64_t bitmapWordsPerChunk(const PatchShape& s) {
  return (s.chunk_elements + 31) / 32;
}

size_t alignUp(size_t n) {
  return (n + kAlign - 1) / kAlign * kAlign;
}

// --- encoding ------------------------------------------------------------------------------------

struct EncodeArgs {
  ChunkGeometry g;
  int64_t words_per_chunk;  // bitmap words kept per chunk in the scratch
  uint8_t* patch;
  uint32_t* entries;            // per chunk: its table entry
  uint32_t* counts;             // per chunk: its changed elements (kDense: not always len)
  unsigned long long* offsets;  // per chunk: payload bytes, then (scanned) payload offset
  uint32_t* bits;               // per chunk: words_per_chunk bitmap words
  DeviceTotals* totals;
};

__device__ void writeHeader(const EncodeArgs& a, int e) {
  uint8_t* h = a.patch;
  for (int i = 0; i < static_cast<int>(kPatchHeaderBytes); ++i)
    h[i] = 0;
  storeLittle<uint32_t>(h, kPatchMagic);
  h[4] = kPatchVersion;
  h[5] = static_cast<uint8_t>(e);
  storeLittle<uint32_t>(h + 8, static_cast<uint32_t>(a.g.chunk_elements));
  storeLittle<uint32_t>(h + 12, static_cast<uint32_t>(a.g.chunks));
  storeLittle<uint32_t>(h + 16, static_cast<uint32_t>(a.g.num_elements));
  storeLittle<uint32_t>(h + 20,
                        static_cast<uint32_t>(static_cast<uint64_t>(a.g.num_elements) >> 32));
}

// Kernel 1: per chunk, the change bitmap, the count, the form, the table entry and the payload
// size (into offsets, scanned next). Block 0 writes the header (also with no chunks).
template <int E>
__global__ void __launch_bounds__(kThreads)
    classifyChunks(EncodeArgs a, const typename ElementOf<E>::T* __restrict__ base,
                   const typename ElementOf<E>::T* __restrict__ next) {
  using T = typename ElementOf<E>::T;
  __shared__ unsigned int changed;
  if (blockIdx.x == 0 && threadIdx.x == 0) writeHeader(a, E);
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  for (int64_t c = blockIdx.x; c < a.g.chunks; c += gridDim.x) {
    if (threadIdx.x == 0) changed = 0;
    __syncthreads();
    const int len = a.g.length(c);
    const int words = (len + 31) / 32;
    const T* b = base + a.g.first(c);
    const T* x = next + a.g.first(c);
    uint32_t* chunk_bits = a.bits + c * a.words_per_chunk;
    unsigned int mine = 0;  // lane 0: this warp's changes
    // w0 depends on the warp alone, so every lane of a warp runs the ballots.
    for (int w0 = warp; w0 < words; w0 += kWarps * kUnroll) {
      T bv[kUnroll];
      T xv[kUnroll];
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const int i = (w0 + k * kWarps) * 32 + lane;
        bv[k] = i < len ? b[i] : T(0);
        xv[k] = i < len ? x[i] : T(0);
      }
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const int w = w0 + k * kWarps;
        const unsigned int word = __ballot_sync(0xffffffffu, bv[k] != xv[k]);
        if (lane == 0 && w < words) {
          chunk_bits[w] = word;
          mine += __popc(word);
        }
      }
    }
    if (lane == 0 && mine != 0) atomicAdd(&changed, mine);
    __syncthreads();
    if (threadIdx.x == 0) {
      const ChunkKind kind = smallestKind(changed, len, E);
      const uint32_t entry = (static_cast<uint32_t>(kind) << 30) |
                             static_cast<uint32_t>(kind == ChunkKind::kDense ? len : changed);
      a.entries[c] = entry;
      a.counts[c] = changed;
      storeLittle<uint32_t>(a.patch + kPatchHeaderBytes + 4 * c, entry);
      a.offsets[c] = static_cast<unsigned long long>(payloadBytes(kind, changed, len, E));
    }
    __syncthreads();  // `changed` is read above before the next chunk resets it
  }
}

// Kernel 3: per chunk, its payload at patch + table end + offsets[c]; with `advance`, the changed
// elements (the whole chunk, kDense) are also written there (the sender's kept base).
// A block's shared scratch for forEachChangedRank.
struct RankScratch {
  typename cub::BlockScan<unsigned int, kThreads>::TempStorage scan;
  unsigned int words[kThreads];
  unsigned int ranks[kThreads];  // changes in the chunk's words before each word of the tile
};

// Calls visit(i, rank) once for each set bit i of a chunk's change bitmap (`words` 32-bit words,
// word w = wordAt(w)), rank being the number of set bits before i: where changed element i's
// value stands among the chunk's values. Every thread of the block must call it (a block-wide scan
// per tile of kThreads words, and barriers); a warp visits one word's bits at a time.
// (applyChunks uses it; writePayloads keeps the same loop written out: through the lambdas it
// encoded 12 % slower on an H100.)
template <typename WordAt, typename Visit>
__device__ void forEachChangedRank(int words, RankScratch& s, WordAt wordAt, Visit visit) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  unsigned int ranked = 0;  // changes in the tiles before this one
  for (int tile = 0; tile < words; tile += kThreads) {
    const int w = tile + static_cast<int>(threadIdx.x);
    const unsigned int word = w < words ? wordAt(w) : 0u;
    unsigned int before = 0;
    unsigned int in_tile = 0;
    cub::BlockScan<unsigned int, kThreads>(s.scan).ExclusiveSum(
        static_cast<unsigned int>(__popc(word)), before, in_tile);
    s.words[threadIdx.x] = word;
    s.ranks[threadIdx.x] = ranked + before;
    __syncthreads();
    for (int j = warp; j < kThreads && tile + j < words; j += kWarps) {
      const unsigned int wj = s.words[j];
      if ((wj >> lane) & 1u)
        visit((tile + j) * 32 + lane, s.ranks[j] + __popc(wj & ((1u << lane) - 1u)));
    }
    ranked += in_tile;
    __syncthreads();  // the scratch is reused by the next tile
  }
}

template <int E>
__global__ void __launch_bounds__(kThreads)
    writePayloads(EncodeArgs a, const typename ElementOf<E>::T* __restrict__ next,
                  typename ElementOf<E>::T* __restrict__ advance) {
  using T = typename ElementOf<E>::T;
  using Scan = cub::BlockScan<unsigned int, kThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  __shared__ unsigned int tile_words[kThreads];
  __shared__ unsigned int tile_ranks[kThreads];  // changes in the chunk's words before each word
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const size_t table_end = a.g.tableEnd();
  for (int64_t c = blockIdx.x; c < a.g.chunks; c += gridDim.x) {
    const uint32_t entry = a.entries[c];
    const auto kind = static_cast<ChunkKind>(entry >> 30);
    if (kind == ChunkKind::kSame) continue;  // the same for the whole block
    const int count = static_cast<int>(entry & 0x3fffffffu);
    const int len = a.g.length(c);
    const T* x = next + a.g.first(c);
    T* adv = advance == nullptr ? nullptr : advance + a.g.first(c);
    uint8_t* p = a.patch + table_end + a.offsets[c];
    if (kind == ChunkKind::kDense) {
      for (int i = threadIdx.x; i < len; i += kThreads) {
        const T v = x[i];
        storeLittle<T>(p + static_cast<size_t>(i) * E, v);
        if (adv != nullptr) adv[i] = v;
      }
      continue;
    }
    const uint32_t* chunk_bits = a.bits + c * a.words_per_chunk;
    uint8_t* values = p + 2 * count;  // kIndex: indices first
    if (kind == ChunkKind::kBitmap) {
      const int bitmap_bytes = (len + 7) / 8;
      const auto* bitmap = reinterpret_cast<const uint8_t*>(chunk_bits);
      for (int i = threadIdx.x; i < bitmap_bytes; i += kThreads)
        p[i] = bitmap[i];
      values = p + bitmap_bytes;
    }
    const int words = (len + 31) / 32;
    unsigned int ranked = 0;  // changes in the tiles before this one
    for (int tile = 0; tile < words; tile += kThreads) {
      const int w = tile + static_cast<int>(threadIdx.x);
      const unsigned int word = w < words ? chunk_bits[w] : 0u;
      unsigned int before = 0;
      unsigned int in_tile = 0;
      Scan(scan_storage).ExclusiveSum(static_cast<unsigned int>(__popc(word)), before, in_tile);
      tile_words[threadIdx.x] = word;
      tile_ranks[threadIdx.x] = ranked + before;
      __syncthreads();
      for (int j = warp; j < kThreads && tile + j < words; j += kWarps) {
        const unsigned int wj = tile_words[j];
        if ((wj >> lane) & 1u) {
          const int i = (tile + j) * 32 + lane;
          const unsigned int rank = tile_ranks[j] + __popc(wj & ((1u << lane) - 1u));
          const T v = x[i];
          storeLittle<T>(values + static_cast<size_t>(rank) * E, v);
          if (kind == ChunkKind::kIndex)
            storeLittle<uint16_t>(p + 2 * rank, static_cast<uint16_t>(i));
          if (adv != nullptr) adv[i] = v;
        }
      }
      ranked += in_tile;
      __syncthreads();  // tile_words, tile_ranks and scan_storage are reused by the next tile
    }
  }
}

// After the scan: the patch's length (header + table + the last payload's end).
__global__ void finishLength(EncodeArgs a, int e) {
  const int64_t c = a.g.chunks - 1;
  unsigned long long end = a.g.tableEnd();
  if (c >= 0) {
    const uint32_t entry = a.entries[c];
    end += a.offsets[c] +
           static_cast<unsigned long long>(payloadBytes(static_cast<ChunkKind>(entry >> 30),
                                                        entry & 0x3fffffffu, a.g.length(c), e));
  }
  a.totals->patch_bytes = end;
}

// PatchStats' counts from the table entries (only when the caller asks for stats).
__global__ void __launch_bounds__(kThreads) countChunks(EncodeArgs a) {
  __shared__ unsigned long long counts[5];  // per ChunkKind, then changed elements
  if (threadIdx.x < 5) counts[threadIdx.x] = 0;
  __syncthreads();
  for (int64_t c = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; c < a.g.chunks;
       c += static_cast<int64_t>(gridDim.x) * kThreads) {
    atomicAdd(&counts[a.entries[c] >> 30], 1ull);
    if (a.counts[c] != 0) atomicAdd(&counts[4], static_cast<unsigned long long>(a.counts[c]));
  }
  __syncthreads();
  if (threadIdx.x < 4 && counts[threadIdx.x] != 0)
    atomicAdd(&a.totals->chunks[threadIdx.x], counts[threadIdx.x]);
  if (threadIdx.x == 4 && counts[4] != 0) atomicAdd(&a.totals->changed, counts[4]);
}

// --- applying ------------------------------------------------------------------------------------

struct ApplyArgs {
  ChunkGeometry g;
  const uint8_t* patch;
  unsigned long long* offsets;  // per chunk: payload bytes, then (scanned) payload offset
};

__device__ __forceinline__ uint32_t tableEntry(const ApplyArgs& a, int64_t c) {
  return loadLittle<uint32_t>(a.patch + kPatchHeaderBytes + 4 * c);
}

// Per chunk (a thread each): its payload size, from the table.
__global__ void payloadSizes(ApplyArgs a, int e) {
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < a.g.chunks;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint32_t entry = tableEntry(a, c);
    a.offsets[c] = static_cast<unsigned long long>(
        payloadBytes(static_cast<ChunkKind>(entry >> 30), entry & 0x3fffffffu, a.g.length(c), e));
  }
}

// Bitmap word w (elements 32w .. 32w+31) of a kBitmap payload of `bytes` bytes: only the bitmap's
// own bytes are read (the values follow it).
__device__ __forceinline__ uint32_t bitmapWord(const uint8_t* p, int bytes, int w) {
  uint32_t v = 0;
  for (int b = 0; b < 4 && 4 * w + b < bytes; ++b)
    v |= static_cast<uint32_t>(p[4 * w + b]) << (8 * b);
  return v;
}

// The block copies `len` elements from `src` to `dst` (16 bytes at a time when both allow it).
template <typename T>
__device__ void copyChunk(T* dst, const T* src, int len) {
  int done = 0;
  if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 15u) == 0) {
    const int vectors = static_cast<int>(static_cast<int64_t>(len) * sizeof(T) / 16);
    for (int i = threadIdx.x; i < vectors; i += kThreads)
      reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
    done = static_cast<int>(static_cast<int64_t>(vectors) * 16 / sizeof(T));
  }
  for (int i = done + threadIdx.x; i < len; i += kThreads)
    dst[i] = src[i];
}

template <int E>
__global__ void __launch_bounds__(kThreads)
    applyChunks(ApplyArgs a, const typename ElementOf<E>::T* base, typename ElementOf<E>::T* out) {
  using T = typename ElementOf<E>::T;
  __shared__ RankScratch scratch;
  const size_t table_end = a.g.tableEnd();
  for (int64_t c = blockIdx.x; c < a.g.chunks; c += gridDim.x) {
    const uint32_t entry = tableEntry(a, c);
    const auto kind = static_cast<ChunkKind>(entry >> 30);
    const int count = static_cast<int>(entry & 0x3fffffffu);
    const int len = a.g.length(c);
    const uint8_t* p = a.patch + table_end + a.offsets[c];
    T* o = out + a.g.first(c);
    const T* b = base + a.g.first(c);
    if (kind == ChunkKind::kDense) {
      for (int i = threadIdx.x; i < len; i += kThreads)
        o[i] = loadLittle<T>(p + static_cast<size_t>(i) * E);
      continue;
    }
    if (o != b) copyChunk(o, b, len);
    if (kind == ChunkKind::kSame) continue;
    __syncthreads();  // the copy is complete before any changed element is written over it
    if (kind == ChunkKind::kIndex) {
      const uint8_t* values = p + 2 * count;
      for (int i = threadIdx.x; i < count; i += kThreads)
        o[loadLittle<uint16_t>(p + 2 * i)] = loadLittle<T>(values + static_cast<size_t>(i) * E);
      continue;
    }
    const int bitmap_bytes = (len + 7) / 8;
    const uint8_t* values = p + bitmap_bytes;
    forEachChangedRank((len + 31) / 32, scratch,
                       [&](int w) { return bitmapWord(p, bitmap_bytes, w); },
                       [&](int i, unsigned int rank) {
                         o[i] = loadLittle<T>(values + static_cast<size_t>(rank) * E);
                       });
  }
}

}  // namespace
}  // namespace wsync::delta
