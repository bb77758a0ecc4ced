// Block quantization kernels (kernels/block_quant_kernels.h). The arithmetic is
// quant/block_quant_math.h, shared with the host code, so both give the same bits; the index
// arithmetic is quant/block_quant_geometry.h, which the tests also run on the host. Compiled by
// nvcc as C++17 (block_quant.h and what it includes are C++17).
//
// On sm_89 and later the float8 conversion is the hardware's (cvt.rn.satfinite.e4m3x2.f32,
// block_quant_geometry.h: quantizePairHardware), bit-equal to the shared software one.
//
// One kernel for every step: a group of G threads (4, 32 or 256) per cover block walks the part
// of the block inside its piece, in 16-byte vectors where the block's rows are aligned
// (bk::vectorizable), else element by element. Per block it computes the max |x| (an unsigned
// max over the elements' |x| bits: NaN bits are above every number's, so a NaN wins as
// qm::mergeAmax says), the scale and the float8 bytes, as the mode asks. In the fused mode the
// block's vectors stay in registers between the max and the bytes (up to kCachedVectors a thread;
// larger blocks are read a second time, mostly from L2).
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
__device__ __forceinline__ void storeQuantized(const uint4 v, int dtype, float m, uint8_t* out) {
  uint32_t w[4];
  wordsOf(v, w);
  uint32_t q[2];
  bk::quantizeVector(w, dtype, m, q);
  if (dtype == 0) {
    *reinterpret_cast<uint32_t*>(out) = q[0];
  } else {
    *reinterpret_cast<uint2*>(out) = make_uint2(q[0], q[1]);
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
  static_assert(G == 4 || G == 32 || G == kThreads, "groups of 4, 32 or all threads");
  if constexpr (G <= 32) {
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

// The multiplier of cover block `b` of task `t` in `mode` (not kAmax): read from the scales, or
// from the block's maximum (`amax`: the group's, merged with amax_in in kFused; amax_in alone in
// kScaleAndQuantize), its scale written by the `writer` thread.
__device__ __forceinline__ float multiplierOf(const QuantTask& t, int64_t b, QuantMode mode,
                                              float amax, bool writer) {
  const bool e8m0 = t.format == static_cast<int>(ScaleFormat::kE8M0);
  if (mode == QuantMode::kQuantizeWithScales) return bk::multiplierAt(t.scales, e8m0, b);
  float a = mode == QuantMode::kScaleAndQuantize ? t.amax_in[b] : amax;
  if (mode == QuantMode::kFused && t.amax_in != nullptr) a = qm::mergeAmax(a, t.amax_in[b]);
  if (e8m0) {
    const uint8_t e = qm::e8m0Scale(a);
    if (writer) static_cast<uint8_t*>(t.scales)[b] = e;
    return qm::multiplierOfE8m0(e);
  }
  const float s = qm::floatScale(t.format, a);
  if (writer) static_cast<float*>(t.scales)[b] = s;
  return qm::multiplierOfFloatScale(s);
}

// The full-tile path (quant/block_quant_geometry.h) for task `t`: the same for every thread.
__device__ __forceinline__ bool fullTiles(const QuantTask& t) {
  return bk::holdsFullTiles(t.g, reinterpret_cast<uint64_t>(t.g.data),
                            reinterpret_cast<uint64_t>(t.dst));
}

// processUnit for a task whose blocks pass fullTiles, with a group of all kThreads threads: each
// thread's 8 vectors (bk::fullTilePlace) stay in registers between the maximum and the bytes; the
// index arithmetic is 32-bit and once per block.
__device__ __forceinline__ void processFullTile(const QuantTask& t, uint64_t unit, bool active,
                                                QuantMode mode, float* list_out, uint32_t* shared) {
  static_assert(kThreads == bk::kFullTileThreads, "one group of the whole thread block");
  const Geometry& g = t.g;
  const int dtype = g.dtype;
  const uint32_t b = active ? static_cast<uint32_t>(unit - t.first_tile) : 0;
  const bk::FullTilePlace at = bk::fullTilePlace(g, b, threadIdx.x);
  const bk::FullTilePlace step = bk::fullTileStep(g);
  const auto* src = static_cast<const uint16_t*>(g.data) + at.src;
  uint8_t* out = t.dst + at.dst;
  const int64_t src_step = step.src;
  const int64_t out_step = step.dst;
  uint4 v[kCache];
  uint32_t acc = 0;
  if (active) {
#pragma unroll
    for (int k = 0; k < kCache; ++k)
      v[k] = __ldg(reinterpret_cast<const uint4*>(src + k * src_step));
#pragma unroll
    for (int k = 0; k < kCache; ++k)
      acc = absMaxOf(v[k], dtype, acc);
  }
  const bool data_amax = mode == QuantMode::kAmax || mode == QuantMode::kFused;
  float amax = 0.0F;
  if (data_amax)
    amax = bk::amaxOfBits(groupMax<kThreads>(bk::floatBitsOfAccumulator(acc, dtype), shared));
  if (!active) return;
  if (mode == QuantMode::kAmax) {
    if (threadIdx.x == 0) *(list_out != nullptr ? list_out : t.amax_out + b) = amax;
    return;
  }
  const float m = multiplierOf(t, b, mode, amax, threadIdx.x == 0);
#pragma unroll
  for (int k = 0; k < kCache; ++k)
    storeQuantized(v[k], dtype, m, out + k * out_step);
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
  const auto storeVector = [&](int64_t v, const uint4 x, float m) {
    const uint32_t r = static_cast<uint32_t>(v) / per_row;
    const uint32_t c = static_cast<uint32_t>(v) - r * per_row;
    storeQuantized(x, dtype, m, t.dst + dstAt(r, int64_t{c} * per));
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

  const float m = multiplierOf(t, b, mode, amax, lane == 0);
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
    t.dst[dstAt(r, c)] = qm::quantizeElement(bk::loadElement(g, srcAt(r, c)), m);
  }
}

// kThreads / G groups per thread block, each on one work item at a time (grid-stride, the same
// trip count for every thread of a block). Work item i is unit i, or units[i] with a list. With
// kTable the tasks are `tasks` (num_tasks, sorted by first_tile), else the single task `one`.
// Four thread blocks per SM (at most 64 registers a thread; ptxas spills ~200 bytes): on an H100
// 1.2x the amax pass and 1.05x the fused pass of the unbounded 98 registers (two blocks per SM).
template <int G, bool kTable>
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
    // With G == kThreads the whole thread block works on one item: `active` and the task are
    // the same for every thread, so the full-tile path's barriers are reached by all or none.
    if constexpr (kTable) {
      if (active) owner = kernels::nextTileOwner(tasks, num_tasks, unit, owner);
      const QuantTask& t = tasks[owner];
      if (G == kThreads && fullTiles(t)) {
        processFullTile(t, unit, active, mode, list_out, shared);
      } else {
        processUnit<G>(t, unit, active, mode, list_out, shared);
      }
    } else if (G == kThreads && fullTiles(one)) {
      processFullTile(one, unit, active, mode, list_out, shared);
    } else {
      processUnit<G>(one, unit, active, mode, list_out, shared);
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

template <int G, bool kTable>
Status launchGroup(const QuantTask* tasks, int64_t num_tasks, const QuantTask& one, uint64_t items,
                   const uint64_t* units, float* list_amax, QuantMode mode, cudaStream_t stream,
                   const char* what) {
  constexpr uint64_t kGroups = kThreads / G;
  const auto kernel = blockQuantKernel<G, kTable>;
  WSYNC_ASSIGN_OR_RETURN(
      const unsigned blocks,
      kernels::oneWaveBlocks(kernel, kThreads, (items + kGroups - 1) / kGroups, what));
  kernel<<<blocks, kThreads, 0, stream>>>(tasks, num_tasks, one, items, units, list_amax,
                                          static_cast<int>(mode));
  return cudaCheck(cudaGetLastError(), what);
}

template <bool kTable>
Status launchAny(int group, const QuantTask* tasks, int64_t num_tasks, const QuantTask& one,
                 uint64_t items, const uint64_t* units, float* list_amax, QuantMode mode,
                 cudaStream_t stream, const char* what) {
  if (items == 0) return Status::ok();
  switch (group) {
    case 4:
      return launchGroup<4, kTable>(tasks, num_tasks, one, items, units, list_amax, mode, stream,
                                    what);
    case 32:
      return launchGroup<32, kTable>(tasks, num_tasks, one, items, units, list_amax, mode, stream,
                                     what);
    case kThreads:
      return launchGroup<kThreads, kTable>(tasks, num_tasks, one, items, units, list_amax, mode,
                                           stream, what);
    default:
      return invalidArgument(std::string(what) + ": group of " + std::to_string(group) +
                             " threads (4, 32 or 256)");
  }
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
  return launchAny<false>(group, nullptr, 0, t, static_cast<uint64_t>(t.g.cover_volume), nullptr,
                          nullptr, mode, stream, what);
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

Status launchBlockQuantBatch(const QuantTask* device_tasks, int64_t num_tasks,
                             uint64_t total_blocks, int group, QuantMode mode,
                             const uint64_t* units, uint64_t num_units, float* list_amax,
                             cudaStream_t stream) {
  const uint64_t items = units != nullptr ? num_units : total_blocks;
  if (num_tasks <= 0 || items == 0) return Status::ok();
  if (device_tasks == nullptr) return invalidArgument("launchBlockQuantBatch: null task array");
  if (units != nullptr && (mode != QuantMode::kAmax || list_amax == nullptr)) {
    return invalidArgument("launchBlockQuantBatch: a unit list takes kAmax and a list_amax array");
  }
  return launchAny<true>(group, device_tasks, num_tasks, QuantTask{}, items, units, list_amax, mode,
                         stream, "launchBlockQuantBatch");
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
