// Block quantization kernels (kernels/block_quant_kernels.h). The arithmetic is
// quant/block_quant_math.h, shared with the host code, so both give the same bits. Compiled by
// nvcc as C++17 (block_quant.h and what it includes are C++17).
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "common/cuda_check.h"
#include "kernels/block_quant_kernels.h"
#include "quant/block_quant_math.h"

namespace wsync {
namespace {

namespace qm = quant_math;

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;
constexpr int64_t kMaxGrid = 65535LL * 32;  // grid-stride loops cover the rest

// A piece and its block cover, by value into the kernels.
struct Geometry {
  int rank = 0;
  int dtype = 0;  // 0 float32, 1 bfloat16, 2 float16
  const void* data = nullptr;
  int64_t offset[kMaxRank] = {};
  int64_t extent[kMaxRank] = {};
  int64_t stride[kMaxRank] = {};
  int64_t cover_offset[kMaxRank] = {};
  int64_t cover_extent[kMaxRank] = {};
  int64_t block_rows = 1;
  int64_t block_cols = 1;
  int64_t volume = 0;        // elements of the piece
  int64_t cover_volume = 0;  // blocks of the cover
};

Geometry geometryOf(const PieceView& piece, const BlockScaling& s) {
  Geometry g;
  g.rank = piece.box.rank();
  g.dtype = piece.dtype == DType::kFloat32 ? 0 : piece.dtype == DType::kBFloat16 ? 1 : 2;
  g.data = piece.data;
  const Box cover = blockCover(piece.box, s);
  for (int d = 0; d < g.rank; ++d) {
    g.offset[d] = piece.box.offset[d];
    g.extent[d] = piece.box.extent[d];
    g.stride[d] = piece.strides[d];
    g.cover_offset[d] = cover.offset[d];
    g.cover_extent[d] = cover.extent[d];
  }
  g.block_rows = s.block_rows;
  g.block_cols = s.block_cols;
  g.volume = piece.box.volume();
  g.cover_volume = cover.volume();
  return g;
}

__device__ __forceinline__ float loadElement(const Geometry& g, int64_t element) {
  switch (g.dtype) {
    case 1:
      return qm::floatOfBFloat16(static_cast<const uint16_t*>(g.data)[element]);
    case 2:
      return qm::floatOfFloat16(static_cast<const uint16_t*>(g.data)[element]);
    default:
      return static_cast<const float*>(g.data)[element];
  }
}

int gridFor(int64_t work_items, int per_block) {
  const int64_t blocks = (work_items + per_block - 1) / per_block;
  return static_cast<int>(blocks < kMaxGrid ? blocks : kMaxGrid);
}

// One warp per block of the cover: the part of the block inside the piece, lanes along columns.
__global__ void blockAmaxKernel(Geometry g, float* amax) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  const int r = g.rank;
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
       b < g.cover_volume; b += warps) {
    // cover coordinates of block b; leading dims index the piece directly
    int64_t rest = b;
    int64_t lead_elems = 0;
    int64_t coord[kMaxRank];
    for (int d = r - 1; d >= 0; --d) {
      coord[d] = rest % g.cover_extent[d];
      rest /= g.cover_extent[d];
    }
    for (int d = 0; d < r - 2; ++d)
      lead_elems += coord[d] * g.stride[d];
    const int64_t brow = coord[r - 2] + g.cover_offset[r - 2];
    const int64_t bcol = coord[r - 1] + g.cover_offset[r - 1];
    const int64_t row_lo = max(brow * g.block_rows, g.offset[r - 2]);
    const int64_t row_hi = min((brow + 1) * g.block_rows, g.offset[r - 2] + g.extent[r - 2]);
    const int64_t col_lo = max(bcol * g.block_cols, g.offset[r - 1]);
    const int64_t col_hi = min((bcol + 1) * g.block_cols, g.offset[r - 1] + g.extent[r - 1]);
    float best = 0.0f;
    bool nan = false;
    for (int64_t row = row_lo; row < row_hi; ++row) {
      const int64_t base = lead_elems + (row - g.offset[r - 2]) * g.stride[r - 2] - g.offset[r - 1];
      for (int64_t col = col_lo + lane; col < col_hi; col += 32) {
        const float a = qm::absOf(loadElement(g, base + col));
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

__global__ void scalesKernel(const float* amax, int64_t n, int format, void* scales) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    switch (format) {
      case static_cast<int>(ScaleFormat::kFloat32):
        static_cast<float*>(scales)[i] = qm::float32Scale(amax[i]);
        break;
      case static_cast<int>(ScaleFormat::kPow2Float32):
        static_cast<float*>(scales)[i] = qm::pow2Scale(amax[i]);
        break;
      case static_cast<int>(ScaleFormat::kFloat32Gpu):
        static_cast<float*>(scales)[i] = qm::float32GpuScale(amax[i]);
        break;
      default:
        static_cast<uint8_t*>(scales)[i] = qm::e8m0Scale(amax[i]);
        break;
    }
  }
}

// One thread per element of the piece (grid-stride), row-major over its extent.
__global__ void quantizeKernel(Geometry g, const void* scales, bool e8m0, uint8_t* dst) {
  const int r = g.rank;
  const int64_t width = g.extent[r - 1];
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < g.volume;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t col = i % width;
    int64_t row = i / width;
    int64_t src = col;
    int64_t cover_index = 0;
    int64_t scale_stride = g.cover_extent[r - 1];
    // the row's index, innermost row dim first
    for (int d = r - 2; d >= 0; --d) {
      const int64_t idx = row % g.extent[d];
      row /= g.extent[d];
      src += idx * g.stride[d];
      const int64_t c = d == r - 2 ? (g.offset[d] + idx) / g.block_rows - g.cover_offset[d] : idx;
      cover_index += c * scale_stride;
      scale_stride *= g.cover_extent[d];
    }
    cover_index += (g.offset[r - 1] + col) / g.block_cols - g.cover_offset[r - 1];
    const float m =
        e8m0 ? qm::multiplierOfE8m0(static_cast<const uint8_t*>(scales)[cover_index])
             : qm::multiplierOfFloatScale(static_cast<const float*>(scales)[cover_index]);
    dst[i] = qm::quantizeElement(loadElement(g, src), m);
  }
}

Status checked(const PieceView& piece, const Dims& shape, const BlockScaling& s) {
  const std::string why = checkPiece(piece, shape, s);
  return why.empty() ? Status::ok() : invalidArgument(why);
}

}  // namespace

Status launchBlockAmax(const PieceView& piece, const Dims& shape, const BlockScaling& s,
                       float* amax, cudaStream_t stream) {
  if (Status st = checked(piece, shape, s); !st) return st;
  if (piece.box.empty()) return Status::ok();
  if (amax == nullptr) return invalidArgument("launchBlockAmax: no amax array");
  const Geometry g = geometryOf(piece, s);
  blockAmaxKernel<<<gridFor(g.cover_volume, kWarpsPerBlock), kThreads, 0, stream>>>(g, amax);
  return cudaCheck(cudaGetLastError(), "launchBlockAmax");
}

Status launchScalesFromAmax(const float* amax, int64_t n, ScaleFormat format, void* scales,
                            cudaStream_t stream) {
  if (!validScaleFormat(static_cast<int>(format))) {
    return invalidArgument("launchScalesFromAmax: unknown scale format");
  }
  if (n <= 0) return Status::ok();
  if (amax == nullptr || scales == nullptr) {
    return invalidArgument("launchScalesFromAmax: null amax or scales");
  }
  scalesKernel<<<gridFor(n, kThreads), kThreads, 0, stream>>>(amax, n, static_cast<int>(format),
                                                              scales);
  return cudaCheck(cudaGetLastError(), "launchScalesFromAmax");
}

Status launchQuantizeBlocks(const PieceView& piece, const Dims& shape, const BlockScaling& s,
                            const void* scales, uint8_t* dst, cudaStream_t stream) {
  if (Status st = checked(piece, shape, s); !st) return st;
  if (piece.box.empty()) return Status::ok();
  if (scales == nullptr || dst == nullptr) {
    return invalidArgument("launchQuantizeBlocks: null scales or destination");
  }
  const Geometry g = geometryOf(piece, s);
  quantizeKernel<<<gridFor(g.volume, kThreads), kThreads, 0, stream>>>(
      g, scales, s.format == ScaleFormat::kE8M0, dst);
  return cudaCheck(cudaGetLastError(), "launchQuantizeBlocks");
}

}  // namespace wsync
