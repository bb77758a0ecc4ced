#include "common/fast_copy.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string_view>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace wsync {
namespace {

// Rows shorter than this are copied with memcpy even in a large copy: the unaligned head and tail
// of each row would be most of it.
constexpr size_t kStreamMinRowBytes = 256;

#if defined(__x86_64__)
bool cpuHas(HostCopyKind kind) {
  switch (kind) {
    case HostCopyKind::kStreamAvx512:
      return __builtin_cpu_supports("avx512f");
    case HostCopyKind::kStreamAvx2:
      return __builtin_cpu_supports("avx2");
    case HostCopyKind::kMemcpy:
      return true;
  }
  return false;
}

// One row: memcpy up to a 64-byte aligned target, 256-byte blocks of streaming stores, then
// 64-byte ones, memcpy for the tail. Unaligned loads (the source's alignment is the caller's).
__attribute__((target("avx512f"))) void streamRowAvx512(uint8_t* d, const uint8_t* s, size_t n) {
  const size_t head = (64 - (reinterpret_cast<uintptr_t>(d) & 63)) & 63;
  if (head != 0) {
    std::memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
  }
  for (; n >= 256; n -= 256, d += 256, s += 256) {
    const __m512i a = _mm512_loadu_si512(s);
    const __m512i b = _mm512_loadu_si512(s + 64);
    const __m512i c = _mm512_loadu_si512(s + 128);
    const __m512i e = _mm512_loadu_si512(s + 192);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d), a);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d + 64), b);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d + 128), c);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d + 192), e);
  }
  for (; n >= 64; n -= 64, d += 64, s += 64)
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d), _mm512_loadu_si512(s));
  if (n != 0) std::memcpy(d, s, n);
}

// The same with 32-byte stores, 128-byte blocks.
__attribute__((target("avx2"))) void streamRowAvx2(uint8_t* d, const uint8_t* s, size_t n) {
  const size_t head = (32 - (reinterpret_cast<uintptr_t>(d) & 31)) & 31;
  if (head != 0) {
    std::memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
  }
  for (; n >= 128; n -= 128, d += 128, s += 128) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 32));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 64));
    const __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + 96), e);
  }
  for (; n >= 32; n -= 32, d += 32, s += 32) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)));
  }
  if (n != 0) std::memcpy(d, s, n);
}
#else
bool cpuHas(HostCopyKind kind) {
  return kind == HostCopyKind::kMemcpy;
}
#endif

// `wanted`, or the widest kind the CPU has when it lacks `wanted`.
HostCopyKind usable(HostCopyKind wanted) {
  if (cpuHas(wanted)) return wanted;
  if (cpuHas(HostCopyKind::kStreamAvx512)) return HostCopyKind::kStreamAvx512;
  if (cpuHas(HostCopyKind::kStreamAvx2)) return HostCopyKind::kStreamAvx2;
  return HostCopyKind::kMemcpy;
}

std::atomic<HostCopyKind>& chosenKind() {
  static std::atomic<HostCopyKind> kind{usable(HostCopyKind::kStreamAvx512)};
  return kind;
}

}  // namespace

HostCopyKind hostCopyKind() {
  return chosenKind().load(std::memory_order_relaxed);
}

void preferHostCopy(HostCopyKind wanted) {
  chosenKind().store(usable(wanted), std::memory_order_relaxed);
}

const char* hostCopyKindName(HostCopyKind kind) {
  switch (kind) {
    case HostCopyKind::kMemcpy:
      return "memcpy";
    case HostCopyKind::kStreamAvx2:
      return "avx2";
    case HostCopyKind::kStreamAvx512:
      return "avx512";
  }
  return "?";
}

void copy2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
            size_t rows) {
  copy2dWith(hostCopyKind(), dst, dst_pitch, src, src_pitch, row_bytes, rows);
}

void copy2dWith(HostCopyKind kind, void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                size_t row_bytes, size_t rows) {
  if (rows == 0 || row_bytes == 0) return;
  if (rows == 1 || (dst_pitch == row_bytes && src_pitch == row_bytes)) {
    row_bytes *= rows;  // one contiguous run
    rows = 1;
  }
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  kind = usable(kind);
  if (kind == HostCopyKind::kMemcpy || row_bytes < kStreamMinRowBytes ||
      row_bytes * rows < kStreamMinBytes) {
    for (size_t i = 0; i < rows; ++i)
      std::memcpy(d + i * dst_pitch, s + i * src_pitch, row_bytes);
    return;
  }
#if defined(__x86_64__)
  if (kind == HostCopyKind::kStreamAvx512) {
    for (size_t i = 0; i < rows; ++i)
      streamRowAvx512(d + i * dst_pitch, s + i * src_pitch, row_bytes);
  } else {
    for (size_t i = 0; i < rows; ++i)
      streamRowAvx2(d + i * dst_pitch, s + i * src_pitch, row_bytes);
  }
  _mm_sfence();  // streaming stores are weakly ordered: order them before what follows
#endif
}

void copy2dInterleaved(const Copy2d* copies, size_t n) {
  if (n == 0) return;
  if (n == 1) {
    const Copy2d& c = copies[0];
    copy2d(c.dst, c.dst_pitch, c.src, c.src_pitch, c.row_bytes, c.rows);
    return;
  }
  const HostCopyKind kind = hostCopyKind();
  size_t rows = 0;
  for (size_t i = 0; i < n; ++i)
    rows = std::max(rows, copies[i].rows);
  bool streamed = false;
  for (size_t r = 0; r < rows; ++r) {
    for (size_t i = 0; i < n; ++i) {
      const Copy2d& c = copies[i];
      if (r >= c.rows) continue;
      auto* d = static_cast<uint8_t*>(c.dst) + r * c.dst_pitch;
      const auto* s = static_cast<const uint8_t*>(c.src) + r * c.src_pitch;
      if (kind == HostCopyKind::kMemcpy || c.row_bytes < kStreamMinRowBytes ||
          c.row_bytes * c.rows < kStreamMinBytes) {
        std::memcpy(d, s, c.row_bytes);
        continue;
      }
      streamed = true;
#if defined(__x86_64__)
      if (kind == HostCopyKind::kStreamAvx512) {
        streamRowAvx512(d, s, c.row_bytes);
      } else {
        streamRowAvx2(d, s, c.row_bytes);
      }
#endif
    }
  }
#if defined(__x86_64__)
  if (streamed) _mm_sfence();
#else
  (void)streamed;
#endif
}

}  // namespace wsync
