// The conversion and pack kernels (kernels/convert_kernels.h) against a host reference: Eigen's
// bfloat16/half (round to nearest even) and a float8 e4m3/e5m2 reference written here from the
// formats' definitions (checked against hand-computed values). Every supported pair on random and
// exhaustive inputs, strided regions with odd sizes, argument errors.
// Tests that launch kernels skip without a usable CUDA device; the argument and reference checks
// never touch the device and run everywhere.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/cuda_check.h"
#include "kernels/convert_kernels.h"
#include "layout/dtype.h"

namespace wsync {
namespace {

constexpr DType kAllTypes[] = {DType::kFloat32,    DType::kBFloat16,   DType::kFloat16,
                               DType::kFloat8E4M3, DType::kFloat8E5M2, DType::kInt8,
                               DType::kInt16,      DType::kInt32,      DType::kInt64,
                               DType::kUInt8,      DType::kBool};

bool isFp8(DType t) {
  return t == DType::kFloat8E4M3 || t == DType::kFloat8E5M2;
}
bool isWide(DType t) {
  return t == DType::kFloat32 || t == DType::kBFloat16 || t == DType::kFloat16;
}

// ---- host reference -----------------------------------------------------------------------------

// The exact value of a float8 code (NaN codes give NaN, e5m2's infinities give infinity).
double fp8Value(uint8_t code, bool e4m3) {
  const bool negative = (code & 0x80) != 0;
  double v = 0;
  if (e4m3) {
    const int e = (code >> 3) & 0xF;
    const int m = code & 7;
    if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
    v = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);  // (1 + m/8) * 2^(e-7)
  } else {
    const int e = (code >> 2) & 0x1F;
    const int m = code & 3;
    if (e == 31) {
      return m == 0 ? (negative ? -HUGE_VAL : HUGE_VAL) : std::numeric_limits<double>::quiet_NaN();
    }
    v = e == 0 ? std::ldexp(m, -16) : std::ldexp(4 + m, e - 17);  // (1 + m/4) * 2^(e-15)
  }
  return negative ? -v : v;
}

// float -> float8: round to nearest, ties to the even code, saturating to the largest finite value
// (infinities too). NaN gives 0x7F (callers compare NaN-ness, not NaN bits).
uint8_t fp8Encode(float f, bool e4m3) {
  if (std::isnan(f)) return 0x7F;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const double a = std::fabs(static_cast<double>(f));
  const int max_code = e4m3 ? 0x7E : 0x7B;
  if (a >= fp8Value(static_cast<uint8_t>(max_code), e4m3)) return sign | max_code;
  // Positive codes 0..max_code increase with their value: the last one not above `a`.
  int lo = 0;
  int hi = max_code;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (fp8Value(static_cast<uint8_t>(mid), e4m3) <= a) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const double below = a - fp8Value(static_cast<uint8_t>(lo), e4m3);
  const double above = fp8Value(static_cast<uint8_t>(lo + 1), e4m3) - a;
  const int code = below < above ? lo : above < below ? lo + 1 : (lo % 2 == 0 ? lo : lo + 1);
  return static_cast<uint8_t>(sign | code);
}

float toFloat(DType t, const uint8_t* p) {
  switch (t) {
    case DType::kFloat32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::kBFloat16: {
      Eigen::bfloat16 b;
      std::memcpy(&b, p, 2);
      return static_cast<float>(b);
    }
    case DType::kFloat16: {
      Eigen::half h;
      std::memcpy(&h, p, 2);
      return static_cast<float>(h);
    }
    case DType::kFloat8E4M3:
      return static_cast<float>(fp8Value(*p, true));
    case DType::kFloat8E5M2:
      return static_cast<float>(fp8Value(*p, false));
    default:
      ADD_FAILURE() << "no float value for " << dtypeName(t);
      return 0;
  }
}

void fromFloat(DType t, float f, uint8_t* out) {
  switch (t) {
    case DType::kFloat32:
      std::memcpy(out, &f, 4);
      return;
    case DType::kBFloat16: {
      const Eigen::bfloat16 b(f);
      std::memcpy(out, &b, 2);
      return;
    }
    case DType::kFloat16: {
      const Eigen::half h(f);
      std::memcpy(out, &h, 2);
      return;
    }
    case DType::kFloat8E4M3:
      *out = fp8Encode(f, true);
      return;
    case DType::kFloat8E5M2:
      *out = fp8Encode(f, false);
      return;
    default:
      ADD_FAILURE() << "no float encoding for " << dtypeName(t);
  }
}

// One element, as the kernels define it: exact to float, / scale out of float8, * scale into
// float8 (float32 arithmetic), one rounding into `to`. Identical types: the bytes.
void referenceConvert(DType from, const uint8_t* in, DType to, uint8_t* out, float scale) {
  if (from == to) {
    std::memcpy(out, in, dtypeSize(from));
    return;
  }
  float f = toFloat(from, in);
  if (isFp8(from)) f = f / scale;
  if (isFp8(to)) f = f * scale;
  fromFloat(to, f, out);
}

std::vector<uint8_t> referenceConvertAll(DType from, const std::vector<uint8_t>& in, DType to,
                                         float scale) {
  const size_t n = in.size() / dtypeSize(from);
  std::vector<uint8_t> out(n * dtypeSize(to));
  for (size_t i = 0; i < n; ++i) {
    referenceConvert(from, in.data() + i * dtypeSize(from), to, out.data() + i * dtypeSize(to),
                     scale);
  }
  return out;
}

bool elementIsNaN(DType t, const uint8_t* p) {
  return isWide(t) || isFp8(t) ? std::isnan(toFloat(t, p)) : false;
}

std::string hexBytes(const uint8_t* p, size_t n) {
  static const char* kHex = "0123456789abcdef";
  std::string s = "0x";
  for (size_t i = n; i-- > 0;) {  // little-endian: most significant byte first
    s += kHex[p[i] >> 4];
    s += kHex[p[i] & 15];
  }
  return s;
}

// Compares converted elements; NaN matches any NaN. Reports the count and the first few.
void expectElements(DType from, const std::vector<uint8_t>& input, DType to,
                    const std::vector<uint8_t>& want, const std::vector<uint8_t>& got,
                    const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  const size_t size = dtypeSize(to);
  const size_t n = want.size() / size;
  size_t mismatches = 0;
  std::string first;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* w = want.data() + i * size;
    const uint8_t* g = got.data() + i * size;
    if (std::memcmp(w, g, size) == 0) continue;
    if (from != to && elementIsNaN(to, w) && elementIsNaN(to, g)) continue;
    if (++mismatches <= 5) {
      const uint8_t* in = input.data() + i * dtypeSize(from);
      first += "\n  element " + std::to_string(i) + ": input " + hexBytes(in, dtypeSize(from)) +
               (isWide(from) || isFp8(from) ? " (" + std::to_string(toFloat(from, in)) + ")" : "") +
               ", expected " + hexBytes(w, size) + ", got " + hexBytes(g, size);
    }
  }
  EXPECT_EQ(mismatches, 0u) << what << ": " << mismatches << " of " << n
                            << " elements differ from the host reference" << first;
}

// ---- inputs -------------------------------------------------------------------------------------

// Inputs for `t`: for 1- and 2-byte floats every bit pattern (twice, shuffled into a random
// order); for float32 random bit patterns (all exponents, NaN, inf, subnormals), random values of
// common magnitudes, ties of bfloat16/float16 rounding, and special values.
std::vector<uint8_t> inputsFor(DType t, std::mt19937_64& rng) {
  std::vector<uint8_t> out;
  auto append = [&](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  };
  if (t == DType::kFloat32) {
    std::vector<float> v;
    for (int i = 0; i < 40000; ++i) {
      const auto bits = static_cast<uint32_t>(rng());
      float f;
      std::memcpy(&f, &bits, 4);
      v.push_back(f);
    }
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_int_distribution<int> exponent(-30, 20);
    for (int i = 0; i < 40000; ++i)
      v.push_back(std::ldexp(normal(rng), exponent(rng)));
    for (int i = 0; i < 10000; ++i) {  // bfloat16 ties: the dropped 16 bits are exactly half
      uint32_t bits = (static_cast<uint32_t>(rng()) & 0x3FFF0000u) | 0x8000u;
      float f;
      std::memcpy(&f, &bits, 4);
      v.push_back(f);
    }
    for (int i = 0; i < 10000; ++i) {  // float16 ties: midpoints of neighbouring halfs
      const auto bits = static_cast<uint16_t>(rng() & 0x7BFF);
      Eigen::half h;
      std::memcpy(&h, &bits, 2);
      const uint16_t next_bits = bits + 1;
      Eigen::half next;
      std::memcpy(&next, &next_bits, 2);
      v.push_back((static_cast<float>(h) + static_cast<float>(next)) / 2);
    }
    for (int code = 0; code < 256; ++code) {  // float8 values, and their midpoints (ties)
      for (bool e4m3 : {true, false}) {
        const double a = fp8Value(static_cast<uint8_t>(code), e4m3);
        const double b = fp8Value(static_cast<uint8_t>(code + 1), e4m3);
        v.push_back(static_cast<float>(a));
        if (code < 255 && std::isfinite(a) && std::isfinite(b)) {
          v.push_back(static_cast<float>((a + b) / 2));
        }
      }
    }
    const float inf = std::numeric_limits<float>::infinity();
    for (float f : {0.0f, -0.0f, inf, -inf, std::numeric_limits<float>::quiet_NaN(), 448.0f, 464.0f,
                    480.0f, 57344.0f, 61440.0f, 65504.0f, 65520.0f, 1e-40f, -1e-45f,
                    std::numeric_limits<float>::max(), std::numeric_limits<float>::lowest()}) {
      v.push_back(f);
    }
    append(v.data(), v.size() * 4);
    return out;
  }
  const size_t size = dtypeSize(t);
  const uint32_t patterns = size == 1 ? 256 : 65536;
  std::vector<uint32_t> all;
  for (int copy = 0; copy < 2; ++copy) {
    for (uint32_t p = 0; p < patterns; ++p)
      all.push_back(p);
  }
  std::shuffle(all.begin(), all.end(), rng);
  for (uint32_t p : all)
    append(&p, size);  // little-endian: the low bytes
  return out;
}

// ---- device helpers -----------------------------------------------------------------------------

class GpuBuffer {
 public:
  explicit GpuBuffer(size_t bytes) {
    const cudaError_t e = cudaMalloc(&p_, bytes == 0 ? 1 : bytes);
    EXPECT_EQ(e, cudaSuccess) << "cudaMalloc(" << bytes << "): " << cudaGetErrorString(e);
    if (e != cudaSuccess) p_ = nullptr;
  }
  ~GpuBuffer() {
    if (p_ != nullptr) cudaFree(p_);
  }
  GpuBuffer(const GpuBuffer&) = delete;
  GpuBuffer& operator=(const GpuBuffer&) = delete;
  uint8_t* get() const { return static_cast<uint8_t*>(p_); }

 private:
  void* p_ = nullptr;
};

class KernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cudaDeviceAvailable(0)) {
      GTEST_SKIP() << "no usable CUDA device: the kernels run on the GPU machine only";
    }
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  // cudaMemcpy from pageable memory may return before its DMA finished, and stream_ does not
  // wait for the legacy stream: synchronize so kernels on stream_ see the bytes.
  void upload(uint8_t* dst, const std::vector<uint8_t>& bytes) {
    ASSERT_EQ(cudaMemcpy(dst, bytes.data(), bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  std::vector<uint8_t> download(const uint8_t* src, size_t bytes) {
    std::vector<uint8_t> out(bytes);
    EXPECT_EQ(cudaMemcpy(out.data(), src, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
  void sync() {
    const cudaError_t e = cudaStreamSynchronize(stream_);
    ASSERT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
  }

  // Converts `input` on the device with the source `src_shift` and destination `dst_shift`
  // elements past an aligned address (shifts make the vector path fall back), checks against the
  // reference, and that the guard bytes around the destination stay untouched.
  void checkConvert(DType from, DType to, float scale, const std::vector<uint8_t>& input,
                    int src_shift, int dst_shift) {
    const std::string what = std::string(dtypeName(from)) + " -> " + dtypeName(to) + ", scale " +
                             std::to_string(scale) + ", element shifts " +
                             std::to_string(src_shift) + "/" + std::to_string(dst_shift);
    const size_t n = input.size() / dtypeSize(from);
    const size_t out_bytes = n * dtypeSize(to);
    constexpr size_t kGuard = 64;
    GpuBuffer src(input.size() + 64);
    GpuBuffer dst(out_bytes + 64 + 2 * kGuard);
    if (src.get() == nullptr || dst.get() == nullptr) return;
    uint8_t* s = src.get() + src_shift * dtypeSize(from);
    uint8_t* d = dst.get() + kGuard + dst_shift * dtypeSize(to);
    upload(s, input);
    ASSERT_EQ(cudaMemset(dst.get(), 0xCD, out_bytes + 64 + 2 * kGuard), cudaSuccess);
    const Status st = launchConvert(s, from, d, to, static_cast<int64_t>(n), scale, stream_);
    ASSERT_TRUE(st.isOk()) << what << ": " << st.toString();
    sync();
    const std::vector<uint8_t> all = download(dst.get(), out_bytes + 64 + 2 * kGuard);
    const size_t start = kGuard + dst_shift * dtypeSize(to);
    const std::vector<uint8_t> got(all.begin() + start, all.begin() + start + out_bytes);
    expectElements(from, input, to, referenceConvertAll(from, input, to, scale), got, what);
    for (size_t i = 0; i < all.size(); ++i) {
      if (i >= start && i < start + out_bytes) continue;
      if (all[i] != 0xCD) {
        ADD_FAILURE() << what << ": byte " << i - start << " relative to the destination, outside "
                      << "it, was overwritten";
        break;
      }
    }
  }

  cudaStream_t stream_ = nullptr;
};

// ---- checks that need no device -----------------------------------------------------------------

TEST(KernelsReference, Fp8ReferenceMatchesHandComputedValues) {
  struct Case {
    float x;
    int e4m3;
    int e5m2;
  };
  const float inf = std::numeric_limits<float>::infinity();
  const Case cases[] = {
      {0.0f, 0x00, 0x00},
      {-0.0f, 0x80, 0x80},
      {1.0f, 0x38, 0x3C},
      {-2.0f, 0xC0, 0xC0},
      {448.0f, 0x7E, 0x5F},
      {464.0f, 0x7E, 0x5F},  // e5m2: 448 exact (1.75 * 2^8)
      {500.0f, 0x7E, 0x60},
      {57344.0f, 0x7E, 0x7B},
      {1e9f, 0x7E, 0x7B},
      {inf, 0x7E, 0x7B},
      {-inf, 0xFE, 0xFB},
      {0.001953125f, 0x01, 0x18},        // 2^-9
      {0.0009765625f, 0x00, 0x14},       // 2^-10: e4m3 tie -> 0
      {1.52587890625e-05f, 0x00, 0x01},  // 2^-16
      {1.0625f, 0x38, 0x3C},
      {1.1875f, 0x3A, 0x3D},  // e4m3 ties to even (m0, m2)
      {1.125f, 0x39, 0x3C},
      {1.375f, 0x3B, 0x3E},          // e5m2 ties: 1.125 -> m0, 1.375 -> m2
      {0.00146484375f, 0x01, 0x16},  // 0.75 * 2^-9: nearer the e4m3 subnormal 0x01
  };
  for (const Case& c : cases) {
    EXPECT_EQ(fp8Encode(c.x, true), c.e4m3) << "e4m3 of " << c.x;
    EXPECT_EQ(fp8Encode(c.x, false), c.e5m2) << "e5m2 of " << c.x;
  }
  EXPECT_TRUE(std::isnan(fp8Value(fp8Encode(std::nanf(""), true), true)));
  EXPECT_TRUE(std::isnan(fp8Value(fp8Encode(std::nanf(""), false), false)));
  // Every finite code encodes back to itself.
  for (int code = 0; code < 256; ++code) {
    for (bool e4m3 : {true, false}) {
      const double v = fp8Value(static_cast<uint8_t>(code), e4m3);
      if (!std::isfinite(v)) continue;
      EXPECT_EQ(fp8Encode(static_cast<float>(v), e4m3), code) << (e4m3 ? "e4m3 " : "e5m2 ") << code;
    }
  }
  EXPECT_EQ(fp8Value(0x7E, true), 448.0);
  EXPECT_EQ(fp8Value(0x7B, false), 57344.0);
  EXPECT_TRUE(std::isinf(fp8Value(0x7C, false)));
}

TEST(KernelsArguments, SupportedPairs) {
  for (DType from : kAllTypes) {
    for (DType to : kAllTypes) {
      const bool expected =
          from == to || (isWide(from) && (isWide(to) || isFp8(to))) || (isFp8(from) && isWide(to));
      EXPECT_EQ(deviceCanConvert(from, to), expected) << dtypeName(from) << " -> " << dtypeName(to);
    }
  }
  EXPECT_FALSE(deviceCanConvert(static_cast<DType>(200), DType::kFloat32));
}

// Argument checks come before any CUDA call, so these run without a device (a null stream).
TEST(KernelsArguments, RejectsWhatItCannotDo) {
  float dummy[16] = {};
  void* p = dummy;
  auto code = [](const Status& s) { return s.code(); };
  Status s = launchConvert(p, DType::kFloat32, p, DType::kInt8, 4, 1.0f, nullptr);
  EXPECT_EQ(code(s), WSYNC_ERR_UNSUPPORTED) << s.toString();
  EXPECT_NE(s.message().find("float32"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("int8"), std::string::npos) << s.message();
  s = launchConvert(p, DType::kFloat8E4M3, p, DType::kFloat8E5M2, 4, 1.0f, nullptr);
  EXPECT_EQ(code(s), WSYNC_ERR_UNSUPPORTED) << s.toString();
  s = launchConvert(p, DType::kInt32, p, DType::kFloat32, 4, 1.0f, nullptr);
  EXPECT_EQ(code(s), WSYNC_ERR_UNSUPPORTED) << s.toString();
  for (float bad : {0.0f, -1.0f, std::numeric_limits<float>::infinity(), std::nanf("")}) {
    s = launchConvert(p, DType::kFloat32, p, DType::kFloat8E4M3, 4, bad, nullptr);
    EXPECT_EQ(code(s), WSYNC_ERR_INVALID_ARGUMENT) << "scale " << bad << ": " << s.toString();
    EXPECT_NE(s.message().find("scale"), std::string::npos) << s.message();
  }
  s = launchConvert(p, DType::kFloat32, p, DType::kBFloat16, -1, 1.0f, nullptr);
  EXPECT_EQ(code(s), WSYNC_ERR_INVALID_ARGUMENT) << s.toString();
  s = launchConvert(nullptr, DType::kFloat32, p, DType::kBFloat16, 4, 1.0f, nullptr);
  EXPECT_EQ(code(s), WSYNC_ERR_INVALID_ARGUMENT) << s.toString();
  // Nothing to do: fine even with null pointers.
  EXPECT_TRUE(
      launchConvert(nullptr, DType::kFloat32, nullptr, DType::kBFloat16, 0, 1.0f, nullptr).isOk());

  Region r;
  r.count[0] = 4;
  r.count[1] = 3;
  r.src_stride[0] = 4;
  r.dst_stride[0] = 3;  // destination rows of 4 elements 3 apart: they overlap
  s = launchCopyRegion(p, DType::kFloat32, p, DType::kBFloat16, r, 1.0f, nullptr);
  EXPECT_EQ(code(s), WSYNC_ERR_INVALID_ARGUMENT) << s.toString();
  EXPECT_NE(s.message().find("overlap"), std::string::npos) << s.message();
  r.dst_stride[0] = 4;
  r.count[2] = 2;
  r.src_stride[1] = 12;
  r.dst_stride[1] = 11;  // planes of extent 12 only 11 apart
  s = launchCopyRegion(p, DType::kFloat32, p, DType::kBFloat16, r, 1.0f, nullptr);
  EXPECT_EQ(code(s), WSYNC_ERR_INVALID_ARGUMENT) << s.toString();
  r.dst_stride[1] = 12;
  r.src_stride[0] = -4;
  s = launchCopyRegion(p, DType::kFloat32, p, DType::kBFloat16, r, 1.0f, nullptr);
  EXPECT_EQ(code(s), WSYNC_ERR_INVALID_ARGUMENT) << s.toString();
  r.src_stride[0] = 4;
  r.count[0] = std::numeric_limits<int64_t>::max() / 2;
  s = launchCopyRegion(p, DType::kFloat32, p, DType::kBFloat16, r, 1.0f, nullptr);
  EXPECT_EQ(code(s), WSYNC_ERR_INVALID_ARGUMENT) << s.toString();
  r.count[0] = 4;
  s = launchCopyRegion(p, DType::kUInt8, p, DType::kFloat16, r, 1.0f, nullptr);
  EXPECT_EQ(code(s), WSYNC_ERR_UNSUPPORTED) << s.toString();
  r.count[1] = 0;  // empty: nothing to do
  EXPECT_TRUE(
      launchCopyRegion(nullptr, DType::kFloat32, nullptr, DType::kBFloat16, r, 1.0f, nullptr)
          .isOk());
}

// ---- device tests -------------------------------------------------------------------------------

// Every converting pair on exhaustive (1- and 2-byte sources) or broad random (float32) inputs,
// through the vector path (aligned) and the element path (shifted by one element).
TEST_F(KernelsTest, EveryPairMatchesTheHostReference) {
  std::mt19937_64 rng(42);
  int pairs = 0;
  for (DType from : kAllTypes) {
    for (DType to : kAllTypes) {
      if (from == to || !deviceCanConvert(from, to)) continue;
      const std::vector<uint8_t> input = inputsFor(from, rng);
      // A non-power-of-two scale (products round) and a power of two (exact: ties stay ties);
      // pairs without float8 ignore the scale.
      for (float scale : {1.0f, 0.25f, 3.7f}) {
        if (!isFp8(from) && !isFp8(to) && scale != 3.7f) continue;
        checkConvert(from, to, scale, input, 0, 0);
        checkConvert(from, to, scale, input, 1, 0);
        checkConvert(from, to, scale, input, 0, 3);
        for (size_t n : {1, 3, 17, 67, 1031, 12345}) {  // short and odd counts: the tails
          const std::vector<uint8_t> head(input.begin(), input.begin() + n * dtypeSize(from));
          checkConvert(from, to, scale, head, 0, 0);
        }
      }
      ++pairs;
    }
  }
  EXPECT_EQ(pairs, 18);
  std::printf("[ info ] %d dtype pairs checked against the host reference\n", pairs);
}

TEST_F(KernelsTest, SameDTypeIsABytewiseCopy) {
  std::mt19937_64 rng(7);
  for (DType t : kAllTypes) {
    std::vector<uint8_t> bytes(dtypeSize(t) * 10007);
    for (uint8_t& b : bytes)
      b = static_cast<uint8_t>(rng());
    checkConvert(t, t, 1.0f, bytes, 0, 0);
    checkConvert(t, t, 1.0f, bytes, 1, 2);
  }
}

TEST_F(KernelsTest, Fp8KnownValuesAndRoundTrips) {
  // float32 -> float8 with a scale, then back: y = fp8(x * scale), x' = y / scale.
  const std::vector<float> xs = {1.0f, 0.5f, 300.0f, -1000.0f, 3.0f};
  std::vector<uint8_t> in(xs.size() * 4);
  std::memcpy(in.data(), xs.data(), in.size());
  GpuBuffer src(in.size());
  GpuBuffer mid(xs.size());
  GpuBuffer back(in.size());
  upload(src.get(), in);
  ASSERT_TRUE(launchConvert(src.get(), DType::kFloat32, mid.get(), DType::kFloat8E4M3,
                            static_cast<int64_t>(xs.size()), 2.0f, stream_)
                  .isOk());
  ASSERT_TRUE(launchConvert(mid.get(), DType::kFloat8E4M3, back.get(), DType::kFloat32,
                            static_cast<int64_t>(xs.size()), 2.0f, stream_)
                  .isOk());
  sync();
  const std::vector<uint8_t> codes = download(mid.get(), xs.size());
  // 1*2 = 2 -> 0x40; 0.5*2 = 1 -> 0x38; 600 -> 448 (saturated) 0x7E; -2000 -> -448 0xFE; 6 -> 0x4C
  const std::vector<uint8_t> want_codes = {0x40, 0x38, 0x7E, 0xFE, 0x4C};
  EXPECT_EQ(codes, want_codes);
  std::vector<float> round(xs.size());
  std::memcpy(round.data(), download(back.get(), in.size()).data(), in.size());
  const std::vector<float> want_back = {1.0f, 0.5f, 224.0f, -224.0f, 3.0f};
  EXPECT_EQ(round, want_back);

  // Every finite float8 code survives float8 -> {float32, bfloat16, float16} -> float8 with an
  // exact (power of two) scale.
  for (DType f8 : {DType::kFloat8E4M3, DType::kFloat8E5M2}) {
    std::vector<uint8_t> all;
    for (int c = 0; c < 256; ++c) {
      if (std::isfinite(fp8Value(static_cast<uint8_t>(c), f8 == DType::kFloat8E4M3))) {
        all.push_back(static_cast<uint8_t>(c));
      }
    }
    for (DType wide : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
      GpuBuffer a(all.size());
      GpuBuffer w(all.size() * dtypeSize(wide));
      GpuBuffer b(all.size());
      upload(a.get(), all);
      const auto n = static_cast<int64_t>(all.size());
      const float scale = wide == DType::kFloat16 ? 1.0f : 0.125f;  // 1/8: stays inside half
      ASSERT_TRUE(launchConvert(a.get(), f8, w.get(), wide, n, scale, stream_).isOk());
      ASSERT_TRUE(launchConvert(w.get(), wide, b.get(), f8, n, scale, stream_).isOk());
      sync();
      EXPECT_EQ(download(b.get(), all.size()), all)
          << dtypeName(f8) << " -> " << dtypeName(wide) << " -> " << dtypeName(f8);
    }
  }
}

// Strided regions (odd counts and strides, unit dims, broadcast rows, 2-D copies), every element
// checked and every byte between them untouched.
TEST_F(KernelsTest, StridedRegions) {
  struct Shape {
    int64_t c0, c1, c2, ss0, ss1, ds0, ds1;
    int64_t src_off = 3;  // elements into the buffers: 3 and 5 misalign the vector units
    int64_t dst_off = 5;
  };
  const Shape shapes[] = {
      {7, 5, 3, 11, 60, 9, 50},           // everything strided, flat kernel
      {1, 1, 1, 0, 0, 0, 0},              // one element
      {1000, 3, 1, 1003, 0, 1000, 0},     // long rows, destination packed: row kernel
      {3, 200, 7, 5, 1001, 3, 600},       // short rows, many of them
      {600, 2, 2, 600, 1200, 600, 1200},  // contiguous on both sides: one run
      {300, 4, 3, 301, 1300, 300, 1200},  // destination packed, source planes apart
      {4097, 3, 1, 5000, 0, 4100, 0},     // long rows: 2-D copy for identical types
      {5, 1, 4, 0, 7, 0, 6},              // one row per plane: planes become rows
      {8, 4, 1, 0, 0, 8, 0},              // a source row broadcast into 4 destination rows
      {33, 17, 2, 40, 700, 35, 600},      // odd everything, two planes
      // Multiples of 32 elements, aligned: vector units (flat and row kernels) for every pair.
      {64, 7, 3, 96, 1024, 64, 512, 0, 0},
      {2048, 5, 2, 2304, 12800, 2048, 10240, 32, 64},
      {16384, 3, 1, 16896, 0, 17408, 0, 0, 32},
  };
  struct Pair {
    DType from, to;
    float scale;
  };
  const Pair pairs[] = {
      {DType::kFloat32, DType::kFloat32, 1},       {DType::kBFloat16, DType::kBFloat16, 1},
      {DType::kFloat8E4M3, DType::kFloat8E4M3, 1}, {DType::kInt64, DType::kInt64, 1},
      {DType::kFloat32, DType::kBFloat16, 1},      {DType::kBFloat16, DType::kFloat32, 1},
      {DType::kFloat32, DType::kFloat8E4M3, 3.7f}, {DType::kFloat8E5M2, DType::kFloat16, 0.5f},
      {DType::kFloat16, DType::kBFloat16, 1},      {DType::kBFloat16, DType::kFloat8E5M2, 1},
  };
  std::mt19937_64 rng(3);
  for (const Shape& sh : shapes) {
    for (const Pair& pr : pairs) {
      Region r;
      r.count[0] = sh.c0;
      r.count[1] = sh.c1;
      r.count[2] = sh.c2;
      r.src_stride[0] = sh.ss0;
      r.src_stride[1] = sh.ss1;
      r.dst_stride[0] = sh.ds0;
      r.dst_stride[1] = sh.ds1;
      const std::string what = std::string(dtypeName(pr.from)) + " -> " + dtypeName(pr.to) +
                               ", region " + std::to_string(sh.c0) + "x" + std::to_string(sh.c1) +
                               "x" + std::to_string(sh.c2) + " strides src " +
                               std::to_string(sh.ss0) + "," + std::to_string(sh.ss1) + " dst " +
                               std::to_string(sh.ds0) + "," + std::to_string(sh.ds1);
      const size_t fs = dtypeSize(pr.from);
      const size_t ts = dtypeSize(pr.to);
      const int64_t src_elems = (sh.c2 - 1) * sh.ss1 + (sh.c1 - 1) * sh.ss0 + sh.c0;
      const int64_t dst_elems = (sh.c2 - 1) * sh.ds1 + (sh.c1 - 1) * sh.ds0 + sh.c0;
      // Source: random finite values of `from` (a 2-D offset of 3 elements into the buffer).
      std::vector<uint8_t> src_bytes((src_elems + sh.src_off) * fs);
      for (size_t i = 0; i < src_bytes.size(); i += fs) {
        if (isWide(pr.from) || isFp8(pr.from)) {
          const float v = std::ldexp(static_cast<float>(static_cast<int>(rng() % 2001) - 1000),
                                     static_cast<int>(rng() % 12) - 8);
          fromFloat(pr.from, v, src_bytes.data() + i);
        } else {
          for (size_t k = 0; k < fs; ++k)
            src_bytes[i + k] = static_cast<uint8_t>(rng());
        }
      }
      const size_t dst_total = (dst_elems + sh.dst_off) * ts;
      std::vector<uint8_t> want(dst_total, 0xCD);
      for (int64_t p = 0; p < sh.c2; ++p) {
        for (int64_t row = 0; row < sh.c1; ++row) {
          for (int64_t e = 0; e < sh.c0; ++e) {
            const int64_t si = sh.src_off + p * sh.ss1 + row * sh.ss0 + e;
            const int64_t di = sh.dst_off + p * sh.ds1 + row * sh.ds0 + e;
            referenceConvert(pr.from, src_bytes.data() + si * fs, pr.to, want.data() + di * ts,
                             pr.scale);
          }
        }
      }
      GpuBuffer src(src_bytes.size());
      GpuBuffer dst(dst_total);
      if (src.get() == nullptr || dst.get() == nullptr) return;
      upload(src.get(), src_bytes);
      ASSERT_EQ(cudaMemset(dst.get(), 0xCD, dst_total), cudaSuccess);
      const Status s = launchCopyRegion(src.get() + sh.src_off * fs, pr.from,
                                        dst.get() + sh.dst_off * ts, pr.to, r, pr.scale, stream_);
      ASSERT_TRUE(s.isOk()) << what << ": " << s.toString();
      sync();
      const std::vector<uint8_t> got = download(dst.get(), dst_total);
      size_t mismatches = 0;
      size_t first = 0;
      for (size_t i = 0; i < dst_total; ++i) {
        if (got[i] != want[i] && mismatches++ == 0) first = i;
      }
      EXPECT_EQ(mismatches, 0u) << what << ": " << mismatches << " of " << dst_total
                                << " destination bytes differ; the first at byte " << first
                                << " (element " << static_cast<int64_t>(first / ts) - sh.dst_off
                                << "): got 0x" << std::hex << int(got[first]) << ", expected 0x"
                                << int(want[first]);
    }
  }
}

// Informational: GB/s (bytes read + written) of large conversions and a strided pack; checks a
// sample of the output, never the speed.
TEST_F(KernelsTest, Throughput) {
  constexpr int64_t kElements = int64_t{1} << 28;  // 1 GiB of float32
  GpuBuffer src(kElements * 4);
  GpuBuffer dst(kElements * 4);
  if (src.get() == nullptr || dst.get() == nullptr) return;
  {  // a pattern of exactly representable values
    std::vector<float> host(1 << 20);
    for (size_t i = 0; i < host.size(); ++i)
      host[i] = static_cast<float>(i % 1000) * 0.25f - 100.0f;
    for (int64_t off = 0; off < kElements; off += static_cast<int64_t>(host.size())) {
      ASSERT_EQ(
          cudaMemcpy(src.get() + off * 4, host.data(), host.size() * 4, cudaMemcpyHostToDevice),
          cudaSuccess);
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  ASSERT_EQ(cudaEventCreate(&start), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&stop), cudaSuccess);
  auto measure = [&](const char* name, int64_t bytes_moved, const std::function<Status()>& run) {
    ASSERT_TRUE(run().isOk());  // warm-up
    float best_ms = 1e30f;
    for (int i = 0; i < 5; ++i) {
      cudaEventRecord(start, stream_);
      const Status s = run();
      ASSERT_TRUE(s.isOk()) << name << ": " << s.toString();
      cudaEventRecord(stop, stream_);
      ASSERT_EQ(cudaEventSynchronize(stop), cudaSuccess);
      float ms = 0;
      cudaEventElapsedTime(&ms, start, stop);
      best_ms = std::min(best_ms, ms);
    }
    std::printf("[ info ] %-44s %8.1f GB/s (%.3f ms, best of 5)\n", name,
                static_cast<double>(bytes_moved) / (best_ms * 1e-3) / 1e9, best_ms);
  };
  measure("float32 -> bfloat16, 2^28 elements", kElements * 6, [&] {
    return launchConvert(src.get(), DType::kFloat32, dst.get(), DType::kBFloat16, kElements, 1.0f,
                         stream_);
  });
  {  // sample check of the last conversion
    std::vector<uint16_t> out(1000);
    ASSERT_EQ(cudaMemcpy(out.data(), dst.get(), 2000, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int i = 0; i < 1000; ++i) {
      const Eigen::bfloat16 want(static_cast<float>(i % 1000) * 0.25f - 100.0f);
      uint16_t bits;
      std::memcpy(&bits, &want, 2);
      ASSERT_EQ(out[i], bits) << "element " << i;
    }
  }
  measure("bfloat16 -> float32, 2^28 elements", kElements * 6, [&] {
    return launchConvert(dst.get(), DType::kBFloat16, src.get(), DType::kFloat32, kElements, 1.0f,
                         stream_);
  });
  measure("float32 -> float8_e4m3 (scale 2), 2^28 elements", kElements * 5, [&] {
    return launchConvert(src.get(), DType::kFloat32, dst.get(), DType::kFloat8E4M3, kElements, 2.0f,
                         stream_);
  });
  measure("bfloat16 -> bfloat16 (cudaMemcpyAsync)", kElements * 4, [&] {
    return launchConvert(src.get(), DType::kBFloat16, dst.get(), DType::kBFloat16, kElements, 1.0f,
                         stream_);
  });
  Region r;  // pack every other 4096-wide row (a column split of an 8192-wide matrix)
  r.count[0] = 4096;
  r.count[1] = kElements / 8192;
  r.src_stride[0] = 8192;
  r.dst_stride[0] = 4096;
  measure("region float32 -> bfloat16, rows 4096 of 8192", r.numElements() * 6, [&] {
    return launchCopyRegion(src.get(), DType::kFloat32, dst.get(), DType::kBFloat16, r, 1.0f,
                            stream_);
  });
  Region narrow;  // short rows: a flat index over (element, row)
  narrow.count[0] = 96;
  narrow.count[1] = kElements / 128;
  narrow.src_stride[0] = 128;
  narrow.dst_stride[0] = 96;
  measure("region float32 -> bfloat16, rows 96 of 128", narrow.numElements() * 6, [&] {
    return launchCopyRegion(src.get(), DType::kFloat32, dst.get(), DType::kBFloat16, narrow, 1.0f,
                            stream_);
  });
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

}  // namespace
}  // namespace wsync
