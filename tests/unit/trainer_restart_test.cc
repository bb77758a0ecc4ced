// The trainer restart component (coordinator/trainer_restart.h) driven by hand: participants in a
// table, what it sends recorded by a RecordingWire, the running job a few lambdas, time as an
// argument. No sockets.
#include "coordinator/trainer_restart.h"

#include <gtest/gtest.h>

#include <set>
#include <utility>
#include <vector>

#include "codec/plan_codec.h"
#include "codec/registration_codec.h"
#include "layout/builders.h"
#include "plan/planner.h"
#include "recording_wire.h"

namespace wsync {
namespace {

using std::chrono::milliseconds;
using Time = CoordinatorClock::time_point;

constexpr int32_t kJoined = 2;  // the replica that joined the running job (rollout rank 2)
const Time kT0 = Time() + std::chrono::hours(1);

Registration trainerRegistration(int32_t rank, int64_t columns = 8) {
  Registration reg;
  reg.role = Role::kTrainer;
  reg.rank = rank;
  EXPECT_TRUE(addSplit(reg, "w", Dims{16, columns}, DType::kBFloat16, 0, 2, rank).isOk());
  return reg;
}

Registration rolloutRegistration(int32_t rank, int32_t replica) {
  Registration reg;
  reg.role = Role::kRollout;
  reg.rank = rank;
  reg.replica = replica;
  EXPECT_TRUE(addReplicated(reg, "w", Dims{16, 8}, DType::kBFloat16).isOk());
  return reg;
}

std::vector<uint8_t> registerPayload(const Registration& reg) {
  RegisterMsg m;
  m.registration = encodeRegistration(reg);
  return encode(m);
}

// Two trainers (connections 1, 2), rollout replicas 0 and 1 of the plan (connections 11, 12)
// and replica 2 that joined the running job (connection 13, with a plan extension per trainer).
class TrainerRestartComponent : public ::testing::Test {
 protected:
  TrainerRestartComponent() {
    for (int32_t t = 0; t < 2; ++t) {
      trainer_registrations_.push_back(trainerRegistration(t));
      addParticipant(1 + static_cast<ConnectionId>(t), Role::kTrainer, t, -1);
    }
    for (int32_t r = 0; r < 3; ++r)
      addParticipant(11 + static_cast<ConnectionId>(r), Role::kRollout, r, r);
    participants_.assignRanks({0, 1}, {2, 3, 4});
    participants_.setReplicaOfRollout({0, 1, kJoined});
    Result<Plan> plan =
        makePlan(trainer_registrations_, {rolloutRegistration(0, 0), rolloutRegistration(1, 1)});
    EXPECT_TRUE(plan.isOk()) << plan.status().toString();

    TrainerRestartOptions options;
    options.enabled = true;
    options.restart_timeout = milliseconds(5000);
    options.timeout = milliseconds(1000);
    options.heartbeat_interval_ms = 250;
    TrainerRestartJob job;
    job.has_replica = [this](int32_t replica) { return running_.count(replica) != 0; };
    job.rollout_in_versions = [this](int32_t r) {
      return running_.count(participants_.replicaOfRollout()[static_cast<size_t>(r)]) != 0;
    };
    job.last_started_version = [] { return uint64_t{7}; };
    job.as_planned = [](Registration&) { return Status::ok(); };
    job.complete_assignment = [](int32_t, PlanAssignmentMsg&) {};
    job.publish = [this](int32_t t, const std::vector<uint8_t>& payload) {
      published_.emplace_back(t, payload);
    };
    job.drop_replica = [this](Participant& rank, const std::string& reason) {
      dropped_.emplace_back(rank.hello.replica, reason);
      running_.erase(rank.hello.replica);
      rank.dropped = true;
    };
    restart_.emplace(options, participants_, wire_, std::move(job));
    restart_->keepPlan(std::move(plan).value(), &trainer_registrations_);
    restart_->keepExtension(kJoined, 0, {0xA0});
    restart_->keepExtension(kJoined, 1, {0xA1});
  }

  void addParticipant(ConnectionId conn, Role role, int32_t rank, int32_t replica) {
    participants_.admit(committedParticipant(conn, role, rank, replica));
  }

  // The trainers are lost, their connections close, and new ones (connections 21, 22) say Hello.
  void loseAndReturnTrainers() {
    restart_->begin(remoteError("trainer 1 disconnected"), kT0);
    for (int32_t t = 0; t < 2; ++t) {
      participants_[static_cast<size_t>(t)].connected = false;
      restart_->onTrainerClosed();
    }
    for (int32_t t = 0; t < 2; ++t)
      restart_->onHello(newTrainer(t), hello(t));
  }

  static ConnectionId newTrainer(int32_t t) { return 21 + static_cast<ConnectionId>(t); }
  static HelloMsg hello(int32_t t) {
    HelloMsg h;
    h.role = Role::kTrainer;
    h.role_rank = t;
    h.host = "node-b";
    return h;
  }
  Participant& participantOf(ConnectionId conn) {
    return participants_[*participants_.indexOf(conn)];
  }

  void registerAndCommitNewTrainers() {
    for (int32_t t = 0; t < 2; ++t) {
      Participant& p = participantOf(newTrainer(t));
      ASSERT_TRUE(restart_->onRegister(p, registerPayload(trainerRegistration(t))).isOk());
    }
    for (int32_t t = 0; t < 2; ++t)
      ASSERT_TRUE(
          restart_->onCommitDone(participantOf(newTrainer(t)), kT0 + milliseconds(10)).isOk());
  }

  ParticipantTable participants_;
  RecordingWire wire_;
  std::vector<Registration> trainer_registrations_;
  std::set<int32_t> running_{0, 1, kJoined};
  std::vector<std::pair<int32_t, std::vector<uint8_t>>> published_;
  std::vector<std::pair<int32_t, std::string>> dropped_;
  std::optional<TrainerRestart> restart_;
};

TEST_F(TrainerRestartComponent, NewTrainersThatDoNotCommitByTheDeadlineFailTheJobNamingThem) {
  ASSERT_TRUE(restart_->canBegin(/*job_running=*/true));
  restart_->begin(remoteError("trainer 1 disconnected"), kT0);
  // The lost trainers are told why and are out of the job.
  for (ConnectionId conn : {1, 2}) {
    ASSERT_EQ(wire_.to(conn, MessageType::kError).size(), 1u);
    EXPECT_TRUE(participantOf(conn).dropped);
  }
  EXPECT_TRUE(wire_.logged("versions above 7"));
  participants_[0].connected = false;
  participants_[1].connected = false;
  restart_->onHello(newTrainer(0), hello(0));  // trainer 1 never comes back
  EXPECT_EQ(wire_.count(MessageType::kWelcome), 0u);
  EXPECT_TRUE(restart_->tick(kT0 + milliseconds(4999)).isOk());
  const Status s = restart_->tick(kT0 + milliseconds(5000));
  EXPECT_EQ(s.code(), WSYNC_ERR_TIMEOUT);
  EXPECT_NE(s.message().find("trainer 0 not registered, trainer 1 never came back"),
            std::string::npos)
      << s.toString();
  EXPECT_NE(s.message().find("trainer 1 disconnected"), std::string::npos) << s.toString();
}

TEST_F(TrainerRestartComponent, WelcomeWaitsUntilEveryPreviousTrainerClosed) {
  restart_->begin(remoteError("trainer 1 disconnected"), kT0);
  for (int32_t t = 0; t < 2; ++t)
    restart_->onHello(newTrainer(t), hello(t));
  EXPECT_EQ(wire_.count(MessageType::kWelcome), 0u);  // trainers 0 and 1 may still write
  participants_[0].connected = false;
  restart_->onTrainerClosed();
  EXPECT_EQ(wire_.count(MessageType::kWelcome), 0u);
  participants_[1].connected = false;
  restart_->onTrainerClosed();
  for (int32_t t = 0; t < 2; ++t) {
    const auto welcomes = wire_.to(newTrainer(t), MessageType::kWelcome);
    ASSERT_EQ(welcomes.size(), 1u);
    WelcomeMsg w;
    ASSERT_TRUE(decode(welcomes[0].payload, w).isOk());
    EXPECT_EQ(w.role_rank, t);
    EXPECT_EQ(w.num_trainers, 2);
    EXPECT_EQ(w.num_rollouts, 3);
    EXPECT_EQ(w.heartbeat_interval_ms, 250);
  }
  // A second Hello for a rank that is back is refused, naming it.
  restart_->onHello(31, hello(1));
  EXPECT_EQ(wire_.closed.count(31), 1u);
  EXPECT_TRUE(wire_.logged("trainer 1 already registered again"));
}

TEST_F(TrainerRestartComponent, HeldPublishesAreReleasedOnceEveryExtensionIsApplied) {
  // Replica 1 was dropped before the trainers were lost: the new plan views leave it out.
  participants_.rollout(1).dropped = true;
  running_.erase(1);
  loseAndReturnTrainers();
  registerAndCommitNewTrainers();
  for (int32_t t = 0; t < 2; ++t) {
    const auto assignments = wire_.to(newTrainer(t), MessageType::kPlanAssignment);
    ASSERT_EQ(assignments.size(), 1u);
    PlanAssignmentMsg msg;
    ASSERT_TRUE(decode(assignments[0].payload, msg).isOk());
    Result<RankPlan> view = decodeRankPlan(msg.rank_plan.data(), msg.rank_plan.size());
    ASSERT_TRUE(view.isOk()) << view.status().toString();
    EXPECT_EQ(view->peers, std::vector<int32_t>{0});
    EXPECT_FALSE(view->writes.empty());
    for (const WriteOp& op : view->writes)
      EXPECT_EQ(op.dst_rank, 0);
    EXPECT_EQ(msg.replica_of_rollout, (std::vector<int32_t>{0, -1, kJoined}));
    // CommitOk, then the joined replica's extension as that trainer's predecessor got it.
    ASSERT_EQ(wire_.to(newTrainer(t), MessageType::kCommitOk).size(), 1u);
    const auto extensions = wire_.to(newTrainer(t), MessageType::kPlanExtension);
    ASSERT_EQ(extensions.size(), 1u);
    EXPECT_EQ(extensions[0].payload, std::vector<uint8_t>{static_cast<uint8_t>(0xA0 + t)});
  }
  ASSERT_TRUE(restart_->extending());
  const std::vector<uint8_t> publish = encode(VersionMsg{8});
  EXPECT_TRUE(restart_->holdPublish(participantOf(newTrainer(0)), publish));
  EXPECT_TRUE(restart_->holdPublish(participantOf(newTrainer(1)), publish));
  EXPECT_FALSE(restart_->holdPublish(participants_.rollout(0), publish));  // a rollout's: not held
  ASSERT_TRUE(restart_->onExtensionDone(participantOf(newTrainer(0)), kJoined).isOk());
  EXPECT_TRUE(published_.empty());
  EXPECT_EQ(restart_->onExtensionDone(participantOf(newTrainer(0)), kJoined).code(),
            WSYNC_ERR_PROTOCOL);  // twice
  ASSERT_TRUE(restart_->onExtensionDone(participantOf(newTrainer(1)), kJoined).isOk());
  EXPECT_FALSE(restart_->active());
  ASSERT_EQ(published_.size(), 2u);
  EXPECT_EQ(published_[0], std::make_pair(0, publish));
  EXPECT_EQ(published_[1], std::make_pair(1, publish));
  EXPECT_TRUE(wire_.logged("trainers restarted"));
}

TEST_F(TrainerRestartComponent, AReplicaWhoseExtensionIsNotAppliedInTimeIsDropped) {
  loseAndReturnTrainers();
  registerAndCommitNewTrainers();
  ASSERT_TRUE(restart_->onExtensionDone(participantOf(newTrainer(0)), kJoined).isOk());
  const std::vector<uint8_t> publish = encode(VersionMsg{8});
  EXPECT_TRUE(restart_->holdPublish(participantOf(newTrainer(1)), publish));
  EXPECT_TRUE(restart_->tick(kT0 + milliseconds(1009)).isOk());
  EXPECT_TRUE(dropped_.empty());
  EXPECT_TRUE(restart_->tick(kT0 + milliseconds(1010)).isOk());  // CommitOk + the job's timeout
  ASSERT_EQ(dropped_.size(), 1u);
  EXPECT_EQ(dropped_[0].first, kJoined);
  EXPECT_NE(dropped_[0].second.find("did not apply its plan extension within 1000 ms"),
            std::string::npos);
  EXPECT_FALSE(restart_->active());  // the versions go on without it
  ASSERT_EQ(published_.size(), 1u);
}

TEST_F(TrainerRestartComponent, ATrainerThatRegistersDifferentlyIsRefusedAndMayBeReplaced) {
  loseAndReturnTrainers();
  Participant& first = participantOf(newTrainer(0));
  ASSERT_TRUE(restart_->onRegister(first, registerPayload(trainerRegistration(0))).isOk());
  Participant& second = participantOf(newTrainer(1));
  ASSERT_TRUE(restart_->onRegister(second, registerPayload(trainerRegistration(1, 4))).isOk());
  const auto errors = wire_.to(newTrainer(1), MessageType::kError);
  ASSERT_EQ(errors.size(), 1u);
  ErrorMsg error;
  ASSERT_TRUE(decode(errors[0].payload, error).isOk());
  EXPECT_EQ(error.code, WSYNC_ERR_MISMATCH);
  EXPECT_NE(error.message.find("trainer 1 registered differently"), std::string::npos);
  EXPECT_NE(error.message.find("tensor 'w': shape"), std::string::npos) << error.message;
  EXPECT_EQ(wire_.closed.count(newTrainer(1)), 1u);
  EXPECT_EQ(wire_.count(MessageType::kPlanAssignment), 0u);
  // A replacement for trainer 1 is welcomed, and once it registers the same, both are assigned.
  participantOf(newTrainer(1)).connected = false;
  restart_->onHello(23, hello(1));
  ASSERT_EQ(wire_.to(23, MessageType::kWelcome).size(), 1u);
  ASSERT_TRUE(
      restart_->onRegister(participantOf(23), registerPayload(trainerRegistration(1))).isOk());
  EXPECT_EQ(wire_.count(MessageType::kPlanAssignment), 2u);
  EXPECT_EQ(participants_.trainer(1).conn, 23u);
}

}  // namespace
}  // namespace wsync
