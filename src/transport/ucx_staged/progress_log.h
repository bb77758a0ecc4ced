// Private to the staged UCX backend: the format of the progress logs (early landing) that targets
// expose (staged_exposed_memory.cc) and writers fill (staged_chunk_ring.cc), and the descriptor
// extension that names them.
#pragma once

#include <cstdint>
#include <vector>

namespace wsync::staged_internal {

// Progress logs (early landing). A staged target exposes, next to each landing area, one log per
// writer rank below the log count: a header whose first word is the writer's sealed record count,
// then records of the writes it delivered since the round began. A writer appends the records of
// its completed writes after a fence that orders them behind those writes' bytes, then (after a
// second fence) the new count; the target moves each reported write to the device as soon as it
// reads the count. Writers that cannot log (rank beyond the log count, a full log) are landed by
// land() as before.
constexpr uint64_t kLogHeaderBytes = 64;
constexpr uint64_t kRecordWords = 4;  // remote offset, remote pitch, row bytes, rows
constexpr uint64_t kRecordBytes = kRecordWords * sizeof(uint64_t);
constexpr uint8_t kProgressVersion = 1;

inline uint64_t logBytes(uint32_t records) {
  return kLogHeaderBytes + records * kRecordBytes;
}

// A record count as written into a log header: the count in the low word, its complement in the
// high word, so that a header read while it changes (or zeroed) never passes as a count.
inline uint64_t sealCount(uint32_t count) {
  return (static_cast<uint64_t>(~count) << 32) | count;
}
inline bool unsealCount(uint64_t word, uint32_t& count) {
  count = static_cast<uint32_t>(word);
  return static_cast<uint32_t>(word >> 32) == ~count;
}

// The descriptor extension of a staged target with progress logs: layout and the logs' UCX
// descriptor.
struct ProgressLayout {
  uint32_t writers = 0;
  uint32_t records = 0;
  std::vector<uint8_t> log_descriptor;
};

std::vector<uint8_t> encodeProgressLayout(const ProgressLayout& p);

// False for an absent or malformed extension (the target is then landed by land() only).
bool decodeProgressLayout(const std::vector<uint8_t>& bytes, ProgressLayout& p);

}  // namespace wsync::staged_internal
