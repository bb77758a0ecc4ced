#include "kernels/convert_kernels.h"

#include "kernels/convert_kernels_cuda.h"

namespace wsync {

Status launchCopyRegion(const void* src, DType from, void* dst, DType to, const Region& region,
                        float scale, cudaStream_t stream) {
  kernels::RegionDims dims;
  for (int i = 0; i < 3; ++i)
    dims.count[i] = region.count[i];
  for (int i = 0; i < 2; ++i) {
    dims.src_stride[i] = region.src_stride[i];
    dims.dst_stride[i] = region.dst_stride[i];
  }
  return kernels::launchCopyRegionDims(src, from, dst, to, dims, scale, stream);
}

}  // namespace wsync
