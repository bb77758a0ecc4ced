// Trainer restart in the version sequencer and the delivery gate (coordinator/version_sequencer.h
// abortVersions, coordinator/delivery_gate.h abandonAll), driven by hand: the version in flight is
// aborted so that no slot a lost trainer wrote becomes readable, versions continue above it, and
// the rollouts' late messages about the aborted version fail nothing.
#include <gtest/gtest.h>

#include "coordinator/delivery_gate.h"
#include "coordinator/version_sequencer.h"
#include "support/sequencer_events.h"

namespace wsync {
namespace {

using namespace sequencer_events;  // NOLINT(google-build-using-namespace): test helpers

// 2 trainers; replica 0 = rollouts {0, 1}, replica 1 = rollouts {2, 3}; 2 slots each.
class TrainerRestartSequencerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(seq_.addReplica({0, {0, 1}, 2}).isOk());
    ASSERT_TRUE(seq_.addReplica({1, {2, 3}, 2}).isOk());
  }

  // Version v: published, every rank prepared `slot`, Go sent; nothing sent or received yet.
  void startAndGo(uint64_t v, int32_t slot) {
    ok(seq_.onPublish(0, v, at(0)));
    for (int32_t r = 0; r < 4; ++r)
      ok(seq_.onPrepared(r, SlotMsg{v, slot}, at(0)));
  }

  void deliver(uint64_t v, int32_t slot) {
    startAndGo(v, slot);
    ok(seq_.onSent(0, v, at(0)));
    ok(seq_.onSent(1, v, at(0)));
    SequencerOutput out;
    for (int32_t r = 0; r < 4; ++r)
      out = ok(seq_.onReceived(r, v, at(0)));
    ASSERT_TRUE(out.delivered.has_value());
  }

  VersionSequencer seq_{SequencerOptions{}, 2};
};

TEST_F(TrainerRestartSequencerTest, AbortGivesTheSlotBackOnReplicasNotReady) {
  deliver(1, 0);
  startAndGo(2, 1);
  // Replica 0 landed and is ready; replica 1 is still being written when the trainers are lost.
  ok(seq_.onSent(0, 2, at(1)));
  ok(seq_.onSent(1, 2, at(1)));
  ok(seq_.onReceived(0, 2, at(1)));
  const SequencerOutput ready = ok(seq_.onReceived(1, 2, at(1)));
  ASSERT_EQ(ofType(ready, MessageType::kReady).size(), 1u);

  const SequencerOutput out = seq_.abortVersions();
  ASSERT_EQ(out.messages.size(), 1u);
  const OutgoingMessage& go = out.messages[0];
  EXPECT_EQ(go.type, MessageType::kGo);
  EXPECT_EQ(go.to, (std::vector<RankRef>{rollout(2), rollout(3)}));
  EXPECT_EQ(std::get<GoMsg>(go.payload).version, 2u);
  EXPECT_EQ(std::get<GoMsg>(go.payload).slot_of_replica, (std::vector<int32_t>{-1, -1}));
  EXPECT_FALSE(out.delivered.has_value());
  EXPECT_EQ(seq_.inFlightVersion(), 0u);
  EXPECT_EQ(seq_.readyVersion(0), 2u);
  EXPECT_EQ(seq_.readyVersion(1), 1u);
  ASSERT_EQ(out.notes.size(), 1u);
  EXPECT_NE(out.notes[0].find("version 2 aborted; replicas 1 give its slot back"),
            std::string::npos)
      << out.notes[0];

  // Late messages of the rollouts about version 2 are ignored.
  EXPECT_TRUE(ok(seq_.onReceived(2, 2, at(2))).messages.empty());
  EXPECT_TRUE(ok(seq_.onPrepared(3, SlotMsg{2, 1}, at(2))).messages.empty());
  EXPECT_FALSE(seq_.nextDeadline().has_value()) << "no version in flight: nothing can time out";
}

TEST_F(TrainerRestartSequencerTest, AbortBeforeGoReachesEveryPreparingReplica) {
  deliver(1, 0);
  ok(seq_.onPublish(0, 2, at(0)));
  ok(seq_.onPrepared(0, SlotMsg{2, 1}, at(0)));  // the rest still drain
  const SequencerOutput out = seq_.abortVersions();
  ASSERT_EQ(out.messages.size(), 1u);
  EXPECT_EQ(out.messages[0].to,
            (std::vector<RankRef>{rollout(0), rollout(1), rollout(2), rollout(3)}));
  EXPECT_EQ(std::get<GoMsg>(out.messages[0].payload).slot_of_replica,
            (std::vector<int32_t>{-1, -1}));
}

TEST_F(TrainerRestartSequencerTest, VersionsContinueAboveTheLastStartedOne) {
  deliver(1, 0);
  startAndGo(2, 1);
  ok(seq_.onPublish(1, 3, at(0)));  // queued behind 2: forgotten by the abort
  seq_.abortVersions();
  for (uint64_t v : {1u, 2u}) {
    const Status s = failure(seq_.onPublish(0, v, at(5)));
    EXPECT_EQ(s.code(), WSYNC_ERR_INVALID_USAGE);
    EXPECT_NE(s.message().find("trainer 0 published version " + std::to_string(v) +
                               ", not above version 2"),
              std::string::npos)
        << s.toString();
  }
  EXPECT_EQ(seq_.inFlightVersion(), 0u) << "version 3 was forgotten with the lost trainers";
  // The next version goes to the slot that does not hold the newest ready version (slot 0 holds
  // version 1 on both replicas; slot 1 was given back).
  const SequencerOutput out = ok(seq_.onPublish(0, 3, at(6)));
  const auto prepares = ofType(out, MessageType::kPrepare);
  ASSERT_EQ(prepares.size(), 2u);
  EXPECT_EQ(std::get<SlotMsg>(prepares[0].payload).slot, 1);
  for (int32_t r = 0; r < 4; ++r)
    ok(seq_.onPrepared(r, SlotMsg{3, 1}, at(6)));
  ok(seq_.onSent(0, 3, at(7)));
  ok(seq_.onSent(1, 3, at(7)));
  SequencerOutput last;
  for (int32_t r = 0; r < 4; ++r)
    last = ok(seq_.onReceived(r, 3, at(7)));
  ASSERT_TRUE(last.delivered.has_value());
  EXPECT_EQ(last.delivered->ready_replicas, (std::vector<int32_t>{0, 1}));
}

TEST_F(TrainerRestartSequencerTest, AbortWithNothingInFlightOnlyRaisesTheFloor) {
  deliver(1, 0);
  const SequencerOutput out = seq_.abortVersions();
  EXPECT_TRUE(out.messages.empty());
  EXPECT_EQ(failure(seq_.onPublish(1, 1, at(1))).code(), WSYNC_ERR_INVALID_USAGE);
  EXPECT_EQ(ofType(ok(seq_.onPublish(1, 2, at(1))), MessageType::kPrepare).size(), 2u);
}

TEST(TrainerRestartDeliveryGate, AbandonedVersionsReleaseNothingAndAreNeverOverdue) {
  DeliveryGate gate;
  gate.readySent(4, 0, at(0));
  gate.readySent(4, 1, at(0));
  OutgoingMessage delivered{MessageType::kDelivered, {trainer(0)}, DeliveredMsg{4, {0}, {}, {}}};
  EXPECT_FALSE(gate.deliver(delivered).has_value()) << "held until both ranks confirm";
  gate.readySent(5, 0, at(0));  // version 5 was aborted after its Ready to rollout 0
  gate.abandonAll();
  EXPECT_FALSE(gate.overdue(at(100000), std::chrono::milliseconds(10)).has_value());
  for (auto [version, rank] : {std::pair{4u, 0}, std::pair{4u, 1}, std::pair{5u, 0}}) {
    Result<std::optional<OutgoingMessage>> released = gate.readied(version, rank);
    ASSERT_TRUE(released.isOk()) << released.status().toString();
    EXPECT_FALSE(released->has_value()) << "the lost trainers get no Delivered";
  }
  EXPECT_EQ(gate.readied(4, 0).status().code(), WSYNC_ERR_PROTOCOL) << "confirmed twice";
}

}  // namespace
}  // namespace wsync
