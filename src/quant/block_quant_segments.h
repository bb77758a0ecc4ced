// Internal to src/quant: the inner loops of block quantization over one contiguous run of a row
// that lies in a single block (a "segment"), one implementation per host code path. The scalar
// ones are the reference; block_quant_avx512.cc holds the vectorized ones, which give the same
// results (max is exact; the e4m3 rounding is the same integer arithmetic, lane by lane).
#pragma once

#include <cstdint>

#include "layout/dtype.h"

namespace wsync::quant_detail {

// max |x| over the `n` elements at `src` (float32, bfloat16 or float16), NaN when one is NaN;
// merged into `amax` with quant_math::mergeAmax.
using SegmentAmaxFn = float (*)(const void* src, DType dtype, int64_t n, float amax);
// dst[i] = e4m3(x[i] * m) for the `n` elements at `src`.
using SegmentQuantizeFn = void (*)(const void* src, DType dtype, int64_t n, float m, uint8_t* dst);

float segmentAmaxScalar(const void* src, DType dtype, int64_t n, float amax);
void segmentQuantizeScalar(const void* src, DType dtype, int64_t n, float m, uint8_t* dst);

// False when the compiler or the CPU lacks AVX-512F; the functions are then never called.
bool cpuHasAvx512();
float segmentAmaxAvx512(const void* src, DType dtype, int64_t n, float amax);
void segmentQuantizeAvx512(const void* src, DType dtype, int64_t n, float m, uint8_t* dst);

}  // namespace wsync::quant_detail
