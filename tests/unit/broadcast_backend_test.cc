// Which data plane carries broadcast groups: the capability rule on its own, then a real
// coordinator (explicit bootstrap, ranks on threads speaking the protocol) handing out the NCCL
// world in its plan assignments.
#include <gtest/gtest.h>

#include <thread>

#include "codec/plan_codec.h"
#include "codec/registration_codec.h"
#include "coordinator/broadcast_backend.h"
#include "coordinator/coordinator.h"
#include "layout/builders.h"
#include "runtime/bootstrap.h"

namespace wsync {
namespace {

// ---- the rule ----------------------------------------------------------------------------------

std::vector<RankBufferPlace> places(const std::vector<std::string>& device_ids) {
  std::vector<RankBufferPlace> out;
  for (size_t i = 0; i < device_ids.size(); ++i)
    out.push_back({"rank " + std::to_string(i), device_ids[i]});
  return out;
}

TEST(BroadcastBackend, HostJobsBroadcastOverMpiOnly) {
  EXPECT_EQ(decideBroadcastBackend(places({"", "", ""}), true, false).backend,
            BroadcastBackend::kMpiHost);
  // A unique id changes nothing for host memory.
  EXPECT_EQ(decideBroadcastBackend(places({"", ""}), true, true).backend,
            BroadcastBackend::kMpiHost);
  const BroadcastDecision explicit_job = decideBroadcastBackend(places({"", ""}), false, false);
  EXPECT_EQ(explicit_job.backend, BroadcastBackend::kNone);
  EXPECT_NE(explicit_job.reason.find("MPI"), std::string::npos) << explicit_job.reason;
}

TEST(BroadcastBackend, DeviceJobsOnDistinctGpusBroadcastOverNccl) {
  const auto ranks = places({"a/GPU-0", "a/GPU-1", "b/GPU-0", "b/GPU-1"});
  EXPECT_EQ(decideBroadcastBackend(ranks, true, true).backend, BroadcastBackend::kNcclDevice);
  // NCCL needs no MPI: the unique id travels through the coordinator.
  EXPECT_EQ(decideBroadcastBackend(ranks, false, true).backend, BroadcastBackend::kNcclDevice);
}

TEST(BroadcastBackend, TwoRanksOnOneGpuUseWritesAndAreNamed) {
  const BroadcastDecision d =
      decideBroadcastBackend(places({"a/GPU-0", "a/GPU-1", "a/GPU-0"}), true, true);
  EXPECT_EQ(d.backend, BroadcastBackend::kNone);
  EXPECT_NE(d.reason.find("rank 0 and rank 2 share GPU a/GPU-0"), std::string::npos) << d.reason;
}

TEST(BroadcastBackend, DeviceJobsWithoutAUniqueIdUseWrites) {
  const BroadcastDecision d = decideBroadcastBackend(places({"a/GPU-0", "a/GPU-1"}), true, false);
  EXPECT_EQ(d.backend, BroadcastBackend::kNone);
  EXPECT_NE(d.reason.find("NCCL unique id"), std::string::npos) << d.reason;
}

TEST(BroadcastBackend, MixedHostAndDeviceJobsUseWrites) {
  const BroadcastDecision d =
      decideBroadcastBackend(places({"a/GPU-0", "", "a/GPU-1"}), true, true);
  EXPECT_EQ(d.backend, BroadcastBackend::kNone);
  EXPECT_NE(d.reason.find("rank 1 holds host memory"), std::string::npos) << d.reason;
  EXPECT_EQ(decideBroadcastBackend({}, true, true).backend, BroadcastBackend::kNone);
}

// ---- the coordinator's plan assignments --------------------------------------------------------

constexpr char kSecret[] = "broadcast-backend-test";
constexpr auto kTimeout = std::chrono::milliseconds(20000);
const Dims kShape{8, 4};

// What one rank registers: tensor "w" split along dim 0 over `parts` (trainers and rollouts use
// the same split, so every rollout box matches a trainer box: broadcast groups when allowed).
struct RankSetup {
  Role role = Role::kTrainer;
  int32_t rank = 0;
  std::string device_id;  // empty: host memory
  std::vector<uint8_t> nccl_unique_id;
};

struct RankResult {
  Status status;
  PlanAssignmentMsg assignment;
  RankPlan plan;
};

RankResult registerAndGetAssignment(uint16_t port, const RankSetup& setup, int parts) {
  RankResult out;
  BootstrapOptions b;
  b.use_mpi = false;
  b.role = setup.role;
  b.rank = setup.rank;
  b.replica = setup.role == Role::kRollout ? 0 : -1;
  b.timeout = kTimeout;
  b.coordinator_address = "127.0.0.1:" + std::to_string(port);
  b.secret = kSecret;
  Result<JobConnection> job = joinJob(b);
  if (!job.isOk()) return {job.status(), {}, {}};
  Registration reg;
  reg.role = setup.role;
  reg.rank = setup.rank;
  reg.replica = b.replica;
  const MemoryKind memory = setup.device_id.empty() ? MemoryKind::kHost : MemoryKind::kDevice;
  Result<int32_t> added = addSplit(reg, "w", kShape, DType::kFloat32, 0, parts, setup.rank,
                                   SplitRule::kBalanced, memory);
  if (!added.isOk()) return {added.status(), {}, {}};
  RegisterMsg msg;
  msg.registration = encodeRegistration(reg);
  msg.device_id = setup.device_id;
  msg.nccl_unique_id = setup.nccl_unique_id;
  if (setup.role == Role::kRollout) {
    msg.slot_descriptors = {{1}, {2}};  // never attached: nothing is transferred here
    msg.buffer_byte_offsets = {0};
  }
  out.status = job->channel->send(static_cast<uint16_t>(MessageType::kRegister), encode(msg));
  if (!out.status.isOk()) return out;
  Result<Frame> frame = expectFrame(*job->channel, MessageType::kPlanAssignment, kTimeout);
  if (!frame.isOk()) return {frame.status(), {}, {}};
  out.status = decode(frame->payload, out.assignment);
  if (!out.status.isOk()) return out;
  Result<RankPlan> plan =
      decodeRankPlan(out.assignment.rank_plan.data(), out.assignment.rank_plan.size());
  if (!plan.isOk()) return {plan.status(), {}, {}};
  out.plan = std::move(plan).value();
  return out;
}

// Runs a job of `trainers` + `rollouts` ranks (one replica) up to the plan assignments; results
// are trainers first, then rollouts.
std::vector<RankResult> assignmentsFor(int trainers, int rollouts,
                                       const std::vector<RankSetup>& setups) {
  CoordinatorOptions opt;
  opt.num_trainers = trainers;
  opt.num_rollouts = rollouts;
  opt.control.secret = kSecret;
  opt.timeout = kTimeout;
  Result<std::unique_ptr<Coordinator>> coordinator = Coordinator::start(std::move(opt));
  EXPECT_TRUE(coordinator.isOk()) << coordinator.status().toString();
  if (!coordinator.isOk()) return {};
  std::vector<RankResult> results(setups.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < setups.size(); ++i) {
    const int parts = setups[i].role == Role::kTrainer ? trainers : rollouts;
    threads.emplace_back([&, i, parts] {
      results[i] = registerAndGetAssignment((*coordinator)->port(), setups[i], parts);
    });
  }
  for (std::thread& t : threads)
    t.join();
  (*coordinator)->stop();
  for (const RankResult& r : results)
    EXPECT_TRUE(r.status.isOk()) << r.status.toString();
  return results;
}

const std::vector<uint8_t> kUniqueId(128, 0x5a);

TEST(CoordinatorNcclWorld, DeviceJobOnDistinctGpusGetsTheUniqueIdAndWorldNumbering) {
  const std::vector<RankSetup> setups = {
      {Role::kTrainer, 0, "h/GPU-0", kUniqueId},
      {Role::kTrainer, 1, "h/GPU-1", {}},
      {Role::kRollout, 0, "h/GPU-2", {}},
      {Role::kRollout, 1, "h/GPU-3", {}},
  };
  const std::vector<RankResult> results = assignmentsFor(2, 2, setups);
  ASSERT_EQ(results.size(), 4u);
  // NCCL world ranks: trainers 0, 1; rollouts 2, 3. Trainer t sends its half to rollout t.
  const std::vector<int32_t> expected_nccl_rank = {0, 1, 2, 3};
  for (size_t i = 0; i < results.size(); ++i) {
    SCOPED_TRACE("rank index " + std::to_string(i));
    const PlanAssignmentMsg& a = results[i].assignment;
    EXPECT_EQ(a.broadcast.backend, "nccl");
    EXPECT_EQ(a.broadcast.world_token, kUniqueId);
    EXPECT_EQ(a.broadcast.world_rank, expected_nccl_rank[i]);
    EXPECT_EQ(a.broadcast.world_size, 4);
    EXPECT_EQ(a.broadcast.root_ranks, (std::vector<int32_t>{0, 1}));
    // Every rank gets every communicator (each split is collective over the world).
    ASSERT_EQ(a.comms.size(), 2u);
    EXPECT_EQ(a.comms[0].world_ranks, (std::vector<int32_t>{0, 2}));
    EXPECT_EQ(a.comms[1].world_ranks, (std::vector<int32_t>{1, 3}));
    ASSERT_EQ(results[i].plan.groups.size(), 1u);
    EXPECT_EQ(a.group_comm, (std::vector<int32_t>{static_cast<int32_t>(i % 2)}));
  }
}

TEST(CoordinatorNcclWorld, TwoRanksOnOneGpuGetWritesAndNoWorld) {
  const std::vector<RankSetup> setups = {
      {Role::kTrainer, 0, "h/GPU-0", kUniqueId},
      {Role::kRollout, 0, "h/GPU-0", {}},
  };
  const std::vector<RankResult> results = assignmentsFor(1, 1, setups);
  ASSERT_EQ(results.size(), 2u);
  for (const RankResult& r : results) {
    EXPECT_TRUE(r.assignment.broadcast.world_token.empty());
    EXPECT_TRUE(r.assignment.comms.empty());
    EXPECT_TRUE(r.plan.groups.empty());
    EXPECT_FALSE(r.plan.writes.empty());
  }
}

TEST(CoordinatorNcclWorld, MixedHostAndDeviceJobGetsWritesAndNoWorld) {
  const std::vector<RankSetup> setups = {
      {Role::kTrainer, 0, "h/GPU-0", kUniqueId},
      {Role::kRollout, 0, "", {}},
  };
  const std::vector<RankResult> results = assignmentsFor(1, 1, setups);
  ASSERT_EQ(results.size(), 2u);
  for (const RankResult& r : results) {
    EXPECT_TRUE(r.assignment.broadcast.world_token.empty());
    EXPECT_TRUE(r.plan.groups.empty());
  }
}

TEST(CoordinatorNcclWorld, DeviceJobWithoutUniqueIdGetsWrites) {
  const std::vector<RankSetup> setups = {
      {Role::kTrainer, 0, "h/GPU-0", {}},
      {Role::kRollout, 0, "h/GPU-1", {}},
  };
  const std::vector<RankResult> results = assignmentsFor(1, 1, setups);
  ASSERT_EQ(results.size(), 2u);
  for (const RankResult& r : results) {
    EXPECT_TRUE(r.assignment.broadcast.world_token.empty());
    EXPECT_TRUE(r.plan.groups.empty());
  }
}

}  // namespace
}  // namespace wsync
