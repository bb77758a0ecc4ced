// Host block quantization (quant/block_quant.h): the walk over a piece's rows and block segments,
// the scales, and the scalar inner loops. The arithmetic is quant/block_quant_math.h.
#include "quant/block_quant.h"

#include <cstring>
#include <string>
#include <vector>

#include "quant/block_quant_math.h"
#include "quant/block_quant_segments.h"

namespace wsync {
namespace {

namespace qm = quant_math;

// Calls fn(src_row, dst_offset, cover_row_base, column_offset, width) for every row of `piece`
// (every index of the dims but the last), in row-major order: `src_row` points at the row's first
// element, `dst_offset` is the row's first element in row-major order over piece.box.extent,
// `cover_row_base` is the index of the row's first block in blockCover(piece.box, s) row-major.
template <typename Fn>
void forEachRow(const PieceView& piece, const BlockScaling& s, Fn&& fn) {
  const Box& box = piece.box;
  const int r = box.rank();
  const Box cover = blockCover(box, s);
  const int64_t width = box.extent[r - 1];
  const size_t esize = dtypeSize(piece.dtype);
  int64_t rows = 1;
  for (int d = 0; d < r - 1; ++d)
    rows *= box.extent[d];
  Dims index = Dims::zeros(r);
  for (int64_t row = 0; row < rows; ++row) {
    int64_t src_elems = 0;
    int64_t cover_index = 0;
    for (int d = 0; d < r - 1; ++d) {
      src_elems += index[d] * piece.strides[d];
      const int64_t cover_coord =
          d == r - 2 ? (box.offset[d] + index[d]) / s.block_rows - cover.offset[d] : index[d];
      cover_index = cover_index * cover.extent[d] + cover_coord;
    }
    cover_index *= cover.extent[r - 1];
    const auto* src =
        static_cast<const uint8_t*>(piece.data) + src_elems * static_cast<int64_t>(esize);
    fn(src, row * width, cover_index, box.offset[r - 1], width);
    for (int d = r - 2; d >= 0; --d) {  // odometer over the row dims
      if (++index[d] < box.extent[d]) break;
      index[d] = 0;
    }
  }
}

// Calls fn(first_column_in_row, count, block_column_in_cover) for each block segment of a row
// whose first column is `column_offset` (global) and which holds `width` columns.
template <typename Fn>
void forEachSegment(int64_t column_offset, int64_t width, int64_t block_cols, Fn&& fn) {
  const int64_t first_block = column_offset / block_cols;
  int64_t c = 0;
  while (c < width) {
    const int64_t global = column_offset + c;
    const int64_t block = global / block_cols;
    const int64_t end = (block + 1) * block_cols - column_offset;
    const int64_t count = (end < width ? end : width) - c;
    fn(c, count, block - first_block);
    c += count;
  }
}

struct KernelFns {
  quant_detail::SegmentAmaxFn amax;
  quant_detail::SegmentQuantizeFn quantize;
};

KernelFns kernelFns(HostQuantKernel k) {
  if (k == HostQuantKernel::kAvx512) {
    return {quant_detail::segmentAmaxAvx512, quant_detail::segmentQuantizeAvx512};
  }
  return {quant_detail::segmentAmaxScalar, quant_detail::segmentQuantizeScalar};
}

Status checkKernel(HostQuantKernel k) {
  if (!hostQuantKernelAvailable(k)) {
    return invalidArgument(std::string("host quantization path ") + hostQuantKernelName(k) +
                           " is not available on this CPU");
  }
  return Status::ok();
}

// The multiplier of every block of the cover from its scales (block_quant_math.h).
void multipliers(const void* scales, int64_t n, ScaleFormat format, float* m) {
  if (format == ScaleFormat::kE8M0) {
    const auto* e = static_cast<const uint8_t*>(scales);
    for (int64_t i = 0; i < n; ++i)
      m[i] = qm::multiplierOfE8m0(e[i]);
  } else {
    const auto* f = static_cast<const float*>(scales);
    for (int64_t i = 0; i < n; ++i)
      m[i] = qm::multiplierOfFloatScale(f[i]);
  }
}

}  // namespace

float mergeAmax(float a, float b) {
  return qm::mergeAmax(a, b);
}

std::string checkPiece(const PieceView& piece, const Dims& shape, const BlockScaling& s) {
  if (piece.dtype != DType::kFloat32 && piece.dtype != DType::kBFloat16 &&
      piece.dtype != DType::kFloat16) {
    return std::string("block quantization takes float32, bfloat16 or float16, not ") +
           dtypeName(piece.dtype);
  }
  if (!validScaleFormat(static_cast<int>(s.format))) return "unknown scale format";
  if (s.block_rows < 1 || s.block_cols < 1) return describe(s) + ": a block extent is below 1";
  const int r = shape.size();
  if (r < 2) return "block quantization needs a weight of rank >= 2, not " + shape.toString();
  if (piece.box.rank() != r || piece.strides.size() != r) {
    return "piece " + piece.box.toString() + " (strides " + piece.strides.toString() +
           ") does not have the rank of shape " + shape.toString();
  }
  if (!piece.box.fitsIn(shape)) {
    return "piece " + piece.box.toString() + " is outside shape " + shape.toString();
  }
  if (piece.strides[r - 1] != 1) {
    return "piece strides " + piece.strides.toString() + ": the innermost stride must be 1";
  }
  if (piece.data == nullptr && !piece.box.empty()) return "piece has no data pointer";
  return {};
}

bool hostQuantKernelAvailable(HostQuantKernel k) {
  return k == HostQuantKernel::kScalar || quant_detail::cpuHasAvx512();
}

HostQuantKernel bestHostQuantKernel() {
  return quant_detail::cpuHasAvx512() ? HostQuantKernel::kAvx512 : HostQuantKernel::kScalar;
}

const char* hostQuantKernelName(HostQuantKernel k) {
  return k == HostQuantKernel::kAvx512 ? "avx512" : "scalar";
}

Status blockAmaxHostWith(HostQuantKernel k, const PieceView& piece, const Dims& shape,
                         const BlockScaling& s, float* amax) {
  if (Status st = checkKernel(k); !st) return st;
  if (std::string why = checkPiece(piece, shape, s); !why.empty()) return invalidArgument(why);
  if (piece.box.empty()) return Status::ok();
  const Box cover = blockCover(piece.box, s);
  const int64_t blocks = cover.volume();
  for (int64_t i = 0; i < blocks; ++i)
    amax[i] = 0.0f;
  const KernelFns fns = kernelFns(k);
  const size_t esize = dtypeSize(piece.dtype);
  forEachRow(
      piece, s, [&](const uint8_t* src, int64_t, int64_t cover_base, int64_t col0, int64_t w) {
        forEachSegment(col0, w, s.block_cols, [&](int64_t c, int64_t count, int64_t block_col) {
          float& a = amax[cover_base + block_col];
          a = fns.amax(src + c * static_cast<int64_t>(esize), piece.dtype, count, a);
        });
      });
  return Status::ok();
}

Status blockAmaxHost(const PieceView& piece, const Dims& shape, const BlockScaling& s,
                     float* amax) {
  return blockAmaxHostWith(bestHostQuantKernel(), piece, shape, s, amax);
}

void scalesFromAmax(const float* amax, int64_t n, ScaleFormat format, void* scales) {
  switch (format) {
    case ScaleFormat::kFloat32:
      for (int64_t i = 0; i < n; ++i)
        static_cast<float*>(scales)[i] = qm::float32Scale(amax[i]);
      return;
    case ScaleFormat::kPow2Float32:
      for (int64_t i = 0; i < n; ++i)
        static_cast<float*>(scales)[i] = qm::pow2Scale(amax[i]);
      return;
    case ScaleFormat::kFloat32Gpu:
      for (int64_t i = 0; i < n; ++i)
        static_cast<float*>(scales)[i] = qm::float32GpuScale(amax[i]);
      return;
    case ScaleFormat::kE8M0:
      for (int64_t i = 0; i < n; ++i)
        static_cast<uint8_t*>(scales)[i] = qm::e8m0Scale(amax[i]);
      return;
  }
}

Status quantizeBlocksHostWith(HostQuantKernel k, const PieceView& piece, const Dims& shape,
                              const BlockScaling& s, const void* scales, uint8_t* dst) {
  if (Status st = checkKernel(k); !st) return st;
  if (std::string why = checkPiece(piece, shape, s); !why.empty()) return invalidArgument(why);
  if (piece.box.empty()) return Status::ok();
  const Box cover = blockCover(piece.box, s);
  std::vector<float> m(static_cast<size_t>(cover.volume()));
  multipliers(scales, cover.volume(), s.format, m.data());
  const KernelFns fns = kernelFns(k);
  const size_t esize = dtypeSize(piece.dtype);
  forEachRow(
      piece, s, [&](const uint8_t* src, int64_t dst0, int64_t cover_base, int64_t col0, int64_t w) {
        forEachSegment(col0, w, s.block_cols, [&](int64_t c, int64_t count, int64_t block_col) {
          fns.quantize(src + c * static_cast<int64_t>(esize), piece.dtype, count,
                       m[static_cast<size_t>(cover_base + block_col)], dst + dst0 + c);
        });
      });
  return Status::ok();
}

Status quantizeBlocksHost(const PieceView& piece, const Dims& shape, const BlockScaling& s,
                          const void* scales, uint8_t* dst) {
  return quantizeBlocksHostWith(bestHostQuantKernel(), piece, shape, s, scales, dst);
}

namespace quant_detail {
namespace {

template <typename Load>
float amaxLoop(int64_t n, float amax, Load&& load) {
  for (int64_t i = 0; i < n; ++i)
    amax = qm::mergeAmax(amax, qm::absOf(load(i)));
  return amax;
}

template <typename Load>
void quantizeLoop(int64_t n, float m, uint8_t* dst, Load&& load) {
  for (int64_t i = 0; i < n; ++i)
    dst[i] = qm::quantizeElement(load(i), m);
}

uint16_t load16(const void* src, int64_t i) {
  uint16_t h;
  std::memcpy(&h, static_cast<const uint8_t*>(src) + 2 * i, sizeof h);
  return h;
}

}  // namespace

float segmentAmaxScalar(const void* src, DType dtype, int64_t n, float amax) {
  switch (dtype) {
    case DType::kBFloat16:
      return amaxLoop(n, amax, [&](int64_t i) { return qm::floatOfBFloat16(load16(src, i)); });
    case DType::kFloat16:
      return amaxLoop(n, amax, [&](int64_t i) { return qm::floatOfFloat16(load16(src, i)); });
    default:
      return amaxLoop(n, amax, [&](int64_t i) { return static_cast<const float*>(src)[i]; });
  }
}

void segmentQuantizeScalar(const void* src, DType dtype, int64_t n, float m, uint8_t* dst) {
  switch (dtype) {
    case DType::kBFloat16:
      quantizeLoop(n, m, dst, [&](int64_t i) { return qm::floatOfBFloat16(load16(src, i)); });
      return;
    case DType::kFloat16:
      quantizeLoop(n, m, dst, [&](int64_t i) { return qm::floatOfFloat16(load16(src, i)); });
      return;
    default:
      quantizeLoop(n, m, dst, [&](int64_t i) { return static_cast<const float*>(src)[i]; });
      return;
  }
}

}  // namespace quant_detail
}  // namespace wsync
