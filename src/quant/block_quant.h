// Block quantization on the host: a trainer's piece of a bf16 / fp16 / fp32 weight into float8
// e4m3 bytes and one scale per block (layout/block_scaling.h), bit for bit what the engines' own
// quantizers give for the full tensor (vLLM's per_block_cast_to_fp8, with and without use_ue8m0;
// _mxfp8_e4m3_quantize_torch for e8m0), whatever part of the tensor the piece holds.
// Two steps, so that blocks whose elements sit on several trainers can be completed first:
//   1. blockAmaxHost: per block the piece intersects, the max |x| over the piece's elements in it;
//      the maxima of a block over all trainers are merged with mergeAmax (NaN-propagating, exact);
//   2. scalesFromAmax, then quantizeBlocksHost with the complete scales.
// Non-finite values behave as in the engines' quantizers: a NaN in a block makes its scale and
// every element of the block NaN; an infinity makes the scale infinite, the block's finite
// elements (+-)0 and the infinite ones NaN (float32 and pow2 scales); e8m0: an infinity gives
// scale 254 and saturates to +-448, a NaN gives scale 0xff (the MX NaN; vLLM writes 0). Every
// NaN element is 0x7f. See docs/block_fp8.md.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "layout/block_scaling.h"
#include "layout/box.h"
#include "layout/dtype.h"

namespace wsync {

// The elements of `box` (global coordinates of a weight) as a rank holds them: element
// box.offset at `data`, neighbours `strides` elements apart per dim (innermost 1).
struct PieceView {
  const void* data = nullptr;
  DType dtype = DType::kBFloat16;  // float32, bfloat16 or float16
  Box box;
  Dims strides;
};

// max(|a|, |b|) of two partial maxima, NaN when either is NaN.
float mergeAmax(float a, float b);

// For every block of blockCover(piece.box, s), the NaN-propagating max |x| over the piece's
// elements in it, into `amax` (float32, row-major over the cover's extent). `shape`: the weight's
// global shape. INVALID_ARGUMENT for a bad dtype or a box outside `shape`.
Status blockAmaxHost(const PieceView& piece, const Dims& shape, const BlockScaling& s, float* amax);

// The scales of `n` blocks from their complete maxima: float32 for kFloat32 / kPow2Float32, uint8
// for kE8M0, into `scales`.
void scalesFromAmax(const float* amax, int64_t n, ScaleFormat format, void* scales);

// Quantizes the piece into `dst`: e4m3 bytes, row-major over piece.box.extent, each element with
// its block's scale (`scales`: row-major over blockCover(piece.box, s), as scalesFromAmax wrote
// them). Vectorized with AVX-512 where the CPU has it, else scalar; both give the same bytes.
Status quantizeBlocksHost(const PieceView& piece, const Dims& shape, const BlockScaling& s,
                          const void* scales, uint8_t* dst);

// ---- added for tests and benchmarks (same contracts as above, with the host code chosen) -------

// The host code paths; quantizeBlocksHost and blockAmaxHost take the fastest the CPU has. Every
// path gives the same amax and the same bytes.
enum class HostQuantKernel : uint8_t { kScalar, kAvx512 };
bool hostQuantKernelAvailable(HostQuantKernel k);  // kAvx512: the CPU has AVX-512F
HostQuantKernel bestHostQuantKernel();
const char* hostQuantKernelName(HostQuantKernel k);  // "scalar", "avx512"

// INVALID_ARGUMENT when `k` is not available on this CPU, else as the functions above.
Status blockAmaxHostWith(HostQuantKernel k, const PieceView& piece, const Dims& shape,
                         const BlockScaling& s, float* amax);
Status quantizeBlocksHostWith(HostQuantKernel k, const PieceView& piece, const Dims& shape,
                              const BlockScaling& s, const void* scales, uint8_t* dst);

// An empty string when `piece` can be quantized under `s` for a weight of `shape` (dtype, ranks,
// box inside the shape, innermost stride 1, block extents >= 1, a known format), else why not.
// The CUDA launchers (kernels/block_quant_kernels.h) check with it too.
std::string checkPiece(const PieceView& piece, const Dims& shape, const BlockScaling& s);

}  // namespace wsync
