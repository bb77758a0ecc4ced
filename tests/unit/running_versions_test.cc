// The running job's versions on the wire (coordinator/running_versions.h) driven by hand: ranks in
// a participant table, what it sends recorded by a RecordingWire, time from a test clock. No
// sockets: a version from Publish to Delivered, Delivered held until every Ready is confirmed,
// a dropped replica releasing it, messages from the wrong role refused, the trainers' loss.
#include "coordinator/running_versions.h"

#include <gtest/gtest.h>

#include <vector>

#include "recording_wire.h"
#include "support/sequencer_events.h"

namespace wsync {
namespace {

using sequencer_events::at;

constexpr ConnectionId kTrainer = 1;
constexpr ConnectionId kRollout0 = 11;  // rollout 0, replica 0
constexpr ConnectionId kRollout1 = 12;  // rollout 1, replica 0
constexpr ConnectionId kRollout2 = 13;  // rollout 2, replica 1

std::vector<uint8_t> versionPayload(uint64_t v) {
  return encode(VersionMsg{v});
}

// One trainer; replica 0 (rollouts 0 and 1) and replica 1 (rollout 2), 2 slots each.
class RunningVersionsComponent : public ::testing::Test {
 protected:
  RunningVersionsComponent() {
    participants_.admit(committedParticipant(kTrainer, Role::kTrainer, 0, -1));
    participants_.admit(committedParticipant(kRollout0, Role::kRollout, 0, 0));
    participants_.admit(committedParticipant(kRollout1, Role::kRollout, 1, 0));
    participants_.admit(committedParticipant(kRollout2, Role::kRollout, 2, 1));
    participants_.assignRanks({0}, {1, 2, 3});
    participants_.setReplicaOfRollout({0, 0, 1});
    SequencerOptions options;
    options.skip_grace = std::chrono::milliseconds(1000);
    EXPECT_TRUE(versions_.start(options, 1, {{0, {0, 1}, 2}, {1, {2}, 2}}).isOk());
  }

  const Participant& rank(ConnectionId conn) { return participants_[*participants_.indexOf(conn)]; }
  Status message(ConnectionId conn, MessageType type, const std::vector<uint8_t>& payload) {
    return versions_.onMessage(rank(conn), type, payload);
  }
  // Publish(v), every rank prepared, the trainer sent and every rank received: Ready is sent.
  void deliverUpToReady(uint64_t v) {
    ASSERT_TRUE(message(kTrainer, MessageType::kPublish, versionPayload(v)).isOk());
    for (ConnectionId c : {kRollout0, kRollout1, kRollout2}) {
      const std::vector<RecordingWire::Sent> prepares = wire_.to(c, MessageType::kPrepare);
      ASSERT_FALSE(prepares.empty());
      ASSERT_TRUE(message(c, MessageType::kPrepared, prepares.back().payload).isOk());
    }
    ASSERT_EQ(wire_.to(kTrainer, MessageType::kGo).size(), 1u);
    ASSERT_TRUE(message(kTrainer, MessageType::kSent, versionPayload(v)).isOk());
    for (ConnectionId c : {kRollout0, kRollout1, kRollout2})
      ASSERT_TRUE(message(c, MessageType::kReceived, versionPayload(v)).isOk());
  }

  ParticipantTable participants_;
  RecordingWire wire_;
  CoordinatorMetrics metrics_;
  SequencerTime now_ = at(0);
  int delivered_events_ = 0;
  RunningVersions versions_{
      JobSettings{},          metrics_, participants_, wire_, [this] { ++delivered_events_; },
      [this] { return now_; }};
};

// A version from Publish to Delivered: Prepare to every rollout rank, Go to all, Ready to each,
// and Delivered (with the version's stats) only once every rank confirmed its Ready.
TEST_F(RunningVersionsComponent, DeliveredAfterEveryReadyIsConfirmed) {
  deliverUpToReady(1);
  for (ConnectionId c : {kRollout0, kRollout1, kRollout2}) {
    ASSERT_EQ(wire_.to(c, MessageType::kReady).size(), 1u);
    SlotMsg ready;
    ASSERT_TRUE(decode(wire_.to(c, MessageType::kReady)[0].payload, ready).isOk());
    EXPECT_EQ(ready.version, 1u);
  }
  EXPECT_EQ(delivered_events_, 1);  // the sequencer delivered; the gate holds the message
  EXPECT_EQ(versions_.inFlightVersion(), 0u);
  EXPECT_TRUE(wire_.to(kTrainer, MessageType::kDelivered).empty());

  ASSERT_TRUE(versions_.onReadied(rank(kRollout0), versionPayload(1)).isOk());
  ASSERT_TRUE(versions_.onReadied(rank(kRollout2), versionPayload(1)).isOk());
  EXPECT_TRUE(wire_.to(kTrainer, MessageType::kDelivered).empty());
  ASSERT_TRUE(versions_.onReadied(rank(kRollout1), versionPayload(1)).isOk());
  const std::vector<RecordingWire::Sent> delivered = wire_.to(kTrainer, MessageType::kDelivered);
  ASSERT_EQ(delivered.size(), 1u);
  DeliveredMsg d;
  ASSERT_TRUE(decode(delivered[0].payload, d).isOk());
  EXPECT_EQ(d.version, 1u);
  EXPECT_EQ(d.ready_replicas, (std::vector<int32_t>{0, 1}));
  EXPECT_TRUE(d.has_stats);
  // A confirmation no Ready awaits is the rank's error.
  EXPECT_EQ(versions_.onReadied(rank(kRollout1), versionPayload(1)).code(), WSYNC_ERR_PROTOCOL);
}

// A replica dropped while its Ready is unconfirmed no longer holds Delivered back.
TEST_F(RunningVersionsComponent, DroppedReplicaReleasesDelivered) {
  deliverUpToReady(1);
  ASSERT_TRUE(versions_.onReadied(rank(kRollout0), versionPayload(1)).isOk());
  ASSERT_TRUE(versions_.onReadied(rank(kRollout1), versionPayload(1)).isOk());
  EXPECT_TRUE(wire_.to(kTrainer, MessageType::kDelivered).empty());
  EXPECT_EQ(versions_.overdueRanks(now_ + std::chrono::seconds(5), std::chrono::seconds(1)),
            (std::vector<int32_t>{2}));
  ASSERT_TRUE(versions_.dropReplica(1, {2}).isOk());
  EXPECT_EQ(wire_.to(kTrainer, MessageType::kDelivered).size(), 1u);
  EXPECT_FALSE(versions_.sequencer()->hasReplica(1));
}

// Version messages from the wrong role are refused; a sequencer error is returned.
TEST_F(RunningVersionsComponent, RefusesMessagesOfTheWrongRole) {
  EXPECT_EQ(message(kRollout0, MessageType::kPublish, versionPayload(1)).code(),
            WSYNC_ERR_PROTOCOL);
  EXPECT_EQ(message(kTrainer, MessageType::kReceived, versionPayload(1)).code(),
            WSYNC_ERR_PROTOCOL);
  EXPECT_EQ(message(kTrainer, MessageType::kPublish, versionPayload(0)).code(),
            WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(wire_.sent.empty());
}

// The trainers lost mid-version: every replica not ready gets Go(v, -1) to give its slot back.
TEST_F(RunningVersionsComponent, AbortGivesSlotsBack) {
  ASSERT_TRUE(message(kTrainer, MessageType::kPublish, versionPayload(3)).isOk());
  EXPECT_EQ(versions_.inFlightVersion(), 3u);
  wire_.clear();
  ASSERT_TRUE(versions_.abort().isOk());
  EXPECT_EQ(versions_.inFlightVersion(), 0u);
  for (ConnectionId c : {kRollout0, kRollout1, kRollout2}) {
    ASSERT_EQ(wire_.to(c, MessageType::kGo).size(), 1u);
    GoMsg go;
    ASSERT_TRUE(decode(wire_.to(c, MessageType::kGo)[0].payload, go).isOk());
    EXPECT_EQ(go.slot_of_replica, (std::vector<int32_t>{-1, -1}));
  }
  EXPECT_TRUE(wire_.logged("version 3 aborted"));
  EXPECT_EQ(message(kTrainer, MessageType::kPublish, versionPayload(3)).code(),
            WSYNC_ERR_INVALID_USAGE);
}

// Time passing past the version's timeout is the job's error.
TEST_F(RunningVersionsComponent, AdvanceReportsTheTimeout) {
  ASSERT_TRUE(message(kTrainer, MessageType::kPublish, versionPayload(1)).isOk());
  ASSERT_TRUE(versions_.advance(at(10)).isOk());
  Result<std::vector<int32_t>> late = versions_.advance(at(600000));
  ASSERT_FALSE(late.isOk());
  EXPECT_EQ(late.status().code(), WSYNC_ERR_TIMEOUT);
}

}  // namespace
}  // namespace wsync
