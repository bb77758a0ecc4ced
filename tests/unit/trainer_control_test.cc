// A trainer's side of the coordinator channel (runtime/trainer_control.h) and its view of the
// job's membership (runtime/trainer_membership.h), without sockets: frames are fed by hand.
#include <gtest/gtest.h>

#include <deque>

#include "codec/plan_codec.h"
#include "runtime/trainer_control.h"
#include "runtime/trainer_membership.h"

namespace wsync {
namespace {

using std::chrono::milliseconds;

template <class Msg>
Frame frameOf(MessageType type, const Msg& msg) {
  return Frame{static_cast<uint16_t>(type), encode(msg)};
}

GoMsg go(uint64_t version, std::vector<int32_t> slots) {
  GoMsg m;
  m.version = version;
  m.slot_of_replica = std::move(slots);
  return m;
}

class TrainerControlTest : public ::testing::Test {
 protected:
  TrainerControl control_{[this](milliseconds) -> Result<Frame> {
                            if (frames_.empty()) return timeoutError("no frame");
                            Frame f = std::move(frames_.front());
                            frames_.pop_front();
                            return f;
                          },
                          [this](const Frame& frame) {
                            membership_frames_.push_back(static_cast<MessageType>(frame.type));
                            return membership_status_;
                          }};
  std::deque<Frame> frames_;
  std::vector<MessageType> membership_frames_;
  Status membership_status_;
};

TEST_F(TrainerControlTest, GoReadWhileIdleIsKeptForThePublishAndNewsApplied) {
  frames_.push_back(frameOf(MessageType::kReplicaDropped, ReplicaMsg{1, {2, 3}}));
  frames_.push_back(frameOf(MessageType::kGo, go(1, {0, 1})));
  frames_.push_back(frameOf(MessageType::kPlanExtension, PlanExtensionMsg{}));
  EXPECT_FALSE(control_.pollIdle().has_value());
  EXPECT_EQ(membership_frames_,
            (std::vector<MessageType>{MessageType::kReplicaDropped, MessageType::kPlanExtension}));
  Result<GoMsg> first = control_.awaitGo(1, milliseconds(100), false, nullptr);
  ASSERT_TRUE(first.isOk()) << first.status().toString();
  EXPECT_EQ(first->slot_of_replica, (std::vector<int32_t>{0, 1}));
}

TEST_F(TrainerControlTest, GosBeforeBlockMaximaAreSentAfterTheFirstTransfer) {
  frames_.push_back(frameOf(MessageType::kGo, go(2, {0, -1})));
  frames_.push_back(frameOf(MessageType::kGo, go(2, {-1, 1})));  // a busy replica's late Go
  frames_.push_back(frameOf(MessageType::kBlockMaxima, BlockMaximaMsg{2, {1, 2, 3}}));
  int maxima = 0;
  Result<GoMsg> first = control_.awaitGo(2, milliseconds(100), true, [&](const BlockMaximaMsg& m) {
    ++maxima;
    EXPECT_EQ(m.amax, (std::vector<uint8_t>{1, 2, 3}));
    return Status::ok();
  });
  ASSERT_TRUE(first.isOk()) << first.status().toString();
  EXPECT_EQ(maxima, 1);
  EXPECT_EQ(first->slot_of_replica, (std::vector<int32_t>{0, -1}));
  // After Sent: the late Go first, then a re-send the coordinator asks for, then Delivered.
  frames_.push_back(frameOf(MessageType::kGo, go(2, {0, -1})));
  frames_.push_back(frameOf(MessageType::kDelivered, DeliveredMsg{2, {0, 1}, {}, {}}));
  std::vector<std::vector<int32_t>> resent;
  Result<DeliveredMsg> delivered =
      control_.awaitDelivered(2, milliseconds(100), [&](const GoMsg& again) {
        resent.push_back(again.slot_of_replica);
        return Status::ok();
      });
  ASSERT_TRUE(delivered.isOk()) << delivered.status().toString();
  EXPECT_EQ(delivered->ready_replicas, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(resent, (std::vector<std::vector<int32_t>>{{-1, 1}, {0, -1}}));
}

TEST_F(TrainerControlTest, ErrorsNameWhatCame) {
  frames_.push_back(frameOf(MessageType::kError, ErrorMsg{WSYNC_ERR_TIMEOUT, "replica 1 stalled"}));
  Result<GoMsg> failed = control_.awaitGo(3, milliseconds(100), false, nullptr);
  EXPECT_EQ(failed.status().code(), WSYNC_ERR_TIMEOUT);
  EXPECT_EQ(failed.status().message(), "replica 1 stalled");
  frames_.push_back(frameOf(MessageType::kDelivered, DeliveredMsg{3, {}, {}, {}}));
  failed = control_.awaitGo(3, milliseconds(100), false, nullptr);
  EXPECT_EQ(failed.status().code(), WSYNC_ERR_PROTOCOL);
  EXPECT_NE(failed.status().message().find("expected Go from the coordinator, got Delivered"),
            std::string::npos)
      << failed.status().toString();
  // Delivered of another version, and a Go of another version, while one is awaited.
  frames_.push_back(frameOf(MessageType::kGo, go(5, {0})));
  Result<DeliveredMsg> wrong =
      control_.awaitDelivered(4, milliseconds(100), [](const GoMsg&) { return Status::ok(); });
  EXPECT_EQ(wrong.status().code(), WSYNC_ERR_PROTOCOL);
  EXPECT_NE(wrong.status().message().find("Go for version 5 while waiting for the delivery of "
                                          "version 4"),
            std::string::npos);
  // Nothing came: TIMEOUT from the channel.
  EXPECT_EQ(control_.awaitGo(6, milliseconds(10), false, nullptr).status().code(),
            WSYNC_ERR_TIMEOUT);
}

TEST_F(TrainerControlTest, IdleFailuresSayWhetherTheCoordinatorShouldHear) {
  membership_status_ = protocolError("bad extension");
  frames_.push_back(frameOf(MessageType::kPlanExtension, PlanExtensionMsg{}));
  std::optional<TrainerControl::IdleFailure> failed = control_.pollIdle();
  ASSERT_TRUE(failed.has_value());
  EXPECT_EQ(failed->status.message(), "bad extension");
  EXPECT_TRUE(failed->tell_coordinator);
  frames_.push_back(frameOf(MessageType::kError, ErrorMsg{WSYNC_ERR_REMOTE, "job over"}));
  failed = control_.pollIdle();
  ASSERT_TRUE(failed.has_value());
  EXPECT_EQ(failed->status.message(), "job over");
  EXPECT_FALSE(failed->tell_coordinator);  // it said so itself
}

// ---- membership
// ----------------------------------------------------------------------------------

TEST(TrainerMembershipTest, SlotsFollowTheReplicasAsTheyDropAndJoin) {
  TrainerMembership m;
  m.reset({0, 0, 1, 1});  // rollouts 0, 1: replica 0; 2, 3: replica 1
  const GoMsg v1 = go(1, {1, 0});
  EXPECT_EQ(m.slotFor(v1, 1), 1);
  EXPECT_EQ(m.slotFor(v1, 2), 0);
  EXPECT_EQ(m.slotFor(v1, 7), -1);  // unknown rank
  BroadcastGroup group;
  group.replica = 1;
  group.dst = {{2, 0, 0}, {3, 0, 0}};
  EXPECT_TRUE(m.replicaTakes(v1, group));
  EXPECT_FALSE(m.replicaTakes(go(1, {1, -1}), group));  // replica 1 skips the version
  m.forget(ReplicaMsg{1, {2, 3}});
  EXPECT_EQ(m.slotFor(v1, 2), -1);
  EXPECT_FALSE(m.replicaTakes(v1, group));
  // A joining replica that reuses id 1 on new ranks: writes to it, not the old group.
  auto part = std::make_unique<ExtensionPart>();
  part->replica = 1;
  part->ranks = {4, 5};
  m.add(std::move(part));
  EXPECT_EQ(m.slotFor(v1, 5), 0);
  EXPECT_EQ(m.replicaOf(5), 1);
  EXPECT_FALSE(m.replicaTakes(v1, group));
  ASSERT_EQ(m.extensions().size(), 1u);
  m.forget(ReplicaMsg{1, {}});  // dropped again: its extension goes inactive
  EXPECT_FALSE(m.extensions()[0]->active);
  EXPECT_EQ(m.slotFor(v1, 4), -1);
}

TEST(TrainerMembershipTest, ExtensionsAreCheckedBeforeTheyConnectAnything) {
  RankPlan plan;
  plan.tensors = {{"embed", Dims{8}}};
  WriteOp op;
  op.tensor = 0;
  op.src_rank = 0;
  op.src_buffer = 0;
  op.dst_rank = 4;
  op.dst_buffer = 0;
  op.run = 8;
  plan.writes = {op};
  PlanExtensionMsg extension;
  extension.replica = 2;
  extension.ranks = {4, 5};
  extension.rank_plan = encodeRankPlan(plan);
  extension.peers.resize(1);
  extension.peers[0].rank = 4;
  const auto none = [](int32_t) { return false; };
  Result<RankPlan> checked = TrainerMembership::checkExtension(extension, none);
  ASSERT_TRUE(checked.isOk()) << checked.status().toString();
  EXPECT_EQ(checked->writes.size(), 1u);
  // A peer already connected.
  EXPECT_EQ(TrainerMembership::checkExtension(extension, [](int32_t r) { return r == 4; })
                .status()
                .message(),
            "replica 2 joining: rollout 4 is known");
  // A peer outside the replica.
  extension.peers[0].rank = 6;
  EXPECT_EQ(TrainerMembership::checkExtension(extension, none).status().message(),
            "replica 2 joining: names rollout 6");
  // A write outside the replica.
  extension.peers[0].rank = 4;
  plan.writes[0].dst_rank = 1;
  extension.rank_plan = encodeRankPlan(plan);
  EXPECT_EQ(TrainerMembership::checkExtension(extension, none).status().message(),
            "replica 2 joining: a write targets rollout 1");
  // Broadcast groups.
  plan.writes[0].dst_rank = 4;
  plan.groups.resize(1);
  extension.rank_plan = encodeRankPlan(plan);
  EXPECT_EQ(TrainerMembership::checkExtension(extension, none).status().code(), WSYNC_ERR_PROTOCOL);
}

}  // namespace
}  // namespace wsync
