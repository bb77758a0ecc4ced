// Internal to the block quantization kernels (block_quant_kernels.cu): the index arithmetic of a
// piece and its block cover, as host-and-device functions, so that
// tests/gpu/block_quant_device_test.cc can run the kernels' per-thread work on the host (a GPU
// is not needed to check which elements and scales each thread touches). C++17.
#pragma once

#include <cstdint>

#include "quant/block_quant.h"
#include "quant/block_quant_math.h"

namespace wsync::block_quant_kernels {

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

inline Geometry geometryOf(const PieceView& piece, const BlockScaling& s) {
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

WSYNC_QUANT_HD int64_t larger(int64_t a, int64_t b) {
  return a < b ? b : a;
}
WSYNC_QUANT_HD int64_t smaller(int64_t a, int64_t b) {
  return a < b ? a : b;
}

// Element `element` (in elements from g.data) as float32.
WSYNC_QUANT_HD float loadElement(const Geometry& g, int64_t element) {
  switch (g.dtype) {
    case 1:
      return quant_math::floatOfBFloat16(static_cast<const uint16_t*>(g.data)[element]);
    case 2:
      return quant_math::floatOfFloat16(static_cast<const uint16_t*>(g.data)[element]);
    default:
      return static_cast<const float*>(g.data)[element];
  }
}

// The part of cover block `b` (row-major over the cover) inside the piece: global rows
// [row_lo, row_hi) and columns [col_lo, col_hi); element (row, col) is at
// base + row * row_stride + col from g.data.
struct BlockPart {
  int64_t base = 0;
  int64_t row_stride = 0;
  int64_t row_lo = 0, row_hi = 0, col_lo = 0, col_hi = 0;
};

WSYNC_QUANT_HD BlockPart blockPart(const Geometry& g, int64_t b) {
  const int r = g.rank;
  int64_t coord[kMaxRank] = {};
  int64_t rest = b;
  for (int d = r - 1; d >= 0; --d) {
    coord[d] = rest % g.cover_extent[d];
    rest /= g.cover_extent[d];
  }
  BlockPart p;
  for (int d = 0; d < r - 2; ++d)  // leading dims: block 1, cover coordinate = piece index
    p.base += coord[d] * g.stride[d];
  const int64_t brow = coord[r - 2] + g.cover_offset[r - 2];
  const int64_t bcol = coord[r - 1] + g.cover_offset[r - 1];
  p.row_lo = larger(brow * g.block_rows, g.offset[r - 2]);
  p.row_hi = smaller((brow + 1) * g.block_rows, g.offset[r - 2] + g.extent[r - 2]);
  p.col_lo = larger(bcol * g.block_cols, g.offset[r - 1]);
  p.col_hi = smaller((bcol + 1) * g.block_cols, g.offset[r - 1] + g.extent[r - 1]);
  p.row_stride = g.stride[r - 2];
  p.base -= g.offset[r - 2] * g.stride[r - 2] + g.offset[r - 1];
  return p;
}

// A row of the piece (row-major index over every dim but the last): its first element's offset
// from g.data and the index of its first cover block.
struct RowPlace {
  int64_t src = 0;
  int64_t cover = 0;
};

WSYNC_QUANT_HD RowPlace rowPlace(const Geometry& g, int64_t row) {
  const int r = g.rank;
  RowPlace p;
  int64_t rest = row;
  int64_t scale_stride = g.cover_extent[r - 1];
  for (int d = r - 2; d >= 0; --d) {  // innermost row dim first
    const int64_t idx = rest % g.extent[d];
    rest /= g.extent[d];
    p.src += idx * g.stride[d];
    const int64_t c = d == r - 2 ? (g.offset[d] + idx) / g.block_rows - g.cover_offset[d] : idx;
    p.cover += c * scale_stride;
    scale_stride *= g.cover_extent[d];
  }
  return p;
}

// The cover index of column `col` (piece-relative) of a row; `narrow`: the weight's columns and
// the block width fit 32 bits (a 32-bit division).
WSYNC_QUANT_HD int64_t scaleIndex(const Geometry& g, const RowPlace& row, int64_t col,
                                  bool narrow) {
  const int64_t global_col = g.offset[g.rank - 1] + col;
  const int64_t block_col = narrow ? static_cast<int64_t>(static_cast<uint32_t>(global_col) /
                                                          static_cast<uint32_t>(g.block_cols))
                                   : global_col / g.block_cols;
  return row.cover + block_col - g.cover_offset[g.rank - 1];
}

// The multiplier of cover block `k` from the scales.
WSYNC_QUANT_HD float multiplierAt(const void* scales, bool e8m0, int64_t k) {
  return e8m0 ? quant_math::multiplierOfE8m0(static_cast<const uint8_t*>(scales)[k])
              : quant_math::multiplierOfFloatScale(static_cast<const float*>(scales)[k]);
}

}  // namespace wsync::block_quant_kernels
