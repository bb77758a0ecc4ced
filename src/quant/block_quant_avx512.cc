// AVX-512F inner loops of host block quantization (quant/block_quant_segments.h): 16 elements per
// step, the tail by the scalar loops. Compiled with target attributes, called only when
// __builtin_cpu_supports("avx512f"). The e4m3 rounding is block_quant_math.h's e4m3FromFloat
// (torch's c10 conversion) lane by lane in integer arithmetic, so the bytes equal the scalar ones.
#include <cstdint>

#include "quant/block_quant_math.h"
#include "quant/block_quant_segments.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// GCC 12 flags its own intrinsics' _mm512_undefined_* placeholders (-Wmaybe-uninitialized).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#define WSYNC_QUANT_HAVE_AVX512 1
#define WSYNC_AVX512 __attribute__((target("avx512f")))
#endif

namespace wsync::quant_detail {

#if defined(WSYNC_QUANT_HAVE_AVX512)
namespace {

// 16 elements of `dtype` at `src` as float32 (exact conversions).
WSYNC_AVX512 inline __m512 load16(const void* src, DType dtype) {
  switch (dtype) {
    case DType::kBFloat16: {
      const __m256i h = _mm256_loadu_si256(static_cast<const __m256i*>(src));
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    case DType::kFloat16:
      return _mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i*>(src)));
    default:
      return _mm512_loadu_ps(src);
  }
}

// e4m3FromFloat of 16 lanes, as 32-bit lanes holding the byte. One simplification of the scalar
// code, same results: every magnitude from 448 up (finite or inf) gives 0x7e there (448..464
// rounds to 448, 464..480 rounds into the NaN pattern and saturates, 480 up saturates), so one
// compare against 448 replaces the scalar code's two saturation checks.
WSYNC_AVX512 inline __m512i e4m3FromFloat16(__m512 v) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i sign = _mm512_and_si512(bits, _mm512_set1_epi32(static_cast<int>(0x80000000u)));
  const __m512i a = _mm512_xor_si512(bits, sign);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(a, _mm512_set1_epi32(0x7f800000));
  const __mmask16 saturate = _mm512_cmpge_epu32_mask(a, _mm512_set1_epi32(0x43e00000));  // 448
  const __mmask16 subnormal = _mm512_cmplt_epu32_mask(a, _mm512_set1_epi32(121 << 23));
  // normal e4m3: rebias, round to nearest even, take bits 20..26
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(a, 20), _mm512_set1_epi32(1));
  const uint32_t bias = (static_cast<uint32_t>(7 - 127) << 23) + 0x7ffffu;
  __m512i r = _mm512_add_epi32(a, _mm512_set1_epi32(static_cast<int>(bias)));
  r = _mm512_srli_epi32(_mm512_add_epi32(r, odd), 20);
  // subnormal e4m3: (a as float) + 2^14, minus its bits
  const __m512i denorm_mask = _mm512_set1_epi32(141 << 23);
  const __m512 shifted = _mm512_add_ps(_mm512_castsi512_ps(a), _mm512_castsi512_ps(denorm_mask));
  r = _mm512_mask_sub_epi32(r, subnormal, _mm512_castps_si512(shifted), denorm_mask);
  r = _mm512_mask_mov_epi32(r, saturate, _mm512_set1_epi32(0x7e));
  r = _mm512_or_si512(r, _mm512_srli_epi32(sign, 24));
  return _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(quant_math::kE4m3NaN));
}

int64_t elementSize(DType dtype) {
  return dtype == DType::kFloat32 ? 4 : 2;
}

}  // namespace

bool cpuHasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

WSYNC_AVX512 float segmentAmaxAvx512(const void* src, DType dtype, int64_t n, float amax) {
  const auto* p = static_cast<const uint8_t*>(src);
  const int64_t esize = elementSize(dtype);
  const __m512i magnitude = _mm512_set1_epi32(0x7fffffff);
  __m512 best = _mm512_setzero_ps();
  __mmask16 any_nan = 0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_castsi512_ps(
        _mm512_and_si512(_mm512_castps_si512(load16(p + i * esize, dtype)), magnitude));
    any_nan |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    best = _mm512_max_ps(best, x);
  }
  float result = any_nan ? quant_math::nanValue() : _mm512_reduce_max_ps(best);
  result = quant_math::mergeAmax(amax, result);
  return segmentAmaxScalar(p + i * esize, dtype, n - i, result);
}

WSYNC_AVX512 void segmentQuantizeAvx512(const void* src, DType dtype, int64_t n, float m,
                                        uint8_t* dst) {
  const auto* p = static_cast<const uint8_t*>(src);
  const int64_t esize = elementSize(dtype);
  const __m512 mul = _mm512_set1_ps(m);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i q = e4m3FromFloat16(_mm512_mul_ps(load16(p + i * esize, dtype), mul));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm512_cvtepi32_epi8(q));
  }
  segmentQuantizeScalar(p + i * esize, dtype, n - i, m, dst + i);
}

#else

bool cpuHasAvx512() {
  return false;
}
float segmentAmaxAvx512(const void* src, DType dtype, int64_t n, float amax) {
  return segmentAmaxScalar(src, dtype, n, amax);
}
void segmentQuantizeAvx512(const void* src, DType dtype, int64_t n, float m, uint8_t* dst) {
  segmentQuantizeScalar(src, dtype, n, m, dst);
}

#endif

}  // namespace wsync::quant_detail
