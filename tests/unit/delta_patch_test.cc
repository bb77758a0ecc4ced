// Delta patches (src/delta/delta_patch.h): the next version rebuilt from the base plus the patch
// equals the next version byte for byte, for random changes of every density, element size and
// chunk size; malformed patches are refused naming the chunk, and refused patches write nothing.
#include "delta/delta_patch.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace wsync::delta {
namespace {

std::vector<uint8_t> randomBytes(size_t n, std::mt19937_64& rng) {
  std::vector<uint8_t> v(n);
  for (auto& b : v)
    b = static_cast<uint8_t>(rng());
  return v;
}

// `next` = `base` with about `share` of its elements changed (a changed element differs in at
// least one byte).
std::vector<uint8_t> changed(const std::vector<uint8_t>& base, int e, double share,
                             std::mt19937_64& rng) {
  std::vector<uint8_t> next = base;
  std::bernoulli_distribution pick(share);
  for (size_t i = 0; i < base.size() / e; ++i)
    if (pick(rng)) next[i * e + rng() % e] ^= static_cast<uint8_t>(1 + rng() % 255);
  return next;
}

TEST(DeltaPatch, RoundTripsEveryDensityElementSizeAndChunkSize) {
  std::mt19937_64 rng(7);
  for (int e : {1, 2, 4, 8})
    for (int64_t chunk_bytes : {8, 100, 4096, 65536 * 8})
      for (int64_t n : {0, 1, 1000, 20011})
        for (double share : {0.0, 0.001, 0.03, 0.3, 1.0}) {
          const PatchShape shape = shapeFor(n, e, chunk_bytes);
          const std::vector<uint8_t> base = randomBytes(n * e, rng);
          const std::vector<uint8_t> next = changed(base, e, share, rng);
          std::vector<uint8_t> patch;
          PatchStats st;
          ASSERT_TRUE(encodePatch(shape, base.data(), next.data(), &patch, &st).isOk());
          EXPECT_EQ(st.patch_bytes, static_cast<int64_t>(patch.size()));
          EXPECT_LE(st.patch_bytes, maxPatchBytes(shape));
          std::vector<uint8_t> out(n * e, 0xee);
          Status s = applyPatch(shape, patch.data(), patch.size(), base.data(), out.data());
          ASSERT_TRUE(s.isOk()) << s.toString();
          ASSERT_EQ(out, next) << "e " << e << " chunk " << chunk_bytes << " n " << n << " share "
                               << share;
          std::vector<uint8_t> in_place = base;  // the rollout's free slot holding the base
          ASSERT_TRUE(
              applyPatch(shape, patch.data(), patch.size(), in_place.data(), in_place.data())
                  .isOk());
          ASSERT_EQ(in_place, next);
        }
}

TEST(DeltaPatch, PicksTheSmallestFormPerChunk) {
  // 4 chunks of 2048 bf16: unchanged, 3 changed (index list), 600 changed (bitmap), all changed.
  const PatchShape shape = shapeFor(4 * 2048, 2, 4096);
  std::vector<uint16_t> base(4 * 2048, 0), next(4 * 2048, 0);
  for (int i = 0; i < 3; ++i)
    next[2048 + i * 100] = 1;
  for (int i = 0; i < 600; ++i)
    next[2 * 2048 + i * 3] = 1;
  for (int i = 0; i < 2048; ++i)
    next[3 * 2048 + i] = 1;
  std::vector<uint8_t> patch;
  PatchStats st;
  ASSERT_TRUE(encodePatch(shape, base.data(), next.data(), &patch, &st).isOk());
  EXPECT_EQ(st.chunks[static_cast<int>(ChunkKind::kSame)], 1);
  EXPECT_EQ(st.chunks[static_cast<int>(ChunkKind::kIndex)], 1);
  EXPECT_EQ(st.chunks[static_cast<int>(ChunkKind::kBitmap)], 1);
  EXPECT_EQ(st.chunks[static_cast<int>(ChunkKind::kDense)], 1);
  EXPECT_EQ(st.changed_elements, 3 + 600 + 2048);
  // header + table + index (3 * 4) + bitmap (256 + 600 * 2) + dense (4096)
  EXPECT_EQ(st.patch_bytes, 24 + 16 + 12 + 256 + 1200 + 4096);
}

TEST(DeltaPatch, ComparesBitsNotValues) {
  // +0.0 and -0.0 (float32) are equal numbers but different bytes: the patch carries the change.
  const PatchShape shape = shapeFor(1, 4, 4096);
  const float base = 0.0f, next = -0.0f;
  std::vector<uint8_t> patch;
  ASSERT_TRUE(encodePatch(shape, &base, &next, &patch).isOk());
  float out = 1.0f;
  ASSERT_TRUE(applyPatch(shape, patch.data(), patch.size(), &base, &out).isOk());
  EXPECT_EQ(std::memcmp(&out, &next, 4), 0);
}

TEST(DeltaPatch, MalformedPatchesAreRefusedNamingTheChunkAndWriteNothing) {
  std::mt19937_64 rng(3);
  const PatchShape shape = shapeFor(3 * 2048 + 5, 2, 4096);
  const std::vector<uint8_t> base = randomBytes(shape.num_elements * 2, rng);
  const std::vector<uint8_t> next = changed(base, 2, 0.01, rng);
  std::vector<uint8_t> patch;
  ASSERT_TRUE(encodePatch(shape, base.data(), next.data(), &patch).isOk());
  auto refused = [&](std::vector<uint8_t> bad, const PatchShape& as, const char* what) {
    std::vector<uint8_t> out(base.size(), 0x5a);
    Status s = applyPatch(as, bad.data(), bad.size(), base.data(), out.data());
    EXPECT_EQ(s.code(), as.elem_bytes == shape.elem_bytes && as.chunk_elements > 0
                            ? WSYNC_ERR_PROTOCOL
                            : WSYNC_ERR_INVALID_ARGUMENT)
        << what;
    EXPECT_EQ(out, std::vector<uint8_t>(base.size(), 0x5a)) << what << ": wrote before refusing";
    return s.message();
  };
  std::vector<uint8_t> bad = patch;
  bad[0] ^= 1;
  EXPECT_NE(refused(bad, shape, "magic").find("magic"), std::string::npos);
  bad = patch;
  bad[4] = 9;
  EXPECT_NE(refused(bad, shape, "version").find("version 9"), std::string::npos);
  PatchShape other = shape;
  other.num_elements += 1;
  EXPECT_NE(refused(patch, other, "shape").find("differs"), std::string::npos);
  bad = patch;
  bad.pop_back();
  EXPECT_NE(refused(bad, shape, "truncated").find("past the patch's end"), std::string::npos);
  bad = patch;
  bad.push_back(0);
  EXPECT_NE(refused(bad, shape, "trailing").find("after the last chunk"), std::string::npos);
  // Chunk 1's table entry: claim more changed elements than its index list holds.
  bad = patch;
  bad[24 + 4] = static_cast<uint8_t>(bad[24 + 4] + 1);
  EXPECT_NE(refused(bad, shape, "count").find("chunk 1"), std::string::npos);
  // Last chunk (5 elements) marked dense with 6.
  bad = patch;
  const uint32_t dense6 = (1u << 30) | 6u;
  std::memcpy(&bad[24 + 4 * 3], &dense6, 4);
  EXPECT_NE(refused(bad, shape, "dense count").find("chunk 3"), std::string::npos);
}

TEST(DeltaPatch, BadShapesAreInvalidArguments) {
  std::vector<uint8_t> patch;
  uint8_t x = 0;
  PatchShape s = shapeFor(1, 3, 4096);
  EXPECT_EQ(encodePatch(s, &x, &x, &patch).code(), WSYNC_ERR_INVALID_ARGUMENT);
  s = shapeFor(1, 2, 4096);
  s.chunk_elements = kMaxChunkElements + 1;
  EXPECT_EQ(encodePatch(s, &x, &x, &patch).code(), WSYNC_ERR_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace wsync::delta
