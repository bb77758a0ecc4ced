// wsync's shard checksum: a 64-bit sum, computed the same way on the CPU (here) and on a GPU
// (kernels/checksum_kernels.h), over the bytes a version delivers to a rollout rank, keyed by where
// each byte lands. The function is defined in checksum_math.h; docs/checksums.md says why this
// function and what it detects.
//
// Properties the runtime relies on:
//  - additive: the checksum of a set of runs is the sum (mod 2^64) of the runs' checksums, in any
//    order, so senders add up what they send to a rank, receivers what they received from each
//    sender, and a GPU reduces in parallel;
//  - a run is identified by where it lands (destination buffer and byte offset), not by where its
//    bytes come from: a sender's strided source region and the receiver's destination region give
//    the same checksum when the bytes arrived intact;
//  - any change of one 8-byte word of a run changes the checksum (mix is a bijection); other
//    changes go undetected with probability about 2^-64.
// Thread-safety: every function is pure (reads its arguments only) and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace wsync {

// `planes` x `rows` runs of `row_bytes` bytes that land in destination buffer `dst_buffer`: run
// (plane, row) starts at src + plane * src_plane_pitch + row * src_pitch in the memory read and
// lands at byte dst_offset + plane * dst_plane_pitch + row * dst_pitch of the buffer.
struct ChecksumSpan {
  uint64_t src = 0;  // an address, or an offset from the base pointer the caller passes
  uint64_t row_bytes = 0;
  uint64_t rows = 1;
  uint64_t planes = 1;
  uint64_t src_pitch = 0;  // bytes between runs (rows > 1)
  uint64_t src_plane_pitch = 0;
  uint64_t dst_buffer = 0;
  uint64_t dst_offset = 0;
  uint64_t dst_pitch = 0;
  uint64_t dst_plane_pitch = 0;
  uint32_t output = 0;      // which sum the span adds to (a rank, in the runtime)
  uint32_t reserved = 0;    // zero
  uint64_t first_tile = 0;  // device kernels only (kernels/checksum_kernels.h)
};

// How the host computes a run's checksum (the result is the same for every kind).
enum class ChecksumKind {
  kScalar,  // one word at a time
  kAvx2,    // 4 words at a time (64-bit multiplies from 32-bit ones)
  kAvx512,  // 8 words at a time (AVX-512DQ 64-bit multiplies)
};
// The fastest kind this CPU has.
ChecksumKind checksumKind();
const char* checksumKindName(ChecksumKind kind);

// The checksum of `bytes` bytes at `data` that land at byte `dst_offset` of destination buffer
// `dst_buffer` (one run). `data` may be null when bytes is 0.
uint64_t checksumRun(const void* data, uint64_t bytes, uint64_t dst_buffer, uint64_t dst_offset);
// The same with a given kind (a kind the CPU lacks falls back to the fastest it has). For tests and
// benchmarks.
uint64_t checksumRunWith(ChecksumKind kind, const void* data, uint64_t bytes, uint64_t dst_buffer,
                         uint64_t dst_offset);

// The checksum of every run of `span`, reading base + span.src (base null: span.src is an
// address).
uint64_t checksumSpan(const uint8_t* base, const ChecksumSpan& span);

// Adds the checksum of every span whose output is active (output < active.size() and
// active[output] != 0) to sums[output]; sums.size() >= active.size().
void accumulateChecksums(const uint8_t* base, const std::vector<ChecksumSpan>& spans,
                         const std::vector<uint8_t>& active, std::vector<uint64_t>& sums);

// accumulateChecksums() for spans summed every version: the order is planned once so that memory
// is read in address order. Spans are sorted by source; spans whose runs lie side by side (the
// same rows, planes and pitches, each starting within the first one's first pitch: the column
// blocks of one row-major region that go to different ranks) are summed run by run across the
// group, so that region is read once, front to back, instead of once per block with gaps.
class HostChecksumPlan {
 public:
  HostChecksumPlan() = default;
  explicit HostChecksumPlan(std::vector<ChecksumSpan> spans);
  void accumulate(const uint8_t* base, const std::vector<uint8_t>& active,
                  std::vector<uint64_t>& sums) const;
  const std::vector<ChecksumSpan>& spans() const { return spans_; }

 private:
  std::vector<ChecksumSpan> spans_;  // by source address
  std::vector<size_t> group_ends_;   // spans_[previous end, end) are one group
};

}  // namespace wsync
