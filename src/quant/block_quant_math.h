// The per-block and per-element arithmetic of block quantization (quant/block_quant.h), shared by
// the host code and the CUDA kernels (kernels/block_quant_kernels.cu) so that both compute the same
// bytes. C++17, no project includes: nvcc compiles it. docs/block_fp8.md derives every step from
// the engines' quantizers (vLLM per_block_cast_to_fp8 and _mxfp8_e4m3_quantize_torch, torch 2.13).
//
// Every format quantizes an element as e4m3(x * m), with one float32 multiplier m per block:
//   kFloat32, kPow2Float32: m = 1 / s (torch: `x * (1.0 / sf)`, one rounding each);
//   kE8M0: m = 2^(127 - e), exactly what torch's x / 2^(e - 127) rounds to (powers of two);
//          an e8m0 NaN scale (0xff) gives m = NaN.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define WSYNC_QUANT_HD __host__ __device__ __forceinline__
#else
#define WSYNC_QUANT_HD inline
#endif

namespace wsync::quant_math {

inline constexpr float kE4m3Max = 448.0f;                 // torch.finfo(torch.float8_e4m3fn).max
inline constexpr float kFloat32AmaxFloor = 1e-4f;         // per_block_cast_to_fp8's clamp(1e-4)
inline constexpr float kE8m0AmaxFloor = 1.17549435e-38f;  // torch.finfo(torch.float32).tiny
inline constexpr uint32_t kNaNBits = 0x7fffffffu;         // the NaN amax and float32 scales hold
inline constexpr uint8_t kE4m3NaN = 0x7f;                 // every NaN element (sign dropped)
inline constexpr uint8_t kE8m0NaN = 0xff;                 // an e8m0 scale of a block holding a NaN
inline constexpr int kE8m0MaxBiased = 254;                // clamp(0, 254) of the biased exponent

WSYNC_QUANT_HD uint32_t bitsOf(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

WSYNC_QUANT_HD float floatOf(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// a * b and a + b each rounded once: never contracted into an FMA (nvcc fuses a multiply and a
// dependent add by default; wsync_quant builds with -ffp-contract=off on the host).
WSYNC_QUANT_HD float mulRounded(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

WSYNC_QUANT_HD float addRounded(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

WSYNC_QUANT_HD float divRounded(float a, float b) {  // IEEE division even under -prec-div=false
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

WSYNC_QUANT_HD bool isNaN(float f) {
  return (bitsOf(f) & 0x7fffffffu) > 0x7f800000u;
}

WSYNC_QUANT_HD float nanValue() {
  return floatOf(kNaNBits);
}

// |x| of one element (clears the sign bit, as torch's abs does).
WSYNC_QUANT_HD float absOf(float x) {
  return floatOf(bitsOf(x) & 0x7fffffffu);
}

// max of two partial maxima (non-negative or NaN), NaN when either is NaN.
WSYNC_QUANT_HD float mergeAmax(float a, float b) {
  if (isNaN(a) || isNaN(b)) return nanValue();
  return a > b ? a : b;
}

// 2^n as float32 for n in [-149, 127]; +inf above, 0 below (exact: no libm).
WSYNC_QUANT_HD float exp2Int(int n) {
  if (n > 127) return floatOf(0x7f800000u);
  if (n >= -126) return floatOf(static_cast<uint32_t>(n + 127) << 23);
  if (n >= -149) return floatOf(1u << (n + 149));
  return 0.0f;
}

// Normal y = 2^k (1 + f) with at least this mantissa (f >= 2^-17) has ceilLog2AsTorch(y) = k + 1:
// log2(1 + f) >= f >= 2^-17 is more than half the float32 spacing near any |k| <= 127 (at most
// 2^-17), so log2(y) rounds above k and at most to k + 1. Checked against the double log2 for
// every such float32 (tests/unit/block_quant_test.cc samples it; docs/block_fp8.md).
inline constexpr uint32_t kCeilLog2ExactMantissa = 64;

// torch.ceil(torch.log2(y)) for y > 0 (or +inf) in float32: torch's log2 rounds to the nearest
// float32, which is the integer k for y a few ulps above 2^k (|k| >= 2), so the result is k
// there, not the exact ceiling k + 1. float(log2(double)) is that nearest float32 (checked
// against torch around every power of two, subnormals included: docs/block_fp8.md). Normal y
// whose mantissa is at least kCeilLog2ExactMantissa take k + 1 from the bits (the double log2 is
// a long routine on a GPU, once per block of 32 elements in MXFP8).
WSYNC_QUANT_HD float ceilLog2AsTorch(float y) {
  const uint32_t bits = bitsOf(y);
  const uint32_t exponent = bits >> 23;
  if (exponent != 0 && exponent < 255 && (bits & 0x7fffffu) >= kCeilLog2ExactMantissa)
    return static_cast<float>(static_cast<int>(exponent) - 126);
  const float l = static_cast<float>(log2(static_cast<double>(y)));
  return ceilf(l);
}

// max(amax, floor) as torch's clamp(min=floor): NaN stays NaN.
WSYNC_QUANT_HD float clampMin(float amax, float floor) {
  if (isNaN(amax)) return nanValue();
  return amax < floor ? floor : amax;
}

// float32 scale of a block (kFloat32): max(amax, 1e-4) / 448 (true float32 division, as torch on
// the CPU computes `x_amax / fp8_max`). NaN amax -> NaN, +inf -> +inf.
WSYNC_QUANT_HD float float32Scale(float amax) {
  const float a = clampMin(amax, kFloat32AmaxFloor);
  if (isNaN(a)) return nanValue();
  return divRounded(a, kE4m3Max);
}

// kFloat32Gpu: max(amax, 1e-4) * fl(1 / 448), as torch on CUDA computes `x_amax / fp8_max`
// (div_true_kernel_cuda multiplies by the float32 reciprocal of a scalar divisor).
WSYNC_QUANT_HD float float32GpuScale(float amax) {
  const float a = clampMin(amax, kFloat32AmaxFloor);
  if (isNaN(a)) return nanValue();
  return mulRounded(a, divRounded(1.0f, kE4m3Max));
}

// kPow2Float32: 2^ceil(log2(float32Scale(amax))) (torch.pow(2.0, ceil(log2(sf.abs())))).
WSYNC_QUANT_HD float pow2Scale(float amax) {
  const float s = float32Scale(amax);
  if (isNaN(s)) return nanValue();
  const float c = ceilLog2AsTorch(s);  // in [-22, 120] for finite amax, +inf for +inf
  if (c > 127.0f) return floatOf(0x7f800000u);
  return exp2Int(static_cast<int>(c));
}

// kE8M0: clamp(ceil(log2(max(amax, tiny) / 448)) + 127, 0, 254); 0xff (e8m0 NaN) for a NaN amax.
WSYNC_QUANT_HD uint8_t e8m0Scale(float amax) {
  const float a = clampMin(amax, kE8m0AmaxFloor);
  if (isNaN(a)) return kE8m0NaN;
  float biased = ceilLog2AsTorch(divRounded(a, kE4m3Max)) + 127.0f;
  if (biased < 0.0f) biased = 0.0f;
  if (biased > static_cast<float>(kE8m0MaxBiased)) biased = static_cast<float>(kE8m0MaxBiased);
  return static_cast<uint8_t>(biased);
}

// The float32 scale of a float format (kFloat32, kFloat32Gpu, kPow2Float32; the ScaleFormat value).
WSYNC_QUANT_HD float floatScale(int format, float amax) {
  return format == 4 ? float32GpuScale(amax) : format == 2 ? pow2Scale(amax) : float32Scale(amax);
}

// The multiplier m of a block from its float32 scale (kFloat32, kPow2Float32): 1 / s.
WSYNC_QUANT_HD float multiplierOfFloatScale(float s) {
  return divRounded(1.0f, s);
}

// The multiplier m of a block from its e8m0 scale: 2^(127 - e), NaN for 0xff.
WSYNC_QUANT_HD float multiplierOfE8m0(uint8_t e) {
  if (e == kE8m0NaN) return nanValue();
  return exp2Int(127 - static_cast<int>(e));
}

// float32 -> float8 e4m3fn as torch 2.13 converts (c10 fp8e4m3fn_from_fp32_value): round to
// nearest even, saturating: finite values and infinities beyond 448 give +-448 (0x7e / 0xfe).
// A NaN gives 0x7f whatever its sign (torch keeps the sign, but which NaN torch produces depends
// on its CPU code path; docs/block_fp8.md).
WSYNC_QUANT_HD uint8_t e4m3FromFloat(float f) {
  uint32_t bits = bitsOf(f);
  const uint32_t sign = bits & 0x80000000u;
  bits ^= sign;
  if (bits > 0x7f800000u) return kE4m3NaN;
  uint8_t result;
  if (bits >= (1087u << 20)) {  // 480 and above (rounds past 448): saturate
    result = 0x7e;
  } else if (bits < (121u << 23)) {  // below 2^-6: subnormal e4m3, rounded by a float add
    const uint32_t denorm_mask = 141u << 23;
    result =
        static_cast<uint8_t>(bitsOf(addRounded(floatOf(bits), floatOf(denorm_mask))) - denorm_mask);
  } else {
    const uint32_t mant_odd = (bits >> 20) & 1u;
    bits += (static_cast<uint32_t>(7 - 127) << 23) + 0x7ffffu;
    bits += mant_odd;
    result = static_cast<uint8_t>(bits >> 20);
    if (result == 0x7f) result = 0x7e;  // rounded up into the NaN pattern: saturate
  }
  return static_cast<uint8_t>(result | (sign >> 24));
}

// One element: e4m3(x * m).
WSYNC_QUANT_HD uint8_t quantizeElement(float x, float m) {
  return e4m3FromFloat(mulRounded(x, m));
}

// bfloat16 / float16 bits -> float (exact). float16 by bit manipulation, subnormals included.
WSYNC_QUANT_HD float floatOfBFloat16(uint16_t h) {
  return floatOf(static_cast<uint32_t>(h) << 16);
}

WSYNC_QUANT_HD float floatOfFloat16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return floatOf(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) return floatOf(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  // zero or subnormal: mantissa * 2^-24, exact in float32
  const float magnitude = mulRounded(static_cast<float>(mantissa), floatOf(0x33800000u));  // 2^-24
  return floatOf(sign | bitsOf(magnitude));
}

}  // namespace wsync::quant_math
