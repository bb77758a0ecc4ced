// Device-side dtype conversion and strided pack/unpack, enqueued on a caller's stream. Plain C++
// interface (the kernels live in convert_kernels.cu), usable from .cc files.
//
// Conversions (deviceCanConvert):
//   - identical dtypes, any of them: a plain copy (cudaMemcpyAsync, or a copy kernel for regions);
//   - float32 <-> bfloat16 <-> float16: round to nearest even (__float2bfloat16_rn,
//     __float2half_rn; overflow gives inf as IEEE says, NaN stays NaN);
//   - float32/bfloat16/float16 -> float8 e4m3 / e5m2: y = fp8(float(x) * scale), the product in
//     float32, then round to nearest even, saturating to the largest finite value (+-448 for e4m3,
//     +-57344 for e5m2; infinities too), NaN stays NaN (__nv_cvt_float_to_fp8, __NV_SATFINITE);
//   - float8 e4m3 / e5m2 -> float32/bfloat16/float16: y = round(float(x) / scale) (IEEE division
//     in float32, then round to nearest even into the target).
//   `scale` matters only when a float8 type is involved, and must then be finite and > 0.
//   float8 -> float8 of the other kind and anything involving integer types (other than plain
//   copies) are not supported.
//
// Contract common to all launches: src/dst are device pointers valid on the calling thread's
// current device, which must be `stream`'s device (dst may be an IPC-mapped peer pointer from
// cudaIpcOpenMemHandle, and either may be host memory mapped into the device's address space);
// src and dst must not overlap; the work is enqueued and this returns at once (launch errors are
// returned, errors during execution surface at the stream's next synchronization). Thread-safe.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/status.h"
#include "layout/dtype.h"
#include "plan/plan.h"

namespace wsync {

// True when the kernels convert `from` into `to` (see above).
bool deviceCanConvert(DType from, DType to);

// Converts `count` contiguous elements of `src` (dtype `from`) into `dst` (dtype `to`) on
// `stream`. count == 0 does nothing. UNSUPPORTED when !deviceCanConvert(from, to);
// INVALID_ARGUMENT for null pointers, count < 0 or a bad scale. Vectorized (units of 16 bytes on
// the wider side, 4 units per thread and step) when both pointers are aligned for such units;
// element by element otherwise.
Status launchConvert(const void* src, DType from, void* dst, DType to, int64_t count, float scale,
                     cudaStream_t stream);

// Copies the strided region of plan.h with conversion: count[0] contiguous elements per row,
// count[1] rows, count[2] planes; rows and planes src_stride/dst_stride apart, in elements of
// each side. `src` and `dst` point at the region's first element (region.src_offset and
// region.dst_offset are NOT applied again). One kernel packs, unpacks and casts at once (in vector
// units when row length, strides and pointers allow, element by element otherwise), for
// regions no cudaMemcpy2D can express; same-dtype regions that are contiguous or 2-D with long
// rows go to cudaMemcpyAsync / cudaMemcpy2DAsync. Counts and strides must be >= 0 (a count of 0
// does nothing); destination elements must not overlap (checked for the nested row-major
// layout: INVALID_ARGUMENT when the destination's rows or planes overlap). Errors as
// launchConvert.
Status launchCopyRegion(const void* src, DType from, void* dst, DType to, const Region& region,
                        float scale, cudaStream_t stream);

}  // namespace wsync
