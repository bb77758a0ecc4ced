// Block quantization on the device (kernels/block_quant_kernels.h) behind plain C++ types, like
// device_ops.h: the PieceView's data and every other pointer are device memory of the calling
// thread's current device; the work is enqueued on `stream`. UNSUPPORTED in a build without CUDA.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "layout/block_scaling.h"
#include "quant/block_quant.h"
#include "runtime/device_ops.h"

namespace wsync {

// As blockAmaxHost, into the device grid `amax`.
Status blockAmaxAsync(const PieceView& piece, const Dims& shape, const BlockScaling& s, float* amax,
                      CudaStreamHandle stream);
// As scalesFromAmax.
Status scalesFromAmaxAsync(const float* amax, int64_t n, ScaleFormat format, void* scales,
                           CudaStreamHandle stream);
// As quantizeBlocksHost.
Status quantizeBlocksAsync(const PieceView& piece, const Dims& shape, const BlockScaling& s,
                           const void* scales, uint8_t* dst, CudaStreamHandle stream);

}  // namespace wsync
