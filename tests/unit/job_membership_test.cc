// The running job's membership (coordinator/job_membership.h) driven by hand: ranks in a
// participant table, what it sends recorded by a RecordingWire, time as an argument. No sockets:
// the liveness bounds, a crashed replica's drop and a clean leave, Left once no trainer writes,
// silent and stalled replicas, the MPI job's ranks that are never dropped.
#include "coordinator/job_membership.h"

#include <gtest/gtest.h>

#include <vector>

#include "recording_wire.h"

namespace wsync {
namespace {

using std::chrono::milliseconds;
using Time = CoordinatorClock::time_point;

const Time kT0 = Time() + std::chrono::hours(1);

JobMembershipOptions membershipOptions(int heartbeat_timeout_ms, bool mpi_job = false) {
  JobMembershipOptions options;
  options.timeout = milliseconds(8000);
  options.job.heartbeat_timeout_ms = heartbeat_timeout_ms;
  options.mpi_job = mpi_job;
  return options;
}

// Trainers 0 and 1 (connections 1, 2); rollouts 0 and 1 of replica 0 (connections 11, 12) and
// rollout 2 of replica 1 (connection 13), all heard from at kT0.
class JobMembershipComponent : public ::testing::Test {
 protected:
  JobMembershipComponent() {
    admitTwoTrainersThreeRollouts(participants_, committedParticipant);
    participants_.setReplicaOfRollout({0, 0, 1});
    for (Participant& p : participants_)
      p.last_heard = kT0;
  }

  ParticipantTable participants_;
  RecordingWire wire_;
  CoordinatorMetrics metrics_;
  JobMembership membership_{membershipOptions(2000), participants_, wire_, metrics_};
};

// The heartbeat interval is a quarter of the heartbeat timeout, at most an eighth of the job's
// timeout; the replica bound the heartbeat timeout, at most half the job's timeout.
TEST_F(JobMembershipComponent, LivenessBounds) {
  EXPECT_EQ(membership_.heartbeatInterval(), milliseconds(500));
  EXPECT_EQ(membership_.replicaBound(), milliseconds(2000));
  JobMembership long_heartbeats(membershipOptions(20000), participants_, wire_, metrics_);
  EXPECT_EQ(long_heartbeats.heartbeatInterval(), milliseconds(1000));
  EXPECT_EQ(long_heartbeats.replicaBound(), milliseconds(4000));
  JobMembership no_heartbeats(membershipOptions(0), participants_, wire_, metrics_);
  EXPECT_EQ(no_heartbeats.heartbeatInterval(), milliseconds(0));
  EXPECT_EQ(no_heartbeats.replicaBound(), milliseconds(4000));
}

// A crashed replica: every rank of it marked dropped and told why, the connection closed, the
// trainers told, the metrics counted; Left waits until the version in flight is no longer written.
TEST_F(JobMembershipComponent, CrashedReplicaIsDroppedAndLeftWaitsForTheWriters) {
  Participant& rank0 = participants_.rollout(0);
  Result<std::vector<int32_t>> dropped = membership_.drop(rank0, "it died", true, /*in_flight=*/7);
  ASSERT_TRUE(dropped.isOk());
  EXPECT_EQ(*dropped, (std::vector<int32_t>{0, 1}));
  EXPECT_TRUE(participants_.rollout(1).dropped);
  EXPECT_FALSE(participants_.rollout(2).dropped);
  EXPECT_EQ(participants_.rollout(1).written_until, 7u);
  for (ConnectionId c : {11, 12}) {
    ASSERT_EQ(wire_.to(c, MessageType::kError).size(), 1u);
    ErrorMsg error;
    ASSERT_TRUE(decode(wire_.to(c, MessageType::kError)[0].payload, error).isOk());
    EXPECT_EQ(error.message, "replica 0 was dropped from the job: it died");
  }
  EXPECT_EQ(wire_.closed, (std::set<ConnectionId>{11}));
  for (ConnectionId t : {1, 2}) {
    ASSERT_EQ(wire_.to(t, MessageType::kReplicaDropped).size(), 1u);
    ReplicaMsg m;
    ASSERT_TRUE(decode(wire_.to(t, MessageType::kReplicaDropped)[0].payload, m).isOk());
    EXPECT_EQ(m.replica, 0);
    EXPECT_EQ(m.ranks, (std::vector<int32_t>{0, 1}));
  }
  EXPECT_TRUE(wire_.logged("replica 0 (rollout ranks 0, 1) dropped: it died"));
  EXPECT_EQ(metrics_.snapshot().dropped, 1u);

  participants_.rollout(1).awaiting_left = true;
  membership_.sendDueLefts(7);  // trainers may still write version 7 into it
  EXPECT_TRUE(wire_.to(12, MessageType::kLeft).empty());
  membership_.sendDueLefts(0);
  EXPECT_EQ(wire_.to(12, MessageType::kLeft).size(), 1u);
  EXPECT_FALSE(participants_.rollout(1).awaiting_left);
}

// A clean leave tells the replica's ranks nothing and counts no drop.
TEST_F(JobMembershipComponent, CleanLeaveSendsNoError) {
  Result<std::vector<int32_t>> left =
      membership_.drop(participants_.rollout(2), "rollout 2 left", false, 0);
  ASSERT_TRUE(left.isOk());
  EXPECT_EQ(*left, (std::vector<int32_t>{2}));
  EXPECT_EQ(wire_.count(MessageType::kError), 0u);
  EXPECT_TRUE(wire_.closed.empty());
  EXPECT_EQ(wire_.count(MessageType::kReplicaDropped), 2u);
  EXPECT_TRUE(wire_.logged("replica 1 (rollout ranks 2) left: rollout 2 left"));
  EXPECT_EQ(metrics_.snapshot().dropped, 0u);
}

// A rank of an MPI-bootstrap job that crashed fails the job; none of its replicas is dropped as
// stalled.
TEST_F(JobMembershipComponent, MpiJobRanksAreNeverDropped) {
  JobMembership mpi(membershipOptions(2000, /*mpi_job=*/true), participants_, wire_, metrics_);
  Result<std::vector<int32_t>> dropped = mpi.drop(participants_.rollout(0), "it died", true, 0);
  ASSERT_FALSE(dropped.isOk());
  EXPECT_EQ(dropped.status().code(), WSYNC_ERR_REMOTE);
  EXPECT_FALSE(participants_.rollout(0).dropped);
  EXPECT_TRUE(wire_.sent.empty());
  EXPECT_EQ(mpi.stalledRank(0), nullptr);
  EXPECT_EQ(membership_.stalledRank(0), &participants_.rollout(0));
}

// Silent rollout ranks past the heartbeat timeout, and the replicas stalled in a version.
TEST_F(JobMembershipComponent, SilentAndStalledReplicas) {
  participants_.rollout(1).last_heard = kT0 + milliseconds(1500);
  EXPECT_FALSE(membership_.silence(participants_.rollout(0), kT0 + milliseconds(1999)));
  std::optional<std::string> silent =
      membership_.silence(participants_.rollout(0), kT0 + milliseconds(2000));
  ASSERT_TRUE(silent);
  EXPECT_EQ(*silent, "rollout 0 () sent no heartbeat for 2000 ms");
  EXPECT_FALSE(membership_.silence(participants_.rollout(1), kT0 + milliseconds(2000)));
  EXPECT_FALSE(membership_.silence(participants_.trainer(0), kT0 + milliseconds(9000)));

  // Replica 1 held up the version; replica 0 holds Go and its rank 0 is silent for two heartbeat
  // intervals (rank 1 is not); rollout 2 did not confirm its Ready.
  const auto drops = membership_.stalledReplicas({1}, 5, {0}, {2}, kT0 + milliseconds(1000));
  ASSERT_EQ(drops.size(), 3u);
  EXPECT_EQ(drops[0].first, 1);
  EXPECT_NE(drops[0].second.find("it held version 5 for 2000 ms"), std::string::npos);
  EXPECT_EQ(drops[1].first, 0);
  EXPECT_EQ(drops[1].second,
            "it held version 5's start for 2000 ms and rollout 0 sent nothing for 1000 ms "
            "(stalled)");
  EXPECT_EQ(drops[2].first, 1);
  EXPECT_EQ(drops[2].second, "rollout 2 did not confirm a ready version within 2000 ms (stalled)");
}

}  // namespace
}  // namespace wsync
