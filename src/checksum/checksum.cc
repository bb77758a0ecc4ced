#include "checksum/checksum.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "checksum/checksum_math.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace wsync {
namespace {

namespace cm = checksum_math;
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the checksum reads words as little-endian integers");

// The last, partial word of a run (1..7 bytes), zero-padded.
uint64_t tailTerm(const uint8_t* p, uint64_t bytes, uint64_t key) {
  uint64_t word = 0;
  std::memcpy(&word, p, bytes);
  return cm::term(word, key);
}

// Words [0, words) of a run whose word 0 has key `key`, one at a time.
uint64_t wordsScalar(const uint8_t* p, uint64_t words, uint64_t key) {
  uint64_t sum = 0;
  for (uint64_t i = 0; i < words; ++i, key += cm::keyStep()) {
    uint64_t word = 0;
    std::memcpy(&word, p + 8 * i, 8);
    sum += cm::term(word, key);
  }
  return sum;
}

#if defined(__x86_64__)
// A 64-bit lane value as the intrinsics take it (same bits).
inline long long lane(uint64_t x) {
  return static_cast<long long>(x);
}

// mix() of 8 lanes.
__attribute__((target("avx512f,avx512dq"))) inline __m512i mixAvx512(__m512i x, __m512i mul1,
                                                                     __m512i mul2) {
  x = _mm512_mullo_epi64(_mm512_xor_si512(x, _mm512_maskz_srli_epi64(0xFF, x, 30)), mul1);
  x = _mm512_mullo_epi64(_mm512_xor_si512(x, _mm512_maskz_srli_epi64(0xFF, x, 27)), mul2);
  return _mm512_xor_si512(x, _mm512_maskz_srli_epi64(0xFF, x, 31));
}

// 8 words per vector, two vectors per iteration (independent multiply chains), the rest scalar.
__attribute__((target("avx512f,avx512dq"))) uint64_t wordsAvx512(const uint8_t* p, uint64_t words,
                                                                 uint64_t key) {
  const uint64_t step = cm::keyStep();
  const __m512i mul1 = _mm512_set1_epi64(lane(cm::kMixMul1));
  const __m512i mul2 = _mm512_set1_epi64(lane(cm::kMixMul2));
  const __m512i lanes = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
  __m512i keys = _mm512_add_epi64(_mm512_set1_epi64(lane(key)),
                                  _mm512_mullo_epi64(lanes, _mm512_set1_epi64(step)));
  const __m512i step8 = _mm512_set1_epi64(lane(8 * step));
  const __m512i step16 = _mm512_set1_epi64(lane(16 * step));
  __m512i acc0 = _mm512_setzero_si512();
  __m512i acc1 = _mm512_setzero_si512();
  uint64_t i = 0;
  for (; i + 16 <= words; i += 16) {
    const __m512i a = _mm512_xor_si512(_mm512_loadu_si512(p + 8 * i), keys);
    const __m512i b =
        _mm512_xor_si512(_mm512_loadu_si512(p + 8 * i + 64), _mm512_add_epi64(keys, step8));
    acc0 = _mm512_add_epi64(acc0, mixAvx512(a, mul1, mul2));
    acc1 = _mm512_add_epi64(acc1, mixAvx512(b, mul1, mul2));
    keys = _mm512_add_epi64(keys, step16);
  }
  if (i + 8 <= words) {
    const __m512i a = _mm512_xor_si512(_mm512_loadu_si512(p + 8 * i), keys);
    acc0 = _mm512_add_epi64(acc0, mixAvx512(a, mul1, mul2));
    i += 8;
  }
  alignas(64) uint64_t partial[8];
  _mm512_store_si512(partial, _mm512_add_epi64(acc0, acc1));
  uint64_t sum = 0;
  for (uint64_t part : partial)
    sum += part;
  return sum + wordsScalar(p + 8 * i, words - i, key + i * step);
}

// 64-bit products of 32-bit multiplies: a * b mod 2^64 per lane (b_high: b >> 32 per lane).
__attribute__((target("avx2"))) inline __m256i mulloAvx2(__m256i a, __m256i b, __m256i b_high) {
  const __m256i low = _mm256_mul_epu32(a, b);
  const __m256i cross =
      _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), b), _mm256_mul_epu32(a, b_high));
  return _mm256_add_epi64(low, _mm256_slli_epi64(cross, 32));
}

// mix() of 4 lanes (high: the multipliers' high halves).
__attribute__((target("avx2"))) inline __m256i mixAvx2(__m256i x, __m256i mul1, __m256i mul1_high,
                                                       __m256i mul2, __m256i mul2_high) {
  x = mulloAvx2(_mm256_xor_si256(x, _mm256_srli_epi64(x, 30)), mul1, mul1_high);
  x = mulloAvx2(_mm256_xor_si256(x, _mm256_srli_epi64(x, 27)), mul2, mul2_high);
  return _mm256_xor_si256(x, _mm256_srli_epi64(x, 31));
}

// 4 words per vector, two vectors per iteration, the rest scalar.
__attribute__((target("avx2"))) uint64_t wordsAvx2(const uint8_t* p, uint64_t words, uint64_t key) {
  const uint64_t step = cm::keyStep();
  const __m256i mul1 = _mm256_set1_epi64x(lane(cm::kMixMul1));
  const __m256i mul1_high = _mm256_set1_epi64x(lane(cm::kMixMul1 >> 32));
  const __m256i mul2 = _mm256_set1_epi64x(lane(cm::kMixMul2));
  const __m256i mul2_high = _mm256_set1_epi64x(lane(cm::kMixMul2 >> 32));
  __m256i keys =
      _mm256_set_epi64x(lane(key + 3 * step), lane(key + 2 * step), lane(key + step), lane(key));
  const __m256i step4 = _mm256_set1_epi64x(lane(4 * step));
  const __m256i step8 = _mm256_set1_epi64x(lane(8 * step));
  __m256i acc0 = _mm256_setzero_si256();
  __m256i acc1 = _mm256_setzero_si256();
  uint64_t i = 0;
  for (; i + 8 <= words; i += 8) {
    const __m256i a =
        _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 8 * i)), keys);
    const __m256i b =
        _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 8 * i + 32)),
                         _mm256_add_epi64(keys, step4));
    acc0 = _mm256_add_epi64(acc0, mixAvx2(a, mul1, mul1_high, mul2, mul2_high));
    acc1 = _mm256_add_epi64(acc1, mixAvx2(b, mul1, mul1_high, mul2, mul2_high));
    keys = _mm256_add_epi64(keys, step8);
  }
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), _mm256_add_epi64(acc0, acc1));
  const uint64_t sum = lanes[0] + lanes[1] + lanes[2] + lanes[3];
  return sum + wordsScalar(p + 8 * i, words - i, key + i * step);
}

bool cpuHas(ChecksumKind kind) {
  switch (kind) {
    case ChecksumKind::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
    case ChecksumKind::kAvx2:
      return __builtin_cpu_supports("avx2");
    case ChecksumKind::kScalar:
      return true;
  }
  return false;
}
#else
bool cpuHas(ChecksumKind kind) {
  return kind == ChecksumKind::kScalar;
}
#endif

ChecksumKind usable(ChecksumKind wanted) {
  if (cpuHas(wanted)) return wanted;
  if (wanted == ChecksumKind::kAvx512 && cpuHas(ChecksumKind::kAvx2)) return ChecksumKind::kAvx2;
  return ChecksumKind::kScalar;
}

uint64_t words(ChecksumKind kind, const uint8_t* p, uint64_t n, uint64_t key) {
#if defined(__x86_64__)
  if (kind == ChecksumKind::kAvx512) return wordsAvx512(p, n, key);
  if (kind == ChecksumKind::kAvx2) return wordsAvx2(p, n, key);
#endif
  (void)kind;
  return wordsScalar(p, n, key);
}

// One run with a kind the CPU has.
uint64_t run(ChecksumKind kind, const uint8_t* p, uint64_t bytes, uint64_t dst_buffer,
             uint64_t dst_offset) {
  const uint64_t key = cm::key(dst_buffer, dst_offset);
  const uint64_t full = bytes / 8;
  uint64_t sum = words(kind, p, full, key);
  if (bytes % 8 != 0) sum += tailTerm(p + 8 * full, bytes % 8, key + full * cm::keyStep());
  return sum;
}

}  // namespace

ChecksumKind checksumKind() {
  static const ChecksumKind kind = usable(ChecksumKind::kAvx512);
  return kind;
}

const char* checksumKindName(ChecksumKind kind) {
  switch (kind) {
    case ChecksumKind::kScalar:
      return "scalar";
    case ChecksumKind::kAvx2:
      return "avx2";
    case ChecksumKind::kAvx512:
      return "avx512";
  }
  return "?";
}

uint64_t checksumRun(const void* data, uint64_t bytes, uint64_t dst_buffer, uint64_t dst_offset) {
  return run(checksumKind(), static_cast<const uint8_t*>(data), bytes, dst_buffer, dst_offset);
}

uint64_t checksumRunWith(ChecksumKind kind, const void* data, uint64_t bytes, uint64_t dst_buffer,
                         uint64_t dst_offset) {
  return run(usable(kind), static_cast<const uint8_t*>(data), bytes, dst_buffer, dst_offset);
}

uint64_t checksumSpan(const uint8_t* base, const ChecksumSpan& span) {
  const ChecksumKind kind = checksumKind();
  const uint8_t* src = base == nullptr
                           ? reinterpret_cast<const uint8_t*>(static_cast<uintptr_t>(span.src))
                           : base + span.src;
  uint64_t sum = 0;
  for (uint64_t plane = 0; plane < span.planes; ++plane) {
    for (uint64_t row = 0; row < span.rows; ++row) {
      sum += run(kind, src + plane * span.src_plane_pitch + row * span.src_pitch, span.row_bytes,
                 span.dst_buffer,
                 span.dst_offset + plane * span.dst_plane_pitch + row * span.dst_pitch);
    }
  }
  return sum;
}

HostChecksumPlan::HostChecksumPlan(std::vector<ChecksumSpan> spans) : spans_(std::move(spans)) {
  std::stable_sort(spans_.begin(), spans_.end(),
                   [](const ChecksumSpan& a, const ChecksumSpan& b) { return a.src < b.src; });
  auto sideBySide = [](const ChecksumSpan& first, const ChecksumSpan& s) {
    return first.rows * first.planes > 1 && s.rows == first.rows && s.planes == first.planes &&
           s.src_pitch == first.src_pitch && s.src_plane_pitch == first.src_plane_pitch &&
           s.src - first.src < first.src_pitch;
  };
  for (size_t i = 0; i < spans_.size();) {
    size_t end = i + 1;
    while (end < spans_.size() && sideBySide(spans_[i], spans_[end]))
      ++end;
    group_ends_.push_back(end);
    i = end;
  }
}

void HostChecksumPlan::accumulate(const uint8_t* base, const std::vector<uint8_t>& active,
                                  std::vector<uint64_t>& sums) const {
  const ChecksumKind kind = checksumKind();
  auto on = [&](const ChecksumSpan& s) { return s.output < active.size() && active[s.output]; };
  size_t begin = 0;
  for (const size_t end : group_ends_) {
    const ChecksumSpan& first = spans_[begin];
    if (end - begin == 1) {
      if (on(first)) sums[first.output] += checksumSpan(base, first);
      begin = end;
      continue;
    }
    for (uint64_t plane = 0; plane < first.planes; ++plane) {
      for (uint64_t row = 0; row < first.rows; ++row) {
        for (size_t i = begin; i < end; ++i) {
          const ChecksumSpan& s = spans_[i];
          if (!on(s)) continue;
          const uint64_t at = s.src + plane * s.src_plane_pitch + row * s.src_pitch;
          const uint8_t* src = base == nullptr
                                   ? reinterpret_cast<const uint8_t*>(static_cast<uintptr_t>(at))
                                   : base + at;
          sums[s.output] += run(kind, src, s.row_bytes, s.dst_buffer,
                                s.dst_offset + plane * s.dst_plane_pitch + row * s.dst_pitch);
        }
      }
    }
    begin = end;
  }
}

void accumulateChecksums(const uint8_t* base, const std::vector<ChecksumSpan>& spans,
                         const std::vector<uint8_t>& active, std::vector<uint64_t>& sums) {
  for (const ChecksumSpan& s : spans) {
    if (s.output >= active.size() || active[s.output] == 0) continue;
    sums[s.output] += checksumSpan(base, s);
  }
}

}  // namespace wsync
