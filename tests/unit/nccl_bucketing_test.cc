// planBuckets (src/transport/nccl/nccl_broadcaster.h): which posts share an NCCL broadcast and
// where they sit in the staging buffer. Pure host logic: runs without CUDA.
#include <gtest/gtest.h>

#include <array>
#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "transport/nccl/nccl_broadcaster.h"

namespace wsync {
namespace {

PostedBroadcast post(int32_t comm, int32_t root, size_t bytes) {
  return {comm, root, nullptr, bytes};
}

// Checks what must hold for every plan: every non-empty post in exactly one bucket, items of a
// bucket share comm and root and keep post order, packed items aligned and disjoint inside the
// bucket, packed buckets within bucket_bytes and disjoint in the staging buffer, unpacked buckets
// one post, buckets ordered by comm then first post, greedy packing (a run is split only when the
// next post does not fit).
void checkInvariants(const std::vector<PostedBroadcast>& posts, size_t bucket_bytes,
                     const BucketPlan& plan) {
  std::vector<int> seen(posts.size(), 0);
  size_t staging_end = 0;
  for (size_t k = 0; k < plan.buckets.size(); ++k) {
    const Bucket& b = plan.buckets[k];
    ASSERT_FALSE(b.items.empty()) << "bucket " << k;
    EXPECT_EQ(b.packed, b.items.size() > 1) << "bucket " << k;
    size_t end = 0;
    for (size_t j = 0; j < b.items.size(); ++j) {
      const BucketItem& it = b.items[j];
      ASSERT_LT(it.post, posts.size());
      ++seen[it.post];
      const PostedBroadcast& p = posts[it.post];
      EXPECT_EQ(p.comm, b.comm) << "bucket " << k << " item " << j;
      EXPECT_EQ(p.root, b.root) << "bucket " << k << " item " << j;
      EXPECT_EQ(it.bytes, p.bytes);
      EXPECT_GT(it.bytes, 0u);
      if (j > 0) {
        EXPECT_GT(it.post, b.items[j - 1].post) << "post order in bucket " << k;
      }
      EXPECT_GE(it.offset, end) << "overlap in bucket " << k;
      EXPECT_EQ(it.offset % kNcclBucketItemAlign, 0u);
      end = it.offset + it.bytes;
    }
    EXPECT_EQ(b.bytes, end) << "bucket " << k;
    if (b.packed) {
      EXPECT_LE(b.bytes, bucket_bytes) << "bucket " << k;
      for (const BucketItem& it : b.items)
        EXPECT_LT(it.bytes, bucket_bytes);
      EXPECT_EQ(b.staging_offset % kNcclStagingAlign, 0u);
      EXPECT_GE(b.staging_offset, staging_end) << "staging overlap at bucket " << k;
      staging_end = b.staging_offset + b.bytes;
    } else {
      EXPECT_EQ(b.items[0].offset, 0u);
    }
    if (k > 0) {
      const Bucket& prev = plan.buckets[k - 1];
      EXPECT_TRUE(prev.comm < b.comm ||
                  (prev.comm == b.comm && prev.items.back().post < b.items.front().post))
          << "order at bucket " << k;
      // Greedy: two small buckets of one run (same comm and root, next in that comm's sequence)
      // are split only because the next post did not fit.
      if (prev.comm == b.comm && prev.root == b.root && prev.items.back().bytes < bucket_bytes &&
          b.items.front().bytes < bucket_bytes) {
        const size_t offset =
            (prev.bytes + kNcclBucketItemAlign - 1) / kNcclBucketItemAlign * kNcclBucketItemAlign;
        EXPECT_GT(offset + b.items.front().bytes, bucket_bytes) << "needless split at " << k;
      }
    }
  }
  EXPECT_EQ(plan.staging_bytes, staging_end);
  for (size_t i = 0; i < posts.size(); ++i) {
    EXPECT_EQ(seen[i], posts[i].bytes > 0 ? 1 : 0)
        << "post " << i << " (" << posts[i].bytes << " bytes)";
  }
}

// The shape of one comm's buckets with posts named by their position in that comm's sequence:
// what two members of the comm must agree on.
using Shape = std::vector<std::tuple<int32_t, bool, size_t, std::vector<std::array<size_t, 3>>>>;
Shape commShape(const std::vector<PostedBroadcast>& posts, const BucketPlan& plan, int32_t comm) {
  std::map<size_t, size_t> seq;  // post index -> position in the comm's sequence
  for (size_t i = 0; i < posts.size(); ++i) {
    if (posts[i].comm == comm) seq.emplace(i, seq.size());
  }
  Shape shape;
  for (const Bucket& b : plan.buckets) {
    if (b.comm != comm) continue;
    std::vector<std::array<size_t, 3>> items;
    for (const BucketItem& it : b.items)
      items.push_back({seq.at(it.post), it.offset, it.bytes});
    shape.emplace_back(b.root, b.packed, b.bytes, items);
  }
  return shape;
}

TEST(NcclBucketing, SmallPostsShareABucketBigOnesGoAlone) {
  const size_t kBucket = 1024;
  const std::vector<PostedBroadcast> posts = {post(0, 0, 10), post(0, 0, 20),   post(0, 0, 2000),
                                              post(0, 0, 30), post(0, 0, 1024), post(0, 0, 1023),
                                              post(0, 0, 1)};
  const BucketPlan plan = planBuckets(posts, kBucket);
  checkInvariants(posts, kBucket, plan);
  ASSERT_EQ(plan.buckets.size(), 6u);
  // {10, 20} packed: 20 starts at the next 16-byte boundary.
  EXPECT_TRUE(plan.buckets[0].packed);
  ASSERT_EQ(plan.buckets[0].items.size(), 2u);
  EXPECT_EQ(plan.buckets[0].items[1].offset, 16u);
  EXPECT_EQ(plan.buckets[0].bytes, 36u);
  EXPECT_EQ(plan.buckets[0].staging_offset, 0u);
  // 2000 alone, in place; it breaks the run, so 30 starts a bucket that stays single.
  EXPECT_FALSE(plan.buckets[1].packed);
  EXPECT_EQ(plan.buckets[1].items[0].post, 2u);
  EXPECT_FALSE(plan.buckets[2].packed);
  EXPECT_EQ(plan.buckets[2].items[0].post, 3u);
  // 1024 == bucket_bytes is big: alone.
  EXPECT_FALSE(plan.buckets[3].packed);
  EXPECT_EQ(plan.buckets[3].items[0].post, 4u);
  // 1023 fits alone but 1 after it does not (1024 + 1 > 1024): two single buckets.
  EXPECT_FALSE(plan.buckets[4].packed);
  EXPECT_FALSE(plan.buckets[5].packed);
  EXPECT_EQ(plan.staging_bytes, 36u);
}

TEST(NcclBucketing, RootChangesAndFullBucketsSplitRuns) {
  const size_t kBucket = 100;
  const std::vector<PostedBroadcast> posts = {post(3, 1, 40), post(3, 1, 40), post(3, 1, 40),
                                              post(3, 2, 8),  post(3, 2, 8),  post(3, 1, 8)};
  const BucketPlan plan = planBuckets(posts, kBucket);
  checkInvariants(posts, kBucket, plan);
  ASSERT_EQ(plan.buckets.size(), 4u);
  // 40 at 0, 40 at 48 (88 <= 100), the third would end at 136: a new bucket.
  EXPECT_EQ(plan.buckets[0].items.size(), 2u);
  EXPECT_EQ(plan.buckets[0].bytes, 88u);
  EXPECT_EQ(plan.buckets[1].items.size(), 1u);
  EXPECT_FALSE(plan.buckets[1].packed);
  EXPECT_EQ(plan.buckets[2].root, 2);
  EXPECT_EQ(plan.buckets[2].items.size(), 2u);
  EXPECT_EQ(plan.buckets[2].staging_offset, kNcclStagingAlign);  // after the first packed bucket
  EXPECT_EQ(plan.buckets[3].root, 1);
  EXPECT_EQ(plan.staging_bytes, kNcclStagingAlign + 24u);
}

TEST(NcclBucketing, OtherCommsInBetweenDoNotBreakARun) {
  const size_t kBucket = 1 << 20;
  // Rank A sees comms 0 and 1 interleaved; rank B is only in comm 1 and sees its posts alone.
  const std::vector<PostedBroadcast> a = {post(1, 4, 100), post(0, 0, 7),   post(1, 4, 200),
                                          post(0, 0, 9),   post(1, 4, 300), post(0, 2, 5)};
  const std::vector<PostedBroadcast> b = {post(1, 4, 100), post(1, 4, 200), post(1, 4, 300)};
  const BucketPlan pa = planBuckets(a, kBucket);
  const BucketPlan pb = planBuckets(b, kBucket);
  checkInvariants(a, kBucket, pa);
  checkInvariants(b, kBucket, pb);
  // Comm 0 first (create order), then comm 1.
  ASSERT_EQ(pa.buckets.size(), 3u);
  EXPECT_EQ(pa.buckets[0].comm, 0);
  EXPECT_EQ(pa.buckets[0].items.size(), 2u);  // 7 and 9 from root 0
  EXPECT_EQ(pa.buckets[1].comm, 0);
  EXPECT_EQ(pa.buckets[1].root, 2);
  EXPECT_EQ(pa.buckets[2].comm, 1);
  EXPECT_EQ(pa.buckets[2].items.size(), 3u);
  EXPECT_EQ(commShape(a, pa, 1), commShape(b, pb, 1));
  EXPECT_FALSE(commShape(a, pa, 1).empty());
}

TEST(NcclBucketing, ZeroByteAndEmptyInputs) {
  EXPECT_TRUE(planBuckets({}, 1024).buckets.empty());
  const std::vector<PostedBroadcast> posts = {post(0, 0, 0), post(0, 0, 8), post(0, 0, 0),
                                              post(0, 0, 8)};
  const BucketPlan plan = planBuckets(posts, 1024);
  checkInvariants(posts, 1024, plan);
  ASSERT_EQ(plan.buckets.size(), 1u);
  EXPECT_EQ(plan.buckets[0].items.size(), 2u);
  // bucket_bytes 0: nothing is small, every post goes alone and nothing is staged.
  const BucketPlan none = planBuckets(posts, 0);
  checkInvariants(posts, 0, none);
  EXPECT_EQ(none.buckets.size(), 2u);
  EXPECT_EQ(none.staging_bytes, 0u);
}

// Seeded random post lists: the invariants hold, the plan is deterministic, and every member of
// a comm computes the same buckets for it from its own interleaving of the comms it belongs to.
TEST(NcclBucketing, RandomizedMembersAgree) {
  std::mt19937_64 rng(20261201);
  for (int trial = 0; trial < 300; ++trial) {
    const int comms = 1 + static_cast<int>(rng() % 5);
    const size_t bucket_bytes = size_t{1} << (4 + rng() % 12);
    // Each comm's sequence of (root, bytes), as every member must post it.
    std::vector<std::vector<std::pair<int32_t, size_t>>> seqs(static_cast<size_t>(comms));
    for (auto& s : seqs) {
      const size_t n = rng() % 12;
      const int32_t roots = 1 + static_cast<int32_t>(rng() % 3);
      for (size_t i = 0; i < n; ++i) {
        const size_t kind = rng() % 10;
        const size_t bytes = kind == 0  ? 0
                             : kind < 7 ? 1 + rng() % (bucket_bytes / 2 + 1)
                                        : bucket_bytes - 1 + rng() % (2 * bucket_bytes);
        s.emplace_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(roots)), bytes);
      }
    }
    // Three "ranks", each a member of a random subset of comms, interleaving them at random.
    std::vector<std::pair<std::vector<PostedBroadcast>, BucketPlan>> ranks;
    for (int r = 0; r < 3; ++r) {
      std::vector<int32_t> mine;
      for (int32_t c = 0; c < comms; ++c) {
        if (rng() % 3 != 0) mine.push_back(c);
      }
      std::vector<size_t> next(static_cast<size_t>(comms), 0);
      std::vector<PostedBroadcast> posts;
      for (;;) {
        std::vector<int32_t> open;
        for (int32_t c : mine) {
          if (next[static_cast<size_t>(c)] < seqs[static_cast<size_t>(c)].size()) open.push_back(c);
        }
        if (open.empty()) break;
        const int32_t c = open[rng() % open.size()];
        const auto [root, bytes] = seqs[static_cast<size_t>(c)][next[static_cast<size_t>(c)]++];
        posts.push_back(post(c, root, bytes));
      }
      BucketPlan plan = planBuckets(posts, bucket_bytes);
      SCOPED_TRACE("trial " + std::to_string(trial) + " rank " + std::to_string(r));
      checkInvariants(posts, bucket_bytes, plan);
      const BucketPlan again = planBuckets(posts, bucket_bytes);
      ASSERT_EQ(again.buckets.size(), plan.buckets.size());
      EXPECT_EQ(again.staging_bytes, plan.staging_bytes);
      for (int32_t c : mine)
        EXPECT_EQ(commShape(posts, plan, c), commShape(posts, again, c));
      ranks.emplace_back(std::move(posts), std::move(plan));
    }
    for (int32_t c = 0; c < comms; ++c) {
      std::set<Shape> shapes;
      for (const auto& [posts, plan] : ranks) {
        bool member = false;
        for (const PostedBroadcast& p : posts)
          member |= p.comm == c;
        if (member) shapes.insert(commShape(posts, plan, c));
      }
      EXPECT_LE(shapes.size(), 1u) << "trial " << trial << ": members disagree on comm " << c;
    }
  }
}

}  // namespace
}  // namespace wsync
