// What the block quantization tests share (unit, GPU, the CLI of the vLLM comparison): random
// weights with awkward values, a naive full-tensor reference (one block at a time, from
// blockBox), random partitions of a weight into trainer pieces held in strided buffers, and the
// piece-wise pipeline (amax per piece -> merge -> scales -> quantize per piece) on the host.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "layout/block_scaling.h"
#include "layout/box.h"
#include "layout/dtype.h"
#include "quant/block_quant.h"
#include "quant/block_quant_math.h"

namespace wsync::block_quant_testing {

namespace qm = quant_math;

// A dense row-major weight of `shape` in `dtype` (float32, bfloat16 or float16).
struct HostTensor {
  DType dtype = DType::kFloat32;
  Dims shape;
  std::vector<uint8_t> bytes;

  size_t elementSize() const { return dtypeSize(dtype); }
  float at(int64_t i) const {
    if (dtype == DType::kFloat32) {
      float f;
      std::memcpy(&f, bytes.data() + 4 * i, 4);
      return f;
    }
    uint16_t h;
    std::memcpy(&h, bytes.data() + 2 * i, 2);
    return dtype == DType::kBFloat16 ? qm::floatOfBFloat16(h) : qm::floatOfFloat16(h);
  }
};

// The quantized weight: e4m3 bytes row-major over the shape, scales row-major over scaleShape
// (float32 bits as 4 bytes each, or e8m0 bytes).
struct Quantized {
  std::vector<uint8_t> values;
  std::vector<uint8_t> scales;
  bool operator==(const Quantized& o) const { return values == o.values && scales == o.scales; }
};

inline size_t scaleSize(ScaleFormat f) {
  return f == ScaleFormat::kE8M0 ? 1 : 4;
}

// Random bits of a finite value with the exponent near `center` (+- spread), sometimes 0 or a
// subnormal; the dtype's own bit layout.
inline uint32_t randomFiniteBits(std::mt19937_64& rng, DType dtype, int center, int spread) {
  std::uniform_int_distribution<int> pick(0, 99);
  const int kind = pick(rng);
  const bool negative = rng() & 1;
  const int exp_bits = dtype == DType::kFloat32 ? 8 : dtype == DType::kBFloat16 ? 8 : 5;
  const int man_bits = dtype == DType::kFloat32 ? 23 : dtype == DType::kBFloat16 ? 7 : 10;
  const int max_exp = (1 << exp_bits) - 2;
  int exponent;
  if (kind < 3) {
    exponent = 0;  // zero or subnormal
  } else {
    std::uniform_int_distribution<int> e(center - spread, center + spread);
    exponent = std::clamp(e(rng), 1, max_exp);
  }
  uint32_t mantissa = static_cast<uint32_t>(rng()) & ((1u << man_bits) - 1);
  if (kind < 1) mantissa = 0;
  const uint32_t bits = (static_cast<uint32_t>(exponent) << man_bits) | mantissa;
  return bits | (negative ? 1u << (exp_bits + man_bits) : 0u);
}

// Special values in the dtype's bit layout.
inline uint32_t specialBits(DType dtype, int which) {  // 0: +inf, 1: -inf, 2: +NaN, 3: -NaN
  const bool wide = dtype == DType::kFloat32;
  const uint32_t inf = wide ? 0x7f800000u : dtype == DType::kBFloat16 ? 0x7f80u : 0x7c00u;
  const uint32_t quiet = wide ? 0x00400000u : dtype == DType::kBFloat16 ? 0x40u : 0x200u;
  const uint32_t sign = wide ? 0x80000000u : 0x8000u;
  switch (which) {
    case 0:
      return inf;
    case 1:
      return inf | sign;
    case 2:
      return inf | quiet;
    default:
      return inf | quiet | sign;
  }
}

// A random weight; `specials_per_million` elements become +-inf or +-NaN.
inline HostTensor randomTensor(std::mt19937_64& rng, DType dtype, const Dims& shape,
                               int specials_per_million) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = shape;
  const int64_t n = shape.product();
  t.bytes.resize(static_cast<size_t>(n) * t.elementSize());
  const int bias = dtype == DType::kFloat16 ? 15 : 127;
  std::uniform_int_distribution<int> center_pick(dtype == DType::kFloat16 ? -8 : -30, 8);
  const int center = bias + center_pick(rng);
  std::uniform_int_distribution<int> spread_pick(0, 12);
  const int spread = spread_pick(rng);
  std::uniform_int_distribution<int> million(0, 999999);
  std::uniform_int_distribution<int> special(0, 3);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits = randomFiniteBits(rng, dtype, center, spread);
    if (million(rng) < specials_per_million) bits = specialBits(dtype, special(rng));
    if (dtype == DType::kFloat32) {
      std::memcpy(t.bytes.data() + 4 * i, &bits, 4);
    } else {
      const auto h = static_cast<uint16_t>(bits);
      std::memcpy(t.bytes.data() + 2 * i, &h, 2);
    }
  }
  return t;
}

// Calls fn(multi_index) for every index of `box`, row-major.
template <typename Fn>
void forEachIndex(const Box& box, Fn&& fn) {
  if (box.empty()) return;
  Dims index = box.offset;
  const int r = box.rank();
  while (true) {
    fn(index);
    int d = r - 1;
    for (; d >= 0; --d) {
      if (++index[d] < box.end(d)) break;
      index[d] = box.offset[d];
    }
    if (d < 0) return;
  }
}

inline int64_t linearIndex(const Dims& index, const Dims& shape) {
  int64_t i = 0;
  for (int d = 0; d < shape.size(); ++d)
    i = i * shape[d] + index[d];
  return i;
}

// The reference: each block from blockBox, its amax, its scale, its elements; no pieces.
inline Quantized referenceQuantize(const HostTensor& t, const BlockScaling& s) {
  const Dims grid = scaleShape(t.shape, s);
  Quantized q;
  q.values.resize(static_cast<size_t>(t.shape.product()));
  q.scales.resize(static_cast<size_t>(grid.product()) * scaleSize(s.format));
  forEachIndex(Box::whole(grid), [&](const Dims& block) {
    const Box box = blockBox(block, t.shape, s);
    float amax = 0.0f;
    forEachIndex(box, [&](const Dims& i) {
      amax = qm::mergeAmax(amax, qm::absOf(t.at(linearIndex(i, t.shape))));
    });
    const int64_t b = linearIndex(block, grid);
    float m;
    if (s.format == ScaleFormat::kE8M0) {
      const uint8_t e = qm::e8m0Scale(amax);
      q.scales[static_cast<size_t>(b)] = e;
      m = qm::multiplierOfE8m0(e);
    } else {
      const float scale = qm::floatScale(static_cast<int>(s.format), amax);
      std::memcpy(q.scales.data() + 4 * b, &scale, 4);
      m = qm::multiplierOfFloatScale(scale);
    }
    forEachIndex(box, [&](const Dims& i) {
      const int64_t e = linearIndex(i, t.shape);
      q.values[static_cast<size_t>(e)] = qm::quantizeElement(t.at(e), m);
    });
  });
  return q;
}

// Cut points of [0, n) into at most `parts` pieces: 0 = c0 < c1 < ... = n, at random positions.
inline std::vector<int64_t> randomCuts(std::mt19937_64& rng, int64_t n, int parts) {
  std::vector<int64_t> cuts = {0, n};
  std::uniform_int_distribution<int64_t> pos(1, std::max<int64_t>(1, n - 1));
  for (int i = 1; i < parts && n > 1; ++i)
    cuts.push_back(pos(rng));
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  return cuts;
}

// A random grid partition of `shape` into boxes (each dim cut at up to parts[d] - 1 random
// positions), as trainers (FSDP row shards, TP column shards, expert shards) hold it.
inline std::vector<Box> randomPartition(std::mt19937_64& rng, const Dims& shape,
                                        const std::vector<int>& parts) {
  std::vector<std::vector<int64_t>> cuts;
  for (int d = 0; d < shape.size(); ++d)
    cuts.push_back(randomCuts(rng, shape[d], parts[static_cast<size_t>(d)]));
  Dims cells = Dims::zeros(shape.size());
  for (int d = 0; d < shape.size(); ++d)
    cells[d] = static_cast<int64_t>(cuts[static_cast<size_t>(d)].size()) - 1;
  std::vector<Box> boxes;
  forEachIndex(Box::whole(cells), [&](const Dims& cell) {
    Box b;
    b.offset = Dims::zeros(shape.size());
    b.extent = Dims::zeros(shape.size());
    for (int d = 0; d < shape.size(); ++d) {
      const auto& c = cuts[static_cast<size_t>(d)];
      b.offset[d] = c[static_cast<size_t>(cell[d])];
      b.extent[d] = c[static_cast<size_t>(cell[d]) + 1] - b.offset[d];
    }
    boxes.push_back(b);
  });
  return boxes;
}

// A trainer's piece in its own buffer: `box` of the weight with strides padded by up to
// `max_pad` elements per dim (innermost stride 1), padding filled with garbage (NaN bytes).
struct HeldPiece {
  Box box;
  Dims strides;
  std::vector<uint8_t> buffer;
  DType dtype = DType::kFloat32;

  PieceView view() const { return PieceView{buffer.data(), dtype, box, strides}; }
};

inline HeldPiece holdPiece(std::mt19937_64& rng, const HostTensor& t, const Box& box, int max_pad) {
  HeldPiece p;
  p.box = box;
  p.dtype = t.dtype;
  const int r = box.rank();
  p.strides = Dims::zeros(r);
  std::uniform_int_distribution<int> pad(0, max_pad);
  int64_t stride = 1;
  for (int d = r - 1; d >= 0; --d) {
    p.strides[d] = stride;
    stride *= box.extent[d] + (d == r - 1 ? pad(rng) : (d == r - 2 ? pad(rng) % 3 : 0));
  }
  const size_t esize = t.elementSize();
  p.buffer.assign(static_cast<size_t>(stride) * esize, 0xff);
  forEachIndex(box, [&](const Dims& i) {
    int64_t off = 0;
    for (int d = 0; d < r; ++d)
      off += (i[d] - box.offset[d]) * p.strides[d];
    std::memcpy(p.buffer.data() + off * static_cast<int64_t>(esize),
                t.bytes.data() + linearIndex(i, t.shape) * static_cast<int64_t>(esize), esize);
  });
  return p;
}

// Copies `sub` (row-major over `sub_box`) into `full` (row-major over `full_shape`-shaped
// `full_box` region coordinates), `esize` bytes per element.
inline void scatter(const std::vector<uint8_t>& sub, const Box& sub_box, std::vector<uint8_t>* full,
                    const Dims& full_shape, size_t esize) {
  int64_t k = 0;
  forEachIndex(sub_box, [&](const Dims& i) {
    std::memcpy(full->data() + linearIndex(i, full_shape) * static_cast<int64_t>(esize),
                sub.data() + k * static_cast<int64_t>(esize), esize);
    ++k;
  });
}

// The rows of `all` (row-major over `grid`) that `cover` selects, row-major over cover.extent.
inline std::vector<uint8_t> gather(const std::vector<uint8_t>& all, const Dims& grid,
                                   const Box& cover, size_t esize) {
  std::vector<uint8_t> out(static_cast<size_t>(cover.volume()) * esize);
  int64_t k = 0;
  forEachIndex(cover, [&](const Dims& i) {
    std::memcpy(out.data() + k * static_cast<int64_t>(esize),
                all.data() + linearIndex(i, grid) * static_cast<int64_t>(esize), esize);
    ++k;
  });
  return out;
}

// The piece-wise pipeline on the host: blockAmaxHostWith per piece, merged into the weight's
// amax grid, scalesFromAmax, quantizeBlocksHostWith per piece; assembled into a Quantized.
inline Status quantizePiecewiseHost(HostQuantKernel k, const std::vector<HeldPiece>& pieces,
                                    const Dims& shape, const BlockScaling& s, Quantized* out) {
  const Dims grid = scaleShape(shape, s);
  std::vector<float> amax(static_cast<size_t>(grid.product()), 0.0f);
  for (const HeldPiece& p : pieces) {
    const Box cover = blockCover(p.box, s);
    std::vector<float> part(static_cast<size_t>(cover.volume()));
    if (Status st = blockAmaxHostWith(k, p.view(), shape, s, part.data()); !st) return st;
    int64_t j = 0;
    forEachIndex(cover, [&](const Dims& b) {
      float& a = amax[static_cast<size_t>(linearIndex(b, grid))];
      a = mergeAmax(a, part[static_cast<size_t>(j++)]);
    });
  }
  const size_t ssize = scaleSize(s.format);
  out->scales.assign(static_cast<size_t>(grid.product()) * ssize, 0);
  scalesFromAmax(amax.data(), grid.product(), s.format, out->scales.data());
  out->values.assign(static_cast<size_t>(shape.product()), 0);
  for (const HeldPiece& p : pieces) {
    const std::vector<uint8_t> scales = gather(out->scales, grid, blockCover(p.box, s), ssize);
    std::vector<uint8_t> q(static_cast<size_t>(p.box.volume()));
    if (Status st = quantizeBlocksHostWith(k, p.view(), shape, s, scales.data(), q.data()); !st) {
      return st;
    }
    scatter(q, p.box, &out->values, shape, 1);
  }
  return Status::ok();
}

}  // namespace wsync::block_quant_testing
