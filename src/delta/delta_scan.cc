#include "delta/delta_scan.h"

#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace wsync::delta::scan {
namespace {

// Element i of a run of `E`-byte elements.
template <int E>
typename ElementOf<E>::T load(const uint8_t* p, int64_t i) {
  typename ElementOf<E>::T v;
  std::memcpy(&v, p + i * E, E);
  return v;
}

// Elements [from, len) one at a time into the word of element `from` (a multiple of 64) and on.
template <int E>
int64_t diffTail(const uint8_t* base, const uint8_t* next, int64_t from, int64_t len,
                 uint64_t* bits) {
  int64_t count = 0;
  for (int64_t g = from; g < len; g += 64) {
    uint64_t word = 0;
    const int64_t end = g + 64 < len ? g + 64 : len;
    for (int64_t i = g; i < end; ++i)
      word |= static_cast<uint64_t>(load<E>(base, i) != load<E>(next, i)) << (i - g);
    bits[g / 64] = word;
    count += __builtin_popcountll(word);
  }
  return count;
}

// Scalar: per group of 64 elements, 8-byte words compared first (an unchanged group costs
// 8 * E word compares), then the changed group's elements.
template <int E>
int64_t diffScalar(const uint8_t* base, const uint8_t* next, int64_t len, uint64_t* bits) {
  const int64_t groups = len / 64;
  int64_t count = 0;
  for (int64_t g = 0; g < groups; ++g) {
    const uint8_t* b = base + g * 64 * E;
    const uint8_t* x = next + g * 64 * E;
    uint64_t any = 0;
    for (int w = 0; w < 8 * E; ++w)
      any |= load<8>(b, w) ^ load<8>(x, w);
    if (any == 0) {
      bits[g] = 0;
      continue;
    }
    count += diffTail<E>(b, x, 0, 64, bits + g);
  }
  return count + diffTail<E>(base, next, groups * 64, len, bits);
}

int64_t countScalar(const uint8_t* p, int64_t bytes) {
  int64_t n = 0, i = 0;
  for (; i + 8 <= bytes; i += 8)
    n += __builtin_popcountll(load<8>(p, i / 8));
  for (; i < bytes; ++i)
    n += __builtin_popcount(p[i]);
  return n;
}

// One element per set bit (count trailing zeros), for every kind without block moves.
template <int E>
struct BitMovers {
  static void gather(const uint64_t* bits, int64_t words, const uint8_t* x, uint8_t* values) {
    for (int64_t w = 0; w < words; ++w)
      for (uint64_t m = bits[w]; m != 0; m &= m - 1) {
        std::memcpy(values, x + (w * 64 + __builtin_ctzll(m)) * E, E);
        values += E;
      }
  }
  static void gatherIndexed(const uint64_t* bits, int64_t words, const uint8_t* x, uint8_t* index,
                            uint8_t* values) {
    for (int64_t w = 0; w < words; ++w)
      for (uint64_t m = bits[w]; m != 0; m &= m - 1) {
        const int64_t i = w * 64 + __builtin_ctzll(m);
        index[0] = static_cast<uint8_t>(i);
        index[1] = static_cast<uint8_t>(i >> 8);
        index += 2;
        std::memcpy(values, x + i * E, E);
        values += E;
      }
  }
  static void copyChanged(const uint64_t* bits, int64_t words, const uint8_t* x, uint8_t* o) {
    for (int64_t w = 0; w < words; ++w)
      for (uint64_t m = bits[w]; m != 0; m &= m - 1) {
        const int64_t i = w * 64 + __builtin_ctzll(m);
        std::memcpy(o + i * E, x + i * E, E);
      }
  }
  static void scatterBitmap(const uint8_t* p, int64_t len, uint8_t* o) {
    const int64_t bytes = (len + 7) / 8;
    const uint8_t* values = p + bytes;
    for (int64_t w = 0; w < (bytes + 7) / 8; ++w)
      for (uint64_t m = bitmapWord(p, bytes, w); m != 0; m &= m - 1) {
        std::memcpy(o + (w * 64 + __builtin_ctzll(m)) * E, values, E);
        values += E;
      }
  }
};
template <int E>
constexpr Movers kBitMovers = {BitMovers<E>::gather, BitMovers<E>::gatherIndexed,
                               BitMovers<E>::copyChanged, BitMovers<E>::scatterBitmap};

#if defined(__x86_64__)
#define WSYNC_AVX2 __attribute__((target("avx2,popcnt")))

// AVX2: the "equal" bits of 32 bytes (one bit per element).
template <int E>
WSYNC_AVX2 inline uint32_t equalAvx2(const uint8_t* b, const uint8_t* x) {
  const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  if constexpr (E == 1) return static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(u, v)));
  if constexpr (E == 4)
    return static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(u, v))));
  if constexpr (E == 8)
    return static_cast<uint32_t>(_mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(u, v))));
  return 0;
}

// AVX2, 2-byte elements: the "equal" bits of 64 bytes (32 elements), both halves' 16-bit
// compares packed to bytes and put back in element order.
WSYNC_AVX2 inline uint32_t equal16Avx2(const uint8_t* b, const uint8_t* x) {
  const auto* u = reinterpret_cast<const __m256i*>(b);
  const auto* v = reinterpret_cast<const __m256i*>(x);
  const __m256i lo = _mm256_cmpeq_epi16(_mm256_loadu_si256(u), _mm256_loadu_si256(v));
  const __m256i hi = _mm256_cmpeq_epi16(_mm256_loadu_si256(u + 1), _mm256_loadu_si256(v + 1));
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packs_epi16(lo, hi), 0xD8);
  return static_cast<uint32_t>(_mm256_movemask_epi8(packed));
}

template <int E>
WSYNC_AVX2 int64_t diffAvx2(const uint8_t* base, const uint8_t* next, int64_t len, uint64_t* bits) {
  const int64_t groups = len / 64;
  int64_t count = 0;
  for (int64_t g = 0; g < groups; ++g) {
    const uint8_t* b = base + g * 64 * E;
    const uint8_t* x = next + g * 64 * E;
    uint64_t equal = 0;
    if constexpr (E == 2) {
      equal = equal16Avx2(b, x) | static_cast<uint64_t>(equal16Avx2(b + 64, x + 64)) << 32;
    } else {
      constexpr int kPerLoad = 32 / E;  // elements per 32 bytes
      for (int k = 0; k < 2 * E; ++k)
        equal |= static_cast<uint64_t>(equalAvx2<E>(b + 32 * k, x + 32 * k)) << (k * kPerLoad);
    }
    bits[g] = ~equal;
    count += _mm_popcnt_u64(~equal);
  }
  return count + diffTail<E>(base, next, groups * 64, len, bits);
}

WSYNC_AVX2 int64_t countPopcnt(const uint8_t* p, int64_t bytes) {
  int64_t n = 0, i = 0;
  for (; i + 8 <= bytes; i += 8)
    n += _mm_popcnt_u64(load<8>(p, i / 8));
  for (; i < bytes; ++i)
    n += _mm_popcnt_u32(p[i]);
  return n;
}
#endif

}  // namespace

bool cpuHas(DeltaKernel kernel) {
#if defined(__x86_64__)
  switch (kernel) {
    case DeltaKernel::kAvx512:
#if defined(__SANITIZE_THREAD__)
      // GCC 12's ThreadSanitizer instrumentation miscompiles the 64-byte compares here (a diff
      // of 64 bf16 elements with one change reports five; clang's is right): TSan builds take
      // the AVX2 kernels.
      return false;
#endif
      return diffAvx512For(2) != nullptr && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vbmi2") &&
             __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("popcnt");
    case DeltaKernel::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("popcnt");
    case DeltaKernel::kScalar:
      return true;
  }
  return false;
#else
  return kernel == DeltaKernel::kScalar;
#endif
}

DiffFn diffFor(DeltaKernel kernel, int elem_bytes) {
  if (kernel == DeltaKernel::kAvx512) return diffAvx512For(elem_bytes);
#if defined(__x86_64__)
  if (kernel == DeltaKernel::kAvx2) {
    switch (elem_bytes) {
      case 1:
        return diffAvx2<1>;
      case 2:
        return diffAvx2<2>;
      case 4:
        return diffAvx2<4>;
      default:
        return diffAvx2<8>;
    }
  }
#endif
  switch (elem_bytes) {
    case 1:
      return diffScalar<1>;
    case 2:
      return diffScalar<2>;
    case 4:
      return diffScalar<4>;
    default:
      return diffScalar<8>;
  }
}

const Movers& moversFor(DeltaKernel kernel, int elem_bytes) {
  if (kernel == DeltaKernel::kAvx512) return *moversAvx512For(elem_bytes);
  switch (elem_bytes) {
    case 1:
      return kBitMovers<1>;
    case 2:
      return kBitMovers<2>;
    case 4:
      return kBitMovers<4>;
    default:
      return kBitMovers<8>;
  }
}

int64_t countBits(DeltaKernel kernel, const uint8_t* p, int64_t bytes) {
#if defined(__x86_64__)
  if (kernel != DeltaKernel::kScalar) return countPopcnt(p, bytes);
#endif
  (void)kernel;
  return countScalar(p, bytes);
}

}  // namespace wsync::delta::scan
