// The first block quantization kernels (kernels/block_quant_kernels.h, "legacy"): one warp per
// block with scalar loads for the maxima, one element per thread for the bytes. Kept for the
// kernel bench's old-vs-new line and as a second device implementation in the GPU test; the
// library uses block_quant_kernels.cu. nvcc, C++17.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "common/cuda_check.h"
#include "kernels/block_quant_kernels.h"
#include "quant/block_quant_geometry.h"
#include "quant/block_quant_math.h"

namespace wsync {
namespace {

namespace qm = quant_math;
using block_quant_kernels::BlockPart;
using block_quant_kernels::Geometry;
using block_quant_kernels::RowPlace;

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;
constexpr int64_t kMaxGrid = 65535LL * 32;  // grid-stride loops cover the rest

int gridFor(int64_t work_items, int per_block) {
  const int64_t blocks = (work_items + per_block - 1) / per_block;
  return static_cast<int>(blocks < kMaxGrid ? blocks : kMaxGrid);
}

// One warp per block of the cover: the part of the block inside the piece, lanes along columns,
// then a warp max (exact, so the order does not matter) and a warp vote for NaN.
__global__ void blockAmaxKernel(Geometry g, float* amax) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
       b < g.cover_volume; b += warps) {
    const BlockPart p = block_quant_kernels::blockPart(g, b);
    float best = 0.0f;
    bool nan = false;
    for (int64_t row = p.row_lo; row < p.row_hi; ++row) {
      const int64_t base = p.base + row * p.row_stride;
      for (int64_t col = p.col_lo + lane; col < p.col_hi; col += 32) {
        const float a = qm::absOf(block_quant_kernels::loadElement(g, base + col));
        nan |= qm::isNaN(a);
        best = a > best ? a : best;
      }
    }
    for (int step = 16; step > 0; step /= 2)
      best = fmaxf(best, __shfl_xor_sync(0xffffffffu, best, step));
    nan = __any_sync(0xffffffffu, nan);
    if (lane == 0) amax[b] = nan ? qm::nanValue() : best;
  }
}

// Rows of the piece along grid y (grid-stride), columns along x: a row's source offset and first
// cover block once per row and thread; per element the block column and the multiplier.
__global__ void quantizeKernel(Geometry g, const void* scales, bool e8m0, bool narrow,
                               uint8_t* dst) {
  const int64_t width = g.extent[g.rank - 1];
  const int64_t rows = g.volume / width;
  for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
    const RowPlace place = block_quant_kernels::rowPlace(g, row);
    for (int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; col < width;
         col += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const int64_t k = block_quant_kernels::scaleIndex(g, place, col, narrow);
      const float m = block_quant_kernels::multiplierAt(scales, e8m0, k);
      dst[row * width + col] =
          qm::quantizeElement(block_quant_kernels::loadElement(g, place.src + col), m);
    }
  }
}

Status checked(const PieceView& piece, const Dims& shape, const BlockScaling& s) {
  const std::string why = checkPiece(piece, shape, s);
  return why.empty() ? Status::ok() : invalidArgument(why);
}

}  // namespace

Status launchBlockAmaxLegacy(const PieceView& piece, const Dims& shape, const BlockScaling& s,
                             float* amax, cudaStream_t stream) {
  if (Status st = checked(piece, shape, s); !st) return st;
  if (piece.box.empty()) return Status::ok();
  if (amax == nullptr) return invalidArgument("launchBlockAmaxLegacy: no amax array");
  const Geometry g = block_quant_kernels::geometryOf(piece, s);
  blockAmaxKernel<<<gridFor(g.cover_volume, kWarpsPerBlock), kThreads, 0, stream>>>(g, amax);
  return cudaCheck(cudaGetLastError(), "launchBlockAmaxLegacy");
}

Status launchQuantizeBlocksLegacy(const PieceView& piece, const Dims& shape, const BlockScaling& s,
                                  const void* scales, uint8_t* dst, cudaStream_t stream) {
  if (Status st = checked(piece, shape, s); !st) return st;
  if (piece.box.empty()) return Status::ok();
  if (scales == nullptr || dst == nullptr) {
    return invalidArgument("launchQuantizeBlocksLegacy: null scales or destination");
  }
  const Geometry g = block_quant_kernels::geometryOf(piece, s);
  const int64_t width = piece.box.extent[g.rank - 1];
  const int64_t rows = g.volume / width;
  // about 8 elements per thread and row along x; rows along y (at most 65535, grid-stride)
  const int64_t x_blocks = (width + 8 * kThreads - 1) / (8 * kThreads);
  const dim3 grid(static_cast<unsigned>(x_blocks < 1024 ? x_blocks : 1024),
                  static_cast<unsigned>(rows < 65535 ? rows : 65535));
  const bool narrow = shape[shape.size() - 1] <= INT32_MAX && s.block_cols <= INT32_MAX;
  quantizeKernel<<<grid, kThreads, 0, stream>>>(g, scales, s.format == ScaleFormat::kE8M0, narrow,
                                                dst);
  return cudaCheck(cudaGetLastError(), "launchQuantizeBlocksLegacy");
}

}  // namespace wsync
