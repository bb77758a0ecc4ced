#include "runtime/device_quant_ops.h"

namespace wsync {
namespace {
Status noDeviceQuantizer() {
  return {WSYNC_ERR_UNSUPPORTED, "block quantization on the device is not in this build"};
}
}  // namespace

Status blockAmaxAsync(const PieceView&, const Dims&, const BlockScaling&, float*,
                      CudaStreamHandle) {
  return noDeviceQuantizer();
}
Status scalesFromAmaxAsync(const float*, int64_t, ScaleFormat, void*, CudaStreamHandle) {
  return noDeviceQuantizer();
}
Status quantizeBlocksAsync(const PieceView&, const Dims&, const BlockScaling&, const void*,
                           uint8_t*, CudaStreamHandle) {
  return noDeviceQuantizer();
}

}  // namespace wsync
