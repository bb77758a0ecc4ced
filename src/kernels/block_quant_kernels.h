// Block quantization on the device: quant/block_quant.h's contract with the piece, the amax grid,
// the scales and the e4m3 output in device memory. Same amax, scales and bytes as the host
// functions (both compute with quant/block_quant_math.h; tests/gpu/block_quant_device_test.cc
// compares them), so trainers may quantize on either side and rollouts see one result.
//
// Contract: pointers are device memory readable / writable on `stream`'s device; `piece.data` is
// the piece's first element, strides in elements (innermost 1). Launches return at once (work is
// enqueued on `stream`); errors during execution surface at the stream's next synchronization.
// INVALID_ARGUMENT for what checkPiece() refuses. Thread-safe.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/status.h"
#include "quant/block_quant.h"
#include "quant/block_quant_geometry.h"

namespace wsync {

// blockAmaxHost on the device: `amax` (float32, row-major over blockCover(piece.box, s)) gets,
// per block, the NaN-propagating max |x| over the piece's elements in it. A group of threads per
// block, 16-byte loads where the block's rows allow (quant/block_quant_geometry.h: vectorizable).
Status launchBlockAmax(const PieceView& piece, const Dims& shape, const BlockScaling& s,
                       float* amax, cudaStream_t stream);

// scalesFromAmax on the device: `n` scales (float32, or uint8 for kE8M0) from `n` complete maxima.
Status launchScalesFromAmax(const float* amax, int64_t n, ScaleFormat format, void* scales,
                            cudaStream_t stream);

// quantizeBlocksHost on the device: `dst` (row-major over piece.box.extent) gets e4m3 bytes, each
// element with its block's scale from `scales` (row-major over blockCover(piece.box, s)).
Status launchQuantizeBlocks(const PieceView& piece, const Dims& shape, const BlockScaling& s,
                            const void* scales, uint8_t* dst, cudaStream_t stream);

// launchScalesFromAmax then launchQuantizeBlocks in one kernel: `amax` holds the complete maxima
// of the piece's cover (row-major over blockCover), `scales` gets their scales.
Status launchScaleAndQuantize(const PieceView& piece, const Dims& shape, const BlockScaling& s,
                              const float* amax, void* scales, uint8_t* dst, cudaStream_t stream);

// launchBlockAmax, launchScalesFromAmax and launchQuantizeBlocks in one pass over the data: per
// cover block the max |x| of the piece's elements, merged (mergeAmax) with amax_in[b] where
// amax_in is not null (the other trainers' maxima of a shared block; 0 for none), its scale into
// `scales`, the bytes into `dst`. Without amax_in the piece must hold every element of its cover
// blocks for the scales to be the tensor's.
Status launchQuantizeFused(const PieceView& piece, const Dims& shape, const BlockScaling& s,
                           const float* amax_in, void* scales, uint8_t* dst, cudaStream_t stream);

// ---- batched: one launch for many pieces (quant/block_quant_geometry.h: QuantTask)
// -----------------

// Runs `mode` over every cover block of the `num_tasks` tasks in device memory (numbered by
// numberQuantTasks; total_blocks as it returned), `group` threads per block (groupSizeFor: 1, 4,
// 32 or 256; the tasks' blocks may be of any size, the group only tunes the speed). `host_tasks`:
// the same table in host memory, from which the launcher picks the kernel (the whole-width one
// when every task passes holdsWholeWidthBlocks for `group`). With `units` (device, `num_units`
// sorted global block numbers) only those blocks, and (kAmax only) block units[i]'s maximum goes
// to list_amax[i] instead of its task's amax_out. The tasks' pieces must pass checkPiece (the
// caller checks: no check on the device).
Status launchBlockQuantBatch(const block_quant_kernels::QuantTask* host_tasks,
                             const block_quant_kernels::QuantTask* device_tasks, int64_t num_tasks,
                             uint64_t total_blocks, int group, block_quant_kernels::QuantMode mode,
                             const uint64_t* units, uint64_t num_units, float* list_amax,
                             cudaStream_t stream);

// grid[index[i]] = values[i] for i < n (device arrays).
Status launchScatterAmax(const uint64_t* index, const float* values, int64_t n, float* grid,
                         cudaStream_t stream);

// ---- the first kernels (block_quant_legacy.cu), for the bench and tests: same contracts --------

Status launchBlockAmaxLegacy(const PieceView& piece, const Dims& shape, const BlockScaling& s,
                             float* amax, cudaStream_t stream);
Status launchQuantizeBlocksLegacy(const PieceView& piece, const Dims& shape, const BlockScaling& s,
                                  const void* scales, uint8_t* dst, cudaStream_t stream);

}  // namespace wsync
