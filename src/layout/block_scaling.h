// Block scaling: how a rollout holds a float8 (e4m3) weight with one scale per block of elements,
// as block-fp8 and MXFP8 engines do (vLLM's Fp8LinearMethod with weight_block_size [128, 128]:
// float32 `weight_scale_inv` per 128x128 block; DeepGEMM's power-of-two variant; OCP MXFP8: 1x32
// blocks with e8m0 scales). The blocks tile the last two dims of the global tensor; leading dims
// (experts) have block 1. The scale tensor is a global tensor of its own, one element per block:
// shape [..., ceil(rows / block_rows), ceil(cols / block_cols)]. A trainer never registers
// scales: the coordinator derives them (src/plan/block_scaling_plan.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "layout/box.h"
#include "layout/dtype.h"

namespace wsync {

// How a block's scale is computed from its absolute maximum `amax` (NaN-propagating max |x|) and
// stored. Values equal the public wsync_scale_format_t.
enum class ScaleFormat : uint8_t {
  // float32 s = max(amax, 1e-4) / 448; q = e4m3(x * (1 / s)) (vLLM per_block_cast_to_fp8 as torch
  // runs it on the CPU).
  kFloat32 = 1,
  // float32 s = 2^ceil(log2(max(amax, 1e-4) / 448)); q as above (per_block_cast_to_fp8 with
  // use_ue8m0).
  kPow2Float32 = 2,
  // uint8 e = clamp(ceil(log2(max(amax, FLT_MIN) / 448)) + 127, 0, 254); q = e4m3(x / 2^(e-127))
  // (OCP MX as vLLM's _mxfp8_e4m3_quantize_torch computes it).
  kE8M0 = 3,
  // float32 s = max(amax, 1e-4) * fl(1 / 448); q as kFloat32: per_block_cast_to_fp8 as torch runs
  // it on CUDA devices (it multiplies by the reciprocal; the CPU divides: the last bit of the
  // scale differs for about half of all maxima, docs/block_fp8.md).
  kFloat32Gpu = 4,
};
inline constexpr int kMaxScaleFormat = 4;

struct BlockScaling {
  ScaleFormat format = ScaleFormat::kFloat32;
  int64_t block_rows = 128;  // along dim rank-2 of the weight
  int64_t block_cols = 128;  // along dim rank-1
  std::string scale_tensor;  // the global name the rollout registers the scales under

  bool operator==(const BlockScaling& o) const {
    return format == o.format && block_rows == o.block_rows && block_cols == o.block_cols &&
           scale_tensor == o.scale_tensor;
  }
  bool operator!=(const BlockScaling& o) const { return !(*this == o); }
};

// A global tensor a rollout holds block-scaled. `cuts` (the job's table only; set at commit by
// the coordinator): per dim of the weight, the boundaries of the rollouts' pieces strictly inside
// it, increasing; each trainer piece is quantized in parts between them (block_scaling_plan.h), so
// that each part goes whole to one rollout piece. Not part of the scheme: == ignores it.
struct ScaledTensor {
  std::string tensor;
  BlockScaling scaling;
  std::vector<std::vector<int64_t>> cuts;
  bool operator==(const ScaledTensor& o) const {
    return tensor == o.tensor && scaling == o.scaling;
  }
};

const char* scaleFormatName(ScaleFormat f);  // "float32", "pow2_float32", "e8m0"
bool validScaleFormat(int value);
// The dtype of the scale tensor: float32, or uint8 for e8m0.
DType scaleDType(ScaleFormat f);
// "block 128x128 float32 scales" (for error messages).
std::string describe(const BlockScaling& s);
// A tag that tells two schemes apart in internal tensor names: "fp8_b128x128_float32".
std::string schemeTag(const BlockScaling& s);
// An empty string when `s` can scale a weight of `shape`, else why not (rank < 2, a block
// extent < 1, MX rules: e8m0 needs block_rows 1 and cols % block_cols == 0).
std::string checkBlockScaling(const BlockScaling& s, const Dims& shape);

// The scale tensor's shape for a weight of `shape` (rank >= 2).
Dims scaleShape(const Dims& shape, const BlockScaling& s);
// The block of the weight that scale element `block` (scale-tensor coordinates) covers, clipped to
// the weight's `shape` (the last blocks may be uneven).
Box blockBox(const Dims& block, const Dims& shape, const BlockScaling& s);
// The blocks (a box of the scale tensor) that intersect `box` of the weight.
Box blockCover(const Box& box, const BlockScaling& s);
// True when `box` holds every element of block `block` (clipped to `shape`).
bool coversBlock(const Box& box, const Dims& block, const Dims& shape, const BlockScaling& s);

}  // namespace wsync
