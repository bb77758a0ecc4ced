// Conversion and pack kernels; see convert_kernels.h for the contract. Compiled by nvcc as C++17:
// includes no project header that needs C++20 (convert_kernels_cuda.h stands in for plan.h).
// Defines deviceCanConvert() and launchConvert() of convert_kernels.h, and launchCopyRegionDims().
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>

#include "common/cuda_check.h"
#include "kernels/convert_kernels_cuda.h"

namespace wsync {
namespace {

constexpr int kThreads = 256;
// Same-dtype regions with rows at least this long go to cudaMemcpy2DAsync (copy engines);
// shorter rows are faster through the copy kernel.
constexpr int64_t kMin2dRowBytes = 512;

// ---- element types ------------------------------------------------------------------------------

// Storage type of each dtype on the device, and its exact conversions to and from float.
template <DType D>
struct Elem;

template <>
struct Elem<DType::kFloat32> {
  using T = float;
  __device__ static float toFloat(T x) { return x; }
  __device__ static T fromFloat(float f) { return f; }
};
template <>
struct Elem<DType::kBFloat16> {
  using T = unsigned short;
  __device__ static float toFloat(T x) { return __bfloat162float(__ushort_as_bfloat16(x)); }
  __device__ static T fromFloat(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
};
template <>
struct Elem<DType::kFloat16> {
  using T = unsigned short;
  __device__ static float toFloat(T x) { return __half2float(__ushort_as_half(x)); }
  __device__ static T fromFloat(float f) { return __half_as_ushort(__float2half_rn(f)); }
};
// The fp8 formats (kind: __NV_E4M3 or __NV_E5M2). Every fp8 value is exact in half, and every
// half in float; to fp8, round to nearest, saturating to the largest finite value.
template <__nv_fp8_interpretation_t kKind>
struct Fp8Elem {
  using T = __nv_fp8_storage_t;
  __device__ static float toFloat(T x) {
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(x, kKind)));
  }
  __device__ static T fromFloat(float f) { return __nv_cvt_float_to_fp8(f, __NV_SATFINITE, kKind); }
};
template <>
struct Elem<DType::kFloat8E4M3> : Fp8Elem<__NV_E4M3> {};
template <>
struct Elem<DType::kFloat8E5M2> : Fp8Elem<__NV_E5M2> {};

constexpr bool isFloat8(DType t) {
  return t == DType::kFloat8E4M3 || t == DType::kFloat8E5M2;
}
constexpr bool isWideFloat(DType t) {
  return t == DType::kFloat32 || t == DType::kBFloat16 || t == DType::kFloat16;
}

// ---- element operations -------------------------------------------------------------------------

// `from` -> float (exact) -> scaled when a float8 type is involved -> `to` (one rounding).
template <DType From, DType To>
struct Convert {
  using In = typename Elem<From>::T;
  using Out = typename Elem<To>::T;
  float scale;
  __device__ Out operator()(In x) const {
    float f = Elem<From>::toFloat(x);
    if constexpr (isFloat8(From)) f = __fdiv_rn(f, scale);
    if constexpr (isFloat8(To)) f = __fmul_rn(f, scale);
    return Elem<To>::fromFloat(f);
  }
};

// A plain copy of elements of one size.
template <typename T>
struct Copy {
  using In = T;
  using Out = T;
  __device__ T operator()(T x) const { return x; }
};

// N elements of T moved as one unit: aligned to min(16, N * sizeof(T)) bytes, so that the compiler
// loads and stores it with 16-byte (or, for small units, narrower) vector instructions.
template <typename T, int N>
struct alignas(sizeof(T) * N < 16 ? sizeof(T) * N : 16) Vec {
  T v[N];
};

// Elements per vector unit. Contiguous path: 16 bytes on the wider side, so every load and store
// instruction of a warp covers one contiguous span (float32 <-> 16-bit: 4, 16-bit <-> float8: 8,
// float32 <-> float8: 4); the kernel unrolls kUnroll units per thread for bytes in flight.
// Region path: up to 32 bytes on the wider side (float32 -> bfloat16: 8), one unit per step.
template <class Op>
constexpr int contiguousWidth() {
  return static_cast<int>(16 / std::max(sizeof(typename Op::In), sizeof(typename Op::Out)));
}
template <class Op>
constexpr int regionWidth() {
  return static_cast<int>(32 / std::max(sizeof(typename Op::In), sizeof(typename Op::Out)));
}
constexpr int kUnroll = 4;

// Alignment of a unit of `n` elements of `element_bytes` (see Vec).
constexpr size_t unitAlignment(size_t element_bytes, int n) {
  return std::min<size_t>(16, element_bytes * static_cast<size_t>(n));
}

// Converts vector unit `v` (elements v*N .. v*N+N-1) of `in` into `out`.
template <class Op, int N>
__device__ __forceinline__ void convertUnit(const typename Op::In* __restrict__ in,
                                            typename Op::Out* __restrict__ out, int64_t v,
                                            const Op& op) {
  using In = typename Op::In;
  using Out = typename Op::Out;
  const Vec<In, N> a = reinterpret_cast<const Vec<In, N>*>(in)[v];
  Vec<Out, N> b;
#pragma unroll
  for (int k = 0; k < N; ++k)
    b.v[k] = op(a.v[k]);
  reinterpret_cast<Vec<Out, N>*>(out)[v] = b;
}

// ---- kernels ------------------------------------------------------------------------------------

// `count` contiguous elements: units of N elements (src and dst aligned for them), U units per
// thread and step (all loads before the stores; a warp's units are adjacent), then the remaining
// units one by one and the tail element by element.
template <class Op, int N, int U>
__global__ void __launch_bounds__(kThreads)
    convertContiguous(const typename Op::In* __restrict__ src, typename Op::Out* __restrict__ dst,
                      int64_t count, Op op) {
  using In = typename Op::In;
  using Out = typename Op::Out;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t units = count / N;
  const auto* in = reinterpret_cast<const Vec<In, N>*>(src);
  auto* out = reinterpret_cast<Vec<Out, N>*>(dst);
  int64_t i = first;
  for (; i + (U - 1) * stride < units; i += U * stride) {
    Vec<In, N> a[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      a[u] = in[i + u * stride];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      Vec<Out, N> b;
#pragma unroll
      for (int k = 0; k < N; ++k)
        b.v[k] = op(a[u].v[k]);
      out[i + u * stride] = b;
    }
  }
  for (; i < units; i += stride)
    convertUnit<Op, N>(src, dst, i, op);
  for (int64_t e = units * N + first; e < count; e += stride)
    dst[e] = op(src[e]);
}

// A region in units of N elements: count[0] units per row; strides in units too.
struct RegionShape {
  int64_t count[3];
  int64_t src_stride[2];
  int64_t dst_stride[2];
};

// Long rows: blocks along y walk the rows (planes folded in), blocks along x a row's units.
template <class Op, int N>
__global__ void __launch_bounds__(kThreads)
    copyRegionRows(const typename Op::In* __restrict__ src, typename Op::Out* __restrict__ dst,
                   RegionShape s, Op op) {
  const int64_t rows = s.count[1] * s.count[2];
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
    const int64_t r = row % s.count[1];
    const int64_t p = row / s.count[1];
    const auto* in = src + (r * s.src_stride[0] + p * s.src_stride[1]) * N;
    auto* out = dst + (r * s.dst_stride[0] + p * s.dst_stride[1]) * N;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < s.count[0];
         i += step) {
      convertUnit<Op, N>(in, out, i, op);
    }
  }
}

// Short rows: one flat index over all units, split into (unit, row, plane).
template <class Op, int N>
__global__ void __launch_bounds__(kThreads)
    copyRegionFlat(const typename Op::In* __restrict__ src, typename Op::Out* __restrict__ dst,
                   RegionShape s, int64_t total, Op op) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const int64_t e = i % s.count[0];
    const int64_t rows = i / s.count[0];
    const int64_t r = rows % s.count[1];
    const int64_t p = rows / s.count[1];
    convertUnit<Op, N>(src + (r * s.src_stride[0] + p * s.src_stride[1]) * N,
                       dst + (r * s.dst_stride[0] + p * s.dst_stride[1]) * N, e, op);
  }
}

// ---- launch helpers -----------------------------------------------------------------------------

// Properties of the current device, cached per ordinal.
struct DeviceLimits {
  int sms = 0;
  int64_t max_pitch = 0;
};

Status currentDeviceLimits(DeviceLimits& limits) {
  constexpr int kMaxCached = 64;
  static std::atomic<int> cached_sms[kMaxCached];
  static std::atomic<int> cached_pitch[kMaxCached];
  int device = 0;
  WSYNC_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device), "cudaGetDevice");
  if (device >= 0 && device < kMaxCached && cached_sms[device].load() > 0) {
    limits.sms = cached_sms[device].load();
    limits.max_pitch = cached_pitch[device].load();
    return Status::ok();
  }
  int sms = 0;
  int pitch = 0;
  WSYNC_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
                             "cudaDeviceGetAttribute(multiprocessor count)");
  WSYNC_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&pitch, cudaDevAttrMaxPitch, device),
                             "cudaDeviceGetAttribute(max pitch)");
  limits.sms = std::max(sms, 1);
  limits.max_pitch = pitch > 0 ? pitch : (1LL << 31) - 1;
  if (device >= 0 && device < kMaxCached) {
    cached_pitch[device].store(static_cast<int>(limits.max_pitch));
    cached_sms[device].store(limits.sms);
  }
  return Status::ok();
}

int64_t ceilDiv(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Enough blocks to fill the device a few times over; the kernels loop over the rest.
unsigned blocksFor(int64_t items, const DeviceLimits& limits) {
  const int64_t cap = static_cast<int64_t>(limits.sms) * 8;
  return static_cast<unsigned>(std::clamp<int64_t>(ceilDiv(items, kThreads), 1, cap));
}

Status launchStatus(const std::string& what) {
  return cudaCheck(cudaGetLastError(), what + ": kernel launch");
}

bool aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

template <class Op>
Status runContiguous(const void* src, void* dst, int64_t count, Op op, cudaStream_t stream,
                     const DeviceLimits& limits, const std::string& what) {
  using In = typename Op::In;
  using Out = typename Op::Out;
  constexpr int kN = contiguousWidth<Op>();
  const auto* in = static_cast<const In*>(src);
  auto* out = static_cast<Out*>(dst);
  (void)cudaGetLastError();  // so that the check below sees this launch only
  if (aligned(src, unitAlignment(sizeof(In), kN)) && aligned(dst, unitAlignment(sizeof(Out), kN))) {
    convertContiguous<Op, kN, kUnroll>
        <<<blocksFor(ceilDiv(count, kN * kUnroll), limits), kThreads, 0, stream>>>(in, out, count,
                                                                                   op);
  } else {
    convertContiguous<Op, 1, kUnroll>
        <<<blocksFor(ceilDiv(count, kUnroll), limits), kThreads, 0, stream>>>(in, out, count, op);
  }
  return launchStatus(what);
}

// Launches the row or the flat kernel over `s`, given in units of N elements.
template <class Op, int N>
void launchRegion(const typename Op::In* in, typename Op::Out* out, const RegionShape& s, Op op,
                  cudaStream_t stream, const DeviceLimits& limits) {
  const int64_t rows = s.count[1] * s.count[2];
  if (s.count[0] >= 2 * kThreads) {
    const int64_t target = static_cast<int64_t>(limits.sms) * 16;
    const int64_t bx = std::clamp<int64_t>(ceilDiv(s.count[0], kThreads), 1, target);
    const int64_t by = std::clamp<int64_t>(target / bx, 1, std::min<int64_t>(rows, 65535));
    const dim3 grid(static_cast<unsigned>(bx), static_cast<unsigned>(by));
    copyRegionRows<Op, N><<<grid, kThreads, 0, stream>>>(in, out, s, op);
  } else {
    const int64_t total = rows * s.count[0];
    copyRegionFlat<Op, N><<<blocksFor(total, limits), kThreads, 0, stream>>>(in, out, s, total, op);
  }
}

template <class Op>
Status runRegion(const void* src, void* dst, const RegionShape& s, Op op, cudaStream_t stream,
                 const DeviceLimits& limits, const std::string& what) {
  using In = typename Op::In;
  using Out = typename Op::Out;
  const auto* in = static_cast<const In*>(src);
  auto* out = static_cast<Out*>(dst);
  if (s.count[1] == 1 && s.count[2] == 1) {
    return runContiguous(src, dst, s.count[0], op, stream, limits, what);
  }
  (void)cudaGetLastError();
  // Vector units when every row starts on a unit boundary on both sides.
  constexpr int kN = regionWidth<Op>();
  const bool units = s.count[0] % kN == 0 && s.src_stride[0] % kN == 0 &&
                     s.src_stride[1] % kN == 0 && s.dst_stride[0] % kN == 0 &&
                     s.dst_stride[1] % kN == 0 && aligned(src, unitAlignment(sizeof(In), kN)) &&
                     aligned(dst, unitAlignment(sizeof(Out), kN));
  if (units) {
    const RegionShape u{{s.count[0] / kN, s.count[1], s.count[2]},
                        {s.src_stride[0] / kN, s.src_stride[1] / kN},
                        {s.dst_stride[0] / kN, s.dst_stride[1] / kN}};
    launchRegion<Op, kN>(in, out, u, op, stream, limits);
  } else {
    launchRegion<Op, 1>(in, out, s, op, stream, limits);
  }
  return launchStatus(what);
}

// Calls f(op) with the element operation of (from, to): a Convert for converting pairs, a Copy of
// the element size for identical types. False when the pair is not supported.
template <class F>
bool withOp(DType from, DType to, float scale, F&& f) {
  if (from == to) {
    switch (dtypeSize(from)) {
      case 1:
        f(Copy<uint8_t>{});
        return true;
      case 2:
        f(Copy<uint16_t>{});
        return true;
      case 4:
        f(Copy<uint32_t>{});
        return true;
      case 8:
        f(Copy<unsigned long long>{});
        return true;
      default:
        return false;
    }
  }
#define WSYNC_CONVERT_PAIR(A, B)            \
  if (from == DType::A && to == DType::B) { \
    f(Convert<DType::A, DType::B>{scale});  \
    return true;                            \
  }
  WSYNC_CONVERT_PAIR(kFloat32, kBFloat16)
  WSYNC_CONVERT_PAIR(kFloat32, kFloat16)
  WSYNC_CONVERT_PAIR(kBFloat16, kFloat32)
  WSYNC_CONVERT_PAIR(kBFloat16, kFloat16)
  WSYNC_CONVERT_PAIR(kFloat16, kFloat32)
  WSYNC_CONVERT_PAIR(kFloat16, kBFloat16)
  WSYNC_CONVERT_PAIR(kFloat32, kFloat8E4M3)
  WSYNC_CONVERT_PAIR(kFloat32, kFloat8E5M2)
  WSYNC_CONVERT_PAIR(kBFloat16, kFloat8E4M3)
  WSYNC_CONVERT_PAIR(kBFloat16, kFloat8E5M2)
  WSYNC_CONVERT_PAIR(kFloat16, kFloat8E4M3)
  WSYNC_CONVERT_PAIR(kFloat16, kFloat8E5M2)
  WSYNC_CONVERT_PAIR(kFloat8E4M3, kFloat32)
  WSYNC_CONVERT_PAIR(kFloat8E4M3, kBFloat16)
  WSYNC_CONVERT_PAIR(kFloat8E4M3, kFloat16)
  WSYNC_CONVERT_PAIR(kFloat8E5M2, kFloat32)
  WSYNC_CONVERT_PAIR(kFloat8E5M2, kBFloat16)
  WSYNC_CONVERT_PAIR(kFloat8E5M2, kFloat16)
#undef WSYNC_CONVERT_PAIR
  return false;
}

std::string typeName(DType t) {
  return validDType(static_cast<int>(t)) ? dtypeName(t)
                                         : "dtype #" + std::to_string(static_cast<int>(t));
}

std::string pairName(DType from, DType to) {
  return typeName(from) + " -> " + typeName(to);
}

// Checks what launchConvert and launchCopyRegion share: a supported pair and a usable scale.
Status checkPair(DType from, DType to, float scale, const std::string& what) {
  if (!deviceCanConvert(from, to)) {
    if (!validDType(static_cast<int>(from)) || !validDType(static_cast<int>(to))) {
      return invalidArgument(what + ": invalid dtype value");
    }
    return Status(WSYNC_ERR_UNSUPPORTED, what + ": no device conversion " + pairName(from, to));
  }
  if (from != to && (isFloat8(from) || isFloat8(to)) && !(std::isfinite(scale) && scale > 0)) {
    return invalidArgument(what + ": float8 scale " + std::to_string(scale) +
                           " (must be finite and > 0)");
  }
  return Status::ok();
}

// Folds unit dimensions and rows or planes that are contiguous on both sides into longer runs,
// so that as much as possible moves as contiguous or 2-D copies.
RegionShape normalize(const kernels::RegionDims& region) {
  RegionShape s{{region.count[0], region.count[1], region.count[2]},
                {region.src_stride[0], region.src_stride[1]},
                {region.dst_stride[0], region.dst_stride[1]}};
  for (bool changed = true; changed;) {
    changed = false;
    if (s.count[2] == 1) s.src_stride[1] = s.dst_stride[1] = 0;
    if (s.count[1] == 1 && s.count[2] > 1) {  // planes become rows
      s.count[1] = s.count[2];
      s.src_stride[0] = s.src_stride[1];
      s.dst_stride[0] = s.dst_stride[1];
      s.count[2] = 1;
      s.src_stride[1] = s.dst_stride[1] = 0;
    }
    if (s.count[1] > 1 && s.src_stride[0] == s.count[0] && s.dst_stride[0] == s.count[0]) {
      s.count[0] *= s.count[1];  // rows packed on both sides: one run per plane
      s.count[1] = 1;
      changed = true;
    } else if (s.count[2] > 1 && s.src_stride[1] == s.src_stride[0] * s.count[1] &&
               s.dst_stride[1] == s.dst_stride[0] * s.count[1]) {
      s.count[1] *= s.count[2];  // planes follow each other: more rows
      s.count[2] = 1;
      changed = true;
    }
  }
  if (s.count[1] == 1) s.src_stride[0] = s.dst_stride[0] = 0;
  return s;
}

}  // namespace

bool deviceCanConvert(DType from, DType to) {
  if (!validDType(static_cast<int>(from)) || !validDType(static_cast<int>(to))) return false;
  if (from == to) return true;
  return (isWideFloat(from) && (isWideFloat(to) || isFloat8(to))) ||
         (isFloat8(from) && isWideFloat(to));
}

Status launchConvert(const void* src, DType from, void* dst, DType to, int64_t count, float scale,
                     cudaStream_t stream) {
  const std::string what =
      "launchConvert(" + pairName(from, to) + ", " + std::to_string(count) + " elements)";
  WSYNC_RETURN_IF_ERROR(checkPair(from, to, scale, what));
  if (count < 0) return invalidArgument(what + ": negative count");
  if (count == 0) return Status::ok();
  if (src == nullptr || dst == nullptr) return invalidArgument(what + ": null pointer");
  if (from == to) {
    WSYNC_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst, src, static_cast<size_t>(count) * dtypeSize(from), cudaMemcpyDefault,
                        stream),
        what + ": cudaMemcpyAsync");
    return Status::ok();
  }
  DeviceLimits limits;
  WSYNC_RETURN_IF_ERROR(currentDeviceLimits(limits).withContext(what));
  Status result;
  withOp(from, to, scale, [&](auto op) {
    (void)(result = runContiguous(src, dst, count, op, stream, limits, what));
  });
  return result;
}

Status kernels::launchCopyRegionDims(const void* src, DType from, void* dst, DType to,
                                     const RegionDims& region, float scale, cudaStream_t stream) {
  const std::string what =
      "launchCopyRegion(" + pairName(from, to) + ", " + std::to_string(region.count[0]) + " x " +
      std::to_string(region.count[1]) + " x " + std::to_string(region.count[2]) + " elements)";
  WSYNC_RETURN_IF_ERROR(checkPair(from, to, scale, what));
  const int64_t* c = region.count;
  if (c[0] < 0 || c[1] < 0 || c[2] < 0 || region.src_stride[0] < 0 || region.src_stride[1] < 0 ||
      region.dst_stride[0] < 0 || region.dst_stride[1] < 0) {
    return invalidArgument(what + ": negative count or stride");
  }
  if (c[0] == 0 || c[1] == 0 || c[2] == 0) return Status::ok();
  if (src == nullptr || dst == nullptr) return invalidArgument(what + ": null pointer");
  // Sizes must fit int64 on both sides, and destination rows and planes must not overlap.
  int64_t total = 0;
  int64_t src_end = 0;
  int64_t dst_end = 0;
  int64_t t = 0;
  if (__builtin_mul_overflow(c[0], c[1], &total) || __builtin_mul_overflow(total, c[2], &total) ||
      __builtin_mul_overflow(c[1] - 1, region.src_stride[0], &src_end) ||
      __builtin_mul_overflow(c[2] - 1, region.src_stride[1], &t) ||
      __builtin_add_overflow(src_end, t, &src_end) ||
      __builtin_add_overflow(src_end, c[0], &src_end) ||
      __builtin_mul_overflow(c[1] - 1, region.dst_stride[0], &dst_end) ||
      __builtin_mul_overflow(c[2] - 1, region.dst_stride[1], &t) ||
      __builtin_add_overflow(dst_end, t, &dst_end) ||
      __builtin_add_overflow(dst_end, c[0], &dst_end) ||
      __builtin_mul_overflow(std::max(src_end, dst_end), static_cast<int64_t>(8), &t)) {
    return invalidArgument(what + ": the region's extent overflows");
  }
  const int64_t plane_extent = (c[1] > 1 ? region.dst_stride[0] * (c[1] - 1) : 0) + c[0];
  if ((c[1] > 1 && region.dst_stride[0] < c[0]) ||
      (c[2] > 1 && region.dst_stride[1] < plane_extent)) {
    return invalidArgument(what + ": destination rows or planes overlap (dst strides " +
                           std::to_string(region.dst_stride[0]) + ", " +
                           std::to_string(region.dst_stride[1]) + ")");
  }

  const RegionShape s = normalize(region);
  DeviceLimits limits;
  WSYNC_RETURN_IF_ERROR(currentDeviceLimits(limits).withContext(what));
  if (from == to) {
    const auto size = static_cast<int64_t>(dtypeSize(from));
    if (s.count[1] == 1) {  // normalize() leaves count[2] == 1 then too
      WSYNC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, static_cast<size_t>(s.count[0] * size),
                                                 cudaMemcpyDefault, stream),
                                 what + ": cudaMemcpyAsync");
      return Status::ok();
    }
    const int64_t row_bytes = s.count[0] * size;
    if (s.count[2] == 1 && row_bytes >= kMin2dRowBytes && s.src_stride[0] >= s.count[0] &&
        s.src_stride[0] * size <= limits.max_pitch && s.dst_stride[0] * size <= limits.max_pitch) {
      WSYNC_CUDA_RETURN_IF_ERROR(
          cudaMemcpy2DAsync(dst, static_cast<size_t>(s.dst_stride[0] * size), src,
                            static_cast<size_t>(s.src_stride[0] * size),
                            static_cast<size_t>(row_bytes), static_cast<size_t>(s.count[1]),
                            cudaMemcpyDefault, stream),
          what + ": cudaMemcpy2DAsync");
      return Status::ok();
    }
  }
  Status result;
  withOp(from, to, scale,
         [&](auto op) { (void)(result = runRegion(src, dst, s, op, stream, limits, what)); });
  return result;
}

}  // namespace wsync
