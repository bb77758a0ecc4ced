// Block quantization kernels (kernels/block_quant_kernels.h). The arithmetic is
// quant/block_quant_math.h, shared with the host code, so both give the same bits; the index
// arithmetic is quant/block_quant_geometry.h, which the tests also run on the host. Compiled by
// nvcc as C++17 (block_quant.h and what it includes are C++17).
//
// On sm_89 and later the float8 conversion is the hardware's (cvt.rn.satfinite.e4m3x2.f32,
// block_quant_geometry.h: quantizePairHardware), bit-equal to the shared software one.
//
// One kernel for every step: a group of G threads (1, 4, 32 or 256) per cover block walks the part
// of the block inside its piece, in 16-byte vectors where the block's rows are aligned
// (bk::vectorizable), else element by element. Per block it computes the max |x| (an unsigned
// max over the elements' |x| bits: NaN bits are above every number's, so a NaN wins as
// qm::mergeAmax says), the scale and the float8 bytes, as the mode asks. In the fused mode the
// block's vectors stay in registers between the max and the bytes (up to kCachedVectors a thread;
// larger blocks are read a second time, mostly from L2).
//
// Pieces whose blocks are whole in width (bk::holdsWholeWidthBlocks: 128 x 128 and MXFP8's 1 x 32
// on aligned 16-bit weights, a trainer's whole weights and its dim-0 shards, however they cut the
// blocks' rows) get their own kernel, chosen on the host per launch: 32-bit indices once per
// block, a row bound per lane, and none of the general walk's registers (in one kernel with it,
// ptxas spilled the cached vectors to local memory).
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "common/cuda_check.h"
#include "kernels/batched_tiles.cuh"
#include "kernels/block_quant_kernels.h"
#include "quant/block_quant_geometry.h"
#include "quant/block_quant_math.h"

namespace wsync {
namespace {

namespace qm = quant_math;
namespace bk = block_quant_kernels;
using bk::BlockPart;
using bk::Geometry;
using bk::QuantMode;
using bk::QuantTask;

constexpr int kThreads = 256;
constexpr int kCache = bk::kCachedVectors;

// A vector's 16 bytes as little-endian words.
__device__ __forceinline__ void wordsOf(const uint4 v, uint32_t (&w)[4]) {
  w[0] = v.x;
  w[1] = v.y;
  w[2] = v.z;
  w[3] = v.w;
}

// The float8 bytes of a vector's elements (multiplier m) at `out`: 4 bytes for float32, 8 bytes
// for 16-bit elements (out aligned to that).
__device__ __forceinline__ void storeQuantized(const uint4 v, int dtype, float m, bool finite,
                                               uint8_t* out) {
  uint32_t w[4];
  wordsOf(v, w);
  uint32_t q[2];
  bk::quantizeVector(w, dtype, m, q, finite);
  if (dtype == 0) {
    *reinterpret_cast<uint32_t*>(out) = q[0];
  } else {
    *reinterpret_cast<uint2*>(out) = make_uint2(q[0], q[1]);
  }
}

// storeQuantized for the `vectors` 16-bit vectors `v` of a whole-width lane, vector k at
// out + k * step (kDType and kFinite as quantizeVectorOf takes them).
template <int kDType, bool kFinite>
__device__ __forceinline__ void storeVectors(const uint4 (&v)[kCache], int vectors, float m,
                                             uint8_t* out, int64_t step) {
#pragma unroll
  for (int k = 0; k < kCache; ++k) {
    if (k < vectors) {
      uint32_t w[4];
      wordsOf(v[k], w);
      uint32_t q[2];
      bk::quantizeVectorOf<kDType, kFinite>(w, m, q);
      *reinterpret_cast<uint2*>(out + k * step) = make_uint2(q[0], q[1]);
    }
  }
}

__device__ __forceinline__ uint32_t absMaxOf(const uint4 v, int dtype, uint32_t acc) {
  uint32_t w[4];
  wordsOf(v, w);
  return bk::absMaxOfVector(w, dtype, acc);
}

// The max of `v` over the group of G threads holding this thread (every thread of the thread
// block calls it, active or not).
template <int G>
__device__ __forceinline__ uint32_t groupMax(uint32_t v, uint32_t* shared) {
  static_assert(G == 1 || G == 4 || G == 32 || G == kThreads, "groups of 1, 4, 32 or all threads");
  if constexpr (G == 1) {
    (void)shared;
    return v;
  } else if constexpr (G <= 32) {
#pragma unroll
    for (int o = G / 2; o > 0; o /= 2)
      v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
  } else {
#pragma unroll
    for (int o = 16; o > 0; o /= 2)
      v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
    if ((threadIdx.x & 31) == 0) shared[threadIdx.x / 32] = v;
    __syncthreads();
    v = 0;
#pragma unroll
    for (int w = 0; w < kThreads / 32; ++w)
      v = max(v, shared[w]);
    __syncthreads();  // `shared` is free for the next block
    return v;
  }
}

// A block's multiplier and whether its elements are all finite (kFused only, where the maximum
// includes the data's own: then no product is NaN and quantizeVector skips the NaN fix-up; given
// scales or maxima are not trusted to bound the data).
struct Multiplier {
  float m;
  bool finite;
};

// The multiplier of cover block `b` of task `t` in `mode` (not kAmax): read from the scales, or
// from the block's maximum (`amax`: the group's, merged with amax_in in kFused; amax_in alone in
// kScaleAndQuantize), its scale written by the `writer` thread.
__device__ __forceinline__ Multiplier multiplierOf(const QuantTask& t, int64_t b, QuantMode mode,
                                                   float amax, bool writer) {
  const bool e8m0 = t.format == static_cast<int>(ScaleFormat::kE8M0);
  if (mode == QuantMode::kQuantizeWithScales) return {bk::multiplierAt(t.scales, e8m0, b), false};
  float a = mode == QuantMode::kScaleAndQuantize ? t.amax_in[b] : amax;
  if (mode == QuantMode::kFused && t.amax_in != nullptr) a = qm::mergeAmax(a, t.amax_in[b]);
  const bool finite = mode == QuantMode::kFused && qm::bitsOf(a) < 0x7f800000u;
  if (e8m0) {
    const uint8_t e = qm::e8m0Scale(a);
    if (writer) static_cast<uint8_t*>(t.scales)[b] = e;
    return {qm::multiplierOfE8m0(e), finite};
  }
  const float s = qm::floatScale(t.format, a);
  if (writer) static_cast<float*>(t.scales)[b] = s;
  return {qm::multiplierOfFloatScale(s), finite};
}

// processUnit for a task that passes bk::holdsWholeWidthBlocks for G: each lane's vectors in the
// block's part (bk::wholeWidthPlace) stay in registers between the maximum and the bytes; the
// index arithmetic is 32-bit and once per block.
template <int G>
__device__ __forceinline__ void processWholeWidth(const QuantTask& t, uint64_t unit, bool active,
                                                  QuantMode mode, float* list_out,
                                                  uint32_t* shared) {
  const Geometry& g = t.g;
  const int dtype = g.dtype;
  const auto lane = static_cast<uint32_t>(threadIdx.x % G);
  const uint32_t b = active ? static_cast<uint32_t>(unit - t.first_tile) : 0;
  const bk::WholeWidthPlace at = bk::wholeWidthPlace(g, b, lane, G);
  const int vectors = at.vectors;  // fewer where the piece cuts the block's rows
  const bk::WholeWidthPlace step = bk::wholeWidthStep(g, G);
  const auto* src = static_cast<const uint16_t*>(g.data) + at.src;
  uint8_t* out = t.dst + at.dst;
  uint4 v[kCache];
  uint32_t acc = 0;
  if (active) {
#pragma unroll
    for (int k = 0; k < kCache; ++k)
      if (k < vectors) v[k] = __ldg(reinterpret_cast<const uint4*>(src + k * step.src));
#pragma unroll
    for (int k = 0; k < kCache; ++k)
      if (k < vectors) acc = absMaxOf(v[k], dtype, acc);
  }
  const bool data_amax = mode == QuantMode::kAmax || mode == QuantMode::kFused;
  float amax = 0.0F;
  if (data_amax) amax = bk::amaxOfBits(groupMax<G>(bk::floatBitsOfAccumulator(acc, dtype), shared));
  if (!active) return;
  if (mode == QuantMode::kAmax) {
    if (lane == 0) *(list_out != nullptr ? list_out : t.amax_out + b) = amax;
    return;
  }
  if (!data_amax) {
#pragma unroll
    for (int k = 0; k < kCache; ++k)
      if (k < vectors) v[k] = __ldg(reinterpret_cast<const uint4*>(src + k * step.src));
  }
  const Multiplier m = multiplierOf(t, b, mode, amax, lane == 0);
  // one branch per block: a run-time dtype or NaN check per element would be the kernel's cost
  if (dtype == 1) {
    if (m.finite) {
      storeVectors<1, true>(v, vectors, m.m, out, step.dst);
    } else {
      storeVectors<1, false>(v, vectors, m.m, out, step.dst);
    }
  } else if (m.finite) {
    storeVectors<2, true>(v, vectors, m.m, out, step.dst);
  } else {
    storeVectors<2, false>(v, vectors, m.m, out, step.dst);
  }
}

// The work of one group on cover block `unit` of task `t` (inactive: past the last unit; the
// group still takes part in groupMax). `list_out`: where a kAmax maximum goes (else amax_out).
template <int G>
__device__ __forceinline__ void processUnit(const QuantTask& t, uint64_t unit, bool active,
                                            QuantMode mode, float* list_out, uint32_t* shared) {
  const int lane = static_cast<int>(threadIdx.x % G);
  const Geometry& g = t.g;
  const int dtype = g.dtype;
  const int64_t b = active ? static_cast<int64_t>(unit - t.first_tile) : 0;
  BlockPart p;
  if (active) p = bk::blockPart(g, b);
  const int64_t rows = p.row_hi - p.row_lo;
  const int64_t cols = p.col_hi - p.col_lo;
  const int64_t width = g.out_pitch;
  const int per = bk::vectorElements(g);
  const int esize = bk::elementBytes(g);
  const bool vec =
      active && rows * cols < (int64_t{1} << 31) &&
      bk::vectorizable(g, p, reinterpret_cast<uint64_t>(g.data), reinterpret_cast<uint64_t>(t.dst));
  const uint32_t per_row = vec ? static_cast<uint32_t>(cols / per) : 1;
  const int64_t vectors = vec ? rows * per_row : 0;
  const int64_t scalars = active && !vec ? rows * cols : 0;
  const auto* src = static_cast<const uint8_t*>(g.data);
  // element (r, c) of the part, both relative to its first row and column
  const auto srcAt = [&](int64_t r, int64_t c) {
    return p.base + (p.row_lo + r) * p.row_stride + p.col_lo + c;
  };
  const auto dstAt = [&](int64_t r, int64_t c) {
    return p.dst_base + (p.row_lo + r) * width + p.col_lo + c;
  };
  const auto loadVector = [&](int64_t v) {
    const uint32_t r = static_cast<uint32_t>(v) / per_row;
    const uint32_t c = static_cast<uint32_t>(v) - r * per_row;
    return __ldg(reinterpret_cast<const uint4*>(src + srcAt(r, int64_t{c} * per) * esize));
  };
  const auto storeVector = [&](int64_t v, const uint4 x, const Multiplier& m) {
    const uint32_t r = static_cast<uint32_t>(v) / per_row;
    const uint32_t c = static_cast<uint32_t>(v) - r * per_row;
    storeQuantized(x, dtype, m.m, m.finite, t.dst + dstAt(r, int64_t{c} * per));
  };

  uint4 cache[kCache];
  const bool data_amax = mode == QuantMode::kAmax || mode == QuantMode::kFused;
  float amax = 0.0f;
  if (data_amax) {
    uint32_t acc = 0;
    uint32_t bits = 0;
#pragma unroll
    for (int k = 0; k < kCache; ++k) {
      const int64_t v = lane + static_cast<int64_t>(k) * G;
      if (v < vectors) {
        cache[k] = loadVector(v);
        acc = absMaxOf(cache[k], dtype, acc);
      }
    }
    for (int64_t v = lane + static_cast<int64_t>(kCache) * G; v < vectors; v += G)
      acc = absMaxOf(loadVector(v), dtype, acc);
    for (int64_t e = lane; e < scalars; e += G) {
      const int64_t r = e / cols;
      const float x = bk::loadElement(g, srcAt(r, e - r * cols));
      bits = max(bits, qm::bitsOf(qm::absOf(x)));
    }
    bits = groupMax<G>(max(bits, bk::floatBitsOfAccumulator(acc, dtype)), shared);
    amax = bk::amaxOfBits(bits);
  }
  if (!active) return;
  if (mode == QuantMode::kAmax) {
    if (lane == 0) *(list_out != nullptr ? list_out : t.amax_out + b) = amax;
    return;
  }

  const Multiplier m = multiplierOf(t, b, mode, amax, lane == 0);
#pragma unroll
  for (int k = 0; k < kCache; ++k) {
    const int64_t v = lane + static_cast<int64_t>(k) * G;
    if (v < vectors) storeVector(v, data_amax ? cache[k] : loadVector(v), m);
  }
  for (int64_t v = lane + static_cast<int64_t>(kCache) * G; v < vectors; v += G)
    storeVector(v, loadVector(v), m);
  for (int64_t e = lane; e < scalars; e += G) {
    const int64_t r = e / cols;
    const int64_t c = e - r * cols;
    t.dst[dstAt(r, c)] = qm::quantizeElement(bk::loadElement(g, srcAt(r, c)), m.m);
  }
}

// kThreads / G groups per thread block, each on one work item at a time (grid-stride, the same
// trip count for every thread of a block). Work item i is unit i, or units[i] with a list. With
// kTable the tasks are `tasks` (num_tasks, sorted by first_tile), else the single task `one`.
// kWhole: every task passes bk::holdsWholeWidthBlocks for G (checked by the launcher).
// Four thread blocks per SM (at most 64 registers a thread): on an H100 the general walk spills
// ~200 bytes there and ran 1.2x the amax pass and 1.05x the fused pass of the unbounded 98
// registers (two blocks per SM); the whole-width walk fits without spilling.
template <int G, bool kTable, bool kWhole>
__global__ void __launch_bounds__(kThreads, 4)
    blockQuantKernel(const QuantTask* __restrict__ tasks, int64_t num_tasks, QuantTask one,
                     uint64_t items, const uint64_t* __restrict__ units,
                     float* __restrict__ list_amax, int mode_value) {
  __shared__ uint32_t shared[kThreads / 32];
  constexpr int kGroups = kThreads / G;
  const QuantMode mode = static_cast<QuantMode>(mode_value);
  int64_t owner = 0;
  for (uint64_t first = static_cast<uint64_t>(blockIdx.x) * kGroups; first < items;
       first += static_cast<uint64_t>(gridDim.x) * kGroups) {
    const uint64_t item = first + threadIdx.x / G;
    const bool active = item < items;
    const uint64_t unit = !active ? 0 : units != nullptr ? units[item] : item;
    float* list_out = active && list_amax != nullptr ? list_amax + item : nullptr;
    // With G == kThreads the whole thread block works on one item, so groupMax's barriers are
    // reached by all threads or none.
    if constexpr (kTable) {
      if (active) owner = kernels::nextTileOwner(tasks, num_tasks, unit, owner);
    }
    const QuantTask& t = kTable ? tasks[owner] : one;
    if constexpr (kWhole) {
      processWholeWidth<G>(t, unit, active, mode, list_out, shared);
    } else {
      processUnit<G>(t, unit, active, mode, list_out, shared);
    }
  }
}

__global__ void scalesKernel(const float* amax, int64_t n, int format, void* scales) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (format == static_cast<int>(ScaleFormat::kE8M0)) {
      static_cast<uint8_t*>(scales)[i] = qm::e8m0Scale(amax[i]);
    } else {
      static_cast<float*>(scales)[i] = qm::floatScale(format, amax[i]);
    }
  }
}

__global__ void scatterKernel(const uint64_t* index, const float* values, int64_t n, float* grid) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    grid[index[i]] = values[i];
}

int simpleGrid(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 65535 * 32 ? blocks : 65535 * 32);
}

template <int G, bool kTable, bool kWhole>
Status launchGroup(const QuantTask* tasks, int64_t num_tasks, const QuantTask& one, uint64_t items,
                   const uint64_t* units, float* list_amax, QuantMode mode, cudaStream_t stream,
                   const char* what) {
  constexpr uint64_t kGroups = kThreads / G;
  const auto kernel = blockQuantKernel<G, kTable, kWhole>;
  WSYNC_ASSIGN_OR_RETURN(
      const unsigned blocks,
      kernels::oneWaveBlocks(kernel, kThreads, (items + kGroups - 1) / kGroups, what));
  kernel<<<blocks, kThreads, 0, stream>>>(tasks, num_tasks, one, items, units, list_amax,
                                          static_cast<int>(mode));
  return cudaCheck(cudaGetLastError(), what);
}

template <int G, bool kTable>
Status launchWalk(bool whole, const QuantTask* tasks, int64_t num_tasks, const QuantTask& one,
                  uint64_t items, const uint64_t* units, float* list_amax, QuantMode mode,
                  cudaStream_t stream, const char* what) {
  if (whole) {
    return launchGroup<G, kTable, true>(tasks, num_tasks, one, items, units, list_amax, mode,
                                        stream, what);
  }
  return launchGroup<G, kTable, false>(tasks, num_tasks, one, items, units, list_amax, mode, stream,
                                       what);
}

// `whole`: every task passes holdsWholeWidthBlocks for `group` (the whole-width kernel).
template <bool kTable>
Status launchAny(int group, bool whole, const QuantTask* tasks, int64_t num_tasks,
                 const QuantTask& one, uint64_t items, const uint64_t* units, float* list_amax,
                 QuantMode mode, cudaStream_t stream, const char* what) {
  if (items == 0) return Status::ok();
  switch (group) {
    case 1:
      return launchWalk<1, kTable>(whole, tasks, num_tasks, one, items, units, list_amax, mode,
                                   stream, what);
    case 4:
      return launchWalk<4, kTable>(whole, tasks, num_tasks, one, items, units, list_amax, mode,
                                   stream, what);
    case 32:
      return launchWalk<32, kTable>(whole, tasks, num_tasks, one, items, units, list_amax, mode,
                                    stream, what);
    case kThreads:
      return launchWalk<kThreads, kTable>(whole, tasks, num_tasks, one, items, units, list_amax,
                                          mode, stream, what);
    default:
      return invalidArgument(std::string(what) + ": group of " + std::to_string(group) +
                             " threads (1, 4, 32 or 256)");
  }
}

// Whether the whole-width kernel may walk task `t` with `group` threads a block.
bool wholeWidth(const QuantTask& t, int group) {
  return bk::holdsWholeWidthBlocks(t.g, group, reinterpret_cast<uint64_t>(t.g.data),
                                   reinterpret_cast<uint64_t>(t.dst));
}

// One piece: checked, then every block of its cover in `mode`.
Status launchPiece(const PieceView& piece, const Dims& shape, const BlockScaling& s, QuantTask t,
                   QuantMode mode, cudaStream_t stream, const char* what) {
  const std::string why = checkPiece(piece, shape, s);
  if (!why.empty()) return invalidArgument(std::string(what) + ": " + why);
  if (piece.box.empty()) return Status::ok();
  const QuantTask geometry = bk::quantTaskOf(piece, s);
  t.g = geometry.g;
  t.format = geometry.format;
  t.first_tile = 0;
  const int group = bk::groupSizeFor(s.block_rows, s.block_cols, t.g.dtype);
  return launchAny<false>(group, wholeWidth(t, group), nullptr, 0, t,
                          static_cast<uint64_t>(t.g.cover_volume), nullptr, nullptr, mode, stream,
                          what);
}

}  // namespace

Status launchBlockAmax(const PieceView& piece, const Dims& shape, const BlockScaling& s,
                       float* amax, cudaStream_t stream) {
  if (amax == nullptr && checkPiece(piece, shape, s).empty() && !piece.box.empty())
    return invalidArgument("launchBlockAmax: no amax array");
  QuantTask t;
  t.amax_out = amax;
  return launchPiece(piece, shape, s, t, QuantMode::kAmax, stream, "launchBlockAmax");
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
  scalesKernel<<<simpleGrid(n), kThreads, 0, stream>>>(amax, n, static_cast<int>(format), scales);
  return cudaCheck(cudaGetLastError(), "launchScalesFromAmax");
}

Status launchQuantizeBlocks(const PieceView& piece, const Dims& shape, const BlockScaling& s,
                            const void* scales, uint8_t* dst, cudaStream_t stream) {
  if ((scales == nullptr || dst == nullptr) && checkPiece(piece, shape, s).empty() &&
      !piece.box.empty())
    return invalidArgument("launchQuantizeBlocks: null scales or destination");
  QuantTask t;
  t.scales = const_cast<void*>(scales);
  t.dst = dst;
  return launchPiece(piece, shape, s, t, QuantMode::kQuantizeWithScales, stream,
                     "launchQuantizeBlocks");
}

Status launchScaleAndQuantize(const PieceView& piece, const Dims& shape, const BlockScaling& s,
                              const float* amax, void* scales, uint8_t* dst, cudaStream_t stream) {
  if ((amax == nullptr || scales == nullptr || dst == nullptr) &&
      checkPiece(piece, shape, s).empty() && !piece.box.empty())
    return invalidArgument("launchScaleAndQuantize: null amax, scales or destination");
  QuantTask t;
  t.amax_in = amax;
  t.scales = scales;
  t.dst = dst;
  return launchPiece(piece, shape, s, t, QuantMode::kScaleAndQuantize, stream,
                     "launchScaleAndQuantize");
}

Status launchQuantizeFused(const PieceView& piece, const Dims& shape, const BlockScaling& s,
                           const float* amax_in, void* scales, uint8_t* dst, cudaStream_t stream) {
  if ((scales == nullptr || dst == nullptr) && checkPiece(piece, shape, s).empty() &&
      !piece.box.empty())
    return invalidArgument("launchQuantizeFused: null scales or destination");
  QuantTask t;
  t.amax_in = amax_in;
  t.scales = scales;
  t.dst = dst;
  return launchPiece(piece, shape, s, t, QuantMode::kFused, stream, "launchQuantizeFused");
}

Status launchBlockQuantBatch(const QuantTask* host_tasks, const QuantTask* device_tasks,
                             int64_t num_tasks, uint64_t total_blocks, int group, QuantMode mode,
                             const uint64_t* units, uint64_t num_units, float* list_amax,
                             cudaStream_t stream) {
  const uint64_t items = units != nullptr ? num_units : total_blocks;
  if (num_tasks <= 0 || items == 0) return Status::ok();
  if (device_tasks == nullptr || host_tasks == nullptr)
    return invalidArgument("launchBlockQuantBatch: null task array");
  if (units != nullptr && (mode != QuantMode::kAmax || list_amax == nullptr)) {
    return invalidArgument("launchBlockQuantBatch: a unit list takes kAmax and a list_amax array");
  }
  bool whole = true;
  for (int64_t i = 0; i < num_tasks && whole; ++i)
    whole = wholeWidth(host_tasks[i], group);
  return launchAny<true>(group, whole, device_tasks, num_tasks, QuantTask{}, items, units,
                         list_amax, mode, stream, "launchBlockQuantBatch");
}

Status launchScatterAmax(const uint64_t* index, const float* values, int64_t n, float* grid,
                         cudaStream_t stream) {
  if (n <= 0) return Status::ok();
  if (index == nullptr || values == nullptr || grid == nullptr) {
    return invalidArgument("launchScatterAmax: null index, values or grid");
  }
  scatterKernel<<<simpleGrid(n), kThreads, 0, stream>>>(index, values, n, grid);
  return cudaCheck(cudaGetLastError(), "launchScatterAmax");
}

}  // namespace wsync
