// The per-word arithmetic of wsync's shard checksum (checksum/checksum.h), shared by the host code
// and the CUDA kernel (kernels/checksum_kernels.cu) so that both compute the same function. C++17,
// no includes beyond <cstdint>: nvcc compiles it.
//
// The checksum of a version's bytes on one rollout rank is a sum, mod 2^64, with one term per
// 8-byte word of every destination run (a row of a write op's region, a broadcast span):
//
//   term(word, buffer b, byte offset p) = mix(word XOR key(b, p))
//
// where `word` is the little-endian value of the 8 bytes of the run starting at its byte 8i
// (zero-padded past the run's end), and (b, p) is where that word's first byte lands: destination
// buffer b, byte p from the buffer's start (p = the run's destination offset + 8i). Words are
// counted from each run's start, so sender and receiver split a run identically whatever the
// alignment of their memory. mix is a bijection of 64-bit integers (the SplitMix64 finalizer,
// Stafford's "mix13"), so changing any one word changes the sum; keys make the same bytes at
// another place a different term.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define WSYNC_CHECKSUM_HD __host__ __device__ __forceinline__
#else
#define WSYNC_CHECKSUM_HD inline
#endif

namespace wsync::checksum_math {

inline constexpr uint64_t kMixMul1 = 0xbf58476d1ce4e5b9ull;
inline constexpr uint64_t kMixMul2 = 0x94d049bb133111ebull;
// Odd, so multiplying keys by it is a bijection: distinct positions keep distinct keys.
inline constexpr uint64_t kKeyMul = 0x9e3779b97f4a7c15ull;
// Destination byte offsets below 2^40 (1 TiB per buffer) and buffer indices below 2^24 give
// every position its own key; beyond that the function is still defined (it wraps mod 2^64).
inline constexpr int kKeyBufferShift = 40;

// SplitMix64's finalizer: a bijection of uint64_t with full avalanche.
WSYNC_CHECKSUM_HD uint64_t mix(uint64_t x) {
  x = (x ^ (x >> 30)) * kMixMul1;
  x = (x ^ (x >> 27)) * kMixMul2;
  return x ^ (x >> 31);
}

// The key of destination position (buffer, byte): linear in the byte offset, so the keys of a
// run's consecutive words step by keyStep().
WSYNC_CHECKSUM_HD uint64_t key(uint64_t buffer, uint64_t byte) {
  return ((buffer << kKeyBufferShift) + byte) * kKeyMul;
}
WSYNC_CHECKSUM_HD uint64_t keyStep() {
  return 8 * kKeyMul;
}

WSYNC_CHECKSUM_HD uint64_t term(uint64_t word, uint64_t word_key) {
  return mix(word ^ word_key);
}

}  // namespace wsync::checksum_math
