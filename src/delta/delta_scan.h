// The per-chunk kernels behind delta patches (delta_patch.h), one set per CPU kind: which elements
// of a chunk differ between base and next, as a bitmap in the patch's own layout (bit i of the
// little-endian words: element i), and moving the elements at a bitmap's set bits. Every kind gives
// the same bytes: the scalar kind compares 8-byte words and moves one element per set bit (count
// trailing zeros); AVX2 compares 32 bytes at a time; AVX-512 compares 64 bytes into mask registers
// and moves a 64-byte block's changed elements at once (VBMI2 compress / expand, masked loads and
// stores: nothing past a chunk's elements is read or written). Internal to src/delta.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "delta/delta_patch.h"

namespace wsync::delta::scan {

// Sets `bits` (ceil(len / 64) words, the bits past len zero) to the changed elements of `len`
// elements at `base` and `next` (any alignment); returns how many changed.
using DiffFn = int64_t (*)(const uint8_t* base, const uint8_t* next, int64_t len, uint64_t* bits);

// Moving the elements at the set bits of `bits` (`words` words, no bit past the chunk's length) of
// one chunk of E-byte elements. Buffers have any alignment and are read / written only at the
// elements named (values: packed, in element order).
struct Movers {
  // The values at the set bits, from `x`, packed at `values`.
  void (*gather)(const uint64_t* bits, int64_t words, const uint8_t* x, uint8_t* values);
  // The set bits as 16-bit little-endian indices at `index`, and their values at `values`.
  void (*gather_indexed)(const uint64_t* bits, int64_t words, const uint8_t* x, uint8_t* index,
                         uint8_t* values);
  // The elements at the set bits copied from `x` to `o`.
  void (*copy_changed)(const uint64_t* bits, int64_t words, const uint8_t* x, uint8_t* o);
  // A validated kBitmap payload `p` of a `len`-element chunk: its values written into `o`.
  void (*scatter_bitmap)(const uint8_t* p, int64_t len, uint8_t* o);
};

// Whether this CPU runs `kernel`.
bool cpuHas(DeltaKernel kernel);

// The kernels for `elem_bytes` (1, 2, 4 or 8) of a `kernel` the CPU has.
DiffFn diffFor(DeltaKernel kernel, int elem_bytes);
const Movers& moversFor(DeltaKernel kernel, int elem_bytes);

// The number of set bits in `bytes` bytes at `p` (any alignment), with `kernel`.
int64_t countBits(DeltaKernel kernel, const uint8_t* p, int64_t bytes);

// A kBitmap payload's word w (of a bitmap of `bytes` bytes; the last word may be short).
inline uint64_t bitmapWord(const uint8_t* p, int64_t bytes, int64_t w) {
  uint64_t v = 0;
  const int64_t n = bytes - 8 * w;
  if (n >= 8) {
    __builtin_memcpy(&v, p + 8 * w, 8);  // a little-endian host (delta_patch.cc)
    return v;
  }
  for (int64_t i = 0; i < n; ++i)
    v |= static_cast<uint64_t>(p[8 * w + i]) << (8 * i);
  return v;
}

// AVX-512 (delta_scan_avx512.cc); null where the compiler does not target x86-64.
DiffFn diffAvx512For(int elem_bytes);
const Movers* moversAvx512For(int elem_bytes);

}  // namespace wsync::delta::scan
