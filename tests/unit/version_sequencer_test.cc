// The version sequencer (coordinator/version_sequencer.h) driven by hand: events in, messages out,
// time as an argument. Every test checks the messages' types, recipients and payloads.
#include "coordinator/version_sequencer.h"

#include <gtest/gtest.h>

#include "support/sequencer_events.h"

namespace wsync {
namespace {

using std::chrono::milliseconds;
using namespace sequencer_events;  // NOLINT(google-build-using-namespace): test helpers

// 2 trainers; replica 0 = rollouts {0, 1}, replica 1 = rollouts {2, 3}; 2 slots each.
class VersionSequencerTest : public ::testing::Test {
 protected:
  void SetUp() override { build(SequencerOptions{}); }

  void build(SequencerOptions options, int32_t slots = 2) {
    seq_ = std::make_unique<VersionSequencer>(options, 2);
    ASSERT_TRUE(seq_->addReplica({0, {0, 1}, slots}).isOk());
    ASSERT_TRUE(seq_->addReplica({1, {2, 3}, slots}).isOk());
  }

  void prepare(int32_t rank, uint64_t v, int32_t slot, int ms = 0) {
    last_ = ok(seq_->onPrepared(rank, SlotMsg{v, slot}, at(ms)));
  }

  // Runs version `v` to delivery on every replica, each writing `slot`, at time `ms`.
  void deliver(uint64_t v, int32_t slot, int ms = 0) {
    ok(seq_->onPublish(0, v, at(ms)));
    for (int32_t r = 0; r < 4; ++r)
      prepare(r, v, slot, ms);
    ok(seq_->onSent(0, v, at(ms)));
    ok(seq_->onSent(1, v, at(ms)));
    for (int32_t r = 0; r < 3; ++r)
      ok(seq_->onReceived(r, v, at(ms)));
    last_ = ok(seq_->onReceived(3, v, at(ms)));
    ASSERT_TRUE(last_.delivered.has_value());
    ASSERT_EQ(last_.delivered->version, v);
  }

  std::unique_ptr<VersionSequencer> seq_;
  SequencerOutput last_;
};

TEST_F(VersionSequencerTest, NormalVersionGoesPrepareGoReadyDelivered) {
  SequencerOutput out = ok(seq_->onPublish(1, 1, at(0)));
  ASSERT_EQ(out.messages.size(), 2u);
  for (int replica = 0; replica < 2; ++replica) {
    const OutgoingMessage& m = out.messages[static_cast<size_t>(replica)];
    EXPECT_EQ(m.type, MessageType::kPrepare);
    EXPECT_EQ(m.to, (std::vector<RankRef>{rollout(2 * replica), rollout(2 * replica + 1)}));
    EXPECT_EQ(std::get<SlotMsg>(m.payload).version, 1u);
    EXPECT_EQ(std::get<SlotMsg>(m.payload).slot, 0);
  }
  EXPECT_EQ(seq_->inFlightVersion(), 1u);
  EXPECT_TRUE(ok(seq_->onPublish(0, 1, at(1))).messages.empty());  // already started

  for (int32_t r = 0; r < 3; ++r) {
    prepare(r, 1, 0, 2);
    EXPECT_TRUE(last_.messages.empty()) << "Go before rollout 3 drained its slot";
  }
  prepare(3, 1, 0, 3);
  ASSERT_EQ(last_.messages.size(), 1u);
  const OutgoingMessage& go = last_.messages[0];
  EXPECT_EQ(go.type, MessageType::kGo);
  EXPECT_EQ(go.to, (std::vector<RankRef>{trainer(0), trainer(1), rollout(0), rollout(1), rollout(2),
                                         rollout(3)}));
  EXPECT_EQ(std::get<GoMsg>(go.payload).version, 1u);
  EXPECT_EQ(std::get<GoMsg>(go.payload).slot_of_replica, (std::vector<int32_t>{0, 0}));

  EXPECT_TRUE(ok(seq_->onSent(0, 1, at(4))).messages.empty());
  for (int32_t r = 0; r < 4; ++r)
    EXPECT_TRUE(ok(seq_->onReceived(r, 1, at(5))).messages.empty()) << "trainer 1 has not sent";
  out = ok(seq_->onSent(1, 1, at(6)));
  ASSERT_EQ(out.messages.size(), 3u);
  EXPECT_EQ(out.messages[0].type, MessageType::kReady);
  EXPECT_EQ(out.messages[0].to, (std::vector<RankRef>{rollout(0), rollout(1)}));
  EXPECT_EQ(std::get<SlotMsg>(out.messages[0].payload).slot, 0);
  EXPECT_EQ(out.messages[1].type, MessageType::kReady);
  EXPECT_EQ(out.messages[1].to, (std::vector<RankRef>{rollout(2), rollout(3)}));
  EXPECT_EQ(out.messages[2].type, MessageType::kDelivered);
  EXPECT_EQ(out.messages[2].to, (std::vector<RankRef>{trainer(0), trainer(1)}));
  EXPECT_EQ(std::get<DeliveredMsg>(out.messages[2].payload).version, 1u);
  ASSERT_TRUE(out.delivered.has_value());
  EXPECT_EQ(out.delivered->ready_replicas, (std::vector<int32_t>{0, 1}));
  EXPECT_TRUE(out.delivered->skipped_replicas.empty());
  EXPECT_TRUE(out.delivered->lost_replicas.empty());
  EXPECT_EQ(seq_->inFlightVersion(), 0u);
  EXPECT_EQ(seq_->readyVersion(0), 1u);
  EXPECT_FALSE(seq_->nextDeadline().has_value());

  // The payload encodes as the protocol struct it holds.
  SlotMsg decoded;
  ASSERT_TRUE(decode(out.messages[0].encodedPayload(), decoded).isOk());
  EXPECT_EQ(decoded.version, 1u);
  EXPECT_EQ(decoded.slot, 0);
}

TEST_F(VersionSequencerTest, SlotsAlternateAwayFromTheNewestReadyOne) {
  build(SequencerOptions{}, 3);
  deliver(1, 0);
  SequencerOutput out = ok(seq_->onPublish(0, 2, at(0)));
  EXPECT_EQ(std::get<SlotMsg>(ofType(out, MessageType::kPrepare)[0].payload).slot, 1);  // empty
  for (int32_t r = 0; r < 4; ++r)
    prepare(r, 2, 1);
  ok(seq_->onSent(0, 2, at(0)));
  ok(seq_->onSent(1, 2, at(0)));
  for (int32_t r = 0; r < 4; ++r)
    out = ok(seq_->onReceived(r, 2, at(0)));
  ASSERT_TRUE(out.delivered.has_value());
  out = ok(seq_->onPublish(0, 3, at(0)));
  EXPECT_EQ(std::get<SlotMsg>(ofType(out, MessageType::kPrepare)[0].payload).slot, 2);  // empty
  // Two slots: the one that is not the newest ready one.
  build(SequencerOptions{}, 2);
  deliver(1, 0);
  deliver(2, 1);
  out = ok(seq_->onPublish(0, 3, at(0)));
  EXPECT_EQ(std::get<SlotMsg>(ofType(out, MessageType::kPrepare)[1].payload).slot, 0);
}

TEST_F(VersionSequencerTest, ReadyOnlyAfterEveryRankOfTheReplicaAndDeliveredAfterEveryReplica) {
  ok(seq_->onPublish(0, 1, at(0)));
  for (int32_t r = 0; r < 4; ++r)
    prepare(r, 1, 0);
  ok(seq_->onSent(0, 1, at(0)));
  ok(seq_->onSent(1, 1, at(0)));
  EXPECT_TRUE(ok(seq_->onReceived(0, 1, at(1))).messages.empty()) << "rollout 1 still receiving";
  EXPECT_TRUE(ok(seq_->onReceived(2, 1, at(1))).messages.empty());
  SequencerOutput out = ok(seq_->onReceived(1, 1, at(2)));
  ASSERT_EQ(out.messages.size(), 1u) << "Ready for replica 0 only; no Delivered yet";
  EXPECT_EQ(out.messages[0].type, MessageType::kReady);
  EXPECT_EQ(out.messages[0].to, (std::vector<RankRef>{rollout(0), rollout(1)}));
  EXPECT_FALSE(out.delivered.has_value());
  out = ok(seq_->onReceived(3, 1, at(3)));
  ASSERT_EQ(out.messages.size(), 2u);
  EXPECT_EQ(out.messages[0].type, MessageType::kReady);
  EXPECT_EQ(out.messages[0].to, (std::vector<RankRef>{rollout(2), rollout(3)}));
  EXPECT_EQ(out.messages[1].type, MessageType::kDelivered);
}

TEST_F(VersionSequencerTest, BusyReplicaIsSkippedAfterTheGrace) {
  deliver(1, 0);
  ok(seq_->onPublish(0, 2, at(1000)));
  EXPECT_EQ(seq_->nextDeadline(), at(1200));
  prepare(0, 2, 1, 1010);  // rollout 1 still holds slot 1 under a lease
  prepare(2, 2, 1, 1010);
  prepare(3, 2, 1, 1010);
  EXPECT_TRUE(last_.messages.empty());
  EXPECT_TRUE(ok(seq_->advance(at(1199))).messages.empty()) << "within the grace";
  SequencerOutput out = ok(seq_->advance(at(1200)));
  ASSERT_EQ(out.messages.size(), 1u);
  const GoMsg& go = std::get<GoMsg>(out.messages[0].payload);
  EXPECT_EQ(go.slot_of_replica, (std::vector<int32_t>{-1, 1}));
  EXPECT_EQ(out.messages[0].to.size(), 6u)
      << "the skipped replica hears Go too, to give its slot back";
  ASSERT_EQ(out.notes.size(), 1u);
  EXPECT_EQ(out.notes[0], "version 2: replica 0 skipped (its readers still hold slot 1)");
  EXPECT_EQ(seq_->nextDeadline(), at(1000) + SequencerOptions{}.timeout);

  Status s = failure(seq_->onReceived(0, 2, at(1201)));
  EXPECT_EQ(s.code(), WSYNC_ERR_PROTOCOL);
  EXPECT_EQ(s.message(), "rollout 0 reported version 2 received but its replica skips it");
  ok(seq_->onSent(0, 2, at(1201)));
  ok(seq_->onSent(1, 2, at(1201)));
  ok(seq_->onReceived(2, 2, at(1202)));
  out = ok(seq_->onReceived(3, 2, at(1202)));
  ASSERT_EQ(ofType(out, MessageType::kReady).size(), 1u);
  EXPECT_EQ(ofType(out, MessageType::kReady)[0].to, (std::vector<RankRef>{rollout(2), rollout(3)}));
  ASSERT_TRUE(out.delivered.has_value());
  EXPECT_EQ(out.delivered->ready_replicas, (std::vector<int32_t>{1}));
  EXPECT_EQ(out.delivered->skipped_replicas, (std::vector<int32_t>{0}));
  EXPECT_EQ(seq_->readyVersion(0), 1u);
  EXPECT_EQ(seq_->readyVersion(1), 2u);

  // The late Prepared of the skipped version is ignored; the next version asks the same slot.
  EXPECT_TRUE(ok(seq_->onPrepared(1, SlotMsg{2, 1}, at(1300))).messages.empty());
  out = ok(seq_->onPublish(0, 3, at(1300)));
  EXPECT_EQ(std::get<SlotMsg>(ofType(out, MessageType::kPrepare)[0].payload).slot, 1);
  EXPECT_EQ(std::get<SlotMsg>(ofType(out, MessageType::kPrepare)[1].payload).slot, 0);
}

TEST_F(VersionSequencerTest, ReplicaWithoutAVersionIsNeverSkipped) {
  ok(seq_->onPublish(0, 1, at(0)));
  for (int32_t r = 1; r < 4; ++r)
    prepare(r, 1, 0);
  EXPECT_TRUE(ok(seq_->advance(at(5000))).messages.empty());
  // The grace was looked at: the next deadline is the version's timeout, not a busy loop.
  EXPECT_EQ(seq_->nextDeadline(), at(0) + SequencerOptions{}.timeout);
  prepare(0, 1, 0, 5001);
  ASSERT_EQ(ofType(last_, MessageType::kGo).size(), 1u);
  EXPECT_EQ(std::get<GoMsg>(last_.messages[0].payload).slot_of_replica,
            (std::vector<int32_t>{0, 0}));
}

TEST_F(VersionSequencerTest, StalenessBoundMakesTheVersionWait) {
  SequencerOptions options;
  options.max_staleness = 1;
  build(options);
  deliver(1, 0);
  // Version 2: replica 0 lags 1 version if skipped, within the bound.
  ok(seq_->onPublish(0, 2, at(0)));
  for (int32_t r = 2; r < 4; ++r)
    prepare(r, 2, 1);
  SequencerOutput out = ok(seq_->advance(at(200)));
  ASSERT_EQ(ofType(out, MessageType::kGo).size(), 1u);
  EXPECT_EQ(std::get<GoMsg>(out.messages[0].payload).slot_of_replica,
            (std::vector<int32_t>{-1, 1}));
  ok(seq_->onSent(0, 2, at(201)));
  ok(seq_->onSent(1, 2, at(201)));
  ok(seq_->onReceived(2, 2, at(201)));
  ASSERT_TRUE(ok(seq_->onReceived(3, 2, at(201))).delivered.has_value());
  // Version 3: skipping would make it lag 2 > 1: Go waits past the grace for its readers.
  ok(seq_->onPublish(0, 3, at(300)));
  prepare(2, 3, 0, 300);
  prepare(3, 3, 0, 300);
  prepare(0, 3, 1, 300);
  EXPECT_TRUE(ok(seq_->advance(at(900))).messages.empty());
  prepare(1, 3, 1, 901);
  ASSERT_EQ(ofType(last_, MessageType::kGo).size(), 1u);
  EXPECT_EQ(std::get<GoMsg>(last_.messages[0].payload).slot_of_replica,
            (std::vector<int32_t>{1, 0}));
}

TEST_F(VersionSequencerTest, ZeroStalenessNeverSkips) {
  SequencerOptions options;
  options.max_staleness = 0;
  build(options);
  deliver(1, 0);
  ok(seq_->onPublish(0, 2, at(0)));
  prepare(2, 2, 1);
  prepare(3, 2, 1);
  EXPECT_TRUE(ok(seq_->advance(at(10000))).messages.empty());
}

TEST_F(VersionSequencerTest, VersionsStartInIncreasingOrderOneAtATime) {
  ok(seq_->onPublish(0, 1, at(0)));
  EXPECT_TRUE(ok(seq_->onPublish(0, 3, at(0))).messages.empty()) << "version 1 is in flight";
  EXPECT_TRUE(ok(seq_->onPublish(1, 2, at(0))).messages.empty());
  for (int32_t r = 0; r < 4; ++r)
    prepare(r, 1, 0);
  ok(seq_->onSent(0, 1, at(0)));
  ok(seq_->onSent(1, 1, at(0)));
  for (int32_t r = 0; r < 3; ++r)
    ok(seq_->onReceived(r, 1, at(0)));
  SequencerOutput out = ok(seq_->onReceived(3, 1, at(7)));
  // Ready for replica 1, Delivered(1), then version 2 (the lowest queued) starts at once, at this
  // event's time.
  ASSERT_EQ(out.messages.size(), 4u);
  EXPECT_EQ(out.messages[1].type, MessageType::kDelivered);
  EXPECT_EQ(out.messages[2].type, MessageType::kPrepare);
  EXPECT_EQ(std::get<SlotMsg>(out.messages[2].payload).version, 2u);
  EXPECT_EQ(seq_->inFlightVersion(), 2u);
  EXPECT_EQ(seq_->nextDeadline(), at(207));

  Status s = failure(seq_->onPublish(1, 1, at(8)));
  EXPECT_EQ(s.code(), WSYNC_ERR_INVALID_USAGE);
  EXPECT_EQ(s.message(),
            "trainer 1 published version 1 after version 2 started: trainers must publish the "
            "same increasing versions");
}

TEST_F(VersionSequencerTest, OutOfOrderMessagesAreNamedErrors) {
  auto expectError = [](const Result<SequencerOutput>& r, wsync_status_t code,
                        const std::string& message) {
    Status s = failure(r);
    EXPECT_EQ(s.code(), code) << s.toString();
    EXPECT_EQ(s.message(), message);
  };
  expectError(seq_->onSent(0, 1, at(0)), WSYNC_ERR_PROTOCOL,
              "trainer 0 reported version 1 sent out of order");
  expectError(seq_->onPublish(2, 1, at(0)), WSYNC_ERR_INVALID_ARGUMENT,
              "trainer 2 is not in the job (2 trainers)");
  expectError(seq_->onPublish(0, 0, at(0)), WSYNC_ERR_INVALID_ARGUMENT,
              "trainer 0 published version 0; versions start at 1");
  expectError(seq_->onPrepared(0, SlotMsg{1, 0}, at(0)), WSYNC_ERR_PROTOCOL,
              "rollout 0 prepared version 1, which never started");
  ok(seq_->onPublish(0, 1, at(0)));
  expectError(seq_->onSent(1, 1, at(0)), WSYNC_ERR_PROTOCOL,
              "trainer 1 reported version 1 sent out of order");  // before Go
  expectError(seq_->onReceived(0, 1, at(0)), WSYNC_ERR_PROTOCOL,
              "rollout 0 reported version 1 received out of order");
  expectError(seq_->onPrepared(0, SlotMsg{1, 1}, at(0)), WSYNC_ERR_PROTOCOL,
              "rollout 0 prepared slot 1 for version 1 but slot 0 was asked");
  expectError(seq_->onPrepared(9, SlotMsg{1, 0}, at(0)), WSYNC_ERR_INVALID_ARGUMENT,
              "rollout 9 is in no replica of the job");
  prepare(0, 1, 0);
  expectError(seq_->onPrepared(0, SlotMsg{1, 0}, at(0)), WSYNC_ERR_PROTOCOL,
              "rollout 0 prepared version 1 twice");
  for (int32_t r = 1; r < 4; ++r)
    prepare(r, 1, 0);
  ok(seq_->onSent(0, 1, at(0)));
  expectError(seq_->onSent(0, 1, at(0)), WSYNC_ERR_PROTOCOL,
              "trainer 0 reported version 1 sent twice");
  expectError(seq_->onSent(1, 2, at(0)), WSYNC_ERR_PROTOCOL,
              "trainer 1 reported version 2 sent out of order");
  ok(seq_->onReceived(0, 1, at(0)));
  expectError(seq_->onReceived(0, 1, at(0)), WSYNC_ERR_PROTOCOL,
              "rollout 0 reported version 1 received twice");
  // The errors changed nothing: the version completes normally.
  ok(seq_->onSent(1, 1, at(0)));
  for (int32_t r = 1; r < 3; ++r)
    ok(seq_->onReceived(r, 1, at(0)));
  EXPECT_TRUE(ok(seq_->onReceived(3, 1, at(0))).delivered.has_value());
}

TEST_F(VersionSequencerTest, VersionNotDeliveredInTimeNamesWhoIsLate) {
  ok(seq_->onPublish(0, 1, at(0)));
  prepare(0, 1, 0);
  prepare(1, 1, 0);
  prepare(2, 1, 0);
  EXPECT_TRUE(ok(seq_->advance(at(59999))).messages.empty());
  Status s = failure(seq_->advance(at(60000)));
  EXPECT_EQ(s.code(), WSYNC_ERR_TIMEOUT);
  EXPECT_EQ(s.message(),
            "version 1 not delivered within 60000 ms; waiting on replica 1 (readers still hold "
            "slot 0)");
  prepare(3, 1, 0, 1);
  ok(seq_->onSent(0, 1, at(2)));
  ok(seq_->onReceived(0, 1, at(2)));
  ok(seq_->onReceived(1, 1, at(2)));
  s = failure(seq_->advance(at(60000)));
  EXPECT_EQ(s.message(),
            "version 1 not delivered within 60000 ms; waiting on replica 1; trainers done: 1 of 2");
}

// A replica whose ranks owe the version a message past replica_timeout is reported stalled (once),
// well before the version's own timeout; removing it lets the version complete for the others.
TEST_F(VersionSequencerTest, ReplicaHoldingTheVersionPastItsBoundIsReportedStalled) {
  SequencerOptions options;
  options.timeout = milliseconds(5000);
  options.replica_timeout = milliseconds(2500);
  build(options);
  deliver(1, 0);
  ok(seq_->onPublish(0, 2, at(100)));
  for (int32_t r = 0; r < 4; ++r)
    prepare(r, 2, 1, 100);
  ok(seq_->onSent(0, 2, at(110)));
  ok(seq_->onSent(1, 2, at(110)));
  for (int32_t r = 0; r < 3; ++r)
    ok(seq_->onReceived(r, 2, at(110)));      // rollout 3 (replica 1) is stopped: never Received
  EXPECT_EQ(seq_->nextDeadline(), at(2600));  // from Go (at 100, all prepared)
  EXPECT_TRUE(ok(seq_->advance(at(2599))).stalled_replicas.empty());
  SequencerOutput out = ok(seq_->advance(at(2600)));
  EXPECT_EQ(out.stalled_replicas, (std::vector<int32_t>{1}));
  EXPECT_TRUE(ok(seq_->advance(at(2700))).stalled_replicas.empty());  // reported once
  EXPECT_EQ(seq_->nextDeadline(), at(5100));
  out = ok(seq_->removeReplica(1, at(2700)));
  ASSERT_TRUE(out.delivered.has_value());
  EXPECT_EQ(out.delivered->ready_replicas, (std::vector<int32_t>{0}));
  EXPECT_EQ(out.delivered->lost_replicas, (std::vector<int32_t>{1}));
}

// Not prepared (readers hold the slot; no staleness allowed): not stalled, the version waits up
// to its timeout as before; nor is a replica waiting only on the trainers. The bound runs from
// the Go, not the version's start.
TEST_F(VersionSequencerTest, OnlyMissingAnswersToGoAreStalls) {
  SequencerOptions options;
  options.timeout = milliseconds(5000);
  options.replica_timeout = milliseconds(1000);
  options.max_staleness = 0;
  build(options);
  deliver(1, 0);
  ok(seq_->onPublish(0, 2, at(0)));
  for (int32_t r = 0; r < 3; ++r)
    prepare(r, 2, 1);
  EXPECT_TRUE(ok(seq_->advance(at(1500))).stalled_replicas.empty()) << "readers hold its slot";
  EXPECT_TRUE(seq_->holdingGo(at(999)).empty());
  EXPECT_EQ(seq_->holdingGo(at(1000)), (std::vector<int32_t>{1}));  // the caller tells why
  // Rollout 3 prepares: Go now.
  prepare(3, 2, 1, 1500);
  EXPECT_EQ(seq_->nextDeadline(), at(2500));
  ok(seq_->onReceived(0, 2, at(1502)));
  ok(seq_->onReceived(1, 2, at(1502)));
  ok(seq_->onReceived(2, 2, at(1502)));
  EXPECT_TRUE(ok(seq_->advance(at(2499))).stalled_replicas.empty());
  EXPECT_EQ(ok(seq_->advance(at(2500))).stalled_replicas, (std::vector<int32_t>{1}));
  ok(seq_->removeReplica(1, at(2500)));
  // The trainers have not sent: nobody owes an answer.
  EXPECT_TRUE(ok(seq_->advance(at(4000))).stalled_replicas.empty());
  ok(seq_->onSent(0, 2, at(4001)));
  EXPECT_TRUE(ok(seq_->onSent(1, 2, at(4001))).delivered.has_value());
}

TEST_F(VersionSequencerTest, ReplicaSpecsAreChecked) {
  auto expectInvalid = [this](const ReplicaSpec& spec, const std::string& message) {
    Status s = seq_->addReplica(spec);
    EXPECT_EQ(s.code(), WSYNC_ERR_INVALID_ARGUMENT) << s.toString();
    EXPECT_EQ(s.message(), message);
  };
  expectInvalid({1, {5}, 2}, "replica 1 already exists");
  expectInvalid({2, {}, 2}, "replica 2 has no rank");
  expectInvalid({2, {4}, 1}, "replica 2 has 1 slots; at least 2 are needed");
  expectInvalid({2, {4, 4}, 2}, "replica 2 lists rollout 4 twice");
  expectInvalid({2, {4, 3}, 2}, "replica 2: rollout 3 is already in replica 1");
  expectInvalid({-1, {4}, 2}, "replica -1: a replica id must be >= 0");
  Status s = failure(seq_->removeReplica(7, at(0)));
  EXPECT_EQ(s.code(), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(seq_->replicaOf(3), 1);
  EXPECT_FALSE(seq_->replicaOf(4).has_value());
}

TEST_F(VersionSequencerTest, RemovingABusyReplicaSendsGoWithoutWaitingForTheGrace) {
  ok(seq_->onPublish(0, 1, at(0)));
  for (int32_t r = 0; r < 3; ++r)
    prepare(r, 1, 0);
  SequencerOutput out = ok(seq_->removeReplica(1, at(10)));
  ASSERT_EQ(out.messages.size(), 1u);
  EXPECT_EQ(out.messages[0].type, MessageType::kGo);
  EXPECT_EQ(std::get<GoMsg>(out.messages[0].payload).slot_of_replica, (std::vector<int32_t>{0}));
  EXPECT_EQ(out.messages[0].to,
            (std::vector<RankRef>{trainer(0), trainer(1), rollout(0), rollout(1)}));
  // Late messages from the departed ranks are ignored.
  EXPECT_TRUE(ok(seq_->onPrepared(3, SlotMsg{1, 0}, at(11))).messages.empty());
  EXPECT_TRUE(ok(seq_->onReceived(2, 1, at(11))).messages.empty());
  ok(seq_->onSent(0, 1, at(12)));
  ok(seq_->onSent(1, 1, at(12)));
  ok(seq_->onReceived(0, 1, at(12)));
  out = ok(seq_->onReceived(1, 1, at(12)));
  ASSERT_TRUE(out.delivered.has_value());
  EXPECT_EQ(out.delivered->ready_replicas, (std::vector<int32_t>{0}));
  EXPECT_EQ(out.delivered->lost_replicas, (std::vector<int32_t>{1}));
  // The next version asks only the remaining replica.
  out = ok(seq_->onPublish(0, 2, at(20)));
  ASSERT_EQ(out.messages.size(), 1u);
  EXPECT_EQ(out.messages[0].to, (std::vector<RankRef>{rollout(0), rollout(1)}));
}

TEST_F(VersionSequencerTest, RemovingTheLastLateReplicaCompletesTheVersion) {
  ok(seq_->onPublish(0, 1, at(0)));
  for (int32_t r = 0; r < 4; ++r)
    prepare(r, 1, 0);
  ok(seq_->onSent(0, 1, at(1)));
  ok(seq_->onSent(1, 1, at(1)));
  ok(seq_->onReceived(2, 1, at(1)));
  ok(seq_->onReceived(3, 1, at(1)));
  ok(seq_->onReceived(0, 1, at(1)));  // rollout 1 never reports: its replica leaves
  ok(seq_->onPublish(0, 2, at(2)));
  SequencerOutput out = ok(seq_->removeReplica(0, at(3)));
  ASSERT_TRUE(out.delivered.has_value());
  EXPECT_EQ(out.delivered->ready_replicas, (std::vector<int32_t>{1}));
  EXPECT_EQ(out.delivered->lost_replicas, (std::vector<int32_t>{0}));
  // Ready(1) went to replica 1 before this event; now Delivered(1), then version 2 starts.
  ASSERT_EQ(out.messages.size(), 2u);
  EXPECT_EQ(out.messages[0].type, MessageType::kDelivered);
  EXPECT_EQ(out.messages[1].type, MessageType::kPrepare);
  EXPECT_EQ(out.messages[1].to, (std::vector<RankRef>{rollout(2), rollout(3)}));
  EXPECT_EQ(std::get<SlotMsg>(out.messages[1].payload).slot, 1);
}

TEST_F(VersionSequencerTest, AddedReplicaTakesPartFromTheNextVersion) {
  ok(seq_->onPublish(0, 1, at(0)));
  ASSERT_TRUE(seq_->addReplica({3, {4}, 2}).isOk());
  for (int32_t r = 0; r < 4; ++r)
    prepare(r, 1, 0);
  ASSERT_EQ(ofType(last_, MessageType::kGo).size(), 1u) << "the new replica is not waited for";
  const OutgoingMessage go = last_.messages[0];
  EXPECT_EQ(std::get<GoMsg>(go.payload).slot_of_replica, (std::vector<int32_t>{0, 0, -1, -1}));
  EXPECT_EQ(go.to.size(), 6u) << "rollout 4 is not in version 1";
  Status s = failure(seq_->onPrepared(4, SlotMsg{1, 0}, at(1)));
  EXPECT_EQ(s.message(),
            "rollout 4 prepared version 1 but its replica joined after the version started");
  ok(seq_->onSent(0, 1, at(1)));
  ok(seq_->onSent(1, 1, at(1)));
  for (int32_t r = 0; r < 3; ++r)
    ok(seq_->onReceived(r, 1, at(1)));
  SequencerOutput out = ok(seq_->onReceived(3, 1, at(1)));
  ASSERT_TRUE(out.delivered.has_value());
  EXPECT_EQ(out.delivered->ready_replicas, (std::vector<int32_t>{0, 1}));

  out = ok(seq_->onPublish(0, 2, at(2)));
  ASSERT_EQ(out.messages.size(), 3u);
  EXPECT_EQ(out.messages[2].to, (std::vector<RankRef>{rollout(4)}));
  EXPECT_EQ(std::get<SlotMsg>(out.messages[2].payload).slot, 0);
  for (int32_t r = 0; r < 4; ++r)
    prepare(r, 2, 1, 3);
  EXPECT_TRUE(ok(seq_->advance(at(1000))).messages.empty()) << "its first version: never skipped";
  prepare(4, 2, 0, 1001);
  EXPECT_EQ(std::get<GoMsg>(last_.messages[0].payload).slot_of_replica,
            (std::vector<int32_t>{1, 1, -1, 0}));
}

TEST_F(VersionSequencerTest, ZeroGraceSkipsBusyReplicasAtTheStart) {
  SequencerOptions options;
  options.skip_grace = milliseconds(0);
  build(options);
  deliver(1, 0);
  // Every replica holds a version and none drained its slot yet when version 2 starts: with no
  // grace, all are skipped at once (the first version was still waited for).
  SequencerOutput out = ok(seq_->onPublish(0, 2, at(5)));
  ASSERT_EQ(ofType(out, MessageType::kGo).size(), 1u);
  EXPECT_EQ(std::get<GoMsg>(ofType(out, MessageType::kGo)[0].payload).slot_of_replica,
            (std::vector<int32_t>{-1, -1}));
  ok(seq_->onSent(0, 2, at(6)));
  out = ok(seq_->onSent(1, 2, at(6)));
  ASSERT_TRUE(out.delivered.has_value());
  EXPECT_EQ(out.delivered->skipped_replicas, (std::vector<int32_t>{0, 1}));
}

// Peer cold start: a replica added holding a version in a slot is treated as if that version had
// been delivered to it: the next version goes to another slot, skipping and staleness count from
// it, and its version is its ready one.
TEST_F(VersionSequencerTest, ReplicaAddedWithAReadySlotTakesTheNextVersionInAnotherSlot) {
  deliver(1, 0);
  deliver(2, 1);
  ASSERT_TRUE(seq_->addReplica({3, {4, 5}, 2, 2, 1}).isOk());
  EXPECT_EQ(seq_->readyVersion(3), 2u);
  SequencerOutput out = ok(seq_->onPublish(0, 3, at(10)));
  const std::vector<OutgoingMessage> prepares = ofType(out, MessageType::kPrepare);
  ASSERT_EQ(prepares.size(), 3u);
  EXPECT_EQ(prepares[2].to, (std::vector<RankRef>{rollout(4), rollout(5)}));
  EXPECT_EQ(std::get<SlotMsg>(prepares[2].payload).slot, 0) << "never its ready slot 1";
  // It already holds a version, so a busy reader there gets it skipped after the grace (a replica
  // without a version is never skipped).
  for (int32_t r = 0; r < 4; ++r)
    prepare(r, 3, 0, 11);
  out = ok(seq_->advance(at(10 + 200)));
  ASSERT_EQ(ofType(out, MessageType::kGo).size(), 1u);
  EXPECT_EQ(std::get<GoMsg>(ofType(out, MessageType::kGo)[0].payload).slot_of_replica,
            (std::vector<int32_t>{0, 0, -1, -1}));
  ok(seq_->onSent(0, 3, at(220)));
  ok(seq_->onSent(1, 3, at(220)));
  for (int32_t r = 0; r < 4; ++r)
    out = ok(seq_->onReceived(r, 3, at(221)));
  ASSERT_TRUE(out.delivered.has_value());
  EXPECT_EQ(out.delivered->skipped_replicas, (std::vector<int32_t>{3}));
  EXPECT_EQ(seq_->readyVersion(3), 2u);
}

TEST_F(VersionSequencerTest, ReplicaAddedWithAReadySlotRespectsTheStalenessBound) {
  SequencerOptions options;
  options.max_staleness = 1;
  build(options);
  deliver(1, 0);
  deliver(2, 1);
  deliver(3, 0);
  ASSERT_TRUE(seq_->addReplica({3, {4}, 2, 1, 0}).isOk());  // holds version 1: 2 behind
  ok(seq_->onPublish(0, 4, at(0)));
  for (int32_t r = 0; r < 4; ++r)
    prepare(r, 4, 1);
  EXPECT_TRUE(ok(seq_->advance(at(1000))).messages.empty())
      << "skipping it would make it lag 3 versions";
  prepare(4, 4, 1, 1001);
  EXPECT_EQ(std::get<GoMsg>(last_.messages[0].payload).slot_of_replica,
            (std::vector<int32_t>{1, 1, -1, 1}));
}

TEST_F(VersionSequencerTest, ReadySlotsOfAddedReplicasAreChecked) {
  deliver(1, 0);
  auto expectInvalid = [this](const ReplicaSpec& spec, const std::string& message) {
    Status s = seq_->addReplica(spec);
    EXPECT_EQ(s.code(), WSYNC_ERR_INVALID_ARGUMENT) << s.toString();
    EXPECT_EQ(s.message(), message);
  };
  expectInvalid({3, {4}, 2, 1, 2},
                "replica 3: ready version 1 in slot 2 is not a version in one of its 2 slots");
  expectInvalid({3, {4}, 2, 1, -1},
                "replica 3: ready version 1 in slot -1 is not a version in one of its 2 slots");
  expectInvalid({3, {4}, 2, 0, 1},
                "replica 3: ready version 0 in slot 1 is not a version in one of its 2 slots");
  expectInvalid({3, {4}, 2, 2, 1}, "replica 3 holds version 2, but only version 1 started");
  EXPECT_FALSE(seq_->hasReplica(3));
}

// A replica that leaves after it was sent Ready for the version in flight took that version: the
// outcome lists it as ready, not lost (a reader that read the last version and left at once).
TEST_F(VersionSequencerTest, ReplicaLeavingAfterItsReadyCountsAsReady) {
  ok(seq_->onPublish(0, 1, at(0)));
  for (int32_t r = 0; r < 4; ++r)
    prepare(r, 1, 0);
  ok(seq_->onSent(0, 1, at(1)));
  ok(seq_->onSent(1, 1, at(1)));
  ok(seq_->onReceived(0, 1, at(1)));
  SequencerOutput out = ok(seq_->onReceived(1, 1, at(1)));
  ASSERT_EQ(ofType(out, MessageType::kReady).size(), 1u) << "replica 0 is ready";
  out = ok(seq_->removeReplica(0, at(2)));
  EXPECT_FALSE(out.delivered.has_value()) << "replica 1 is still receiving";
  ok(seq_->onReceived(2, 1, at(3)));
  out = ok(seq_->onReceived(3, 1, at(3)));
  ASSERT_TRUE(out.delivered.has_value());
  EXPECT_EQ(out.delivered->ready_replicas, (std::vector<int32_t>{0, 1}));
  EXPECT_TRUE(out.delivered->lost_replicas.empty());
}

}  // namespace
}  // namespace wsync
