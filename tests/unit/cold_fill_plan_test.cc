// Planning a peer cold start (plan/replica_plan.h, makeColdFillPlan): a joining replica filled from
// the slots of a replica that holds a version. The reference executor (tests/support) plays the
// source replica's slots as the senders' memory and checks every element of the joiner bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "layout/builders.h"
#include "plan/replica_plan.h"
#include "support/reference_executor.h"

namespace wsync {
namespace {

constexpr int64_t kHidden = 64;
constexpr int64_t kFfn = 96;
constexpr int kHeads = 8;
constexpr int kKvHeads = 2;
constexpr int kHeadDim = 8;

// One rank of a vLLM-like replica of TP `tp`: fused qkv and gate_up (column-parallel), a
// row-parallel down projection, replicated norm and embedding.
Registration rolloutRank(int tp, int index, DType dtype = DType::kBFloat16) {
  Registration reg;
  reg.role = Role::kRollout;
  reg.rank = index;
  reg.replica = 0;
  EXPECT_TRUE(
      addQkv(reg, "qkv", "q", "k", "v", kHeads, kKvHeads, kHeadDim, kHidden, dtype, tp, index)
          .isOk());
  EXPECT_TRUE(addGateUp(reg, "gate_up", "gate", "up", kFfn, kHidden, dtype, tp, index).isOk());
  EXPECT_TRUE(addSplit(reg, "down", Dims{kHidden, kFfn}, dtype, 1, tp, index).isOk());
  EXPECT_TRUE(addReplicated(reg, "norm", Dims{kHidden}, dtype).isOk());
  EXPECT_TRUE(addReplicated(reg, "embed", Dims{4 * kHidden, kHidden}, dtype).isOk());
  return reg;
}

std::vector<Registration> replica(int tp, DType dtype = DType::kBFloat16) {
  std::vector<Registration> ranks;
  for (int i = 0; i < tp; ++i)
    ranks.push_back(rolloutRank(tp, i, dtype));
  return ranks;
}

// The sources as the reference executor's senders: the same buffers, in the trainer role.
std::vector<Registration> asSenders(std::vector<Registration> sources) {
  for (size_t i = 0; i < sources.size(); ++i) {
    sources[i].role = Role::kTrainer;
    sources[i].rank = static_cast<int32_t>(i);
  }
  return sources;
}

TEST(ColdFillPlan, FillsAJoinerOfAnotherLayoutFromAPeerReplicaBitExact) {
  for (const auto& [source_tp, joiner_tp] :
       std::vector<std::pair<int, int>>{{2, 4}, {4, 2}, {2, 2}, {1, 4}}) {
    SCOPED_TRACE("source TP " + std::to_string(source_tp) + ", joiner TP " +
                 std::to_string(joiner_tp));
    const std::vector<Registration> sources = replica(source_tp);
    const std::vector<Registration> joiner = replica(joiner_tp);
    Result<Plan> plan = makeColdFillPlan(sources, joiner, 0);
    ASSERT_TRUE(plan.isOk()) << plan.status().toString();
    EXPECT_TRUE(plan->groups.empty()) << "a cold start moves bytes by one-sided writes only";
    for (const WriteOp& op : plan->writes) {
      EXPECT_FALSE(op.converts());
      EXPECT_GE(op.src_rank, 0);
      EXPECT_LT(op.src_rank, source_tp);
    }
    const Status verified = executeAndVerify(asSenders(sources), joiner, *plan);
    EXPECT_TRUE(verified.isOk()) << verified.toString();
  }
}

TEST(ColdFillPlan, JoinerRanksAreTheJobsAndReplicatedTensorsComeFromEverySource) {
  const std::vector<Registration> sources = replica(2);
  Result<Plan> plan = makeColdFillPlan(sources, replica(2), 5);
  ASSERT_TRUE(plan.isOk()) << plan.status().toString();
  std::set<int32_t> dst_ranks;
  std::set<int32_t> embed_senders;
  for (const WriteOp& op : plan->writes) {
    dst_ranks.insert(op.dst_rank);
    if (plan->tensors[static_cast<size_t>(op.tensor)].name == "embed")
      embed_senders.insert(op.src_rank);
  }
  EXPECT_EQ(dst_ranks, (std::set<int32_t>{5, 6}));
  // Both source ranks hold the whole embedding: the two joiner ranks' copies are balanced over
  // them, so no source rank is a funnel.
  EXPECT_EQ(embed_senders, (std::set<int32_t>{0, 1}));
  ASSERT_EQ(plan->stats.bytes_per_sender.size(), 2u);
  EXPECT_LT(plan->stats.senderImbalance(), 1.5);
}

TEST(ColdFillPlan, ADtypeConversionIsUnsupportedNamingTheTensor) {
  Result<Plan> plan =
      makeColdFillPlan(replica(2, DType::kFloat32), replica(2, DType::kBFloat16), 3);
  ASSERT_FALSE(plan.isOk());
  EXPECT_EQ(plan.status().code(), WSYNC_ERR_UNSUPPORTED);
  EXPECT_NE(plan.status().message().find("the source replica holds it as float32"),
            std::string::npos)
      << plan.status().message();
  EXPECT_NE(plan.status().message().find("wants bfloat16"), std::string::npos);
}

TEST(ColdFillPlan, ATensorTheSourcesDoNotHoldIsAMismatch) {
  std::vector<Registration> joiner = replica(2);
  ASSERT_TRUE(
      addReplicated(joiner[0], "lm_head", Dims{4 * kHidden, kHidden}, DType::kBFloat16).isOk());
  Result<Plan> plan = makeColdFillPlan(replica(2), joiner, 0);
  ASSERT_FALSE(plan.isOk());
  EXPECT_EQ(plan.status().code(), WSYNC_ERR_MISMATCH);
  EXPECT_NE(plan.status().message().find("lm_head"), std::string::npos) << plan.status().message();
  EXPECT_EQ(makeColdFillPlan({}, replica(1), 0).status().code(), WSYNC_ERR_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace wsync
