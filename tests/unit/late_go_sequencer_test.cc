// A late Go per replica (coordinator/version_sequencer.h): a replica whose rank said SlotBusy (its
// readers hold the slot) no longer holds up Go for the others; it gets a Go of its own once its
// ranks prepared, or past the grace Go(v, -1) to its ranks only. Driven by hand: events in,
// messages out, time as an argument.
#include <gtest/gtest.h>

#include "coordinator/version_sequencer.h"
#include "support/sequencer_events.h"

namespace wsync {
namespace {

using namespace sequencer_events;  // NOLINT(google-build-using-namespace): test helpers

// 2 trainers; replica 0 = rollouts {0, 1}, replica 1 = rollouts {2, 3}; 2 slots each; version 1
// ready in slot 0 of both, so version 2 goes to slot 1.
class LateGoTest : public ::testing::Test {
 protected:
  void SetUp() override { build(SequencerOptions{}); }

  void build(SequencerOptions options) {
    seq_ = std::make_unique<VersionSequencer>(options, 2);
    ASSERT_TRUE(seq_->addReplica({0, {0, 1}, 2}).isOk());
    ASSERT_TRUE(seq_->addReplica({1, {2, 3}, 2}).isOk());
    ok(seq_->onPublish(0, 1, at(0)));
    for (int32_t r = 0; r < 4; ++r)
      ok(seq_->onPrepared(r, SlotMsg{1, 0}, at(0)));
    ok(seq_->onSent(0, 1, at(0)));
    ok(seq_->onSent(1, 1, at(0)));
    for (int32_t r = 0; r < 4; ++r)
      last_ = ok(seq_->onReceived(r, 1, at(0)));
    ASSERT_TRUE(last_.delivered.has_value());
  }

  // Version 2 starts at 1000; replica 1 prepares slot 1, rollout 0 too, rollout 1 is busy.
  SequencerOutput startWithReplica0Busy() {
    ok(seq_->onPublish(0, 2, at(1000)));
    ok(seq_->onPrepared(2, SlotMsg{2, 1}, at(1001)));
    ok(seq_->onPrepared(3, SlotMsg{2, 1}, at(1001)));
    EXPECT_TRUE(ok(seq_->onPrepared(0, SlotMsg{2, 1}, at(1001))).messages.empty());
    return ok(seq_->onSlotBusy(1, SlotMsg{2, 1}, at(1002)));
  }

  // Replica 1 takes version 2: both trainers' next Sent, its ranks' Received.
  SequencerOutput replica1Takes(int ms) {
    ok(seq_->onSent(0, 2, at(ms)));
    ok(seq_->onSent(1, 2, at(ms)));
    ok(seq_->onReceived(2, 2, at(ms)));
    return ok(seq_->onReceived(3, 2, at(ms)));
  }

  std::unique_ptr<VersionSequencer> seq_;
  SequencerOutput last_;
};

TEST_F(LateGoTest, FastReplicaGoesAtOnceAndTheBusyOneGetsItsOwnGo) {
  SequencerOutput out = startWithReplica0Busy();
  auto go = ofType(out, MessageType::kGo);
  ASSERT_EQ(go.size(), 1u) << "Go without waiting for the busy replica";
  EXPECT_EQ(std::get<GoMsg>(go[0].payload).slot_of_replica, (std::vector<int32_t>{-1, 1}));
  EXPECT_EQ(go[0].to, (std::vector<RankRef>{trainer(0), trainer(1), rollout(2), rollout(3)}))
      << "the busy replica's ranks hear nothing yet";
  EXPECT_EQ(seq_->nextDeadline(), at(1200)) << "the grace still applies to the busy replica";

  out = replica1Takes(1010);
  const auto ready = ofType(out, MessageType::kReady);
  ASSERT_EQ(ready.size(), 1u) << "readable on the fast replica before the busy one prepared";
  EXPECT_EQ(ready[0].to, (std::vector<RankRef>{rollout(2), rollout(3)}));
  EXPECT_FALSE(out.delivered.has_value()) << "Delivered waits for the busy replica";
  EXPECT_EQ(seq_->readyVersion(1), 2u);

  out = ok(seq_->onPrepared(1, SlotMsg{2, 1}, at(1100)));  // its reader let go
  go = ofType(out, MessageType::kGo);
  ASSERT_EQ(go.size(), 1u);
  EXPECT_EQ(std::get<GoMsg>(go[0].payload).slot_of_replica, (std::vector<int32_t>{1, -1}));
  EXPECT_EQ(go[0].to, (std::vector<RankRef>{trainer(0), trainer(1), rollout(0), rollout(1)}));
  ASSERT_EQ(out.notes.size(), 1u);
  EXPECT_EQ(out.notes[0], "version 2: replica 0 goes late (its readers held slot 1)");

  ok(seq_->onReceived(0, 2, at(1101)));
  ok(seq_->onReceived(1, 2, at(1101)));
  ok(seq_->onSent(0, 2, at(1102)));
  out = ok(seq_->onSent(1, 2, at(1102)));
  ASSERT_EQ(ofType(out, MessageType::kReady).size(), 1u);
  EXPECT_EQ(ofType(out, MessageType::kReady)[0].to, (std::vector<RankRef>{rollout(0), rollout(1)}));
  ASSERT_TRUE(out.delivered.has_value());
  EXPECT_EQ(out.delivered->ready_replicas, (std::vector<int32_t>{0, 1}));
  EXPECT_TRUE(out.delivered->skipped_replicas.empty());
  EXPECT_EQ(failure(seq_->onSent(0, 2, at(1103))).code(), WSYNC_ERR_PROTOCOL);
}

TEST_F(LateGoTest, BusyPastTheGraceIsSkippedByAGoOfItsOwn) {
  startWithReplica0Busy();
  SequencerOutput out = replica1Takes(1010);
  EXPECT_FALSE(out.delivered.has_value());
  EXPECT_TRUE(ok(seq_->advance(at(1199))).messages.empty()) << "within the grace";
  out = ok(seq_->advance(at(1200)));
  const auto go = ofType(out, MessageType::kGo);
  ASSERT_EQ(go.size(), 1u);
  EXPECT_EQ(std::get<GoMsg>(go[0].payload).slot_of_replica, (std::vector<int32_t>{-1, -1}));
  EXPECT_EQ(go[0].to, (std::vector<RankRef>{rollout(0), rollout(1)}))
      << "only its ranks: they give the slot back; the trainers write nothing";
  ASSERT_EQ(out.notes.size(), 1u);
  EXPECT_EQ(out.notes[0], "version 2: replica 0 skipped (its readers still hold slot 1)");
  ASSERT_TRUE(out.delivered.has_value());
  EXPECT_EQ(out.delivered->ready_replicas, (std::vector<int32_t>{1}));
  EXPECT_EQ(out.delivered->skipped_replicas, (std::vector<int32_t>{0}));
  // Its late Prepared is ignored; version 3 asks it for the same slot again.
  EXPECT_TRUE(ok(seq_->onPrepared(1, SlotMsg{2, 1}, at(1300))).messages.empty());
  out = ok(seq_->onPublish(0, 3, at(1300)));
  EXPECT_EQ(std::get<SlotMsg>(ofType(out, MessageType::kPrepare)[0].payload).slot, 1);
}

TEST_F(LateGoTest, AllBusyWaitsThenTheFirstPreparedGoesAlone) {
  ok(seq_->onPublish(0, 2, at(1000)));
  EXPECT_TRUE(ok(seq_->onSlotBusy(1, SlotMsg{2, 1}, at(1001))).messages.empty());
  EXPECT_TRUE(ok(seq_->onSlotBusy(3, SlotMsg{2, 1}, at(1001))).messages.empty());
  ok(seq_->onPrepared(0, SlotMsg{2, 1}, at(1001)));
  EXPECT_TRUE(ok(seq_->onPrepared(2, SlotMsg{2, 1}, at(1001))).messages.empty())
      << "every replica busy: nothing to start";
  const SequencerOutput out = ok(seq_->onPrepared(3, SlotMsg{2, 1}, at(1050)));
  const auto go = ofType(out, MessageType::kGo);
  ASSERT_EQ(go.size(), 1u);
  EXPECT_EQ(std::get<GoMsg>(go[0].payload).slot_of_replica, (std::vector<int32_t>{-1, 1}));
  EXPECT_EQ(go[0].to, (std::vector<RankRef>{trainer(0), trainer(1), rollout(2), rollout(3)}));
}

TEST_F(LateGoTest, StaleOrForeignSlotBusyIsIgnored) {
  ok(seq_->onPublish(0, 2, at(1000)));
  for (int32_t r : {0, 2, 3})
    ok(seq_->onPrepared(r, SlotMsg{2, 1}, at(1001)));
  EXPECT_TRUE(ok(seq_->onSlotBusy(1, SlotMsg{1, 1}, at(1002))).messages.empty()) << "version 1";
  EXPECT_TRUE(ok(seq_->onSlotBusy(1, SlotMsg{2, 0}, at(1002))).messages.empty()) << "slot 0";
  EXPECT_TRUE(ok(seq_->onSlotBusy(9, SlotMsg{2, 1}, at(1002))).messages.empty()) << "no rank";
  EXPECT_TRUE(ok(seq_->onSlotBusy(0, SlotMsg{2, 1}, at(1002))).messages.empty())
      << "rollout 0 prepared already";
  // So replica 0 is not busy: Go still waits for rollout 1's answer, as before.
  EXPECT_EQ(ofType(ok(seq_->onPrepared(1, SlotMsg{2, 1}, at(1003))), MessageType::kGo).size(), 1u);
}

TEST_F(LateGoTest, UnskippableBusyReplicaWaitsAloneAndIsReportedHoldingGo) {
  SequencerOptions options;
  options.max_staleness = 0;
  options.replica_timeout = std::chrono::milliseconds(500);
  build(options);
  ASSERT_EQ(ofType(startWithReplica0Busy(), MessageType::kGo).size(), 1u);
  ASSERT_TRUE(replica1Takes(1010).messages.size() > 0);
  EXPECT_TRUE(ok(seq_->advance(at(1400))).messages.empty());
  EXPECT_TRUE(seq_->holdingGo(at(1400)).empty()) << "before the replica bound";
  EXPECT_EQ(seq_->holdingGo(at(1500)), (std::vector<int32_t>{0}));
  const SequencerOutput out = ok(seq_->onPrepared(1, SlotMsg{2, 1}, at(1600)));
  ASSERT_EQ(ofType(out, MessageType::kGo).size(), 1u);
  EXPECT_EQ(std::get<GoMsg>(ofType(out, MessageType::kGo)[0].payload).slot_of_replica,
            (std::vector<int32_t>{1, -1}));
  EXPECT_TRUE(seq_->holdingGo(at(1600)).empty());
}

TEST_F(LateGoTest, TimeoutNamesTheBusyReplica) {
  SequencerOptions options;
  options.max_staleness = 0;
  build(options);
  startWithReplica0Busy();
  replica1Takes(1010);
  const Status s = seq_->advance(at(1000) + options.timeout).status();
  EXPECT_EQ(s.code(), WSYNC_ERR_TIMEOUT);
  EXPECT_NE(s.message().find("replica 0 (readers still hold slot 1)"), std::string::npos)
      << s.message();
}

TEST_F(LateGoTest, AbortGivesTheBusyReplicasSlotBack) {
  startWithReplica0Busy();
  const SequencerOutput out = seq_->abortVersions();
  const auto go = ofType(out, MessageType::kGo);
  ASSERT_EQ(go.size(), 1u);
  EXPECT_EQ(go[0].to, (std::vector<RankRef>{rollout(0), rollout(1), rollout(2), rollout(3)}));
}

TEST_F(LateGoTest, ABusyAnswerToPrepareAheadCountsWhenTheVersionStarts) {
  SequencerOptions options;
  options.prepare_ahead = true;
  build(options);
  // Delivering version 1 prepared version 2 ahead in slot 1 on both replicas.
  ASSERT_EQ(ofType(last_, MessageType::kPrepare).size(), 2u);
  for (int32_t r : {0, 2, 3})
    ok(seq_->onPrepared(r, SlotMsg{2, 1}, at(10)));
  EXPECT_TRUE(ok(seq_->onSlotBusy(1, SlotMsg{2, 1}, at(10))).messages.empty());
  const SequencerOutput out = ok(seq_->onPublish(0, 2, at(1000)));
  EXPECT_TRUE(ofType(out, MessageType::kPrepare).empty());
  const auto go = ofType(out, MessageType::kGo);
  ASSERT_EQ(go.size(), 1u) << "Go at once for replica 1 alone";
  EXPECT_EQ(std::get<GoMsg>(go[0].payload).slot_of_replica, (std::vector<int32_t>{-1, 1}));
}

}  // namespace
}  // namespace wsync
