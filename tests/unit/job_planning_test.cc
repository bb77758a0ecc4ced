// The job's plan at commit (coordinator/job_planning.h) driven by hand: ranks in a participant
// table, what it sends recorded by a RecordingWire. No sockets: Register until every fixed rank
// registered, the plan, the replicas for the sequencer, each rank's PlanAssignment, and the
// registrations it refuses.
#include "coordinator/job_planning.h"

#include <gtest/gtest.h>

#include <vector>

#include "codec/plan_codec.h"
#include "codec/registration_codec.h"
#include "layout/builders.h"
#include "recording_wire.h"

namespace wsync {
namespace {

Registration rolloutRegistration(int32_t rank) {
  Registration reg;
  reg.role = Role::kRollout;
  reg.rank = rank;
  EXPECT_TRUE(addReplicated(reg, "w", Dims{16, 8}, DType::kBFloat16).isOk());
  return reg;
}

std::vector<uint8_t> registerPayload(const Registration& reg, size_t slots = 2) {
  RegisterMsg m;
  m.registration = encodeRegistration(reg);
  if (reg.role == Role::kRollout) {
    m.slot_descriptors.assign(slots, std::vector<uint8_t>{0x5A});
    m.buffer_byte_offsets.assign(reg.buffers.size(), 0);
  }
  return encode(m);
}

Participant joinedRank(ConnectionId conn, Role role, int32_t rank, int32_t replica) {
  Participant p = committedParticipant(conn, role, rank, replica);
  p.registered = false;
  p.committed = false;
  return p;
}

// Trainers 0 and 1 (connections 1, 2); rollouts 0 and 1 (connections 11, 12) of replica 0 and
// rollout 2 (connection 13) of replica 1.
class JobPlanningComponent : public ::testing::Test {
 protected:
  JobPlanningComponent() { admitTwoTrainersThreeRollouts(participants_, joinedRank); }

  Result<bool> registerRank(ConnectionId conn, const std::vector<uint8_t>& payload) {
    return planning_.onRegister(participants_[*participants_.indexOf(conn)], payload);
  }
  // Every rank registers; `rollout2_slots`: the slots rollout 2 exposes.
  void registerAll(size_t rollout1_slots = 2) {
    for (int32_t t = 0; t < 2; ++t) {
      Result<bool> all =
          registerRank(1 + static_cast<ConnectionId>(t), registerPayload(halfRowsTrainer(t)));
      ASSERT_TRUE(all.isOk()) << all.status().toString();
      EXPECT_FALSE(*all);
    }
    for (int32_t r = 0; r < 3; ++r) {
      Result<bool> all =
          registerRank(11 + static_cast<ConnectionId>(r),
                       registerPayload(rolloutRegistration(r), r == 1 ? rollout1_slots : 2));
      ASSERT_TRUE(all.isOk()) << all.status().toString();
      EXPECT_EQ(*all, r == 2);  // complete with the last rank
    }
  }

  ParticipantTable participants_;
  RecordingWire wire_;
  CoordinatorBlockScaling block_scaling_{participants_, wire_};
  JobPlanning planning_{{}, participants_, wire_, block_scaling_};
};

// Every rank registered: a plan of writes (no rank offered a broadcast backend), the replicas with
// their slots, and a PlanAssignment per rank naming its plan, its peers and the replicas.
TEST_F(JobPlanningComponent, PlansAndAssignsEveryRank) {
  registerAll();
  Result<Plan> plan = planning_.plan();
  ASSERT_TRUE(plan.isOk()) << plan.status().toString();
  EXPECT_EQ(plan->tensors.size(), 1u);
  EXPECT_TRUE(plan->groups.empty());
  EXPECT_FALSE(plan->writes.empty());
  EXPECT_EQ(planning_.trainerRegistrations().size(), 2u);
  EXPECT_TRUE(wire_.logged("broadcast groups: "));
  EXPECT_TRUE(wire_.logged("plan: 1 tensors"));

  Result<std::vector<ReplicaSpec>> replicas = planning_.replicas();
  ASSERT_TRUE(replicas.isOk()) << replicas.status().toString();
  ASSERT_EQ(replicas->size(), 2u);
  EXPECT_EQ((*replicas)[0].id, 0);
  EXPECT_EQ((*replicas)[0].ranks, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ((*replicas)[0].num_slots, 2);
  EXPECT_EQ((*replicas)[1].ranks, (std::vector<int32_t>{2}));
  EXPECT_EQ(participants_.replicaOfRollout(), (std::vector<int32_t>{0, 0, 1}));

  planning_.sendAssignments(*plan);
  EXPECT_EQ(wire_.count(MessageType::kPlanAssignment), 5u);
  for (ConnectionId conn : {1, 2, 11, 12, 13}) {
    const std::vector<RecordingWire::Sent> sent = wire_.to(conn, MessageType::kPlanAssignment);
    ASSERT_EQ(sent.size(), 1u) << conn;
    PlanAssignmentMsg msg;
    ASSERT_TRUE(decode(sent[0].payload, msg).isOk());
    Result<RankPlan> view = decodeRankPlan(msg.rank_plan.data(), msg.rank_plan.size());
    ASSERT_TRUE(view.isOk()) << view.status().toString();
    EXPECT_EQ(msg.replica_of_rollout, (std::vector<int32_t>{0, 0, 1}));
    if (conn <= 2) {  // a trainer writes its half to every rollout rank
      EXPECT_EQ(view->peers, (std::vector<int32_t>{0, 1, 2}));
      EXPECT_EQ(msg.peers.size(), 3u);
    } else {
      EXPECT_TRUE(msg.peers.empty());
    }
  }
}

// Registering twice is refused; a rollout's registration that does not fit it fails planning,
// naming the rank.
TEST_F(JobPlanningComponent, RefusesBadRegistrations) {
  ASSERT_TRUE(registerRank(1, registerPayload(halfRowsTrainer(0))).isOk());
  EXPECT_EQ(registerRank(1, registerPayload(halfRowsTrainer(0))).status().code(),
            WSYNC_ERR_INVALID_USAGE);

  Participant& rollout = participants_.rollout(0);
  rollout.reg = RegisterMsg{};
  ASSERT_TRUE(decode(registerPayload(rolloutRegistration(1)), rollout.reg).isOk());
  Result<Registration> wrong_rank = planning_.registrationOf(rollout);
  EXPECT_EQ(wrong_rank.status().code(), WSYNC_ERR_PROTOCOL);
  EXPECT_NE(wrong_rank.status().message().find("rollout 0 registered as rollout 1"),
            std::string::npos)
      << wrong_rank.status().toString();

  ASSERT_TRUE(decode(registerPayload(rolloutRegistration(0), 1), rollout.reg).isOk());
  Result<Registration> one_slot = planning_.registrationOf(rollout);
  EXPECT_EQ(one_slot.status().code(), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(one_slot.status().message().find("rollout 0 exposes 1 slots"), std::string::npos);
}

// The ranks of one replica must expose as many slots each.
TEST_F(JobPlanningComponent, ReplicaRanksDifferInSlots) {
  registerAll(/*rollout1_slots=*/3);
  ASSERT_TRUE(planning_.plan().isOk());
  Result<std::vector<ReplicaSpec>> replicas = planning_.replicas();
  ASSERT_FALSE(replicas.isOk());
  EXPECT_EQ(replicas.status().code(), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(replicas.status().message(), "replica 0: rollout 0 has 2 slots but rollout 1 has 3");
}

}  // namespace
}  // namespace wsync
