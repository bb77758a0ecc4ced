// The shard checksum (src/checksum/checksum.h): every host kind against a byte-by-byte reference
// written from the definition, additivity over runs and spans, detection of any one-bit change,
// and position keying.
#include "checksum/checksum.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace wsync {
namespace {

// The definition (checksum_math.h), byte by byte: words assembled with shifts, keys from scratch.
uint64_t referenceMix(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
uint64_t referenceRun(const uint8_t* p, uint64_t bytes, uint64_t buffer, uint64_t offset) {
  uint64_t sum = 0;
  for (uint64_t start = 0; start < bytes; start += 8) {
    uint64_t word = 0;
    for (uint64_t b = 0; b < 8 && start + b < bytes; ++b)
      word |= static_cast<uint64_t>(p[start + b]) << (8 * b);
    const uint64_t key = ((buffer << 40) + offset + start) * 0x9e3779b97f4a7c15ull;
    sum += referenceMix(word ^ key);
  }
  return sum;
}

std::vector<uint8_t> randomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v)
    b = static_cast<uint8_t>(rng());
  return v;
}

constexpr ChecksumKind kKinds[] = {ChecksumKind::kScalar, ChecksumKind::kAvx2,
                                   ChecksumKind::kAvx512};

TEST(Checksum, KnownAnswer) {
  // Pins the function: a change of constants or word order fails here (and would break a job of
  // mixed library versions).
  std::vector<uint8_t> bytes(19);
  for (size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<uint8_t>(i * 37 + 1);
  EXPECT_EQ(checksumRun(bytes.data(), bytes.size(), 3, 1000),
            referenceRun(bytes.data(), bytes.size(), 3, 1000));
  EXPECT_EQ(checksumRun(bytes.data(), bytes.size(), 3, 1000), 0x8b1291138b0ecec6ull);
  EXPECT_EQ(checksumRun(nullptr, 0, 0, 0), 0u);
}

TEST(Checksum, EveryKindMatchesTheReference) {
  const std::vector<uint8_t> data = randomBytes(4096 + 64, 1);
  std::mt19937 rng(2);
  for (int trial = 0; trial < 400; ++trial) {
    const uint64_t start = rng() % 64;  // any alignment
    const uint64_t bytes = trial < 200 ? static_cast<uint64_t>(trial) : rng() % 4096;
    const uint64_t buffer = rng() % 5000;
    const uint64_t offset = (static_cast<uint64_t>(rng()) << 8) ^ rng();
    const uint64_t want = referenceRun(data.data() + start, bytes, buffer, offset);
    for (ChecksumKind kind : kKinds) {
      EXPECT_EQ(checksumRunWith(kind, data.data() + start, bytes, buffer, offset), want)
          << checksumKindName(kind) << " start " << start << " bytes " << bytes;
    }
  }
}

TEST(Checksum, RunsSplitAtWordBoundariesAdd) {
  const std::vector<uint8_t> data = randomBytes(1003, 3);
  const uint64_t whole = checksumRun(data.data(), data.size(), 7, 4096);
  for (uint64_t cut = 0; cut <= data.size(); cut += 8) {
    EXPECT_EQ(checksumRun(data.data(), cut, 7, 4096) +
                  checksumRun(data.data() + cut, data.size() - cut, 7, 4096 + cut),
              whole)
        << "cut at " << cut;
  }
}

TEST(Checksum, AStridedSourceAndAPackedDestinationAgree) {
  // A sender reads a 3-D region with its own pitches; the receiver the same runs packed at its
  // destination: both name each run by where it lands, so the sums agree.
  const uint64_t row = 37, rows = 5, planes = 3;
  const std::vector<uint8_t> source = randomBytes(planes * rows * 64 + 64, 4);
  std::vector<uint8_t> dest(planes * rows * row);
  for (uint64_t p = 0; p < planes; ++p)
    for (uint64_t r = 0; r < rows; ++r)
      for (uint64_t b = 0; b < row; ++b)
        dest[(p * rows + r) * row + b] = source[5 + p * rows * 64 + r * 64 + b];
  ChecksumSpan sender{};
  sender.src = 5;
  sender.row_bytes = row;
  sender.rows = rows;
  sender.planes = planes;
  sender.src_pitch = 64;
  sender.src_plane_pitch = rows * 64;
  sender.dst_buffer = 2;
  sender.dst_offset = 100;
  sender.dst_pitch = row;
  sender.dst_plane_pitch = rows * row;
  ChecksumSpan receiver = sender;
  receiver.src = 0;
  receiver.src_pitch = row;
  receiver.src_plane_pitch = rows * row;
  const uint64_t sent = checksumSpan(source.data(), sender);
  EXPECT_EQ(checksumSpan(dest.data(), receiver), sent);
  uint64_t by_runs = 0;
  for (uint64_t p = 0; p < planes; ++p)
    for (uint64_t r = 0; r < rows; ++r)
      by_runs +=
          referenceRun(dest.data() + (p * rows + r) * row, row, 2, 100 + (p * rows + r) * row);
  EXPECT_EQ(by_runs, sent);
  // An absolute address (null base) reads the same bytes.
  ChecksumSpan absolute = receiver;
  absolute.src = reinterpret_cast<uintptr_t>(dest.data());
  EXPECT_EQ(checksumSpan(nullptr, absolute), sent);
}

TEST(Checksum, AnyOneBitFlipChangesIt) {
  std::vector<uint8_t> data = randomBytes(77, 5);
  for (ChecksumKind kind : kKinds) {
    const uint64_t clean = checksumRunWith(kind, data.data(), data.size(), 1, 24);
    for (size_t byte = 0; byte < data.size(); ++byte) {
      for (int bit = 0; bit < 8; ++bit) {
        data[byte] ^= static_cast<uint8_t>(1u << bit);
        EXPECT_NE(checksumRunWith(kind, data.data(), data.size(), 1, 24), clean)
            << checksumKindName(kind) << " byte " << byte << " bit " << bit;
        data[byte] ^= static_cast<uint8_t>(1u << bit);
      }
    }
  }
}

TEST(Checksum, TheSameBytesElsewhereDiffer) {
  const std::vector<uint8_t> zeros(64, 0);
  const uint64_t at = checksumRun(zeros.data(), zeros.size(), 0, 0);
  EXPECT_NE(checksumRun(zeros.data(), zeros.size(), 0, 8), at);  // another offset
  EXPECT_NE(checksumRun(zeros.data(), zeros.size(), 1, 0), at);  // another buffer
  // Two words swapped.
  std::vector<uint8_t> data = randomBytes(16, 6);
  const uint64_t before = checksumRun(data.data(), 16, 0, 0);
  std::swap_ranges(data.begin(), data.begin() + 8, data.begin() + 8);
  EXPECT_NE(checksumRun(data.data(), 16, 0, 0), before);
}

TEST(Checksum, AccumulateAddsActiveOutputsOnly) {
  const std::vector<uint8_t> data = randomBytes(256, 7);
  std::vector<ChecksumSpan> spans(3);
  for (uint32_t i = 0; i < 3; ++i) {
    spans[i].src = 64 * i;
    spans[i].row_bytes = 50 + i;
    spans[i].dst_buffer = i;
    spans[i].output = i % 2;  // outputs 0, 1, 0
  }
  std::vector<uint64_t> sums(2, 0);
  accumulateChecksums(data.data(), spans, {1, 0}, sums);
  EXPECT_EQ(sums[0], checksumSpan(data.data(), spans[0]) + checksumSpan(data.data(), spans[2]));
  EXPECT_EQ(sums[1], 0u);
}

TEST(Checksum, APlannedOrderGivesTheSameSums) {
  // Column blocks of one row-major region (side by side: summed run by run across the group),
  // 1-D spans, a 3-D span, overlapping sources, inactive outputs: the same sums as span by span.
  const std::vector<uint8_t> data = randomBytes(1 << 16, 8);
  std::vector<ChecksumSpan> spans;
  for (uint32_t block = 0; block < 4; ++block) {  // a 20 x 400-byte region cut into 4 columns
    ChecksumSpan s;
    s.src = 1000 + 100 * block;
    s.row_bytes = 100;
    s.rows = 20;
    s.src_pitch = 400;
    s.dst_buffer = block;
    s.dst_pitch = 100;
    s.output = block % 3;
    spans.push_back(s);
  }
  ChecksumSpan flat;
  flat.src = 30000;
  flat.row_bytes = 777;
  flat.output = 1;
  spans.insert(spans.begin(), flat);
  ChecksumSpan cube = spans[2];
  cube.src = 40000;
  cube.planes = 3;
  cube.src_plane_pitch = 20 * 400 + 8;
  cube.dst_plane_pitch = 2000;
  spans.push_back(cube);
  spans.push_back(spans[3]);  // the same source twice (two ranks get the same bytes)
  spans.back().dst_buffer = 9;
  for (const std::vector<uint8_t>& active :
       {std::vector<uint8_t>{1, 1, 1}, std::vector<uint8_t>{1, 0, 1}}) {
    std::vector<uint64_t> want(3, 0), got(3, 0);
    accumulateChecksums(data.data(), spans, active, want);
    HostChecksumPlan(spans).accumulate(data.data(), active, got);
    EXPECT_EQ(got, want);
  }
}

}  // namespace
}  // namespace wsync
