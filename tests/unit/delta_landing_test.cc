// Where delta patches land (src/delta/delta_landing.h): the parts of a rank's landing area fit the
// area the rank exposes and do not overlap; a pair area reads back what was written; a stale or
// foreign header reads as "no patches"; a malformed area is PROTOCOL, never an out-of-bounds read.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "delta/delta_landing.h"

namespace wsync::delta {
namespace {

TEST(DeltaLanding, PartsFitTheAreaAndDoNotOverlap) {
  const uint32_t ppm = shareToPpm(0.25);
  EXPECT_EQ(ppm, 250000u);
  const std::vector<uint64_t> dense = {1000000, 0, 12345, 7};
  const uint64_t slot = std::accumulate(dense.begin(), dense.end(), uint64_t{0});
  const std::vector<LandingPart> parts = landingParts(dense, ppm);
  ASSERT_EQ(parts.size(), dense.size());
  EXPECT_EQ(parts[1].bytes, 0u);
  uint64_t end = 0;
  for (size_t t = 0; t < parts.size(); ++t) {
    if (parts[t].bytes == 0) continue;
    EXPECT_GE(parts[t].offset, end);
    EXPECT_EQ(parts[t].offset % kPartAlignment, 0u);
    EXPECT_GE(parts[t].bytes, dense[t] / 4 + kPartAllowanceBytes);
    end = parts[t].offset + parts[t].bytes;
  }
  EXPECT_LE(end, landingAreaBytes(slot, static_cast<int>(dense.size()), ppm));
}

TEST(DeltaLanding, PairAreaRoundTrip) {
  std::vector<uint8_t> area(4096, 0);
  const std::vector<uint8_t> p1 = {1, 2, 3}, p2 = {9, 8, 7, 6, 5};
  PairAreaWriter w(area.data(), area.size(), 3, 42);
  ASSERT_TRUE(w.fits(p1.size()));
  w.add(1, p1.data(), p1.size());
  w.add(4, p2.data(), p2.size());
  const uint64_t bytes = w.finish();
  EXPECT_EQ(bytes, kPairHeaderBytes + p1.size() + p2.size() + 2 * kPairEntryBytes);
  Result<PairArea> read = readPairArea(area.data(), area.size(), 3, 42, 5);
  ASSERT_TRUE(read.isOk()) << read.status().toString();
  ASSERT_EQ(read->entries.size(), 2u);
  EXPECT_EQ(read->entries[0].op, 1u);
  EXPECT_EQ(read->entries[1].op, 4u);
  EXPECT_EQ(std::memcmp(read->patches[1], p2.data(), p2.size()), 0);
  // Another version or trainer: no patches (those ops came dense).
  EXPECT_TRUE(readPairArea(area.data(), area.size(), 3, 43, 5)->entries.empty());
  EXPECT_TRUE(readPairArea(area.data(), area.size(), 2, 42, 5)->entries.empty());
  // An op the pair does not have: PROTOCOL.
  EXPECT_EQ(readPairArea(area.data(), area.size(), 3, 42, 4).status().code(), WSYNC_ERR_PROTOCOL);
  // A part too small for the area it claims: PROTOCOL.
  EXPECT_EQ(readPairArea(area.data(), bytes - 1, 3, 42, 5).status().code(), WSYNC_ERR_PROTOCOL);
}

TEST(DeltaLanding, FullPartRefusesMorePatches) {
  std::vector<uint8_t> area(kPairHeaderBytes + 10 + kPairEntryBytes, 0);
  PairAreaWriter w(area.data(), area.size(), 0, 1);
  EXPECT_TRUE(w.fits(10));
  EXPECT_FALSE(w.fits(11));
}

TEST(DeltaLanding, CorruptedEntriesAreProtocolErrors) {
  std::vector<uint8_t> area(256, 0);
  const std::vector<uint8_t> p = {1, 2, 3, 4};
  PairAreaWriter w(area.data(), area.size(), 0, 7);
  w.add(0, p.data(), p.size());
  w.add(1, p.data(), p.size());
  const uint64_t bytes = w.finish();
  for (size_t at = 16; at < bytes; ++at) {  // past the magic, trainer and version
    std::vector<uint8_t> bad = area;
    bad[at] ^= 0xFF;
    Result<PairArea> read = readPairArea(bad.data(), bad.size(), 0, 7, 2);
    if (!read.isOk()) {
      EXPECT_EQ(read.status().code(), WSYNC_ERR_PROTOCOL);
      continue;
    }
    for (size_t e = 0; e < read->entries.size(); ++e) {  // whatever it read lies in the area
      EXPECT_GE(read->patches[e], bad.data());
      EXPECT_LE(read->patches[e] + read->entries[e].patch_bytes, bad.data() + bad.size());
    }
  }
}

}  // namespace
}  // namespace wsync::delta
