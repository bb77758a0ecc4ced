// Where delta patches land (issue 22, docs/delta.md): each rollout rank on a delta-capable path
// exposes one landing area; each trainer that writes it gets its own part, sized from the dense
// bytes it sends the rank, and per version writes one "pair area" there: a header, the patches
// (delta_patch.h) back to back, then one entry per patched write op. Write ops without an entry go
// dense into the slot as without delta versions.
//
// Both sides derive the parts from the plan: the coordinator (from the whole plan) tells each
// trainer its part (PeerInfo), the rollout rank computes the same parts from its own plan view
// (the write ops it receives, by sending trainer). A version's patches are read once every trainer
// sent (at Verify), and the next version's are written only after this one was delivered, so one
// area per rank serves every version and slot.
//
// Pair area, little-endian:
//   header   32 bytes: u32 magic "WSDA", u32 trainer, u64 version, u32 num_entries, u32 0,
//            u64 total bytes (header + patches + entries)
//   patches  each entry's patch, in entry order
//   entries  num_entries x 16 bytes: u32 op (index among the pair's write ops, in plan order,
//            strictly increasing), u32 0, u64 patch bytes
// A rank reads its part only when Go gave its replica a base version; a header whose magic,
// trainer or version do not match means "no patches from this trainer" (every op dense), so a
// lost or stale area can only leave stale bytes in the slot, which the checksums then catch.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"

namespace wsync::delta {

inline constexpr uint32_t kPairMagic = 0x41445357;  // "WSDA"
inline constexpr size_t kPairHeaderBytes = 32;
inline constexpr size_t kPairEntryBytes = 16;
// Every trainer's part gets this much on top of its share of the dense bytes (the pair header,
// entries and the patches' own headers and chunk tables), and parts start 64-byte aligned.
inline constexpr uint64_t kPartAllowanceBytes = 4096;
inline constexpr uint64_t kPartAlignment = 64;

// `share` as the protocol carries it (millionths, rounded; at least 1) and back.
uint32_t shareToPpm(double share);
double shareFromPpm(uint32_t ppm);

// The landing area a rank exposes: enough for `num_trainers` parts when the dense bytes it
// receives are at most `slot_bytes`.
uint64_t landingAreaBytes(uint64_t slot_bytes, int num_trainers, uint32_t share_ppm);

struct LandingPart {
  uint64_t offset = 0;
  uint64_t bytes = 0;  // 0: the trainer sends the rank nothing by write ops
};
// The parts of one rank's area: `dense_bytes[t]` is what trainer t writes the rank per version
// (destination dtype). Parts follow each other in trainer order.
std::vector<LandingPart> landingParts(const std::vector<uint64_t>& dense_bytes, uint32_t share_ppm);

struct PairEntry {
  uint32_t op = 0;
  uint64_t patch_bytes = 0;
};

// A pair area being built by a trainer into `out` (capacity `capacity` bytes).
class PairAreaWriter {
 public:
  PairAreaWriter(uint8_t* out, uint64_t capacity, uint32_t trainer, uint64_t version);
  // Room for one more patch of `patch_bytes` (with its entry)?
  bool fits(uint64_t patch_bytes) const;
  // Appends op `op`'s patch (fits() must hold; ops increasing).
  void add(uint32_t op, const uint8_t* patch, uint64_t patch_bytes);
  // Writes the entries and the header; returns the area's bytes (the header alone without
  // patches).
  uint64_t finish();
  size_t entries() const { return entries_.size(); }

 private:
  uint8_t* out_;
  uint64_t capacity_;
  uint32_t trainer_;
  uint64_t version_;
  std::vector<PairEntry> entries_;
  uint64_t used_ = kPairHeaderBytes;  // header + patches so far
};

// A pair area as read by a rank.
struct PairArea {
  std::vector<PairEntry> entries;
  std::vector<const uint8_t*> patches;  // per entry
};
// Reads the area at `data` (`bytes` long, the part's size) from `trainer` for `version`:
// no header for them -> an empty area; a malformed one (entries out of order, an op at or past
// `num_ops`, sizes beyond the part) -> PROTOCOL naming what is wrong.
Result<PairArea> readPairArea(const uint8_t* data, uint64_t bytes, uint32_t trainer,
                              uint64_t version, size_t num_ops);

}  // namespace wsync::delta
