// Delta patches' fast paths (src/delta/delta_scan.*, the bitmap-driven encoder and applier) against
// a straightforward reference written from delta_patch.h's format, one element at a time: every
// kernel the CPU has gives the reference's bytes, stats and verdicts on random data with random
// change patterns (every chunk kind, partial last chunks, element sizes 1/2/4/8, chunk lengths
// that are and are not multiples of 64, unaligned buffers), so the SIMD paths cannot drift.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/wire.h"
#include "delta/delta_patch.h"

namespace wsync::delta {
namespace {

std::vector<DeltaKernel> kernelsHere() {
  std::vector<DeltaKernel> k = {DeltaKernel::kScalar};
  if (deltaKernel() != DeltaKernel::kScalar) k.push_back(DeltaKernel::kAvx2);
  if (deltaKernel() == DeltaKernel::kAvx512) k.push_back(DeltaKernel::kAvx512);
  return k;
}

// The reference encoder: per chunk, per element; kind = the smallest payload (ties: dense, then
// index, then bitmap).
std::vector<uint8_t> referenceEncode(const PatchShape& s, const uint8_t* base, const uint8_t* next,
                                     PatchStats* st) {
  const int e = s.elem_bytes;
  const int64_t chunks = s.numChunks();
  std::vector<uint8_t> out(kPatchHeaderBytes + 4 * chunks, 0);
  putFixed32(out.data(), kPatchMagic);
  out[4] = kPatchVersion;
  out[5] = static_cast<uint8_t>(e);
  putFixed32(out.data() + 8, static_cast<uint32_t>(s.chunk_elements));
  putFixed32(out.data() + 12, static_cast<uint32_t>(chunks));
  putFixed64(out.data() + 16, static_cast<uint64_t>(s.num_elements));
  *st = PatchStats{};
  st->dense_bytes = s.num_elements * e;
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t first = c * s.chunk_elements;
    const int64_t len = std::min(s.chunk_elements, s.num_elements - first);
    std::vector<int64_t> idx;
    for (int64_t i = 0; i < len; ++i)
      if (std::memcmp(base + (first + i) * e, next + (first + i) * e, e) != 0) idx.push_back(i);
    const auto count = static_cast<int64_t>(idx.size());
    const int64_t dense = len * e, index = count * (2 + e), bitmap = (len + 7) / 8 + count * e;
    uint32_t kind = 0;
    if (count > 0) kind = index < dense ? (bitmap < index ? 2 : 3) : (bitmap < dense ? 2 : 1);
    putFixed32(out.data() + kPatchHeaderBytes + 4 * c, kind << 30 | (kind == 1 ? len : count));
    st->chunks[kind]++;
    st->changed_elements += count;
    auto value = [&](int64_t i) {
      const uint8_t* v = next + (first + i) * e;
      out.insert(out.end(), v, v + e);
    };
    if (kind == 1) {
      for (int64_t i = 0; i < len; ++i)
        value(i);
    } else if (kind == 2) {
      std::vector<uint8_t> bits((len + 7) / 8, 0);
      for (int64_t i : idx)
        bits[i / 8] = static_cast<uint8_t>(bits[i / 8] | 1 << (i % 8));
      out.insert(out.end(), bits.begin(), bits.end());
      for (int64_t i : idx)
        value(i);
    } else if (kind == 3) {
      for (int64_t i : idx) {
        out.push_back(static_cast<uint8_t>(i));
        out.push_back(static_cast<uint8_t>(i >> 8));
      }
      for (int64_t i : idx)
        value(i);
    }
  }
  st->patch_bytes = static_cast<int64_t>(out.size());
  return out;
}

// `n` elements of `e` bytes; chunk by chunk a random pattern: unchanged, a few, a share, bursts at
// the chunk's ends, everything; a changed element differs in one random byte.
std::vector<uint8_t> randomChange(const std::vector<uint8_t>& base, const PatchShape& s,
                                  std::mt19937_64& rng) {
  std::vector<uint8_t> next = base;
  const int e = s.elem_bytes;
  auto flip = [&](int64_t i) { next[i * e + rng() % e] ^= static_cast<uint8_t>(1 + rng() % 255); };
  for (int64_t first = 0; first < s.num_elements; first += s.chunk_elements) {
    const int64_t len = std::min(s.chunk_elements, s.num_elements - first);
    const double share[] = {0.0, 0.002, 0.03, 0.1, 0.3, 0.6, 1.0};
    const int pattern = static_cast<int>(rng() % 9);
    if (pattern < 7) {
      std::bernoulli_distribution pick(share[pattern]);
      for (int64_t i = 0; i < len; ++i)
        if (pick(rng)) flip(first + i);
    } else if (pattern == 7) {  // first and last elements, and a run across a 64-element word
      flip(first);
      flip(first + len - 1);
      for (int64_t i = 60; i < std::min<int64_t>(len, 70); ++i)
        flip(first + i);
    } else {  // a single element
      flip(first + static_cast<int64_t>(rng() % len));
    }
  }
  return next;
}

TEST(DeltaPatchKernels, EveryKernelEncodesAndAppliesAsTheReference) {
  std::mt19937_64 rng(22);
  std::printf("kernels here: fastest %s\n", deltaKernelName(deltaKernel()));
  for (int round = 0; round < 300; ++round) {
    const int e = 1 << (rng() % 4);
    const int64_t chunk_choices[] = {1, 7, 63, 64, 65, 100, 128, 1000, 2048, 4096, 65536};
    const int64_t chunk = chunk_choices[rng() % 11];
    const int64_t n = static_cast<int64_t>(rng() % (round < 200 ? 5000 : 140000));
    PatchShape s;
    s.num_elements = n;
    s.elem_bytes = e;
    s.chunk_elements = chunk;
    // Unaligned: each buffer starts 0..63 bytes into its storage.
    const size_t bytes = static_cast<size_t>(n * e);
    std::vector<uint8_t> base_store(bytes + 64), next_store(bytes + 64), out_store(bytes + 64);
    const size_t ob = rng() % 64, on = rng() % 64, oo = rng() % 64;
    for (size_t i = 0; i < bytes; ++i)
      base_store[ob + i] = static_cast<uint8_t>(rng() % 4);  // equal bytes are common
    const std::vector<uint8_t> base(base_store.begin() + ob, base_store.begin() + ob + bytes);
    const std::vector<uint8_t> next = randomChange(base, s, rng);
    std::memcpy(next_store.data() + on, next.data(), bytes);
    PatchStats ref_st;
    const std::vector<uint8_t> ref = referenceEncode(s, base.data(), next.data(), &ref_st);
    const std::string where = "round " + std::to_string(round) + " e " + std::to_string(e) +
                              " chunk " + std::to_string(chunk) + " n " + std::to_string(n);
    for (DeltaKernel k : kernelsHere()) {
      const std::string what = where + " kernel " + deltaKernelName(k);
      std::vector<uint8_t> patch(17, 0xcc);  // reused storage, stale bytes
      PatchStats st;
      ASSERT_TRUE(
          encodePatch(s, base_store.data() + ob, next_store.data() + on, &patch, &st, k).isOk());
      ASSERT_EQ(patch, ref) << what;
      EXPECT_EQ(st.patch_bytes, ref_st.patch_bytes) << what;
      EXPECT_EQ(st.changed_elements, ref_st.changed_elements) << what;
      for (int kind = 0; kind < 4; ++kind)
        EXPECT_EQ(st.chunks[kind], ref_st.chunks[kind]) << what << " kind " << kind;
      std::fill(out_store.begin(), out_store.end(), 0xee);
      Status status = applyPatch(s, patch.data(), patch.size(), base_store.data() + ob,
                                 out_store.data() + oo, k);
      ASSERT_TRUE(status.isOk()) << what << ": " << status.toString();
      ASSERT_EQ(0, std::memcmp(out_store.data() + oo, next.data(), bytes)) << what;
      std::vector<uint8_t> in_place = base_store;
      ASSERT_TRUE(
          applyPatch(s, patch.data(), patch.size(), in_place.data() + ob, in_place.data() + ob, k)
              .isOk());
      ASSERT_EQ(0, std::memcmp(in_place.data() + ob, next.data(), bytes)) << what;
      // The kept copy advanced while encoding: the same patch, and it now holds next.
      std::vector<uint8_t> kept = base_store, again;
      ASSERT_TRUE(
          encodePatchAndAdvance(s, kept.data() + ob, next_store.data() + on, &again, nullptr, k)
              .isOk());
      ASSERT_EQ(again, ref) << what;
      ASSERT_EQ(0, std::memcmp(kept.data() + ob, next.data(), bytes)) << what;
    }
  }
}

// Damaged patches: every kernel gives the same verdict and message, and writes nothing.
TEST(DeltaPatchKernels, EveryKernelRefusesDamagedPatchesAlike) {
  std::mt19937_64 rng(5);
  for (int round = 0; round < 400; ++round) {
    const int e = 1 << (rng() % 4);
    PatchShape s;
    s.num_elements = static_cast<int64_t>(1 + rng() % 3000);
    s.elem_bytes = e;
    s.chunk_elements = static_cast<int64_t>(1 + rng() % 700);
    std::vector<uint8_t> base(static_cast<size_t>(s.num_elements * e));
    for (auto& b : base)
      b = static_cast<uint8_t>(rng());
    const std::vector<uint8_t> next = randomChange(base, s, rng);
    PatchStats st;
    std::vector<uint8_t> patch = referenceEncode(s, base.data(), next.data(), &st);
    for (int flips = 1 + static_cast<int>(rng() % 3); flips > 0; --flips) {
      const size_t at = rng() % patch.size();
      patch[at] = static_cast<uint8_t>(patch[at] ^ (1u << (rng() % 8)));
    }
    if (rng() % 4 == 0) patch.resize(patch.size() - rng() % std::min<size_t>(patch.size(), 9));
    std::string verdict;
    for (DeltaKernel k : kernelsHere()) {
      std::vector<uint8_t> out(base.size(), 0x5a);
      const Status status = applyPatch(s, patch.data(), patch.size(), base.data(), out.data(), k);
      const std::string got = status.isOk() ? "ok" : status.message();
      if (k == DeltaKernel::kScalar) verdict = got;
      EXPECT_EQ(got, verdict) << "round " << round << " kernel " << deltaKernelName(k);
      EXPECT_EQ(got == "ok", validatePatch(s, patch.data(), patch.size(), k).isOk());
      if (!status.isOk()) {
        EXPECT_EQ(out, std::vector<uint8_t>(base.size(), 0x5a)) << "round " << round;
      }
    }
  }
}

}  // namespace
}  // namespace wsync::delta
