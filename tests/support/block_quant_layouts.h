// Piece layouts for the block-parallel quantization kernels' tests (unit: host emulation; GPU:
// the kernels): pieces whose rows are 16-byte aligned (the vector path), shifted off alignment,
// with odd widths, padded strides and cuts through blocks (the scalar path), over random weights
// of every dtype and scale format; plus the merged maxima of a partition (block_quant_testing.h).
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "support/block_quant_testing.h"

namespace wsync::block_quant_testing {

// How a case lays its pieces out.
enum class Layout : int {
  kAligned = 0,    // cuts at multiples of 32 columns, row strides whole 16-byte vectors
  kShifted = 1,    // as kAligned, the piece's first element one element past 16-byte alignment
  kOddWidths = 2,  // cuts anywhere, row strides padded by 0-5 elements
  kStrided = 3,    // cuts at multiples of 32 columns, rows padded by whole vectors, 3-D weights
  // 128 x 128 blocks, 2-D weights of whole blocks, cuts at multiples of 128 (and, in about half
  // the cases, one row cut that splits blocks: 64 rows past the last cut, or 1-127), rows padded
  // by 0-2 vectors or by 3 elements: the whole-width kernel's pieces beside the general walk's in
  // one table.
  kFullTiles = 4,
};
inline const char* layoutName(Layout l) {
  static const char* const names[] = {"aligned", "shifted", "odd widths", "strided", "full tiles"};
  return names[static_cast<int>(l)];
}

// A piece held in its own buffer, its first element `shift` bytes past a 64-byte boundary.
struct LaidPiece {
  Box box;
  Dims strides;
  DType dtype = DType::kFloat32;
  size_t shift = 0;
  std::vector<uint8_t> storage;

  const void* data() const {
    const auto at = reinterpret_cast<uintptr_t>(storage.data());
    return reinterpret_cast<const void*>((at + 63) / 64 * 64 + shift);
  }
  PieceView view() const { return PieceView{data(), dtype, box, strides}; }
};

// `box` of `t` with `row_pad` extra elements per row (innermost stride extent + row_pad), the
// padding filled with NaN bytes.
inline LaidPiece layPiece(const HostTensor& t, const Box& box, int64_t row_pad, size_t shift) {
  LaidPiece p;
  p.box = box;
  p.dtype = t.dtype;
  p.shift = shift;
  const int r = box.rank();
  p.strides = Dims::zeros(r);
  int64_t stride = 1;
  for (int d = r - 1; d >= 0; --d) {
    p.strides[d] = stride;
    stride *= box.extent[d] + (d == r - 1 ? row_pad : 0);
  }
  const size_t esize = t.elementSize();
  p.storage.assign(static_cast<size_t>(stride) * esize + 64 + shift, 0xff);
  auto* base = static_cast<uint8_t*>(const_cast<void*>(p.data()));
  forEachIndex(box, [&](const Dims& i) {
    int64_t off = 0;
    for (int d = 0; d < r; ++d)
      off += (i[d] - box.offset[d]) * p.strides[d];
    std::memcpy(base + off * static_cast<int64_t>(esize),
                t.bytes.data() + linearIndex(i, t.shape) * static_cast<int64_t>(esize), esize);
  });
  return p;
}

// A weight of random shape for `layout`, with a scheme of `format` and its pieces.
struct LayoutCase {
  Dims shape;
  BlockScaling s;
  HostTensor t;
  std::vector<LaidPiece> pieces;
  std::string where;
};

inline LayoutCase layoutCase(std::mt19937_64& rng, Layout layout, ScaleFormat f, DType dtype,
                             int specials_per_million) {
  auto dim = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  LayoutCase c;
  c.s.format = f;
  c.s.scale_tensor = "w.scale";
  const bool odd = layout == Layout::kOddWidths;
  const bool tiles = layout == Layout::kFullTiles;
  if (tiles) {
    c.s.block_rows = 128;
    c.s.block_cols = 128;
  } else if (f == ScaleFormat::kE8M0) {
    c.s.block_rows = 1;
    c.s.block_cols = 32;
  } else if (dim(0, 2) > 0) {
    c.s.block_rows = 128;
    c.s.block_cols = 128;
  } else {
    c.s.block_rows = dim(1, 40);
    c.s.block_cols = odd ? dim(1, 70) : 8 * dim(1, 24);
  }
  const int64_t rows = tiles ? 128 * dim(1, 4) : dim(1, 300);
  const int64_t cols = tiles                             ? 128 * dim(1, 5)
                       : f == ScaleFormat::kE8M0 || !odd ? 32 * dim(1, 12)
                                                         : dim(1, 400);
  c.shape = !tiles && (layout == Layout::kStrided || dim(0, 4) == 0) ? Dims{dim(1, 3), rows, cols}
                                                                     : Dims{rows, cols};
  c.t = randomTensor(rng, dtype, c.shape, specials_per_million);
  const int r = c.shape.size();
  std::vector<std::vector<int64_t>> cuts(static_cast<size_t>(r));
  for (int d = 0; d < r; ++d) {
    const int64_t q = tiles ? 128 : d == r - 1 && !odd ? 32 : 1;  // cuts at multiples of q
    std::vector<int64_t>& cut = cuts[static_cast<size_t>(d)];
    cut = {0};
    const int parts = static_cast<int>(dim(1, 3));
    for (int k = 1; k < parts; ++k) {
      const int64_t at = dim(1, c.shape[d] - 1) / q * q;
      if (at > cut.back() && at < c.shape[d]) cut.push_back(at);
    }
    if (tiles && d == 0 && dim(0, 1) == 1) {  // a cut through a block: its maxima merge across
      const int64_t at = cut.back() + (dim(0, 1) == 1 ? 64 : dim(1, 127));  // pieces; any row
      if (at < c.shape[d]) cut.push_back(at);
    }
    cut.push_back(c.shape[d]);
  }
  const int64_t vector = dtype == DType::kFloat32 ? 4 : 8;
  const size_t esize = c.t.elementSize();
  Dims cells = Dims::zeros(r);
  for (int d = 0; d < r; ++d)
    cells[d] = static_cast<int64_t>(cuts[static_cast<size_t>(d)].size()) - 1;
  forEachIndex(Box::whole(cells), [&](const Dims& cell) {
    Box b;
    b.offset = Dims::zeros(r);
    b.extent = Dims::zeros(r);
    for (int d = 0; d < r; ++d) {
      const auto& cut = cuts[static_cast<size_t>(d)];
      b.offset[d] = cut[static_cast<size_t>(cell[d])];
      b.extent[d] = cut[static_cast<size_t>(cell[d]) + 1] - b.offset[d];
    }
    int64_t pad = 0;
    if (layout == Layout::kOddWidths) pad = dim(0, 5);
    if (layout == Layout::kStrided) pad = vector * dim(1, 3);
    if (tiles) pad = dim(0, 3) == 0 ? 3 : vector * dim(0, 2);  // 3: rows off 16-byte alignment
    if (layout == Layout::kAligned || layout == Layout::kShifted) pad = vector * dim(0, 1);
    const size_t shift = layout == Layout::kShifted ? esize : 0;
    c.pieces.push_back(layPiece(c.t, b, pad, shift));
  });
  c.where = std::string(layoutName(layout)) + " shape " + c.shape.toString() + " " + describe(c.s) +
            " " + dtypeName(dtype) + " pieces " + std::to_string(c.pieces.size());
  return c;
}

// The merged maxima of every block of the weight (row-major over scaleShape) from the pieces.
inline std::vector<float> mergedAmax(const LayoutCase& c) {
  const Dims grid = scaleShape(c.shape, c.s);
  std::vector<float> amax(static_cast<size_t>(grid.product()), 0.0f);
  for (const LaidPiece& p : c.pieces) {
    const Box cover = blockCover(p.box, c.s);
    std::vector<float> part(static_cast<size_t>(cover.volume()));
    if (!blockAmaxHost(p.view(), c.shape, c.s, part.data()).isOk()) return {};
    size_t j = 0;
    forEachIndex(cover, [&](const Dims& b) {
      float& a = amax[static_cast<size_t>(linearIndex(b, grid))];
      a = mergeAmax(a, part[j++]);
    });
  }
  return amax;
}

// The float32 values of `cover`'s blocks in the weight's grid `all` (row-major over `grid`).
inline std::vector<float> gatherAmax(const std::vector<float>& all, const Dims& grid,
                                     const Box& cover) {
  std::vector<uint8_t> bytes(all.size() * 4);
  std::memcpy(bytes.data(), all.data(), bytes.size());
  const std::vector<uint8_t> part = gather(bytes, grid, cover, 4);
  std::vector<float> out(part.size() / 4);
  std::memcpy(out.data(), part.data(), part.size());
  return out;
}

}  // namespace wsync::block_quant_testing
