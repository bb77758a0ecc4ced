// Prepare ahead (SequencerOptions::prepare_ahead, coordinator/version_sequencer.h): once a version
// is delivered, every replica drains the next version's slot before that version is published, so
// its Publish gets Go without a Prepare round trip; another version number, a Publish that comes
// before the ranks answered and a replica that joined in between still go the usual way. Driven by
// hand: events in, messages out, time as an argument.
#include <gtest/gtest.h>

#include "coordinator/version_sequencer.h"
#include "support/sequencer_events.h"

namespace wsync {
namespace {

using namespace sequencer_events;  // NOLINT(google-build-using-namespace): test helpers

// 1 trainer; replica 0 = rollouts {0, 1}, replica 1 = rollout {2}; `slots` slots each.
class PrepareAheadTest : public ::testing::Test {
 protected:
  void SetUp() override { build(2); }

  void build(int32_t slots) {
    SequencerOptions options;
    options.prepare_ahead = true;
    seq_ = std::make_unique<VersionSequencer>(options, 1);
    ASSERT_TRUE(seq_->addReplica({0, {0, 1}, slots}).isOk());
    ASSERT_TRUE(seq_->addReplica({1, {2}, slots}).isOk());
  }

  // Version `v` from Publish to Delivered when every rank prepares `slot`; returns the output of
  // the event that delivered it.
  SequencerOutput deliver(uint64_t v, int32_t slot) {
    ok(seq_->onPublish(0, v, at(0)));
    for (int32_t r = 0; r < 3; ++r)
      ok(seq_->onPrepared(r, SlotMsg{v, slot}, at(1)));
    return finish(v);
  }

  // Sent and Received of version `v`, in flight with Go sent; returns the last event's output.
  SequencerOutput finish(uint64_t v) {
    ok(seq_->onSent(0, v, at(2)));
    ok(seq_->onReceived(0, v, at(3)));
    ok(seq_->onReceived(1, v, at(3)));
    SequencerOutput out = ok(seq_->onReceived(2, v, at(3)));
    EXPECT_TRUE(out.delivered.has_value());
    return out;
  }

  std::unique_ptr<VersionSequencer> seq_;
};

// Delivered, then Prepare(v + 1, the other slot) to every replica; Publish(v + 1) once the ranks
// drained it: Go at once, no Prepare.
TEST_F(PrepareAheadTest, TheNextVersionIsPreparedOnDeliveryAndGoesAtOnce) {
  const SequencerOutput delivered = deliver(1, 0);
  ASSERT_EQ(ofType(delivered, MessageType::kDelivered).size(), 1u);
  const auto ahead = ofType(delivered, MessageType::kPrepare);
  ASSERT_EQ(ahead.size(), 2u);
  EXPECT_EQ(ahead[0].to, (std::vector<RankRef>{rollout(0), rollout(1)}));
  EXPECT_EQ(ahead[1].to, (std::vector<RankRef>{rollout(2)}));
  for (const OutgoingMessage& m : ahead) {
    EXPECT_EQ(std::get<SlotMsg>(m.payload).version, 2u);
    EXPECT_EQ(std::get<SlotMsg>(m.payload).slot, 1);  // slot 0 holds version 1
  }
  EXPECT_EQ(seq_->inFlightVersion(), 0u);  // nothing started
  for (int32_t r = 0; r < 3; ++r)
    EXPECT_TRUE(ok(seq_->onPrepared(r, SlotMsg{2, 1}, at(5))).messages.empty());
  EXPECT_EQ(seq_->nextDeadline(), std::nullopt);  // no version in flight: nothing times out

  const SequencerOutput published = ok(seq_->onPublish(0, 2, at(10)));
  EXPECT_TRUE(ofType(published, MessageType::kPrepare).empty());
  const auto go = ofType(published, MessageType::kGo);
  ASSERT_EQ(go.size(), 1u);
  EXPECT_EQ(std::get<GoMsg>(go[0].payload).version, 2u);
  EXPECT_EQ(std::get<GoMsg>(go[0].payload).slot_of_replica, (std::vector<int32_t>{1, 1}));
  const SequencerOutput second = finish(2);
  ASSERT_TRUE(second.delivered.has_value());
  EXPECT_EQ(second.delivered->ready_replicas, (std::vector<int32_t>{0, 1}));
  // Two slots, both holding a version: preparing ahead would take version 1 from readers that may
  // still ask for it, so version 3 is prepared when it starts, in slot 0.
  EXPECT_TRUE(ofType(second, MessageType::kPrepare).empty());
  const auto prepare = ofType(ok(seq_->onPublish(0, 3, at(20))), MessageType::kPrepare);
  ASSERT_EQ(prepare.size(), 2u);
  EXPECT_EQ(std::get<SlotMsg>(prepare[0].payload).version, 3u);
  EXPECT_EQ(std::get<SlotMsg>(prepare[0].payload).slot, 0);
}

// Three slots: every delivery prepares the slot of the oldest version ahead, never the one of the
// version before the newest.
TEST_F(PrepareAheadTest, WithThreeSlotsTheOldestSlotIsPreparedAheadEveryTime) {
  build(3);
  uint64_t v = 1;
  SequencerOutput out = deliver(v, 0);
  for (int32_t expected_slot : {1, 2, 0, 1, 2}) {
    const auto ahead = ofType(out, MessageType::kPrepare);
    ASSERT_EQ(ahead.size(), 2u) << "after version " << v;
    EXPECT_EQ(std::get<SlotMsg>(ahead[0].payload).version, v + 1);
    EXPECT_EQ(std::get<SlotMsg>(ahead[0].payload).slot, expected_slot) << "after version " << v;
    ++v;
    for (int32_t r = 0; r < 3; ++r)
      ok(seq_->onPrepared(r, SlotMsg{v, expected_slot}, at(5)));
    ASSERT_EQ(ofType(ok(seq_->onPublish(0, v, at(6))), MessageType::kGo).size(), 1u);
    out = finish(v);
  }
}

// A Publish that arrives before every rank drained the ahead slot: Go once the last one did.
TEST_F(PrepareAheadTest, APublishBeforeTheRanksAnsweredWaitsForThem) {
  deliver(1, 0);
  ok(seq_->onPrepared(2, SlotMsg{2, 1}, at(5)));
  const SequencerOutput published = ok(seq_->onPublish(0, 2, at(6)));
  EXPECT_TRUE(published.messages.empty()) << "no Prepare again, no Go yet";
  EXPECT_EQ(seq_->inFlightVersion(), 2u);
  EXPECT_TRUE(ok(seq_->onPrepared(0, SlotMsg{2, 1}, at(7))).messages.empty());
  const SequencerOutput last = ok(seq_->onPrepared(1, SlotMsg{2, 1}, at(8)));
  ASSERT_EQ(ofType(last, MessageType::kGo).size(), 1u);
  ASSERT_TRUE(finish(2).delivered.has_value());
}

// Another version than the one prepared ahead: Prepare(that version) again; the late answers for
// the ahead version are ignored.
TEST_F(PrepareAheadTest, AnotherVersionIsPreparedAgainAndLateAnswersAreIgnored) {
  deliver(1, 0);
  ok(seq_->onPrepared(0, SlotMsg{2, 1}, at(5)));
  const SequencerOutput published = ok(seq_->onPublish(0, 7, at(6)));
  const auto prepare = ofType(published, MessageType::kPrepare);
  ASSERT_EQ(prepare.size(), 2u);
  EXPECT_EQ(std::get<SlotMsg>(prepare[0].payload).version, 7u);
  EXPECT_EQ(std::get<SlotMsg>(prepare[0].payload).slot, 1);
  EXPECT_TRUE(ok(seq_->onPrepared(1, SlotMsg{2, 1}, at(7))).messages.empty());  // late, ignored
  for (int32_t r = 0; r < 2; ++r)
    EXPECT_TRUE(ok(seq_->onPrepared(r, SlotMsg{7, 1}, at(8))).messages.empty());
  const SequencerOutput last = ok(seq_->onPrepared(2, SlotMsg{7, 1}, at(9)));
  const auto go = ofType(last, MessageType::kGo);
  ASSERT_EQ(go.size(), 1u);
  EXPECT_EQ(std::get<GoMsg>(go[0].payload).version, 7u);
  ASSERT_TRUE(finish(7).delivered.has_value());
}

// A replica that joined after the Prepare ahead gets Prepare(v) when v starts; the others do not.
TEST_F(PrepareAheadTest, AReplicaThatJoinedInBetweenIsPreparedWhenTheVersionStarts) {
  deliver(1, 0);
  for (int32_t r = 0; r < 3; ++r)
    ok(seq_->onPrepared(r, SlotMsg{2, 1}, at(5)));
  ASSERT_TRUE(seq_->addReplica({2, {3}, 2}).isOk());
  const SequencerOutput published = ok(seq_->onPublish(0, 2, at(6)));
  const auto prepare = ofType(published, MessageType::kPrepare);
  ASSERT_EQ(prepare.size(), 1u);
  EXPECT_EQ(prepare[0].to, (std::vector<RankRef>{rollout(3)}));
  EXPECT_TRUE(ofType(published, MessageType::kGo).empty()) << "the joiner has not drained";
  const SequencerOutput go = ok(seq_->onPrepared(3, SlotMsg{2, 0}, at(7)));
  ASSERT_EQ(ofType(go, MessageType::kGo).size(), 1u);
  EXPECT_EQ(std::get<GoMsg>(ofType(go, MessageType::kGo)[0].payload).slot_of_replica,
            (std::vector<int32_t>{1, 1, 0}));
}

// Answers for the ahead version are checked like any: the slot asked, once per rank.
TEST_F(PrepareAheadTest, AheadAnswersForAnotherSlotOrTwiceAreProtocolErrors) {
  deliver(1, 0);
  EXPECT_EQ(failure(seq_->onPrepared(0, SlotMsg{2, 0}, at(5))).code(), WSYNC_ERR_PROTOCOL);
  ok(seq_->onPrepared(0, SlotMsg{2, 1}, at(5)));
  EXPECT_EQ(failure(seq_->onPrepared(0, SlotMsg{2, 1}, at(6))).code(), WSYNC_ERR_PROTOCOL);
  EXPECT_EQ(failure(seq_->onPrepared(1, SlotMsg{3, 1}, at(6))).code(), WSYNC_ERR_PROTOCOL)
      << "a version neither started nor prepared ahead";
}

}  // namespace
}  // namespace wsync
