// Host block quantization (quant/block_quant.h): hand-computed bytes and scales for the three
// formats (uneven blocks, the 1e-4 clamp, torch's ceil(log2) just above powers of two, NaN and
// infinities), and the property the planner relies on: amax per trainer piece -> merge -> scales
// -> quantize per piece equals quantizing the full tensor, for random shapes (2-D, 3-D experts),
// blocks (128x128, 1x32, odd) and partitions into strided pieces; AVX-512 and scalar paths equal.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "quant/block_quant.h"
#include "quant/block_quant_math.h"
#include "quant/block_quant_segments.h"
#include "support/block_quant_testing.h"

namespace wsync {
namespace {

namespace qm = quant_math;
using block_quant_testing::HeldPiece;
using block_quant_testing::HostTensor;
using block_quant_testing::Quantized;

float bitsFloat(uint32_t u) {
  return qm::floatOf(u);
}

std::vector<HostQuantKernel> kernels() {
  std::vector<HostQuantKernel> k = {HostQuantKernel::kScalar};
  if (hostQuantKernelAvailable(HostQuantKernel::kAvx512)) k.push_back(HostQuantKernel::kAvx512);
  return k;
}

HostTensor floatTensor(const Dims& shape, const std::vector<float>& values) {
  HostTensor t;
  t.dtype = DType::kFloat32;
  t.shape = shape;
  t.bytes.resize(values.size() * 4);
  std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

BlockScaling scheme(ScaleFormat f, int64_t rows, int64_t cols) {
  BlockScaling s;
  s.format = f;
  s.block_rows = rows;
  s.block_cols = cols;
  s.scale_tensor = "w.scale";
  return s;
}

// The whole tensor as one piece through the library (each available path, all equal).
Quantized quantizeWhole(const HostTensor& t, const BlockScaling& s) {
  std::mt19937_64 rng(1);
  std::vector<HeldPiece> pieces = {block_quant_testing::holdPiece(rng, t, Box::whole(t.shape), 0)};
  Quantized first;
  for (HostQuantKernel k : kernels()) {
    Quantized q;
    const Status st = block_quant_testing::quantizePiecewiseHost(k, pieces, t.shape, s, &q);
    EXPECT_TRUE(st.isOk()) << st.toString();
    if (k == HostQuantKernel::kScalar) {
      first = q;
    } else {
      EXPECT_TRUE(q == first) << hostQuantKernelName(k) << " differs from scalar";
    }
  }
  return first;
}

std::vector<float> floatScales(const Quantized& q) {
  std::vector<float> f(q.scales.size() / 4);
  std::memcpy(f.data(), q.scales.data(), q.scales.size());
  return f;
}

TEST(BlockQuantMath, E4m3RoundsLikeTorch) {
  struct Case {
    float in;
    uint8_t out;
  };
  const Case cases[] = {
      {0.0f, 0x00},          {-0.0f, 0x80},  {1.0f, 0x38},   {-2.0f, 0xc0},
      {448.0f, 0x7e},        {463.9f, 0x7e}, {464.0f, 0x7e}, {1000.0f, 0x7e},
      {-1e30f, 0xfe},        {17.0f, 0x58},  {19.0f, 0x5a},  {0.001953125f, 0x01},
      {0.0009765625f, 0x00},  // 2^-10: half the smallest subnormal, ties to even (0)
      {0.0029296875f, 0x02},  // 1.5 * 2^-9: tie, to even
      {0.015625f, 0x08},      // 2^-6: smallest normal
      {0.0146484375f, 0x08},  // 7.5 * 2^-9: rounds up into the normals
      {224.0f, 0x76},
  };
  for (const Case& c : cases)
    EXPECT_EQ(qm::e4m3FromFloat(c.in), c.out) << c.in;
  EXPECT_EQ(qm::e4m3FromFloat(bitsFloat(0x7f800000u)), 0x7e);  // +inf saturates
  EXPECT_EQ(qm::e4m3FromFloat(bitsFloat(0xff800000u)), 0xfe);
  EXPECT_EQ(qm::e4m3FromFloat(bitsFloat(0x7fc00000u)), 0x7f);  // NaN, whatever its sign
  EXPECT_EQ(qm::e4m3FromFloat(bitsFloat(0xffc00000u)), 0x7f);
  EXPECT_EQ(qm::e4m3FromFloat(bitsFloat(0x00000001u)), 0x00);  // float32 subnormal
}

// The vectorized e4m3 conversion against the scalar one (torch's c10 algorithm) on 4M float32
// bit patterns: every sign / exponent / top-7-mantissa-bits combination (bits 16..31) with 64
// low halves (the rounding ties 0x0000 / 0x8000 at bit 19 come from the top bits).
TEST(BlockQuantMath, VectorE4m3EqualsScalarOnEveryHighHalf) {
  if (!hostQuantKernelAvailable(HostQuantKernel::kAvx512)) {
    GTEST_SKIP() << "this CPU lacks AVX-512F: only the scalar path exists here";
  }
  std::vector<uint16_t> lows = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff};
  std::mt19937 rng(3);
  while (lows.size() < 64)
    lows.push_back(static_cast<uint16_t>(rng()));
  std::vector<uint32_t> bits(65536 * lows.size());
  for (uint32_t high = 0; high < 65536; ++high) {
    for (size_t j = 0; j < lows.size(); ++j)
      bits[high * lows.size() + j] = high << 16 | lows[j];
  }
  const int64_t n = static_cast<int64_t>(bits.size());
  std::vector<uint8_t> scalar(bits.size()), vector(bits.size());
  quant_detail::segmentQuantizeScalar(bits.data(), DType::kFloat32, n, 1.0f, scalar.data());
  quant_detail::segmentQuantizeAvx512(bits.data(), DType::kFloat32, n, 1.0f, vector.data());
  for (size_t i = 0; i < bits.size(); ++i) {
    ASSERT_EQ(vector[i], scalar[i]) << std::hex << "float bits 0x" << bits[i];
    ASSERT_EQ(scalar[i], qm::e4m3FromFloat(bitsFloat(bits[i])));
  }
}

// Every bfloat16 and float16 bit pattern, loaded and multiplied by several multipliers (0, inf
// and NaN included): vectorized and scalar bytes equal.
TEST(BlockQuantMath, VectorEqualsScalarOnEveryHalfWidthPattern) {
  if (!hostQuantKernelAvailable(HostQuantKernel::kAvx512)) {
    GTEST_SKIP() << "this CPU lacks AVX-512F: only the scalar path exists here";
  }
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i)
    all[i] = static_cast<uint16_t>(i);
  const float multipliers[] = {
      1.0f, 448.0f / 3.7f,          std::ldexp(1.0f, -20),  std::ldexp(1.0f, 100),
      0.0f, bitsFloat(0x7f800000u), bitsFloat(qm::kNaNBits)};
  for (DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    for (float m : multipliers) {
      std::vector<uint8_t> scalar(all.size()), vector(all.size());
      quant_detail::segmentQuantizeScalar(all.data(), dtype, 65536, m, scalar.data());
      quant_detail::segmentQuantizeAvx512(all.data(), dtype, 65536, m, vector.data());
      ASSERT_EQ(vector, scalar) << dtypeName(dtype) << " m " << m;
    }
    const float a = quant_detail::segmentAmaxScalar(all.data(), dtype, 65536, 0.0f);
    EXPECT_TRUE(qm::isNaN(a));
    EXPECT_TRUE(qm::isNaN(quant_detail::segmentAmaxAvx512(all.data(), dtype, 65536, 0.0f)));
  }
}

#if defined(__FLT16_MAX__)
// float16 -> float32 by bits (subnormals, inf, NaN payloads) equals the compiler's _Float16.
TEST(BlockQuantMath, Float16ConversionIsExact) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    _Float16 f;
    std::memcpy(&f, &h, 2);
    const float expected = static_cast<float>(f);
    const float got = qm::floatOfFloat16(h);
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(got)) << i;
      ASSERT_EQ(std::signbit(got), std::signbit(expected)) << i;
    } else {
      ASSERT_EQ(qm::bitsOf(got), qm::bitsOf(expected)) << i;
    }
  }
}
#endif

TEST(BlockQuantMath, CeilLog2IsTorchsNotTheExactCeiling) {
  // torch.ceil(torch.log2(x)) for x = 2^k + j ulps, j = 0..7 (torch 2.13, CPU): log2 rounds to
  // k for the first ulps above 2^k when |k| >= 2.
  struct Case {
    int k;
    int expected[8];
  };
  const Case cases[] = {
      {-20, {-20, -20, -20, -20, -20, -20, -19, -19}},
      {-12, {-12, -12, -12, -11, -11, -11, -11, -11}},
      {-9, {-9, -9, -9, -8, -8, -8, -8, -8}},
      {-4, {-4, -3, -3, -3, -3, -3, -3, -3}},
      {-1, {-1, 0, 0, 0, 0, 0, 0, 0}},
      {0, {0, 1, 1, 1, 1, 1, 1, 1}},
      {4, {4, 4, 5, 5, 5, 5, 5, 5}},
      {10, {10, 10, 10, 11, 11, 11, 11, 11}},
  };
  for (const Case& c : cases) {
    const uint32_t base = qm::bitsOf(std::ldexp(1.0f, c.k));
    for (int j = 0; j < 8; ++j) {
      EXPECT_EQ(qm::ceilLog2AsTorch(bitsFloat(base + static_cast<uint32_t>(j))), c.expected[j])
          << "2^" << c.k << " + " << j << " ulp";
    }
  }
  EXPECT_EQ(qm::ceilLog2AsTorch(bitsFloat(1u)), -149.0f);  // subnormals
  EXPECT_EQ(qm::ceilLog2AsTorch(bitsFloat(3u)), -147.0f);
}

// The bit shortcut (kCeilLog2ExactMantissa) against the double log2 it replaces: every exponent,
// the mantissas around the shortcut's threshold and at its extremes, and random ones (all 2^31
// positive normal float32 agree; that full check takes ~30 CPU seconds, too long for a unit test).
TEST(BlockQuantMath, CeilLog2ShortcutEqualsTheDoubleLog2) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> mantissa(0, (1u << 23) - 1);
  for (uint32_t e = 1; e < 255; ++e) {
    std::vector<uint32_t> ms;
    for (uint32_t m = 0; m < 2 * qm::kCeilLog2ExactMantissa; ++m)
      ms.push_back(m);
    for (uint32_t m = (1u << 23) - 16; m < (1u << 23); ++m)
      ms.push_back(m);
    for (int i = 0; i < 256; ++i)
      ms.push_back(mantissa(rng));
    for (uint32_t m : ms) {
      const float y = bitsFloat(e << 23 | m);
      const float expected = std::ceil(static_cast<float>(std::log2(static_cast<double>(y))));
      ASSERT_EQ(qm::ceilLog2AsTorch(y), expected) << "exponent " << e << " mantissa " << m;
    }
  }
}

TEST(BlockQuant, Float32ScalesUnevenBlocksAndTheClamp) {
  // [3, 5] in 2x2 blocks: a 2x3 scale grid whose last row and column blocks are partial.
  const std::vector<float> v = {
      1.0f, -2.0f, 5e-5f,  0.0f, 3.0f,   //
      0.5f, 448.f, -5e-5f, 0.0f, -6.0f,  //
      0.0f, 0.0f,  7.0f,   0.0f, 0.25f,  //
  };
  const HostTensor t = floatTensor({3, 5}, v);
  const Quantized q = quantizeWhole(t, scheme(ScaleFormat::kFloat32, 2, 2));
  const std::vector<float> s = floatScales(q);
  ASSERT_EQ(s.size(), 6u);
  EXPECT_EQ(s[0], 1.0f);            // amax 448
  EXPECT_EQ(s[1], 1e-4f / 448.0f);  // amax 5e-5, clamped to 1e-4
  EXPECT_EQ(s[2], 6.0f / 448.0f);   // the 2x1 block (last column)
  EXPECT_EQ(s[3], 1e-4f / 448.0f);  // the 1x2 block of zeros
  EXPECT_EQ(s[4], 7.0f / 448.0f);   // 1x2
  EXPECT_EQ(s[5], 0.25f / 448.0f);  // 1x1
  const std::vector<uint8_t> expected = {
      0x38, 0xc0, 0x76, 0x00, 0x76,  // 1, -2 at scale 1; 5e-5 -> 224; 3/(6/448) = 224
      0x30, 0x7e, 0xf6, 0x00, 0xfe,  // 0.5, 448; -224; -6 -> -448
      0x00, 0x00, 0x7e, 0x00, 0x7e,  // 7 -> 448; 0.25 -> 448
  };
  EXPECT_EQ(q.values, expected);
}

TEST(BlockQuant, Pow2AndE8m0Scales) {
  // One row, blocks of 4: amax 3 -> 3/448 -> 2^-7 (both formats); amax 448 -> 2^0; amax 0 ->
  // pow2: 2^ceil(log2(1e-4/448)) = 2^-22, e8m0: tiny/448 -> biased exponent clamped to 0.
  const std::vector<float> v = {1.0f, -3.0f, 0.5f, 0.0f, 448.f, -1.0f,
                                2.0f, 0.0f,  0.0f, 0.0f, 0.0f,  0.0f};
  const HostTensor t = floatTensor({1, 12}, v);
  const Quantized p = quantizeWhole(t, scheme(ScaleFormat::kPow2Float32, 1, 4));
  EXPECT_EQ(floatScales(p), (std::vector<float>{0.0078125f, 1.0f, std::ldexp(1.0f, -22)}));
  const std::vector<uint8_t> expected = {0x70, 0xfc, 0x68, 0x00, 0x7e, 0xb8,
                                         0x40, 0x00, 0x00, 0x00, 0x00, 0x00};
  EXPECT_EQ(p.values, expected);  // 128, -384, 64, 0 | 448, -1, 2, 0 | zeros
  const Quantized e = quantizeWhole(t, scheme(ScaleFormat::kE8M0, 1, 4));
  EXPECT_EQ(e.scales, (std::vector<uint8_t>{120, 127, 0}));
  EXPECT_EQ(e.values, expected);
}

// kFloat32Gpu is per_block_cast_to_fp8 as torch on CUDA computes it: the clamped amax times the
// float32 reciprocal of 448, which differs from the CPU's true division in the last bit for many
// bfloat16 maxima; the scales the pipeline writes are that product.
TEST(BlockQuant, GpuFloat32ScalesMultiplyByTheReciprocal) {
  const float rcp = 1.0f / 448.0f;
  int differ = 0;
  for (uint32_t h = 0x3b80; h < 0x4380; ++h) {  // bfloat16 in [2^-8, 2^8)
    const float a = qm::floatOfBFloat16(static_cast<uint16_t>(h));
    volatile float product = a * rcp;  // one rounding (the unit builds without contraction)
    ASSERT_EQ(qm::bitsOf(qm::float32GpuScale(a)), qm::bitsOf(product)) << a;
    differ += qm::bitsOf(qm::float32GpuScale(a)) != qm::bitsOf(qm::float32Scale(a));
  }
  EXPECT_GT(differ, 1000);  // a format of its own, not the CPU's under another name
  EXPECT_EQ(qm::bitsOf(qm::float32GpuScale(1e-6f)),
            qm::bitsOf(qm::float32GpuScale(1e-4f)));  // clamp
  EXPECT_TRUE(std::isnan(qm::float32GpuScale(qm::nanValue())));
  HostTensor t;
  t.dtype = DType::kFloat32;
  t.shape = Dims{2, 2};
  const float values[] = {3.0f, -1.5f, 0.25f, 2.75f};
  t.bytes.resize(16);
  std::memcpy(t.bytes.data(), values, 16);
  const Quantized q = quantizeWhole(t, scheme(ScaleFormat::kFloat32Gpu, 2, 2));
  float scale;
  std::memcpy(&scale, q.scales.data(), 4);
  volatile float want = 3.0f * rcp;
  EXPECT_EQ(qm::bitsOf(scale), qm::bitsOf(want));
}

TEST(BlockQuant, NaNAndInfinities) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // blocks of 4: [NaN block], [inf block], [-inf and NaN], [finite]
  const std::vector<float> v = {1.0f, nan,  -2.0f, 0.0f, 1.0f, inf,  -0.5f, -inf,
                                -inf, 1.0f, -nan,  0.0f, 1.0f, 2.0f, 3.0f,  4.0f};
  const HostTensor t = floatTensor({1, 16}, v);
  for (ScaleFormat f : {ScaleFormat::kFloat32, ScaleFormat::kPow2Float32}) {
    const Quantized q = quantizeWhole(t, scheme(f, 1, 4));
    const std::vector<float> s = floatScales(q);
    EXPECT_EQ(qm::bitsOf(s[0]), qm::kNaNBits);
    EXPECT_EQ(s[1], inf);
    EXPECT_EQ(qm::bitsOf(s[2]), qm::kNaNBits);
    const std::vector<uint8_t> expected = {0x7f, 0x7f, 0x7f, 0x7f,   // NaN block: all NaN
                                           0x00, 0x7f, 0x80, 0x7f,   // x * (1/inf): +-0, inf -> NaN
                                           0x7f, 0x7f, 0x7f, 0x7f};  // NaN block
    EXPECT_EQ(std::vector<uint8_t>(q.values.begin(), q.values.begin() + 12), expected)
        << scaleFormatName(f);
  }
  const Quantized e = quantizeWhole(t, scheme(ScaleFormat::kE8M0, 1, 4));
  EXPECT_EQ(e.scales[0], qm::kE8m0NaN);
  EXPECT_EQ(e.scales[1], 254);  // inf amax: clamped; x / 2^127
  EXPECT_EQ(e.scales[2], qm::kE8m0NaN);
  const std::vector<uint8_t> expected = {0x7f, 0x7f, 0x7f, 0x7f, 0x00, 0x7e,
                                         0x80, 0xfe, 0x7f, 0x7f, 0x7f, 0x7f};
  EXPECT_EQ(std::vector<uint8_t>(e.values.begin(), e.values.begin() + 12), expected);
}

TEST(BlockQuant, BadPiecesAreRefused) {
  const HostTensor t = floatTensor({4, 4}, std::vector<float>(16, 1.0f));
  const BlockScaling s = scheme(ScaleFormat::kFloat32, 2, 2);
  float amax[4];
  PieceView p{t.bytes.data(), DType::kFloat32, Box::whole({4, 4}), Dims{4, 1}};
  EXPECT_TRUE(blockAmaxHost(p, t.shape, s, amax).isOk());
  PieceView bad = p;
  bad.dtype = DType::kInt32;
  EXPECT_EQ(blockAmaxHost(bad, t.shape, s, amax).code(), WSYNC_ERR_INVALID_ARGUMENT);
  bad = p;
  bad.box.extent = {5, 4};
  EXPECT_EQ(blockAmaxHost(bad, t.shape, s, amax).code(), WSYNC_ERR_INVALID_ARGUMENT);
  bad = p;
  bad.strides = {1, 4};
  uint8_t dst[16];
  const Status st = quantizeBlocksHost(bad, t.shape, s, amax, dst);
  EXPECT_EQ(st.code(), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(st.message().find("innermost stride"), std::string::npos) << st.message();
  EXPECT_EQ(blockAmaxHost(p, t.shape, scheme(ScaleFormat::kFloat32, 0, 2), amax).code(),
            WSYNC_ERR_INVALID_ARGUMENT);
}

// ---- the property
// --------------------------------------------------------------------------------

struct Layout {
  Dims shape;
  BlockScaling s;
  DType dtype;
  std::vector<int> parts;  // cuts per dim
};

Layout randomLayout(std::mt19937_64& rng, int iteration) {
  std::uniform_int_distribution<int> pick(0, 99);
  Layout l;
  const ScaleFormat formats[] = {ScaleFormat::kFloat32, ScaleFormat::kPow2Float32,
                                 ScaleFormat::kE8M0, ScaleFormat::kFloat32Gpu};
  l.s.format = formats[iteration % 4];
  l.s.scale_tensor = "w.scale";
  const DType dtypes[] = {DType::kBFloat16, DType::kFloat32, DType::kFloat16};
  l.dtype = dtypes[(iteration / 3) % 3];
  const bool experts = pick(rng) < 30;
  auto dim = [&](int lo, int hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  if (l.s.format == ScaleFormat::kE8M0) {
    l.s.block_rows = 1;
    l.s.block_cols = pick(rng) < 70 ? 32 : dim(1, 12);
  } else {
    const int kind = pick(rng);
    if (kind < 35) {
      l.s.block_rows = l.s.block_cols = 128;
    } else if (kind < 50) {
      l.s.block_rows = 1;
      l.s.block_cols = 32;
    } else {
      l.s.block_rows = dim(1, 9);
      l.s.block_cols = dim(1, 40);
    }
  }
  const int64_t big = l.s.block_rows >= 128 ? 300 : 70;
  const int64_t rows = dim(1, big);
  int64_t cols = dim(1, l.s.block_cols >= 128 ? 300 : 90);
  if (l.s.format == ScaleFormat::kE8M0) cols = l.s.block_cols * dim(1, 6);
  l.shape = experts ? Dims{dim(1, 4), rows, cols} : Dims{rows, cols};
  for (int d = 0; d < l.shape.size(); ++d)
    l.parts.push_back(static_cast<int>(dim(1, 4)));
  return l;
}

TEST(BlockQuantProperty, PiecewiseEqualsFullTensorForRandomLayouts) {
  if (!hostQuantKernelAvailable(HostQuantKernel::kAvx512)) {
    std::printf("[   NOTE   ] this CPU lacks AVX-512F: only the scalar path is tested\n");
  }
  std::mt19937_64 rng(20261205);
  int with_specials = 0;
  for (int it = 0; it < 240; ++it) {
    const Layout l = randomLayout(rng, it);
    const int specials = it % 5 == 4 ? 3000 : 0;  // +-inf / +-NaN in some tensors
    with_specials += specials > 0;
    const HostTensor t = block_quant_testing::randomTensor(rng, l.dtype, l.shape, specials);
    const Quantized reference = block_quant_testing::referenceQuantize(t, l.s);
    std::vector<HeldPiece> pieces;
    for (const Box& b : block_quant_testing::randomPartition(rng, l.shape, l.parts))
      pieces.push_back(block_quant_testing::holdPiece(rng, t, b, 5));
    for (HostQuantKernel k : kernels()) {
      Quantized q;
      const Status st = block_quant_testing::quantizePiecewiseHost(k, pieces, l.shape, l.s, &q);
      ASSERT_TRUE(st.isOk()) << st.toString();
      ASSERT_EQ(q.scales, reference.scales)
          << "iteration " << it << " " << hostQuantKernelName(k) << " shape " << l.shape.toString()
          << " " << describe(l.s) << " " << dtypeName(l.dtype) << ", " << pieces.size()
          << " pieces";
      ASSERT_EQ(q.values, reference.values)
          << "iteration " << it << " " << hostQuantKernelName(k) << " shape " << l.shape.toString()
          << " " << describe(l.s) << " " << dtypeName(l.dtype) << ", " << pieces.size()
          << " pieces";
    }
  }
  EXPECT_GT(with_specials, 0);
}

// An FSDP dim-0 shard of 28 rows cuts 128-row blocks: the block completes only after merging.
TEST(BlockQuantProperty, FsdpRowShardsOf28Rows) {
  std::mt19937_64 rng(7);
  const Dims shape{300, 260};
  for (ScaleFormat f : {ScaleFormat::kFloat32, ScaleFormat::kPow2Float32}) {
    const BlockScaling s = scheme(f, 128, 128);
    const HostTensor t = block_quant_testing::randomTensor(rng, DType::kBFloat16, shape, 0);
    std::vector<HeldPiece> pieces;
    for (int64_t r = 0; r < shape[0]; r += 28) {
      const Box b{Dims{r, 0}, Dims{std::min<int64_t>(28, shape[0] - r), shape[1]}};
      pieces.push_back(block_quant_testing::holdPiece(rng, t, b, 3));
    }
    for (HostQuantKernel k : kernels()) {
      Quantized q;
      ASSERT_TRUE(block_quant_testing::quantizePiecewiseHost(k, pieces, shape, s, &q).isOk());
      EXPECT_TRUE(q == block_quant_testing::referenceQuantize(t, s)) << hostQuantKernelName(k);
    }
  }
}

// Long rows through the vectorized loop with every dtype and the tail lengths 0..15.
TEST(BlockQuantProperty, VectorAndScalarPathsAgreeOnEverySegmentLength) {
  if (!hostQuantKernelAvailable(HostQuantKernel::kAvx512)) {
    GTEST_SKIP() << "this CPU lacks AVX-512F: only the scalar path exists here";
  }
  std::mt19937_64 rng(99);
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    for (int64_t cols = 1; cols <= 80; ++cols) {
      const BlockScaling s = scheme(ScaleFormat::kFloat32, 2, cols);
      const HostTensor t = block_quant_testing::randomTensor(rng, dtype, {3, cols}, 20000);
      std::vector<HeldPiece> pieces = {
          block_quant_testing::holdPiece(rng, t, Box::whole(t.shape), 2)};
      Quantized a, b;
      ASSERT_TRUE(block_quant_testing::quantizePiecewiseHost(HostQuantKernel::kScalar, pieces,
                                                             t.shape, s, &a)
                      .isOk());
      ASSERT_TRUE(block_quant_testing::quantizePiecewiseHost(HostQuantKernel::kAvx512, pieces,
                                                             t.shape, s, &b)
                      .isOk());
      ASSERT_TRUE(a == b) << dtypeName(dtype) << " cols " << cols;
    }
  }
}

}  // namespace
}  // namespace wsync
