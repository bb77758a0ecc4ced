// Internal to src/kernels: what convert_kernels.cu defines, declared without plan.h, so that the
// .cu (nvcc, C++17) needs no project header beyond status.h and dtype.h (plan.h is C++20).
// convert_kernels.cc forwards launchCopyRegion(Region) to launchCopyRegionDims(). Everyone else
// includes convert_kernels.h, which documents these functions.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/status.h"
#include "layout/dtype.h"

namespace wsync {

bool deviceCanConvert(DType from, DType to);
Status launchConvert(const void* src, DType from, void* dst, DType to, int64_t count, float scale,
                     cudaStream_t stream);

namespace kernels {

// Region::count, src_stride and dst_stride (offsets are already applied to the pointers).
struct RegionDims {
  int64_t count[3] = {0, 1, 1};
  int64_t src_stride[2] = {0, 0};
  int64_t dst_stride[2] = {0, 0};
};

// launchCopyRegion() of convert_kernels.h, on the dims.
Status launchCopyRegionDims(const void* src, DType from, void* dst, DType to,
                            const RegionDims& region, float scale, cudaStream_t stream);

}  // namespace kernels
}  // namespace wsync
