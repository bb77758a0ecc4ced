// The version sequencer's checksum path (coordinator/version_sequencer.h, job.checksums): Verify
// instead of Ready with each rank's expected sums, Ready once every rank verified, a failed rank
// re-sending the version to its replica only, retries exhausted skipping the replica (its ranks
// give the slot back, the outcome says rejected), Delivered waiting for every trainer's Sent of
// every Go, and answers out of order rejected. Driven by hand: events in, messages out.
#include <gtest/gtest.h>

#include "coordinator/version_sequencer.h"
#include "support/sequencer_events.h"

namespace wsync {
namespace {

using namespace sequencer_events;  // NOLINT(google-build-using-namespace): test helpers

// What trainer t sends rollout rank r in attempt a: distinct per (t, r, a).
uint64_t sumOf(int32_t t, int32_t r, int a = 0) {
  return 1000u * static_cast<uint64_t>(a + 1) + 10u * static_cast<uint64_t>(t) +
         static_cast<uint64_t>(r);
}
std::vector<RankChecksum> sentBy(int32_t t, std::vector<int32_t> ranks, int a = 0) {
  std::vector<RankChecksum> sums;
  for (int32_t r : ranks)
    sums.push_back({r, sumOf(t, r, a)});
  return sums;
}

// 2 trainers; replica 0 = rollouts {0, 1}, replica 1 = rollouts {2, 3}; 2 slots each; checksums.
class ChecksumSequencerTest : public ::testing::Test {
 protected:
  void SetUp() override { build(3); }
  void build(int retries) {
    SequencerOptions options;
    options.job.checksums = true;
    options.job.checksum_retries = retries;
    seq_ = std::make_unique<VersionSequencer>(options, 2);
    ASSERT_TRUE(seq_->addReplica({0, {0, 1}, 2}).isOk());
    ASSERT_TRUE(seq_->addReplica({1, {2, 3}, 2}).isOk());
  }

  // Version 1 up to the Verify of both replicas (every trainer writes every rank).
  SequencerOutput landVersionOne() {
    ok(seq_->onPublish(0, 1, kT0));
    for (int32_t r = 0; r < 4; ++r)
      ok(seq_->onPrepared(r, SlotMsg{1, 0}, kT0));
    ok(seq_->onSent(0, 1, kT0, sentBy(0, {0, 1, 2, 3})));
    ok(seq_->onSent(1, 1, kT0, sentBy(1, {0, 1, 2, 3})));
    for (int32_t r = 0; r < 3; ++r)
      ok(seq_->onReceived(r, 1, kT0));  // replica 0 gets Verify with rank 1's
    return ok(seq_->onReceived(3, 1, kT0));
  }

  SequencerOutput failOn(int32_t rank, uint64_t v) {
    return ok(seq_->onChecksumFailed(rank, ChecksumFailedMsg{v, {0}, "trainer 0's bytes"}, kT0));
  }

  std::unique_ptr<VersionSequencer> seq_;
};

TEST_F(ChecksumSequencerTest, EveryRankVerifiesBeforeItsReplicaIsReady) {
  const SequencerOutput landed = landVersionOne();
  EXPECT_TRUE(ofType(landed, MessageType::kReady).empty());
  const auto verifies = ofType(landed, MessageType::kVerify);
  ASSERT_EQ(verifies.size(), 2u);  // replica 1 landed with this event (replica 0 before)
  for (size_t i = 0; i < verifies.size(); ++i) {
    const auto rank = static_cast<int32_t>(2 + i);
    EXPECT_EQ(verifies[i].to, std::vector<RankRef>{rollout(rank)});
    const auto& verify = std::get<VerifyMsg>(verifies[i].payload);
    EXPECT_EQ(verify.version, 1u);
    EXPECT_EQ(verify.slot, 0);
    EXPECT_EQ(verify.sums, (std::vector<RankChecksum>{{0, sumOf(0, rank)}, {1, sumOf(1, rank)}}));
  }
  EXPECT_TRUE(ok(seq_->onVerified(0, 1, kT0)).messages.empty());
  SequencerOutput out = ok(seq_->onVerified(1, 1, kT0));
  ASSERT_EQ(out.messages.size(), 1u);
  EXPECT_EQ(out.messages[0].type, MessageType::kReady);
  EXPECT_EQ(out.messages[0].to, (std::vector<RankRef>{rollout(0), rollout(1)}));
  ok(seq_->onVerified(2, 1, kT0));
  out = ok(seq_->onVerified(3, 1, kT0));
  ASSERT_EQ(ofType(out, MessageType::kReady).size(), 1u);
  ASSERT_TRUE(out.delivered.has_value());
  EXPECT_EQ(out.delivered->ready_replicas, (std::vector<int32_t>{0, 1}));
  EXPECT_TRUE(out.delivered->checksum_failures.empty());
  EXPECT_TRUE(out.delivered->retries.empty());
  EXPECT_EQ(seq_->readyVersion(0), 1u);
}

TEST_F(ChecksumSequencerTest, AFailedRankResendsTheVersionToItsReplicaOnly) {
  landVersionOne();
  EXPECT_TRUE(failOn(0, 1).messages.empty());  // rank 1 has not answered yet
  SequencerOutput out = ok(seq_->onVerified(1, 1, kT0));
  EXPECT_TRUE(ofType(out, MessageType::kReady).empty()) << "replica 0 is never ready corrupt";
  auto gos = ofType(out, MessageType::kGo);
  ASSERT_EQ(gos.size(), 1u);
  EXPECT_EQ(gos[0].to, (std::vector<RankRef>{trainer(0), trainer(1), rollout(0), rollout(1)}));
  EXPECT_EQ(std::get<GoMsg>(gos[0].payload).version, 1u);
  EXPECT_EQ(std::get<GoMsg>(gos[0].payload).slot_of_replica, (std::vector<int32_t>{0, -1}));
  // Replica 1 verifies meanwhile: ready, but Delivered waits for replica 0.
  ok(seq_->onVerified(2, 1, kT0));
  out = ok(seq_->onVerified(3, 1, kT0));
  EXPECT_EQ(ofType(out, MessageType::kReady).size(), 1u);
  EXPECT_FALSE(out.delivered.has_value());
  EXPECT_EQ(seq_->readyVersion(1), 1u);
  EXPECT_EQ(seq_->readyVersion(0), 0u);
  // The re-send: both trainers send again (new sums), the replica's ranks receive again.
  ok(seq_->onSent(0, 1, kT0, sentBy(0, {0, 1}, 1)));
  ok(seq_->onReceived(0, 1, kT0));
  ok(seq_->onReceived(1, 1, kT0));
  out = ok(seq_->onSent(1, 1, kT0, sentBy(1, {0, 1}, 1)));
  const auto verifies = ofType(out, MessageType::kVerify);
  ASSERT_EQ(verifies.size(), 2u);
  EXPECT_EQ(std::get<VerifyMsg>(verifies[0].payload).sums,
            (std::vector<RankChecksum>{{0, sumOf(0, 0, 1)}, {1, sumOf(1, 0, 1)}}));
  ok(seq_->onVerified(0, 1, kT0));
  out = ok(seq_->onVerified(1, 1, kT0));
  ASSERT_EQ(ofType(out, MessageType::kReady).size(), 1u);
  ASSERT_TRUE(out.delivered.has_value());
  EXPECT_EQ(out.delivered->ready_replicas, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(out.delivered->checksum_failures, (std::map<int32_t, uint32_t>{{0, 1}}));
  EXPECT_EQ(out.delivered->retries, (std::map<int32_t, uint32_t>{{0, 1}}));
  EXPECT_TRUE(out.delivered->rejected_replicas.empty());
  EXPECT_EQ(seq_->readyVersion(0), 1u);
}

TEST_F(ChecksumSequencerTest, RetriesExhaustedSkipTheReplicaAndItsRanksGiveTheSlotBack) {
  build(1);
  landVersionOne();
  for (int32_t r = 2; r < 4; ++r)
    ok(seq_->onVerified(r, 1, kT0));
  failOn(0, 1);
  ok(seq_->onVerified(1, 1, kT0));  // -> retry 1 of 1
  ok(seq_->onSent(0, 1, kT0, sentBy(0, {0, 1}, 1)));
  ok(seq_->onSent(1, 1, kT0, sentBy(1, {0, 1}, 1)));
  ok(seq_->onReceived(0, 1, kT0));
  ok(seq_->onReceived(1, 1, kT0));
  ok(seq_->onVerified(0, 1, kT0));
  const SequencerOutput out = failOn(1, 1);
  EXPECT_TRUE(ofType(out, MessageType::kReady).empty());
  const auto gos = ofType(out, MessageType::kGo);
  ASSERT_EQ(gos.size(), 1u);
  EXPECT_EQ(gos[0].to, (std::vector<RankRef>{rollout(0), rollout(1)})) << "no trainer re-sends";
  EXPECT_EQ(std::get<GoMsg>(gos[0].payload).slot_of_replica, (std::vector<int32_t>{-1, -1}));
  ASSERT_TRUE(out.delivered.has_value());
  EXPECT_EQ(out.delivered->ready_replicas, (std::vector<int32_t>{1}));
  EXPECT_EQ(out.delivered->skipped_replicas, (std::vector<int32_t>{0}));
  EXPECT_EQ(out.delivered->rejected_replicas, (std::vector<int32_t>{0}));
  EXPECT_EQ(out.delivered->checksum_failures, (std::map<int32_t, uint32_t>{{0, 2}}));
  EXPECT_EQ(out.delivered->retries, (std::map<int32_t, uint32_t>{{0, 1}}));
  EXPECT_EQ(seq_->readyVersion(0), 0u) << "the rejected version is not ready on replica 0";
  // The next version goes on normally (replica 0 never held a version: it may not be skipped).
  const SequencerOutput next = ok(seq_->onPublish(0, 2, kT0));
  EXPECT_EQ(ofType(next, MessageType::kPrepare).size(), 2u);
}

TEST_F(ChecksumSequencerTest, DeliveredWaitsForTheTrainersOfAResendWhoseReplicaLeft) {
  landVersionOne();
  for (int32_t r = 2; r < 4; ++r)
    ok(seq_->onVerified(r, 1, kT0));
  failOn(0, 1);
  ok(seq_->onVerified(1, 1, kT0));  // re-send to replica 0 is out to the trainers
  SequencerOutput out = ok(seq_->removeReplica(0, kT0));
  EXPECT_FALSE(out.delivered.has_value()) << "the trainers still answer the re-send's Go";
  ok(seq_->onSent(0, 1, kT0, sentBy(0, {0, 1}, 1)));
  out = ok(seq_->onSent(1, 1, kT0, sentBy(1, {0, 1}, 1)));
  ASSERT_TRUE(out.delivered.has_value());
  EXPECT_EQ(out.delivered->ready_replicas, (std::vector<int32_t>{1}));
  EXPECT_EQ(out.delivered->lost_replicas, (std::vector<int32_t>{0}));
}

TEST_F(ChecksumSequencerTest, AnswersOutOfOrderAreProtocolErrors) {
  ok(seq_->onPublish(0, 1, kT0));
  for (int32_t r = 0; r < 4; ++r)
    ok(seq_->onPrepared(r, SlotMsg{1, 0}, kT0));
  EXPECT_EQ(seq_->onVerified(0, 1, kT0).status().code(), WSYNC_ERR_PROTOCOL) << "before Verify";
  ok(seq_->onSent(0, 1, kT0, sentBy(0, {0, 1, 2, 3})));
  EXPECT_EQ(seq_->onSent(0, 1, kT0).status().code(), WSYNC_ERR_PROTOCOL) << "Sent twice";
  ok(seq_->onSent(1, 1, kT0, sentBy(1, {0, 1, 2, 3})));
  for (int32_t r = 0; r < 4; ++r)
    ok(seq_->onReceived(r, 1, kT0));
  ok(seq_->onVerified(0, 1, kT0));
  EXPECT_EQ(seq_->onVerified(0, 1, kT0).status().code(), WSYNC_ERR_PROTOCOL) << "twice";
  EXPECT_EQ(seq_->onVerified(2, 7, kT0).status().code(), WSYNC_ERR_PROTOCOL) << "another version";
  EXPECT_EQ(seq_->onVerified(9, 1, kT0).status().code(), WSYNC_ERR_INVALID_ARGUMENT);
}

TEST(ChecksumSequencer, WithoutChecksumsSentSumsAreIgnoredAndReadyComesDirectly) {
  VersionSequencer seq(SequencerOptions{}, 1);
  ASSERT_TRUE(seq.addReplica({0, {0}, 2}).isOk());
  ok(seq.onPublish(0, 1, kT0));
  ok(seq.onPrepared(0, SlotMsg{1, 0}, kT0));
  ok(seq.onSent(0, 1, kT0, {{0, 42}}));
  const SequencerOutput out = ok(seq.onReceived(0, 1, kT0));
  EXPECT_TRUE(ofType(out, MessageType::kVerify).empty());
  EXPECT_EQ(ofType(out, MessageType::kReady).size(), 1u);
  EXPECT_TRUE(out.delivered.has_value());
}

}  // namespace
}  // namespace wsync
