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

namespace wsync {

// blockAmaxHost on the device: `amax` (float32, row-major over blockCover(piece.box, s)) gets,
// per block, the NaN-propagating max |x| over the piece's elements in it. One warp per block.
Status launchBlockAmax(const PieceView& piece, const Dims& shape, const BlockScaling& s,
                       float* amax, cudaStream_t stream);

// scalesFromAmax on the device: `n` scales (float32, or uint8 for kE8M0) from `n` complete maxima.
Status launchScalesFromAmax(const float* amax, int64_t n, ScaleFormat format, void* scales,
                            cudaStream_t stream);

// quantizeBlocksHost on the device: `dst` (row-major over piece.box.extent) gets e4m3 bytes, each
// element with its block's scale from `scales` (row-major over blockCover(piece.box, s)).
Status launchQuantizeBlocks(const PieceView& piece, const Dims& shape, const BlockScaling& s,
                            const void* scales, uint8_t* dst, cudaStream_t stream);

}  // namespace wsync
