// Which broadcast backend carries broadcast groups: the generic choice on its own (offers and
// needs only; the coordinator knows no backend), then a real coordinator (explicit bootstrap, ranks
// on threads speaking the protocol) handing out the chosen backend's world in its plan assignments.
#include <gtest/gtest.h>

#include <thread>

#include "codec/plan_codec.h"
#include "codec/registration_codec.h"
#include "coordinator/broadcast_choice.h"
#include "coordinator/coordinator.h"
#include "layout/builders.h"
#include "runtime/bootstrap.h"

namespace wsync {
namespace {

// ---- the rule ----------------------------------------------------------------------------------

const std::vector<uint8_t> kToken(128, 0x5a);

// Offers with the needs this build's backends state (transport/mpi, transport/nccl descriptors).
BroadcastOffer mpiOffer() {
  return {"mpi", {BroadcastWorld::kMpiJob, false, false}, {}};
}
BroadcastOffer ncclOffer(std::vector<uint8_t> token = {}) {
  return {"nccl", {BroadcastWorld::kJobRanks, true, true}, std::move(token)};
}
// A made-up backend the coordinator has never heard of: a world of the job's ranks, any memory
// placement, no token.
BroadcastOffer ringOffer() {
  return {"ring", {BroadcastWorld::kJobRanks, false, false}, {}};
}

// Rank i holds `device_ids[i]` (empty: host memory) and offers what a rank of this build offers
// there (host: MPI, device: NCCL, each with what `extra` adds); rank 0 (trainer 0) carries the
// world token when `token`.
std::vector<RankBroadcastFacts> ranks(const std::vector<std::string>& device_ids, bool token,
                                      const std::vector<BroadcastOffer>& extra = {}) {
  std::vector<RankBroadcastFacts> out;
  for (size_t i = 0; i < device_ids.size(); ++i) {
    RankBroadcastFacts r{"rank " + std::to_string(i), device_ids[i], {}};
    const bool first_with_token = i == 0 && token;
    r.offers.push_back(device_ids[i].empty()
                           ? mpiOffer()
                           : ncclOffer(first_with_token ? kToken : std::vector<uint8_t>{}));
    r.offers.insert(r.offers.end(), extra.begin(), extra.end());
    out.push_back(std::move(r));
  }
  return out;
}

std::string chosen(const BroadcastChoice& c) {
  return c.backend ? c.backend->name : "none";
}

TEST(BroadcastChoice, HostJobsBroadcastInTheMpiJobWorldOnly) {
  EXPECT_EQ(chosen(chooseBroadcastBackend(ranks({"", "", ""}, false), true)), "mpi");
  // A token changes nothing for a backend that needs none.
  EXPECT_EQ(chosen(chooseBroadcastBackend(ranks({"", ""}, true), true)), "mpi");
  const BroadcastChoice explicit_job = chooseBroadcastBackend(ranks({"", ""}, false), false);
  EXPECT_FALSE(explicit_job.backend);
  EXPECT_NE(explicit_job.reason.find("mpi: it needs a job launched under MPI"), std::string::npos)
      << explicit_job.reason;
}

TEST(BroadcastChoice, DeviceJobsOnDistinctGpusGetTheJobWorldAndTrainer0sToken) {
  const auto facts = ranks({"a/GPU-0", "a/GPU-1", "b/GPU-0", "b/GPU-1"}, true);
  const BroadcastChoice c = chooseBroadcastBackend(facts, true);
  ASSERT_EQ(chosen(c), "nccl") << c.reason;
  EXPECT_EQ(c.backend->needs.world, BroadcastWorld::kJobRanks);
  EXPECT_EQ(c.backend->world_token, kToken);
  // A world of the job's ranks needs no MPI: the token travels through the coordinator.
  EXPECT_EQ(chosen(chooseBroadcastBackend(facts, false)), "nccl");
}

TEST(BroadcastChoice, TwoRanksOnOneGpuUseWritesAndAreNamed) {
  const BroadcastChoice c =
      chooseBroadcastBackend(ranks({"a/GPU-0", "a/GPU-1", "a/GPU-0"}, true), true);
  EXPECT_FALSE(c.backend);
  EXPECT_NE(c.reason.find("rank 0 and rank 2 share GPU a/GPU-0"), std::string::npos) << c.reason;
}

TEST(BroadcastChoice, ABackendWithoutItsWorldTokenIsRuledOut) {
  const BroadcastChoice c = chooseBroadcastBackend(ranks({"a/GPU-0", "a/GPU-1"}, false), true);
  EXPECT_FALSE(c.backend);
  EXPECT_NE(c.reason.find("nccl: rank 0 sent no world token"), std::string::npos) << c.reason;
}

TEST(BroadcastChoice, MixedHostAndDeviceJobsUseWrites) {
  const BroadcastChoice c = chooseBroadcastBackend(ranks({"a/GPU-0", "", "a/GPU-1"}, true), true);
  EXPECT_FALSE(c.backend);
  EXPECT_NE(c.reason.find("nccl: rank 1 does not offer it (host memory; it offers mpi)"),
            std::string::npos)
      << c.reason;
  EXPECT_FALSE(chooseBroadcastBackend({}, true).backend);
}

TEST(BroadcastChoice, ARankThatCanRunNoBackendMeansWrites) {
  std::vector<RankBroadcastFacts> facts = ranks({"", ""}, false);
  facts[1].offers.clear();  // e.g. MPI not initialized in that process
  BroadcastChoice c = chooseBroadcastBackend(facts, true);
  EXPECT_FALSE(c.backend);
  EXPECT_NE(c.reason.find("rank 1 does not offer it (host memory; it offers none)"),
            std::string::npos)
      << c.reason;
  facts[0].offers.clear();
  c = chooseBroadcastBackend(facts, true);
  EXPECT_FALSE(c.backend);
  EXPECT_NE(c.reason.find("rank 0 can run no broadcast backend"), std::string::npos) << c.reason;
}

TEST(BroadcastChoice, OffersWithOtherNeedsDoNotMatch) {
  std::vector<RankBroadcastFacts> facts = ranks({"", ""}, false);
  facts[1].offers[0].needs.world = BroadcastWorld::kJobRanks;
  const BroadcastChoice c = chooseBroadcastBackend(facts, true);
  EXPECT_FALSE(c.backend);
  EXPECT_NE(c.reason.find("rank 1 states other needs"), std::string::npos) << c.reason;
}

// A third backend no code of the coordinator knows is chosen by its offer's needs alone, and only
// where the backends before it in registry order are ruled out.
TEST(BroadcastChoice, AMadeUpBackendIsChosenByItsNeedsAlone) {
  // Host ranks outside MPI: MPI is ruled out, the ring needs nothing this job lacks.
  BroadcastChoice c = chooseBroadcastBackend(ranks({"", ""}, false, {ringOffer()}), false);
  ASSERT_EQ(chosen(c), "ring") << c.reason;
  EXPECT_NE(c.reason.find("a world of the job's ranks"), std::string::npos) << c.reason;
  // Under MPI the first in registry order wins.
  EXPECT_EQ(chosen(chooseBroadcastBackend(ranks({"", ""}, false, {ringOffer()}), true)), "mpi");
  // Two ranks on one GPU rule NCCL out, not the ring.
  c = chooseBroadcastBackend(ranks({"a/GPU-0", "a/GPU-0"}, true, {ringOffer()}), false);
  EXPECT_EQ(chosen(c), "ring") << c.reason;
  // A ring that wanted one GPU per rank would be ruled out the same way.
  BroadcastOffer gpu_ring = ringOffer();
  gpu_ring.needs.one_gpu_per_rank = true;
  c = chooseBroadcastBackend(ranks({"a/GPU-0", "a/GPU-0"}, true, {gpu_ring}), false);
  EXPECT_FALSE(c.backend) << c.reason;
  EXPECT_NE(c.reason.find("ring: rank 0 and rank 1 share GPU"), std::string::npos) << c.reason;
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
  std::vector<BroadcastOffer> offers;
};

struct RankResult {
  Status status;
  PlanAssignmentMsg assignment;
  RankPlan plan;
};

RankResult registerAndGetAssignment(uint16_t port, const RankSetup& setup, int parts) {
  RankResult out;
  JobIdentity b;
  b.use_mpi = false;
  b.role = setup.role;
  b.rank = setup.rank;
  b.replica = setup.role == Role::kRollout ? 0 : -1;
  b.timeout = kTimeout;
  b.coordinator_address = "127.0.0.1:" + std::to_string(port);
  b.secret = kSecret;
  Result<JobConnection> job = joinJob(b, Options{});
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
  for (const BroadcastOffer& offer : setup.offers)
    msg.broadcast_offers.push_back({offer});
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

TEST(CoordinatorBroadcastWorld, DeviceJobOnDistinctGpusGetsTheTokenAndJobWorldNumbering) {
  const std::vector<RankSetup> setups = {
      {Role::kTrainer, 0, "h/GPU-0", {ncclOffer(kToken)}},
      {Role::kTrainer, 1, "h/GPU-1", {ncclOffer()}},
      {Role::kRollout, 0, "h/GPU-2", {ncclOffer()}},
      {Role::kRollout, 1, "h/GPU-3", {ncclOffer()}},
  };
  const std::vector<RankResult> results = assignmentsFor(2, 2, setups);
  ASSERT_EQ(results.size(), 4u);
  // World ranks of the job: trainers 0, 1; rollouts 2, 3. Trainer t sends its half to rollout t.
  const std::vector<int32_t> expected_world_rank = {0, 1, 2, 3};
  for (size_t i = 0; i < results.size(); ++i) {
    SCOPED_TRACE("rank index " + std::to_string(i));
    const PlanAssignmentMsg& a = results[i].assignment;
    EXPECT_EQ(a.broadcast.backend, "nccl");
    EXPECT_EQ(a.broadcast.world_token, kToken);
    EXPECT_EQ(a.broadcast.world_rank, expected_world_rank[i]);
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

TEST(CoordinatorBroadcastWorld, TwoRanksOnOneGpuGetWritesAndNoWorld) {
  const std::vector<RankSetup> setups = {
      {Role::kTrainer, 0, "h/GPU-0", {ncclOffer(kToken)}},
      {Role::kRollout, 0, "h/GPU-0", {ncclOffer()}},
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

TEST(CoordinatorBroadcastWorld, MixedHostAndDeviceJobGetsWritesAndNoWorld) {
  const std::vector<RankSetup> setups = {
      {Role::kTrainer, 0, "h/GPU-0", {ncclOffer(kToken)}},
      {Role::kRollout, 0, "", {}},  // host memory outside MPI: no offer
  };
  const std::vector<RankResult> results = assignmentsFor(1, 1, setups);
  ASSERT_EQ(results.size(), 2u);
  for (const RankResult& r : results) {
    EXPECT_TRUE(r.assignment.broadcast.world_token.empty());
    EXPECT_TRUE(r.plan.groups.empty());
  }
}

TEST(CoordinatorBroadcastWorld, DeviceJobWithoutWorldTokenGetsWrites) {
  const std::vector<RankSetup> setups = {
      {Role::kTrainer, 0, "h/GPU-0", {ncclOffer()}},
      {Role::kRollout, 0, "h/GPU-1", {ncclOffer()}},
  };
  const std::vector<RankResult> results = assignmentsFor(1, 1, setups);
  ASSERT_EQ(results.size(), 2u);
  for (const RankResult& r : results) {
    EXPECT_TRUE(r.assignment.broadcast.world_token.empty());
    EXPECT_TRUE(r.plan.groups.empty());
  }
}

TEST(CoordinatorBroadcastWorld, AMadeUpBackendGetsTheJobWorldItsNeedsAskFor) {
  // Host ranks of an explicit job offering a backend no coordinator code names.
  const std::vector<RankSetup> setups = {
      {Role::kTrainer, 0, "", {ringOffer()}},
      {Role::kTrainer, 1, "", {ringOffer()}},
      {Role::kRollout, 0, "", {ringOffer()}},
      {Role::kRollout, 1, "", {ringOffer()}},
  };
  const std::vector<RankResult> results = assignmentsFor(2, 2, setups);
  ASSERT_EQ(results.size(), 4u);
  for (size_t i = 0; i < results.size(); ++i) {
    SCOPED_TRACE("rank index " + std::to_string(i));
    const PlanAssignmentMsg& a = results[i].assignment;
    EXPECT_EQ(a.broadcast.backend, "ring");
    EXPECT_TRUE(a.broadcast.world_token.empty());
    // Its needs ask for a world of the job's ranks: numbered trainers first, every communicator
    // to every rank.
    EXPECT_EQ(a.broadcast.world_rank, static_cast<int32_t>(i));
    EXPECT_EQ(a.broadcast.world_size, 4);
    ASSERT_EQ(a.comms.size(), 2u);
    EXPECT_EQ(a.comms[0].world_ranks, (std::vector<int32_t>{0, 2}));
    EXPECT_EQ(a.comms[1].world_ranks, (std::vector<int32_t>{1, 3}));
  }
}

}  // namespace
}  // namespace wsync
