// The peer cold start tracker (coordinator/cold_start.h) driven by hand: events in, messages and
// notes out, time as an argument, the running job's sources a table the test edits. No sockets.
#include "coordinator/cold_start.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "coordinator/version_sequencer.h"
#include "layout/builders.h"
#include "support/sequencer_events.h"

namespace wsync {
namespace {

using sequencer_events::at;

constexpr int32_t kJoiner = 2;  // the joining replica: rollouts {4, 5}, 2 slots
const std::vector<int32_t> kJoinerRanks{4, 5};

// Rank `index` of a TP-2 replica: a split and a replicated tensor.
Registration rolloutRank(int32_t index, DType dtype = DType::kBFloat16) {
  Registration reg;
  reg.role = Role::kRollout;
  reg.rank = index;
  reg.replica = 0;
  EXPECT_TRUE(addSplit(reg, "w", Dims{16, 8}, dtype, 0, 2, index).isOk());
  EXPECT_TRUE(addReplicated(reg, "norm", Dims{8}, dtype).isOk());
  return reg;
}

ColdStartOutput ok(Result<ColdStartOutput> r) {
  EXPECT_TRUE(r.isOk()) << r.status().toString();
  return r.isOk() ? std::move(r).value() : ColdStartOutput{};
}

bool noted(const ColdStartOutput& out, const std::string& text) {
  return std::any_of(out.notes.begin(), out.notes.end(),
                     [&](const std::string& n) { return n.find(text) != std::string::npos; });
}

// Running replicas 0 (rollouts {0, 1}) and 1 (rollouts {2, 3}); the test sets which versions they
// hold (ready_) and drops them from the table when they are lost.
class ColdStartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    live_[0] = {0, 1};
    live_[1] = {2, 3};
    for (int32_t r = 0; r < 4; ++r)
      registrations_[r] = rolloutRank(r % 2);
  }

  ColdStartSources sources() {
    ColdStartSources s;
    s.holders = [this] {
      std::set<std::pair<uint64_t, int32_t>> holders;
      for (const auto& [replica, version] : ready_)
        holders.insert({version, replica});
      return holders;
    };
    s.live_ranks = [this](int32_t replica) { return live_[replica]; };
    s.registration = [this](int32_t rank) -> Result<Registration> {
      return registrations_.at(rank);
    };
    return s;
  }

  ColdStartJoiner joiner() const {
    ColdStartJoiner j;
    j.replica = kJoiner;
    j.ranks = kJoinerRanks;
    j.num_slots = 2;
    for (size_t i = 0; i < kJoinerRanks.size(); ++i) {
      j.registrations.push_back(rolloutRank(static_cast<int32_t>(i)));
      PeerInfo peer;
      peer.rank = kJoinerRanks[i];
      peer.transport = "test";
      j.peers[peer.rank] = peer;
    }
    return j;
  }

  ColdStartOutput prepareAll(uint64_t version, int32_t slot, int ms = 0) {
    ColdStartOutput out;
    for (int32_t r : kJoinerRanks)
      out = ok(tracker_.onPrepared(kJoiner, r, SlotMsg{version, slot}, sources(), at(ms)));
    return out;
  }

  // `out` holds exactly one message to the joiner's ranks: `type`, about `version` and `slot`.
  static void expectToJoiner(const ColdStartOutput& out, MessageType type, uint64_t version,
                             int32_t slot) {
    ASSERT_EQ(out.messages.size(), 1u);
    const ColdStartMessage& m = out.messages[0];
    EXPECT_EQ(m.type, type);
    EXPECT_EQ(m.to, kJoinerRanks);
    EXPECT_EQ(std::get<SlotMsg>(m.payload).version, version);
    EXPECT_EQ(std::get<SlotMsg>(m.payload).slot, slot);
  }

  // `out` holds one ColdFill per rank of `sources`, for `version` into `slot`, each writing only
  // to the joiner's ranks.
  static void expectFills(const ColdStartOutput& out, const std::vector<int32_t>& sources,
                          uint64_t fill, uint64_t version, int32_t slot) {
    ASSERT_EQ(out.messages.size(), sources.size());
    for (size_t i = 0; i < sources.size(); ++i) {
      const ColdStartMessage& m = out.messages[i];
      EXPECT_EQ(m.type, MessageType::kColdFill);
      EXPECT_EQ(m.to, std::vector<int32_t>{sources[i]});
      const auto& msg = std::get<ColdFillMsg>(m.payload);
      EXPECT_EQ(msg.fill, fill);
      EXPECT_EQ(msg.version, version);
      EXPECT_EQ(msg.target_slot, slot);
      EXPECT_FALSE(msg.rank_plan.empty());
      ASSERT_FALSE(msg.peers.empty());
      for (const PeerInfo& peer : msg.peers) {
        EXPECT_NE(std::find(kJoinerRanks.begin(), kJoinerRanks.end(), peer.rank),
                  kJoinerRanks.end());
        EXPECT_EQ(peer.transport, "test");
      }
    }
  }

  // Go(version, -1 for the joiner) to the joiner's ranks: they give the prepared slot back.
  static void expectSlotGivenBack(const ColdStartMessage& m, uint64_t version) {
    EXPECT_EQ(m.type, MessageType::kGo);
    EXPECT_EQ(m.to, kJoinerRanks);
    const auto& go = std::get<GoMsg>(m.payload);
    EXPECT_EQ(go.version, version);
    ASSERT_EQ(go.slot_of_replica.size(), static_cast<size_t>(kJoiner) + 1);
    EXPECT_EQ(go.slot_of_replica[static_cast<size_t>(kJoiner)], -1);
  }

  static void expectFinished(const ColdStartOutput& out, uint64_t version, int32_t slot) {
    ASSERT_EQ(out.finished.size(), 1u);
    EXPECT_EQ(out.finished[0].replica, kJoiner);
    EXPECT_EQ(out.finished[0].version, version);
    EXPECT_EQ(out.finished[0].slot, slot);
  }

  ColdStartTracker tracker_{ColdStartOptions{std::chrono::milliseconds(1000)}};
  std::map<int32_t, uint64_t> ready_;  // replica -> its newest ready version
  std::map<int32_t, std::vector<int32_t>> live_;
  std::map<int32_t, Registration> registrations_;
};

// A joiner filled from the running replica holding the newest version enters the version
// sequencer holding it: the next version goes to its other slot.
TEST_F(ColdStartTest, FillFromAReadySourceThenTheJoinerEntersTheSequencer) {
  VersionSequencer seq(SequencerOptions{}, 1);
  ASSERT_TRUE(seq.addReplica({0, {0, 1}, 2}).isOk());
  sequencer_events::ok(seq.onPublish(0, 1, at(0)));
  for (int32_t r : {0, 1})
    sequencer_events::ok(seq.onPrepared(r, SlotMsg{1, 0}, at(0)));
  sequencer_events::ok(seq.onSent(0, 1, at(0)));
  for (int32_t r : {0, 1})
    sequencer_events::ok(seq.onReceived(r, 1, at(0)));
  ASSERT_EQ(seq.readyVersion(0), 1u);
  ready_[0] = seq.readyVersion(0);
  live_.erase(1);

  ColdStartOutput out = ok(tracker_.start(joiner(), sources(), at(10)));
  EXPECT_TRUE(tracker_.active(kJoiner));
  expectToJoiner(out, MessageType::kPrepare, 1, 0);
  EXPECT_TRUE(noted(out, "replica 2 cold start, attempt 1: version 1 from replica 0"));
  const uint64_t fill = tracker_.currentFill(kJoiner);
  EXPECT_NE(fill, 0u);

  EXPECT_TRUE(ok(tracker_.onPrepared(kJoiner, 4, SlotMsg{1, 0}, sources(), at(11)))
                  .messages.empty());  // rank 5 has not prepared yet
  out = ok(tracker_.onPrepared(kJoiner, 5, SlotMsg{1, 0}, sources(), at(11)));
  expectFills(out, {0, 1}, fill, 1, 0);

  EXPECT_TRUE(ok(tracker_.onFillDone(0, {fill, WSYNC_SUCCESS, "", 100}, sources(), at(12)))
                  .messages.empty());
  out = ok(tracker_.onFillDone(1, {fill, WSYNC_SUCCESS, "", 28}, sources(), at(12)));
  expectToJoiner(out, MessageType::kReady, 1, 0);

  ok(tracker_.onReadied(kJoiner, 4, VersionMsg{1}, at(13)));
  out = ok(tracker_.onReadied(kJoiner, 5, VersionMsg{1}, at(13)));
  EXPECT_TRUE(out.messages.empty());
  EXPECT_TRUE(noted(out, "replica 2 cold-started from replica 0 with version 1: 128 bytes"));
  expectFinished(out, 1, 0);
  EXPECT_FALSE(tracker_.active(kJoiner));

  // The joiner enters the sequencer holding the version it was filled with.
  ASSERT_EQ(out.finished.size(), 1u);
  const ColdStartResult& result = out.finished[0];
  ASSERT_TRUE(
      seq.addReplica({result.replica, kJoinerRanks, 2, result.version, result.slot}).isOk());
  EXPECT_EQ(seq.readyVersion(kJoiner), 1u);
  const SequencerOutput next = sequencer_events::ok(seq.onPublish(0, 2, at(20)));
  bool prepared_other_slot = false;
  for (const OutgoingMessage& m : next.messages) {
    if (m.type != MessageType::kPrepare || m.to.front().rank != 4) continue;
    prepared_other_slot = std::get<SlotMsg>(m.payload).slot == 1;
  }
  EXPECT_TRUE(prepared_other_slot) << "its ready slot 0 stays readable";
}

// A catch-up (the joiner holds version 2 in slot 1 from its cold start; a peer now holds 4):
// filled into a slot other than the held one, and it ends holding the newer version.
TEST_F(ColdStartTest, CatchUpFillsAnotherSlotThanTheHeldOne) {
  ready_ = {{0, 4}};
  live_.erase(1);
  ColdStartJoiner j = joiner();
  j.held_version = 2;
  j.held_slot = 1;
  ColdStartOutput out = ok(tracker_.start(j, sources(), at(0)));
  expectToJoiner(out, MessageType::kPrepare, 4, 0);
  EXPECT_TRUE(noted(out, "replica 2 catch-up, attempt 1: version 4 from replica 0"));
  const uint64_t fill = tracker_.currentFill(kJoiner);
  expectFills(prepareAll(4, 0), {0, 1}, fill, 4, 0);
  ok(tracker_.onFillDone(0, {fill, WSYNC_SUCCESS, "", 64}, sources(), at(1)));
  expectToJoiner(ok(tracker_.onFillDone(1, {fill, WSYNC_SUCCESS, "", 64}, sources(), at(1))),
                 MessageType::kReady, 4, 0);
  ok(tracker_.onReadied(kJoiner, 4, VersionMsg{4}, at(2)));
  out = ok(tracker_.onReadied(kJoiner, 5, VersionMsg{4}, at(2)));
  EXPECT_TRUE(noted(out, "replica 2 caught up from replica 0 with version 4"));
  expectFinished(out, 4, 0);
}

// A catch-up takes only versions newer than the held one; with none (or when its source is lost
// with no other), it ends holding the held version: the slot it prepared is given back, the held
// one is never written.
TEST_F(ColdStartTest, CatchUpWithNothingNewerKeepsTheHeldVersion) {
  ready_ = {{0, 2}};
  ColdStartJoiner j = joiner();
  j.held_version = 2;
  j.held_slot = 0;
  ColdStartOutput out = ok(tracker_.start(j, sources(), at(0)));
  EXPECT_TRUE(out.messages.empty());
  EXPECT_TRUE(
      noted(out, "replica 2: no catch-up (no running replica holds a version newer than 2)"));
  expectFinished(out, 2, 0);

  ready_ = {{1, 6}};
  live_.erase(0);
  j.num_slots = 3;
  j.held_slot = 2;
  expectToJoiner(ok(tracker_.start(j, sources(), at(0))), MessageType::kPrepare, 6, 0);
  prepareAll(6, 0);
  ready_.clear();
  out = tracker_.onSourceLost(1, sources(), at(1));
  ASSERT_EQ(out.messages.size(), 1u);
  expectSlotGivenBack(out.messages[0], 6);
  expectFinished(out, 2, 2);

  ColdStartJoiner one_slot = joiner();
  one_slot.num_slots = 1;
  one_slot.held_version = 2;
  one_slot.held_slot = 0;
  EXPECT_EQ(tracker_.start(one_slot, sources(), at(0)).status().code(), WSYNC_ERR_INVALID_ARGUMENT);
}

// The source is lost mid-fill: the next attempt comes from the other running replica, into the
// joiner's other slot (the lost source's surviving ranks may still be writing the first); the
// late answer of the first attempt is ignored.
TEST_F(ColdStartTest, SourceLostMidFillFailsOverToAnotherSourceInAnotherSlot) {
  ready_ = {{0, 3}, {1, 2}};
  expectToJoiner(ok(tracker_.start(joiner(), sources(), at(0))), MessageType::kPrepare, 3, 0);
  const uint64_t first = tracker_.currentFill(kJoiner);
  expectFills(prepareAll(3, 0), {0, 1}, first, 3, 0);
  ok(tracker_.onFillDone(0, {first, WSYNC_SUCCESS, "", 64}, sources(), at(1)));

  ready_.erase(0);
  live_.erase(0);
  ColdStartOutput out = tracker_.onSourceLost(0, sources(), at(2));
  EXPECT_TRUE(noted(out,
                    "replica 2 cold start, attempt 1 failed: replica 0, its source, was "
                    "dropped"));
  expectToJoiner(out, MessageType::kPrepare, 2, 1);
  const uint64_t second = tracker_.currentFill(kJoiner);
  EXPECT_NE(second, first);

  EXPECT_TRUE(ok(tracker_.onFillDone(1, {first, WSYNC_SUCCESS, "", 64}, sources(), at(3)))
                  .messages.empty());  // the first attempt's: ignored
  expectFills(prepareAll(2, 1, 4), {2, 3}, second, 2, 1);
  ok(tracker_.onFillDone(2, {second, WSYNC_SUCCESS, "", 64}, sources(), at(5)));
  out = ok(tracker_.onFillDone(3, {second, WSYNC_SUCCESS, "", 64}, sources(), at(5)));
  expectToJoiner(out, MessageType::kReady, 2, 1);
  ok(tracker_.onReadied(kJoiner, 4, VersionMsg{2}, at(6)));
  out = ok(tracker_.onReadied(kJoiner, 5, VersionMsg{2}, at(6)));
  EXPECT_TRUE(noted(out, "(attempt 2,"));
  expectFinished(out, 2, 1);
}

// The only source is lost while the joiner prepares: once its ranks prepared, there is no other
// source, so they give the slot back and the joiner's first version comes from the trainers.
TEST_F(ColdStartTest, NoSourceLeftFallsBackToTheTrainers) {
  ready_ = {{0, 3}};
  ok(tracker_.start(joiner(), sources(), at(0)));
  ready_.clear();
  live_.clear();
  ColdStartOutput out = tracker_.onSourceLost(0, sources(), at(1));
  EXPECT_TRUE(out.messages.empty()) << "the attempt ends once every joiner rank prepared";
  EXPECT_TRUE(out.finished.empty());

  ok(tracker_.onPrepared(kJoiner, 4, SlotMsg{3, 0}, sources(), at(2)));
  out = ok(tracker_.onPrepared(kJoiner, 5, SlotMsg{3, 0}, sources(), at(2)));
  ASSERT_EQ(out.messages.size(), 1u);
  expectSlotGivenBack(out.messages[0], 3);
  EXPECT_TRUE(noted(out, "replica 2: no cold start (no running replica holds a version yet)"));
  expectFinished(out, 0, -1);
  EXPECT_FALSE(tracker_.active(kJoiner));
}

TEST_F(ColdStartTest, SourceLostMidFillWithNoOtherGivesTheSlotBackAtOnce) {
  ready_ = {{1, 5}};
  ok(tracker_.start(joiner(), sources(), at(0)));
  prepareAll(5, 0);
  ready_.clear();
  ColdStartOutput out = tracker_.onSourceLost(1, sources(), at(1));
  ASSERT_EQ(out.messages.size(), 1u);
  expectSlotGivenBack(out.messages[0], 5);
  expectFinished(out, 0, -1);
  EXPECT_TRUE(tracker_.onSourceLost(0, sources(), at(1)).messages.empty());  // none left
}

TEST_F(ColdStartTest, WithoutAVersionAnywhereTheColdStartEndsAtOnce) {
  const ColdStartOutput out = ok(tracker_.start(joiner(), sources(), at(0)));
  EXPECT_TRUE(out.messages.empty()) << "nothing was prepared: no slot to give back";
  EXPECT_TRUE(noted(out, "no running replica holds a version yet"));
  expectFinished(out, 0, -1);
}

// A replica whose dtypes would need conversions cannot fill the joiner: the next one does.
TEST_F(ColdStartTest, ASourceThatCannotFillTheJoinerIsPassedOver) {
  ready_ = {{0, 4}, {1, 3}};
  registrations_[0] = rolloutRank(0, DType::kFloat32);
  registrations_[1] = rolloutRank(1, DType::kFloat32);
  expectToJoiner(ok(tracker_.start(joiner(), sources(), at(0))), MessageType::kPrepare, 3, 0);
  ready_.erase(1);
  ColdStartOutput out = ok(tracker_.start(
      [&] {
        ColdStartJoiner j = joiner();
        j.replica = 7;
        return j;
      }(),
      sources(), at(0)));
  EXPECT_TRUE(noted(out, "replica 7: no cold start (replica 0: WSYNC_ERR_UNSUPPORTED"));
  EXPECT_TRUE(out.messages.empty());
}

// A source rank's failure fails the attempt: retried from the newest version in the same slot,
// then given up after max_attempts, naming the last failure.
TEST_F(ColdStartTest, FailedFillsAreRetriedThenGivenUp) {
  ready_ = {{0, 3}};
  live_.erase(1);
  ok(tracker_.start(joiner(), sources(), at(0)));
  for (int attempt = 1; attempt <= 3; ++attempt) {
    const uint64_t fill = tracker_.currentFill(kJoiner);
    prepareAll(3, 0);
    ok(tracker_.onFillDone(0, {fill, WSYNC_SUCCESS, "", 1}, sources(), at(1)));
    const ColdStartOutput out = ok(
        tracker_.onFillDone(1, {fill, WSYNC_ERR_NOT_READY, "no version 3", 0}, sources(), at(1)));
    EXPECT_TRUE(noted(out, "attempt " + std::to_string(attempt) + " failed"));
    EXPECT_TRUE(noted(out, "rollout 1"));
    ASSERT_EQ(out.messages.size(), 1u);
    if (attempt < 3) {
      expectToJoiner(out, MessageType::kPrepare, 3, 0);
      EXPECT_TRUE(out.finished.empty());
    } else {
      expectSlotGivenBack(out.messages[0], 3);
      EXPECT_TRUE(noted(out, "no cold start (3 attempts failed, the last: "));
      expectFinished(out, 0, -1);
    }
  }
}

// tick(): a source holding its fill past half the timeout is stalled; an attempt past the
// timeout makes the join overdue.
TEST_F(ColdStartTest, TickReportsStalledSourcesAndOverdueAttempts) {
  ready_ = {{0, 3}};
  ok(tracker_.start(joiner(), sources(), at(0)));
  EXPECT_TRUE(tracker_.tick(at(900)).stalled_sources.empty()) << "not filling yet";
  prepareAll(3, 0, 100);
  EXPECT_TRUE(tracker_.tick(at(599)).stalled_sources.empty());
  ColdStartOutput out = tracker_.tick(at(600));
  ASSERT_EQ(out.stalled_sources.size(), 1u);
  EXPECT_EQ(out.stalled_sources[0].first, 0);
  EXPECT_NE(out.stalled_sources[0].second.find("replica 2's cold start (version 3) within 500 ms"),
            std::string::npos);
  EXPECT_TRUE(out.overdue.empty());
  out = tracker_.tick(at(1000));
  ASSERT_EQ(out.overdue.size(), 1u);
  EXPECT_EQ(out.overdue[0].first, kJoiner);
  EXPECT_NE(out.overdue[0].second.find("its cold start from replica 0 (version 3, attempt 1)"),
            std::string::npos);
  tracker_.forget(kJoiner);
  EXPECT_FALSE(tracker_.active(kJoiner));
  EXPECT_TRUE(tracker_.tick(at(5000)).overdue.empty());
}

TEST_F(ColdStartTest, MessagesOutOfOrderAreProtocolErrors) {
  ready_ = {{0, 3}};
  ok(tracker_.start(joiner(), sources(), at(0)));
  const uint64_t fill = tracker_.currentFill(kJoiner);
  EXPECT_EQ(tracker_.onPrepared(kJoiner, 4, SlotMsg{3, 1}, sources(), at(0)).status().code(),
            WSYNC_ERR_PROTOCOL);  // another slot
  EXPECT_EQ(tracker_.onReadied(kJoiner, 4, VersionMsg{3}, at(0)).status().code(),
            WSYNC_ERR_PROTOCOL);  // before Ready
  EXPECT_EQ(tracker_.onFillDone(0, {fill, WSYNC_SUCCESS, "", 0}, sources(), at(0)).status().code(),
            WSYNC_ERR_PROTOCOL);  // before ColdFill
  EXPECT_EQ(tracker_.onPrepared(9, 4, SlotMsg{3, 0}, sources(), at(0)).status().code(),
            WSYNC_ERR_PROTOCOL);  // no such cold start
  prepareAll(3, 0);
  EXPECT_EQ(tracker_.onPrepared(kJoiner, 4, SlotMsg{3, 0}, sources(), at(0)).status().code(),
            WSYNC_ERR_PROTOCOL);  // twice
  EXPECT_EQ(tracker_.onFillDone(4, {fill, WSYNC_SUCCESS, "", 0}, sources(), at(0)).status().code(),
            WSYNC_ERR_PROTOCOL);  // not a source
}

TEST_F(ColdStartTest, MalformedJoinersAreRefused) {
  ColdStartJoiner j = joiner();
  j.peers.erase(5);
  EXPECT_EQ(tracker_.start(j, sources(), at(0)).status().code(), WSYNC_ERR_INVALID_ARGUMENT);
  j = joiner();
  j.ranks = {4, 6};
  EXPECT_EQ(tracker_.start(j, sources(), at(0)).status().code(), WSYNC_ERR_INVALID_ARGUMENT);
  ready_ = {{0, 3}};
  ok(tracker_.start(joiner(), sources(), at(0)));
  EXPECT_EQ(tracker_.start(joiner(), sources(), at(0)).status().code(),
            WSYNC_ERR_INVALID_ARGUMENT);  // in a cold start already
}

}  // namespace
}  // namespace wsync
