// The block quantization kernels' (kernels/block_quant_kernels.cu, block_quant_legacy.cu) index
// arithmetic and vector helpers, as host-and-device functions, so that the tests can run the
// kernels' per-thread work on the host (tests/unit/block_quant_kernel_geometry_test.cc: a GPU is
// not needed to check which elements and scales each thread touches), and the batched kernel's
// task (QuantTask), which runtime/trainer_quantizer fills in plain C++. C++17, no CUDA headers.
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
  // Bytes between the output's rows (a row: the last dim; every other dim flattens into rows):
  // extent[rank - 1] for the piece's row-major output, more where the output is a box of a larger
  // row-major tensor (a rollout's slot written in place).
  int64_t out_pitch = 0;
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
  g.out_pitch = g.rank > 0 ? g.extent[g.rank - 1] : 0;
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
// base + row * row_stride + col from g.data, and at dst_base + row * g.out_pitch + col in the
// output.
struct BlockPart {
  int64_t base = 0;
  int64_t row_stride = 0;
  int64_t dst_base = 0;
  int64_t row_lo = 0, row_hi = 0, col_lo = 0, col_hi = 0;
};

WSYNC_QUANT_HD BlockPart blockPart(const Geometry& g, int64_t b) {
  const int r = g.rank;
  BlockPart p;
  int64_t rest = b;
  const int64_t bcol = rest % g.cover_extent[r - 1] + g.cover_offset[r - 1];
  rest /= g.cover_extent[r - 1];
  const int64_t brow = rest % g.cover_extent[r - 2] + g.cover_offset[r - 2];
  rest /= g.cover_extent[r - 2];
  int64_t lead = 0;  // row-major index over the leading dims of the piece
  int64_t lead_step = 1;
  for (int d = r - 3; d >= 0; --d) {  // leading dims: block 1, cover coordinate = piece index
    const int64_t coord = rest % g.cover_extent[d];
    rest /= g.cover_extent[d];
    p.base += coord * g.stride[d];
    lead += coord * lead_step;
    lead_step *= g.extent[d];
  }
  p.row_lo = larger(brow * g.block_rows, g.offset[r - 2]);
  p.row_hi = smaller((brow + 1) * g.block_rows, g.offset[r - 2] + g.extent[r - 2]);
  p.col_lo = larger(bcol * g.block_cols, g.offset[r - 1]);
  p.col_hi = smaller((bcol + 1) * g.block_cols, g.offset[r - 1] + g.extent[r - 1]);
  p.row_stride = g.stride[r - 2];
  p.base -= g.offset[r - 2] * g.stride[r - 2] + g.offset[r - 1];
  p.dst_base = (lead * g.extent[r - 2] - g.offset[r - 2]) * g.out_pitch - g.offset[r - 1];
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

// ---- the block-parallel kernels (block_quant_kernels.cu): one group of threads per cover block

// Bytes of a vector access: 16-byte loads (8 bf16 / fp16 or 4 fp32 elements), stores of their
// 8 or 4 float8 bytes.
inline constexpr int kVectorBytes = 16;

WSYNC_QUANT_HD int elementBytes(const Geometry& g) {
  return g.dtype == 0 ? 4 : 2;
}
// Elements per vector: 4 (float32) or 8 (16-bit).
WSYNC_QUANT_HD int vectorElements(const Geometry& g) {
  return kVectorBytes / elementBytes(g);
}

// True when part `p` of a cover block can be walked in whole vectors: its rows' first elements
// are 16-byte aligned in the source (`data`: g.data as an address) and vector-aligned in the
// output (`dst`: the piece's output), and its width is a whole number of vectors. Else the
// kernels take the scalar path for that block.
WSYNC_QUANT_HD bool vectorizable(const Geometry& g, const BlockPart& p, uint64_t data,
                                 uint64_t dst) {
  const int64_t v = vectorElements(g);
  const int64_t esize = elementBytes(g);
  const int64_t cols = p.col_hi - p.col_lo;
  const int64_t width = g.out_pitch;
  if (cols <= 0 || cols % v != 0) return false;
  const uint64_t first =
      data + static_cast<uint64_t>((p.base + p.row_lo * p.row_stride + p.col_lo) * esize);
  const uint64_t out = dst + static_cast<uint64_t>(p.dst_base + p.row_lo * width + p.col_lo);
  if (first % kVectorBytes != 0 || out % static_cast<uint64_t>(v) != 0) return false;
  if (p.row_hi - p.row_lo > 1 && ((p.row_stride * esize) % kVectorBytes != 0 || width % v != 0))
    return false;
  return true;
}

// The unsigned max of two words per 16-bit half.
WSYNC_QUANT_HD uint32_t maxPerHalf(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __vmaxu2(a, b);
#else
  const uint32_t lo = (a & 0xffffu) > (b & 0xffffu) ? (a & 0xffffu) : (b & 0xffffu);
  const uint32_t hi = (a >> 16) > (b >> 16) ? (a >> 16) : (b >> 16);
  return hi << 16 | lo;
#endif
}

// The max of `acc` and the |x| bits of a vector's elements (`w`: its 16 bytes as little-endian
// words) in the dtype's own encoding: float32 per word, 16-bit elements per half. Non-negative
// floats order as their bits do, and NaN bits lie above infinity's, so a NaN wins.
WSYNC_QUANT_HD uint32_t absMaxOfVector(const uint32_t (&w)[4], int dtype, uint32_t acc) {
  for (int i = 0; i < 4; ++i) {
    if (dtype == 0) {
      const uint32_t a = w[i] & 0x7fffffffu;
      acc = a > acc ? a : acc;
    } else {
      acc = maxPerHalf(acc, w[i] & 0x7fff7fffu);
    }
  }
  return acc;
}

// The float32 bits of the largest |x| an absMaxOfVector accumulator holds (exact, monotone).
WSYNC_QUANT_HD uint32_t floatBitsOfAccumulator(uint32_t acc, int dtype) {
  if (dtype == 0) return acc;
  const uint32_t lo = acc & 0xffffu;
  const uint32_t h = lo > (acc >> 16) ? lo : acc >> 16;
  return dtype == 1 ? h << 16
                    : quant_math::bitsOf(quant_math::floatOfFloat16(static_cast<uint16_t>(h)));
}

// The block maximum of the largest |x| bits: NaN (quant_math::nanValue) above infinity's bits.
WSYNC_QUANT_HD float amaxOfBits(uint32_t bits) {
  return bits > 0x7f800000u ? quant_math::nanValue() : quant_math::floatOf(bits);
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
// e4m3(lo * m) | e4m3(hi * m) << 8 by the hardware's conversion (sm_89 and later), bit-equal to
// quant_math::e4m3FromFloat: round to nearest even, finite values and infinities beyond 448
// saturate to +-448 (.satfinite), and a NaN product becomes 0x7f whatever its sign.
// `finite`: the caller knows neither product is NaN (the block's maximum is finite, so every
// element and the multiplier are), and the NaN fix-up is skipped.
__device__ __forceinline__ uint32_t quantizePairHardware(float lo, float hi, float m, bool finite) {
  const float a = __fmul_rn(lo, m);
  const float b = __fmul_rn(hi, m);
  unsigned short pair;
  // The first source lands in the upper byte, the second in the lower one.
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(b), "f"(a));
  uint32_t r = pair;
  if (finite) return r;
  if (a != a) r = (r & 0xff00u) | quant_math::kE4m3NaN;
  if (b != b) r = (r & 0x00ffu) | static_cast<uint32_t>(quant_math::kE4m3NaN) << 8;
  return r;
}
#endif

// Element i (0-3 for float32, 0-7 for 16-bit) of a vector's words as float32 (exact).
template <int kDType>
WSYNC_QUANT_HD float vectorElement(const uint32_t (&w)[4], int i) {
  namespace qm = quant_math;
  if constexpr (kDType == 0) return qm::floatOf(w[i]);
  const auto h = static_cast<uint16_t>(i % 2 == 0 ? w[i / 2] & 0xffffu : w[i / 2] >> 16);
  if constexpr (kDType == 1) return qm::floatOfBFloat16(h);
  return qm::floatOfFloat16(h);
}

// The float8 bytes of a vector's elements (dtype kDType: 0 float32, 1 bfloat16, 2 float16) with
// multiplier m, little-endian: out[0] for four float32 elements, out[0..1] for eight 16-bit ones.
// kFinite: no element is NaN or infinite and m is finite (a block whose complete maximum is
// finite), so no product is NaN: the same bytes, without the NaN fix-up on a GPU.
template <int kDType, bool kFinite>
WSYNC_QUANT_HD void quantizeVectorOf(const uint32_t (&w)[4], float m, uint32_t (&out)[2]) {
  constexpr int kPairs = kDType == 0 ? 2 : 4;
  out[0] = 0;
  out[1] = 0;
  for (int p = 0; p < kPairs; ++p) {
    const float lo = vectorElement<kDType>(w, 2 * p);
    const float hi = vectorElement<kDType>(w, 2 * p + 1);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    const uint32_t pair = quantizePairHardware(lo, hi, m, kFinite);
#else
    const uint32_t pair = static_cast<uint32_t>(quant_math::quantizeElement(lo, m)) |
                          static_cast<uint32_t>(quant_math::quantizeElement(hi, m)) << 8;
#endif
    out[p / 2] |= pair << (16 * (p % 2));
  }
}

// quantizeVectorOf for a run-time dtype and `finite`.
WSYNC_QUANT_HD void quantizeVector(const uint32_t (&w)[4], int dtype, float m, uint32_t (&out)[2],
                                   bool finite = false) {
  if (finite) {
    if (dtype == 1) return quantizeVectorOf<1, true>(w, m, out);
    if (dtype == 2) return quantizeVectorOf<2, true>(w, m, out);
    return quantizeVectorOf<0, true>(w, m, out);
  }
  if (dtype == 1) return quantizeVectorOf<1, false>(w, m, out);
  if (dtype == 2) return quantizeVectorOf<2, false>(w, m, out);
  return quantizeVectorOf<0, false>(w, m, out);
}

// Threads per cover block in the block-parallel kernels (1, 4, 32 or 256): the fewest of these
// that hold a whole block of `s` in kCachedVectors vectors each, else 256 (the block is read
// twice). One thread per MXFP8 block: no lane repeats another's index and scale arithmetic.
inline constexpr int kCachedVectors = 8;
WSYNC_QUANT_HD int groupSizeFor(int64_t block_rows, int64_t block_cols, int dtype) {
  const int64_t per_vector = dtype == 0 ? 4 : 8;
  const int64_t vectors = (block_rows * block_cols + per_vector - 1) / per_vector;
  if (vectors <= kCachedVectors) return 1;
  if (vectors <= 4 * kCachedVectors) return 4;
  if (vectors <= 32 * kCachedVectors) return 32;
  return 256;
}

// ---- the whole-width walk: pieces of a 2-D weight of 16-bit elements whose blocks are whole in
// width, their rows whole vectors, and cut in height anywhere (128 x 128 blocks of a weight or of a
// trainer's dim-0 shard, whose cuts fall inside blocks: Kimi-K2's 28 rows per trainer; MXFP8's
// 1 x 32), walked by a group of G threads with 32-bit block indices. With per_row = block_cols / 8
// vectors in a block row, lane i holds vectors i + k * G (row-major in the block's part inside
// the piece), k < the vectors its place counts: where per_row divides G, the column vector
// i % per_row of rows i / per_row + k * (G / per_row); in a one-row block with G dividing per_row,
// columns i + k * G. Every vector of a block stays in a register between its maximum and its bytes.

// Vectors per lane of a whole block when a group of `group` threads walks g's blocks whole in
// width (per_row divides the group, or the group divides a one-row block's per_row; the group
// divides the block's vectors, at most kCachedVectors each), by g's shape alone; 0 when it cannot:
// not 2-D, float32, blocks cut in width by the piece, rows off 8 elements, indices past 32 bits.
WSYNC_QUANT_HD int wholeWidthVectors(const Geometry& g, int group) {
  if (g.rank != 2 || g.dtype == 0 || g.stride[1] != 1 || g.stride[0] % 8 != 0) return 0;
  const int64_t br = g.block_rows;
  const int64_t bc = g.block_cols;
  if (bc % 8 != 0 || g.offset[1] % bc != 0 || g.extent[1] % bc != 0) return 0;
  const int64_t per_row = bc / 8;
  const int64_t vectors = br * per_row;
  const bool rows_per_group = group % per_row == 0;
  const bool groups_per_row = br == 1 && per_row % group == 0;
  if (!(rows_per_group || groups_per_row) || vectors % group != 0 ||
      vectors / group > kCachedVectors)
    return 0;
  if (g.cover_volume >= (int64_t{1} << 31) || g.offset[0] + g.extent[0] >= (int64_t{1} << 31) ||
      g.extent[1] >= (int64_t{1} << 31))
    return 0;
  return static_cast<int>(vectors / group);
}

// wholeWidthVectors(g, group) > 0 with the addresses (`data`: g.data, `dst`: the piece's output)
// the vectors need: source rows 16-byte aligned, output rows 8-byte aligned.
WSYNC_QUANT_HD bool holdsWholeWidthBlocks(const Geometry& g, int group, uint64_t data,
                                          uint64_t dst) {
  return wholeWidthVectors(g, group) > 0 && data % 16 == 0 && dst % 8 == 0 && g.out_pitch % 8 == 0;
}

// A lane's first vector in cover block `b` of a piece that holdsWholeWidthBlocks: its first
// element (elements from g.data) and its first output byte (from the piece's output); its vector
// k is k * wholeWidthStep away in both, for k < vectors (0 for a lane below the block's part).
struct WholeWidthPlace {
  int64_t src = 0;
  int64_t dst = 0;
  int vectors = 0;
};
WSYNC_QUANT_HD WholeWidthPlace wholeWidthPlace(const Geometry& g, uint32_t b, uint32_t lane,
                                               int group) {
  const auto cover_cols = static_cast<uint32_t>(g.cover_extent[1]);
  const auto per_row = static_cast<uint32_t>(g.block_cols) / 8;
  const auto block_rows = static_cast<uint32_t>(g.block_rows);
  const uint32_t brow = b / cover_cols;
  const uint32_t bcol = b - brow * cover_cols;
  // the block's rows inside the piece, from the piece's first row
  const auto first = static_cast<uint32_t>(g.offset[0]);
  const uint32_t top = (static_cast<uint32_t>(g.cover_offset[0]) + brow) * block_rows;
  const uint32_t row_lo = top > first ? top - first : 0;
  const uint32_t row_hi = (top + block_rows < first + static_cast<uint32_t>(g.extent[0])
                               ? top + block_rows
                               : first + static_cast<uint32_t>(g.extent[0])) -
                          first;
  const auto whole = static_cast<uint32_t>(g.block_rows * per_row) / static_cast<uint32_t>(group);
  const uint32_t lane_row = lane < per_row ? 0 : lane / per_row;  // MXFP8: one row, no division
  const uint32_t row = row_lo + lane_row;
  const uint32_t col = bcol * static_cast<uint32_t>(g.block_cols) + (lane - lane_row * per_row) * 8;
  WholeWidthPlace at{int64_t{row} * g.stride[0] + col, int64_t{row} * g.out_pitch + col, 0};
  if (static_cast<uint32_t>(group) < per_row || row_hi - row_lo == block_rows) {
    at.vectors = static_cast<int>(whole);  // a block whole in height
  } else if (row < row_hi) {
    const uint32_t step = static_cast<uint32_t>(group) / per_row;  // rows between a lane's vectors
    at.vectors = static_cast<int>((row_hi - row + step - 1) / step);
  }
  return at;
}
WSYNC_QUANT_HD WholeWidthPlace wholeWidthStep(const Geometry& g, int group) {
  const int64_t per_row = g.block_cols / 8;
  if (group < per_row) return {8 * int64_t{group}, 8 * int64_t{group}, 0};  // along the one row
  const int64_t rows = group / per_row;
  return {rows * g.stride[0], rows * g.out_pitch, 0};
}

// What a block-parallel launch does per cover block.
enum class QuantMode : int {
  kAmax = 0,                // the block's partial max |x| into amax_out (or the unit list's output)
  kQuantizeWithScales = 1,  // float8 bytes with the scale read from `scales`
  kScaleAndQuantize = 2,    // scale from the complete amax_in, written to `scales`, then the bytes
  kFused = 3,  // max |x| of the data (merged with amax_in where given), its scale, the bytes
};

// One piece in a batched launch: its geometry (g.data: the piece's first element) and, per cover
// block b (row-major over the cover), amax_in[b] / amax_out[b] / scales[b] as the mode uses them;
// dst: the piece's float8 bytes, rows g.out_pitch bytes apart. first_tile: the running sum of the
// cover volumes of the tasks before it in the table (numberQuantTasks).
struct QuantTask {
  Geometry g;
  const float* amax_in = nullptr;
  float* amax_out = nullptr;
  void* scales = nullptr;
  uint8_t* dst = nullptr;
  int format = 1;  // ScaleFormat value
  uint64_t first_tile = 0;
};

// A task for `piece` under `s` (pointers as the mode needs them; null otherwise).
inline QuantTask quantTaskOf(const PieceView& piece, const BlockScaling& s) {
  QuantTask t;
  t.g = geometryOf(piece, s);
  t.format = static_cast<int>(s.format);
  return t;
}

// Sets first_tile of every task (in order); returns the total number of cover blocks.
template <typename Tasks>
uint64_t numberQuantTasks(Tasks& tasks) {
  uint64_t total = 0;
  for (QuantTask& t : tasks) {
    t.first_tile = total;
    total += static_cast<uint64_t>(t.g.cover_volume);
  }
  return total;
}

}  // namespace wsync::block_quant_kernels
