// The AVX-512 kernels of delta patches (delta_scan.h): AVX-512F/BW compares of 64 bytes into mask
// registers, and per 64-byte block of a chunk the changed elements moved at once: VBMI2 compress
// (gather) / expand (scatter) with masked loads and stores, so nothing past the elements named is
// read or written (fault suppression covers the bytes of a chunk's last, partial block). Compiled
// with target attributes; called only where delta_scan.cc's cpuHas(kAvx512) holds.
#include <cstring>

#include "delta/delta_scan.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace wsync::delta::scan {

#if defined(__x86_64__)
namespace {

#define WSYNC_AVX512 __attribute__((target("avx512f,avx512bw,avx512vbmi2,bmi,bmi2,popcnt")))

// The low `n` bits set (n <= 64).
WSYNC_AVX512 inline uint64_t lowBits(uint64_t n) {
  return _bzhi_u64(~0ull, static_cast<unsigned>(n));
}

// Per element size, masked 64-byte loads and stores, compress and expand.
template <int E>
WSYNC_AVX512 inline __m512i load(uint64_t m, const uint8_t* p) {
  if constexpr (E == 1) return _mm512_maskz_loadu_epi8(m, p);
  if constexpr (E == 2) return _mm512_maskz_loadu_epi16(static_cast<__mmask32>(m), p);
  if constexpr (E == 4) return _mm512_maskz_loadu_epi32(static_cast<__mmask16>(m), p);
  return _mm512_maskz_loadu_epi64(static_cast<__mmask8>(m), p);
}
template <int E>
WSYNC_AVX512 inline void store(uint8_t* p, uint64_t m, __m512i v) {
  if constexpr (E == 1) _mm512_mask_storeu_epi8(p, m, v);
  if constexpr (E == 2) _mm512_mask_storeu_epi16(p, static_cast<__mmask32>(m), v);
  if constexpr (E == 4) _mm512_mask_storeu_epi32(p, static_cast<__mmask16>(m), v);
  if constexpr (E == 8) _mm512_mask_storeu_epi64(p, static_cast<__mmask8>(m), v);
}
// The elements of `p` under mask `m`, packed to the front of a vector (VBMI2 compress).
template <int E>
WSYNC_AVX512 inline __m512i packed(uint64_t m, const uint8_t* p) {
  const __m512i v = load<E>(m, p);
  if constexpr (E == 1) return _mm512_maskz_compress_epi8(m, v);
  if constexpr (E == 2) return _mm512_maskz_compress_epi16(static_cast<__mmask32>(m), v);
  if constexpr (E == 4) return _mm512_maskz_compress_epi32(static_cast<__mmask16>(m), v);
  return _mm512_maskz_compress_epi64(static_cast<__mmask8>(m), v);
}
// The first popcount(m) elements of `p`, spread to the lanes of mask `m` (VBMI2 expand).
template <int E>
WSYNC_AVX512 inline __m512i spread(uint64_t m, const uint8_t* p) {
  const __m512i v = load<E>(lowBits(_mm_popcnt_u64(m)), p);
  if constexpr (E == 1) return _mm512_maskz_expand_epi8(m, v);
  if constexpr (E == 2) return _mm512_maskz_expand_epi16(static_cast<__mmask32>(m), v);
  if constexpr (E == 4) return _mm512_maskz_expand_epi32(static_cast<__mmask16>(m), v);
  return _mm512_maskz_expand_epi64(static_cast<__mmask8>(m), v);
}
template <int E>
WSYNC_AVX512 inline uint64_t differ(const __m512i u, const __m512i v) {
  if constexpr (E == 1) return _mm512_cmpneq_epu8_mask(u, v);
  if constexpr (E == 2) return _mm512_cmpneq_epu16_mask(u, v);
  if constexpr (E == 4) return _mm512_cmpneq_epu32_mask(u, v);
  return _mm512_cmpneq_epu64_mask(u, v);
}

template <int E>
WSYNC_AVX512 int64_t diff(const uint8_t* base, const uint8_t* next, int64_t len, uint64_t* bits) {
  constexpr int kLanes = 64 / E;  // elements per 64-byte block
  const int64_t groups = len / 64;
  int64_t count = 0;
  for (int64_t g = 0; g < groups; ++g) {
    const uint8_t* b = base + g * 64 * E;
    const uint8_t* x = next + g * 64 * E;
    uint64_t word = 0;
    for (int k = 0; k < E; ++k)
      word |= differ<E>(_mm512_loadu_si512(b + 64 * k), _mm512_loadu_si512(x + 64 * k))
              << (k * kLanes);
    bits[g] = word;
    count += _mm_popcnt_u64(word);
  }
  if (len % 64 != 0) {  // the partial last group: masked loads of its bytes only
    const uint8_t* b = base + groups * 64 * E;
    const uint8_t* x = next + groups * 64 * E;
    const int64_t bytes = (len % 64) * E;
    uint64_t word = 0;
    for (int k = 0; k * 64 < bytes; ++k) {
      const uint64_t m = lowBits(static_cast<uint64_t>(bytes - 64 * k < 64 ? bytes - 64 * k : 64));
      word |=
          differ<E>(_mm512_maskz_loadu_epi8(m, b + 64 * k), _mm512_maskz_loadu_epi8(m, x + 64 * k))
          << (k * kLanes);
    }
    bits[groups] = word;
    count += _mm_popcnt_u64(word);
  }
  return count;
}

template <int E>
struct BlockMovers {
  static constexpr int kLanes = 64 / E;
  // The mask of block k (of E) of word `m`.
  WSYNC_AVX512 static uint64_t blockMask(uint64_t m, int k) {
    return kLanes == 64 ? m : (m >> (k * kLanes)) & lowBits(kLanes);
  }
  // f(m, at) for each block of word `w` (its bits `word`) with a change: `m` the block's mask,
  // `at` the byte offset of its first element.
  template <typename F>
  WSYNC_AVX512 static void forEachBlock(uint64_t word, int64_t w, F&& f) {
    if (word == 0) return;
    for (int k = 0; k < E; ++k) {
      const uint64_t m = blockMask(word, k);
      if (m != 0) f(m, (w * 64 + k * kLanes) * E);
    }
  }
  WSYNC_AVX512 static void gather(const uint64_t* bits, int64_t words, const uint8_t* x,
                                  uint8_t* values) {
    for (int64_t w = 0; w < words; ++w)
      forEachBlock(bits[w], w, [&](uint64_t m, int64_t at) WSYNC_AVX512 {
        const uint64_t n = _mm_popcnt_u64(m);
        store<E>(values, lowBits(n), packed<E>(m, x + at));
        values += n * E;
      });
  }
  // Index chunks are sparse (an index list wins below about one change in 2 + E elements): one
  // element per set bit beats a block compress here.
  WSYNC_AVX512 static void gatherIndexed(const uint64_t* bits, int64_t words, const uint8_t* x,
                                         uint8_t* index, uint8_t* values) {
    for (int64_t w = 0; w < words; ++w)
      for (uint64_t m = bits[w]; m != 0; m = _blsr_u64(m)) {
        const int64_t i = w * 64 + static_cast<int64_t>(_tzcnt_u64(m));
        index[0] = static_cast<uint8_t>(i);
        index[1] = static_cast<uint8_t>(i >> 8);
        index += 2;
        std::memcpy(values, x + i * E, E);
        values += E;
      }
  }
  WSYNC_AVX512 static void copyChanged(const uint64_t* bits, int64_t words, const uint8_t* x,
                                       uint8_t* o) {
    for (int64_t w = 0; w < words; ++w)
      forEachBlock(bits[w], w, [&](uint64_t m, int64_t at) WSYNC_AVX512 {
        store<E>(o + at, m, load<E>(m, x + at));
      });
  }
  WSYNC_AVX512 static void scatterBitmap(const uint8_t* p, int64_t len, uint8_t* o) {
    const int64_t bytes = (len + 7) / 8;
    const uint8_t* values = p + bytes;
    for (int64_t w = 0; w < (bytes + 7) / 8; ++w)
      forEachBlock(bitmapWord(p, bytes, w), w, [&](uint64_t m, int64_t at) WSYNC_AVX512 {
        store<E>(o + at, m, spread<E>(m, values));
        values += _mm_popcnt_u64(m) * E;
      });
  }
};
template <int E>
constexpr Movers kBlockMovers = {BlockMovers<E>::gather, BlockMovers<E>::gatherIndexed,
                                 BlockMovers<E>::copyChanged, BlockMovers<E>::scatterBitmap};

}  // namespace

DiffFn diffAvx512For(int elem_bytes) {
  switch (elem_bytes) {
    case 1:
      return diff<1>;
    case 2:
      return diff<2>;
    case 4:
      return diff<4>;
    default:
      return diff<8>;
  }
}

const Movers* moversAvx512For(int elem_bytes) {
  switch (elem_bytes) {
    case 1:
      return &kBlockMovers<1>;
    case 2:
      return &kBlockMovers<2>;
    case 4:
      return &kBlockMovers<4>;
    default:
      return &kBlockMovers<8>;
  }
}

#else
DiffFn diffAvx512For(int) {
  return nullptr;
}
const Movers* moversAvx512For(int) {
  return nullptr;
}
#endif

}  // namespace wsync::delta::scan
