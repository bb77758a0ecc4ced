// The Kimi-K2 plan of the default layouts (256 trainer ranks: FSDP 16 x PP 2 x EP 8 -> 128 rollout
// ranks: EP 32 x 4 replicas), pinned: counts, bytes, sender loads and a hash over every write op
// and shape. The values are those of the planner of commit bf8b69b (the same encodePlan output), so
// a change to the planner that alters this plan in any field fails here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "layout/registration.h"
#include "model_layouts.h"
#include "model_zoo.h"
#include "plan/planner.h"

namespace wsync {
namespace {

// FNV-1a over 64-bit words.
struct Hash64 {
  uint64_t h = 0xcbf29ce484222325ull;
  void add(int64_t v) {
    for (int b = 0; b < 8; ++b) {
      h ^= static_cast<uint64_t>(v >> (8 * b)) & 0xff;
      h *= 0x100000001b3ull;
    }
  }
};

uint64_t hashWrites(const Plan& plan) {
  Hash64 h;
  for (const WriteOp& w : plan.writes) {
    for (const int64_t v :
         {int64_t{w.tensor}, int64_t{w.src_rank}, int64_t{w.src_buffer}, int64_t{w.dst_rank},
          int64_t{w.dst_buffer}, static_cast<int64_t>(w.src_dtype),
          static_cast<int64_t>(w.dst_dtype), w.src_offset, w.dst_offset, w.run}) {
      h.add(v);
    }
  }
  for (const RegionShape& s : plan.shapes) {
    for (const int64_t v : {s.count[0], s.count[1], s.count[2], s.src_stride[0], s.src_stride[1],
                            s.dst_stride[0], s.dst_stride[1]}) {
      h.add(v);
    }
  }
  return h.h;
}

TEST(KimiPlan, DefaultLayoutPlanIsPinned) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "1 GiB of registrations and plan: too large under a sanitizer";
#endif
  Result<ModelSpec> model = makeModel("kimi-k2");
  ASSERT_TRUE(model.isOk()) << model.status().toString();
  const ModelLayouts layouts = defaultLayouts(model->config());
  Result<std::vector<Registration>> trainers = buildTrainerRegistrations(*model, layouts.trainer);
  ASSERT_TRUE(trainers.isOk()) << trainers.status().toString();
  Result<std::vector<Registration>> rollouts = buildRolloutRegistrations(*model, layouts.rollout);
  ASSERT_TRUE(rollouts.isOk()) << rollouts.status().toString();

  Result<Plan> plan = makePlan(*trainers, *rollouts);
  ASSERT_TRUE(plan.isOk()) << plan.status().toString();
  const PlanStats& st = plan->stats;
  EXPECT_EQ(st.trainer_ranks, 256);
  EXPECT_EQ(st.rollout_ranks, 128);
  EXPECT_EQ(st.replicas, 4);
  EXPECT_EQ(plan->tensors.size(), 69975u);
  EXPECT_EQ(plan->groups.size(), 0u);  // dense tensors are Shard(0) on the trainers
  EXPECT_EQ(plan->writes.size(), 6174720u);
  EXPECT_EQ(plan->shapes.size(), 0u);  // every op is one contiguous run
  EXPECT_EQ(st.bytes_total, int64_t{11118373634048});
  EXPECT_EQ(st.write_bytes, st.bytes_total);
  EXPECT_EQ(st.broadcast_bytes, 0);
  ASSERT_EQ(st.bytes_per_sender.size(), 256u);
  int64_t sent = 0, least = st.bytes_per_sender[0], most = st.bytes_per_sender[0];
  for (const int64_t b : st.bytes_per_sender) {
    sent += b;
    least = std::min(least, b);
    most = std::max(most, b);
  }
  EXPECT_EQ(sent, int64_t{43431147008} * 256);  // bfloat16 on both sides: sent == delivered
  EXPECT_EQ(least, int64_t{42933654016});
  EXPECT_EQ(most, int64_t{43928640000});
  EXPECT_EQ(hashWrites(*plan), uint64_t{7576812497647787269});
}

}  // namespace
}  // namespace wsync
