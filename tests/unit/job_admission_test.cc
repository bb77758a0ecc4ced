// The job's fixed ranks joining (coordinator/job_admission.h) driven by hand: Hellos in, what it
// sends recorded by a RecordingWire. No sockets: Welcome once every rank said Hello, the role
// ranks of an MPI job in world rank order, refused Hellos, the jobs it fails.
#include "coordinator/job_admission.h"

#include <gtest/gtest.h>

#include <vector>

#include "recording_wire.h"

namespace wsync {
namespace {

HelloMsg explicitHello(Role role, int32_t rank, int32_t replica = -1) {
  HelloMsg h;
  h.role = role;
  h.role_rank = rank;
  h.replica = role == Role::kRollout ? replica : -1;
  h.host = "node-a";
  return h;
}

HelloMsg mpiHello(Role role, int32_t world_rank) {
  HelloMsg h;
  h.role = role;
  h.world_rank = world_rank;
  h.replica = role == Role::kRollout ? 0 : -1;
  return h;
}

WelcomeMsg welcomeTo(const RecordingWire& wire, ConnectionId conn) {
  const std::vector<RecordingWire::Sent> sent = wire.to(conn, MessageType::kWelcome);
  EXPECT_EQ(sent.size(), 1u) << "connection " << conn;
  WelcomeMsg w;
  if (!sent.empty()) EXPECT_TRUE(decode(sent[0].payload, w).isOk());
  return w;
}

// Explicit bootstrap, one trainer and two rollouts: Welcome to each once all three said Hello.
TEST(JobAdmissionComponent, WelcomesEveryRankOnceAllJoined) {
  ParticipantTable participants;
  RecordingWire wire;
  JobAdmission admission({{0, 0, 1, 2}, JobSettings{}, 250}, participants, wire);
  EXPECT_FALSE(admission.onHello(1, explicitHello(Role::kTrainer, 0)));
  EXPECT_FALSE(admission.onHello(11, explicitHello(Role::kRollout, 1, 1)));
  EXPECT_NE(admission.absentRanks().find("rollout 0"), std::string::npos)
      << admission.absentRanks();
  EXPECT_TRUE(admission.onHello(10, explicitHello(Role::kRollout, 0, 0)));
  EXPECT_TRUE(wire.sent.empty());
  ASSERT_TRUE(admission.admitAll().isOk());
  EXPECT_EQ(participants.numTrainers(), 1);
  EXPECT_EQ(participants.numRollouts(), 2);
  EXPECT_EQ(participants.rollout(1).conn, 11u);
  const WelcomeMsg w = welcomeTo(wire, 11);
  EXPECT_EQ(w.role_rank, 1);
  EXPECT_EQ(w.num_trainers, 1);
  EXPECT_EQ(w.num_rollouts, 2);
  EXPECT_EQ(w.heartbeat_interval_ms, 250);
  EXPECT_TRUE(w.trainer_world_ranks.empty());
  EXPECT_EQ(welcomeTo(wire, 1).role_rank, 0);
  EXPECT_TRUE(wire.logged("all 3 ranks joined (1 trainers, 2 rollouts)"));
}

// A Hello naming a rank already there, or outside the job, is refused with an Error.
TEST(JobAdmissionComponent, RefusesHellosThatDoNotFit) {
  ParticipantTable participants;
  RecordingWire wire;
  JobAdmission admission({{0, 0, 1, 1}, JobSettings{}, 0}, participants, wire);
  EXPECT_FALSE(admission.onHello(1, explicitHello(Role::kTrainer, 0)));
  EXPECT_FALSE(admission.onHello(2, explicitHello(Role::kTrainer, 0)));
  EXPECT_FALSE(admission.onHello(3, explicitHello(Role::kRollout, 5, 0)));
  EXPECT_EQ(participants.size(), 1u);
  EXPECT_EQ(wire.closed, (std::set<ConnectionId>{2, 3}));
  EXPECT_EQ(wire.to(2, MessageType::kError).size(), 1u);
  EXPECT_TRUE(wire.logged("refused a connection"));
}

// MPI bootstrap: role ranks in world rank order, Welcome naming every rank's world rank.
TEST(JobAdmissionComponent, MpiRanksInWorldRankOrder) {
  ParticipantTable participants;
  RecordingWire wire;
  JobAdmission admission({{4, 1, 0, 0}, JobSettings{}, 0}, participants, wire);
  EXPECT_FALSE(admission.onHello(3, mpiHello(Role::kRollout, 3)));
  EXPECT_FALSE(admission.onHello(2, mpiHello(Role::kTrainer, 2)));
  EXPECT_TRUE(admission.onHello(1, mpiHello(Role::kRollout, 1)));
  ASSERT_TRUE(admission.admitAll().isOk());
  EXPECT_EQ(welcomeTo(wire, 1).role_rank, 0);
  EXPECT_EQ(welcomeTo(wire, 3).role_rank, 1);
  const WelcomeMsg w = welcomeTo(wire, 2);
  EXPECT_EQ(w.role_rank, 0);
  EXPECT_EQ(w.trainer_world_ranks, (std::vector<int32_t>{2}));
  EXPECT_EQ(w.rollout_world_ranks, (std::vector<int32_t>{1, 3}));
}

// An MPI job without a rollout rank (or without a trainer) fails; nobody is welcomed.
TEST(JobAdmissionComponent, FailsAnMpiJobWithoutRollouts) {
  ParticipantTable participants;
  RecordingWire wire;
  JobAdmission admission({{2, 0, 0, 0}, JobSettings{}, 0}, participants, wire);
  EXPECT_FALSE(admission.onHello(1, mpiHello(Role::kTrainer, 0)));
  EXPECT_TRUE(admission.onHello(2, mpiHello(Role::kTrainer, 1)));
  const Status s = admission.admitAll();
  EXPECT_EQ(s.code(), WSYNC_ERR_INVALID_USAGE);
  EXPECT_NE(s.message().find("the MPI job has no rollout rank"), std::string::npos);
  EXPECT_EQ(wire.count(MessageType::kWelcome), 0u);
}

}  // namespace
}  // namespace wsync
