// Block quantization on the device (kernels/block_quant_kernels.h) behind plain C++ types, like
// device_ops.h: the PieceView's data and every other pointer are device memory of the calling
// thread's current device; the work is enqueued on `stream`. UNSUPPORTED in a build without CUDA.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "layout/block_scaling.h"
#include "quant/block_quant.h"
#include "quant/block_quant_geometry.h"
#include "runtime/device_ops.h"

namespace wsync {

// As blockAmaxHost, into the device grid `amax`.
Status blockAmaxAsync(const PieceView& piece, const Dims& shape, const BlockScaling& s, float* amax,
                      CudaStreamHandle stream);
// As scalesFromAmax.
Status scalesFromAmaxAsync(const float* amax, int64_t n, ScaleFormat format, void* scales,
                           CudaStreamHandle stream);
// grid[index[i]] = values[i] (launchScatterAmax).
Status scatterAmaxAsync(const uint64_t* index, const float* values, int64_t n, float* grid,
                        CudaStreamHandle stream);
// As quantizeBlocksHost.
Status quantizeBlocksAsync(const PieceView& piece, const Dims& shape, const BlockScaling& s,
                           const void* scales, uint8_t* dst, CudaStreamHandle stream);
// Many pieces in one launch (kernels/block_quant_kernels.h: launchBlockQuantBatch).
Status blockQuantBatchAsync(const block_quant_kernels::QuantTask* host_tasks,
                            const block_quant_kernels::QuantTask* device_tasks, int64_t num_tasks,
                            uint64_t total_blocks, int group, block_quant_kernels::QuantMode mode,
                            const uint64_t* units, uint64_t num_units, float* list_amax,
                            CudaStreamHandle stream);

}  // namespace wsync
