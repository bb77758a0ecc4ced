// Replicas joining the running job (coordinator/replica_joins.h) driven by hand: participants in
// a table, what the component sends recorded by a RecordingWire, the running job a few lambdas,
// time a variable the test moves, planner results run when the test says. No sockets.
#include "coordinator/replica_joins.h"

#include <gtest/gtest.h>

#include <deque>
#include <mutex>
#include <utility>
#include <vector>

#include "codec/registration_codec.h"
#include "layout/builders.h"
#include "recording_wire.h"

namespace wsync {
namespace {

using std::chrono::milliseconds;
using Time = CoordinatorClock::time_point;

constexpr int32_t kJoiner = 5;  // the joining replica: two ranks, connections 31 and 32
constexpr ConnectionId kJoinerConn = 31;

// Rank `index` of a TP-2 rollout replica.
std::vector<uint8_t> rolloutRegisterPayload(int32_t index) {
  Registration reg;
  reg.role = Role::kRollout;
  reg.rank = index;
  EXPECT_TRUE(addSplit(reg, "w", Dims{16, 8}, DType::kBFloat16, 1, 2, index).isOk());
  RegisterMsg m;
  m.registration = encodeRegistration(reg);
  m.transport = "test";
  m.slot_descriptors = {{1}, {2}};
  m.buffer_byte_offsets = {0};
  return encode(m);
}

HelloMsg joinHello(int32_t replica_rank, int32_t replica = kJoiner, int32_t size = 2) {
  HelloMsg h;
  h.role = Role::kRollout;
  h.replica = replica;
  h.replica_size = size;
  h.replica_rank = replica_rank;
  h.host = "node-c";
  return h;
}

// Two trainers (connections 1, 2) and running replica 0 (rollout rank 0, connection 11).
class ReplicaJoinsComponent : public ::testing::Test {
 protected:
  ReplicaJoinsComponent() {
    for (int32_t t = 0; t < 2; ++t) {
      trainer_registrations_.push_back(halfRowsTrainer(t));
      add(1 + static_cast<ConnectionId>(t), Role::kTrainer, t, -1);
    }
    add(11, Role::kRollout, 0, 0);
    participants_.assignRanks({0, 1}, {2});
    participants_.setReplicaOfRollout({0});

    ReplicaJoinsOptions options;
    options.timeout = milliseconds(1000);
    options.heartbeat_interval_ms = 250;
    ReplicaJoinsJob job;
    job.running = [] { return true; };
    job.ended = [] { return false; };
    job.has_replica = [](int32_t replica) { return replica == 0; };
    job.ready_version = [](int32_t) { return uint64_t{0}; };  // no cold start source
    job.in_flight_version = [] { return uint64_t{0}; };
    job.add_replica = [this](const ReplicaSpec& spec) {
      added_.push_back(spec);
      return Status::ok();
    };
    job.trainers_finished = [] { return std::optional<uint64_t>(); };
    job.trainer_registrations = [this] { return &trainer_registrations_; };
    job.registration = [](const Participant& p) -> Result<Registration> {
      WSYNC_ASSIGN_OR_RETURN(Registration reg, decodeRegistration(p.reg.registration.data(),
                                                                  p.reg.registration.size()));
      reg.rank = p.role_rank;
      reg.replica = p.hello.replica;
      return reg;
    };
    job.check_scalings = [](const Participant&) { return Status::ok(); };
    job.extension_sent = [this](int32_t replica, int32_t t, const std::vector<uint8_t>&) {
      extensions_.emplace_back(replica, t);
    };
    job.drop_replica = [](Participant&, const std::string&) {};
    job.post = [this](std::function<void()> task) {
      std::lock_guard lock(mu_);
      posted_.push_back(std::move(task));
    };
    job.now = [this] { return now_; };
    joins_.emplace(options, participants_, wire_, std::move(job));
  }

  void add(ConnectionId conn, Role role, int32_t rank, int32_t replica) {
    participants_.admit(committedParticipant(conn, role, rank, replica));
  }
  Participant& participantOf(ConnectionId conn) {
    return participants_[*participants_.indexOf(conn)];
  }

  // Runs the planner threads' results on this (the event) thread.
  void runPosted() {
    joins_->stopPlanners();
    std::deque<std::function<void()>> tasks;
    {
      std::lock_guard lock(mu_);
      tasks.swap(posted_);
    }
    for (auto& task : tasks)
      task();
  }

  void helloAndRegisterBothRanks() {
    for (int32_t i = 0; i < 2; ++i)
      joins_->onHello(kJoinerConn + static_cast<ConnectionId>(i), joinHello(i));
    for (int32_t i = 0; i < 2; ++i) {
      Participant& p = participantOf(kJoinerConn + static_cast<ConnectionId>(i));
      ASSERT_TRUE(joins_->onRegister(p, rolloutRegisterPayload(i)).isOk());
    }
    runPosted();
  }

  ParticipantTable participants_;
  RecordingWire wire_;
  std::vector<Registration> trainer_registrations_;
  std::vector<ReplicaSpec> added_;
  std::vector<std::pair<int32_t, int32_t>> extensions_;  // (replica, trainer)
  std::mutex mu_;
  std::deque<std::function<void()>> posted_;
  Time now_ = Time() + std::chrono::hours(1);
  std::optional<ReplicaJoins> joins_;
};

TEST_F(ReplicaJoinsComponent, AJoinMissingARankIsAbortedAtTheTimeoutNamingWhy) {
  joins_->onHello(kJoinerConn, joinHello(0));
  EXPECT_TRUE(joins_->joining(kJoiner));
  EXPECT_EQ(wire_.count(MessageType::kWelcome), 0u);  // rank 1 has not said Hello
  joins_->tick(now_ + milliseconds(999));
  EXPECT_TRUE(joins_->joining(kJoiner));
  joins_->tick(now_ + milliseconds(1000));
  EXPECT_FALSE(joins_->joining(kJoiner));
  const auto errors = wire_.to(kJoinerConn, MessageType::kError);
  ASSERT_EQ(errors.size(), 1u);
  ErrorMsg error;
  ASSERT_TRUE(decode(errors[0].payload, error).isOk());
  EXPECT_EQ(error.code, WSYNC_ERR_REMOTE);  // only its join ended, not the job
  EXPECT_NE(
      error.message.find("replica 5 did not join within 1000 ms: 1 of its 2 ranks said Hello"),
      std::string::npos)
      << error.message;
  EXPECT_NE(error.message.find("the job goes on without replica 5"), std::string::npos);
  EXPECT_EQ(wire_.closed.count(kJoinerConn), 1u);
  EXPECT_TRUE(participantOf(kJoinerConn).dropped);
  EXPECT_EQ(wire_.count(MessageType::kReplicaDropped), 0u);  // no trainer knew of it
}

TEST_F(ReplicaJoinsComponent, AReplicaThatLeavesWhileJoiningIsDroppedQuietly) {
  for (int32_t i = 0; i < 2; ++i)
    joins_->onHello(kJoinerConn + static_cast<ConnectionId>(i), joinHello(i));
  // Welcome: the next rollout ranks of the job.
  for (int32_t i = 0; i < 2; ++i) {
    const auto welcomes =
        wire_.to(kJoinerConn + static_cast<ConnectionId>(i), MessageType::kWelcome);
    ASSERT_EQ(welcomes.size(), 1u);
    WelcomeMsg w;
    ASSERT_TRUE(decode(welcomes[0].payload, w).isOk());
    EXPECT_EQ(w.role_rank, 1 + i);
    EXPECT_EQ(w.num_rollouts, 3);
    EXPECT_EQ(w.heartbeat_interval_ms, 250);
  }
  EXPECT_EQ(participants_.replicaOfRollout(), (std::vector<int32_t>{0, kJoiner, kJoiner}));
  joins_->abort(kJoiner, remoteError("rollout 1 left"), /*left_cleanly=*/true);
  EXPECT_FALSE(joins_->joining(kJoiner));
  EXPECT_EQ(wire_.count(MessageType::kError), 0u);  // Left answers the rank that said Leave
  EXPECT_TRUE(wire_.closed.empty());
  EXPECT_TRUE(participantOf(kJoinerConn).dropped);
  EXPECT_TRUE(participantOf(kJoinerConn + 1).dropped);
  EXPECT_TRUE(wire_.logged("replica 5 left before its join completed: rollout 1 left"));
}

TEST_F(ReplicaJoinsComponent, HellosThatCannotJoinAreRefusedNamingWhy) {
  joins_->onHello(41, joinHello(0, /*replica=*/0));  // replica 0 runs
  EXPECT_TRUE(wire_.logged("joining replica 0: the job already has it"));
  joins_->onHello(42, joinHello(2));  // replica rank outside [0, 2)
  EXPECT_TRUE(wire_.logged("replica_rank 2 is outside [0, 2)"));
  joins_->onHello(kJoinerConn, joinHello(0));
  joins_->onHello(43, joinHello(0));
  EXPECT_TRUE(wire_.logged("replica rank 0 already joined"));
  joins_->onHello(44, joinHello(1, kJoiner, /*size=*/3));
  EXPECT_TRUE(wire_.logged("replica_size 3, but another of its ranks said 2"));
  EXPECT_EQ(wire_.closed, (std::set<ConnectionId>{41, 42, 43, 44}));
  EXPECT_EQ(participants_.size(), 4u);  // only the first Hello of replica 5 was admitted
}

TEST_F(ReplicaJoinsComponent, ThePlannedReplicaExtendsTheTrainersAndAnAbortTellsThem) {
  helloAndRegisterBothRanks();
  for (ConnectionId trainer : {1, 2}) {
    const auto extensions = wire_.to(trainer, MessageType::kPlanExtension);
    ASSERT_EQ(extensions.size(), 1u);
    PlanExtensionMsg ext;
    ASSERT_TRUE(decode(extensions[0].payload, ext).isOk());
    EXPECT_EQ(ext.replica, kJoiner);
    EXPECT_EQ(ext.ranks, (std::vector<int32_t>{1, 2}));
  }
  EXPECT_EQ(extensions_, (std::vector<std::pair<int32_t, int32_t>>{{kJoiner, 0}, {kJoiner, 1}}));
  for (ConnectionId rank : {kJoinerConn, kJoinerConn + 1})
    EXPECT_EQ(wire_.to(rank, MessageType::kPlanAssignment).size(), 1u);
  // A join that cannot complete now: the trainers forget the extension.
  joins_->abort(kJoiner, invalidArgument("rollout 2 failed"));
  for (ConnectionId trainer : {1, 2}) {
    const auto dropped = wire_.to(trainer, MessageType::kReplicaDropped);
    ASSERT_EQ(dropped.size(), 1u);
    ReplicaMsg m;
    ASSERT_TRUE(decode(dropped[0].payload, m).isOk());
    EXPECT_EQ(m.replica, kJoiner);
    EXPECT_EQ(m.ranks, (std::vector<int32_t>{1, 2}));
  }
  EXPECT_EQ(wire_.to(kJoinerConn, MessageType::kError).size(), 1u);
}

TEST_F(ReplicaJoinsComponent, WithNoSourceTheJoinCompletesOnceTheTrainersAppliedItsExtension) {
  helloAndRegisterBothRanks();
  for (ConnectionId rank : {kJoinerConn, kJoinerConn + 1})
    ASSERT_TRUE(joins_->onCommitDone(participantOf(rank)).isOk());
  // CommitOk; no running replica holds a version, so the cold start ends at once without one.
  EXPECT_EQ(wire_.count(MessageType::kCommitOk), 2u);
  EXPECT_TRUE(joins_->committedOk(kJoiner));
  ASSERT_TRUE(joins_->onExtensionDone(participantOf(1), kJoiner).isOk());
  EXPECT_TRUE(added_.empty());
  EXPECT_EQ(joins_->onExtensionDone(participantOf(1), kJoiner).code(), WSYNC_ERR_PROTOCOL);
  ASSERT_TRUE(joins_->onExtensionDone(participantOf(2), kJoiner).isOk());
  ASSERT_EQ(added_.size(), 1u);
  EXPECT_EQ(added_[0].id, kJoiner);
  EXPECT_EQ(added_[0].ranks, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(added_[0].num_slots, 2);
  EXPECT_EQ(added_[0].ready_version, 0u);  // its first version comes from the trainers
  EXPECT_FALSE(joins_->joining(kJoiner));
  EXPECT_TRUE(wire_.logged("replica 5 joined (2 ranks"));
}

}  // namespace
}  // namespace wsync
