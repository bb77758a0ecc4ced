#include "runtime/device_quant_ops.h"

#ifdef WSYNC_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/block_quant_kernels.h"
#endif

namespace wsync {

#ifdef WSYNC_HAVE_CUDA
Status blockAmaxAsync(const PieceView& piece, const Dims& shape, const BlockScaling& s, float* amax,
                      CudaStreamHandle stream) {
  return launchBlockAmax(piece, shape, s, amax, stream);
}
Status scalesFromAmaxAsync(const float* amax, int64_t n, ScaleFormat format, void* scales,
                           CudaStreamHandle stream) {
  return launchScalesFromAmax(amax, n, format, scales, stream);
}
Status quantizeBlocksAsync(const PieceView& piece, const Dims& shape, const BlockScaling& s,
                           const void* scales, uint8_t* dst, CudaStreamHandle stream) {
  return launchQuantizeBlocks(piece, shape, s, scales, dst, stream);
}
Status blockQuantBatchAsync(const block_quant_kernels::QuantTask* host_tasks,
                            const block_quant_kernels::QuantTask* device_tasks, int64_t num_tasks,
                            uint64_t total_blocks, int group, block_quant_kernels::QuantMode mode,
                            const uint64_t* units, uint64_t num_units, float* list_amax,
                            CudaStreamHandle stream) {
  return launchBlockQuantBatch(host_tasks, device_tasks, num_tasks, total_blocks, group, mode,
                               units, num_units, list_amax, stream);
}
Status scatterAmaxAsync(const uint64_t* index, const float* values, int64_t n, float* grid,
                        CudaStreamHandle stream) {
  return launchScatterAmax(index, values, n, grid, stream);
}
#else
namespace {
Status noCuda() {
  return {WSYNC_ERR_UNSUPPORTED, "block quantization on the device: a build without CUDA"};
}
}  // namespace
Status blockAmaxAsync(const PieceView&, const Dims&, const BlockScaling&, float*,
                      CudaStreamHandle) {
  return noCuda();
}
Status scalesFromAmaxAsync(const float*, int64_t, ScaleFormat, void*, CudaStreamHandle) {
  return noCuda();
}
Status quantizeBlocksAsync(const PieceView&, const Dims&, const BlockScaling&, const void*,
                           uint8_t*, CudaStreamHandle) {
  return noCuda();
}
Status blockQuantBatchAsync(const block_quant_kernels::QuantTask*,
                            const block_quant_kernels::QuantTask*, int64_t, uint64_t, int,
                            block_quant_kernels::QuantMode, const uint64_t*, uint64_t, float*,
                            CudaStreamHandle) {
  return noCuda();
}
Status scatterAmaxAsync(const uint64_t*, const float*, int64_t, float*, CudaStreamHandle) {
  return noCuda();
}
#endif

}  // namespace wsync
