#include "coordinator/job_planning.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <utility>

#include "codec/plan_codec.h"
#include "codec/registration_codec.h"
#include "coordinator/admission.h"
#include "coordinator/broadcast_comms.h"
#include "coordinator/delta_assign.h"
#include "layout/registration_checks.h"
#include "plan/block_scaling_plan.h"
#include "plan/planner.h"

namespace wsync {

JobPlanning::JobPlanning(JobPlanningOptions options, ParticipantTable& participants,
                         CoordinatorWire& wire, CoordinatorBlockScaling& block_scaling)
    : options_(options), participants_(participants), wire_(wire), block_scaling_(block_scaling) {}

Result<bool> JobPlanning::onRegister(Participant& p, const std::vector<uint8_t>& payload) {
  if (p.registered) {
    return invalidUsage("Register out of order (twice, or before every rank joined)");
  }
  WSYNC_RETURN_IF_ERROR(decode(payload, p.reg));
  p.registered = true;
  return std::all_of(participants_.begin(), participants_.end(),
                     [](const Participant& q) { return q.joiner || q.registered; });
}

Result<Registration> JobPlanning::registrationOf(const Participant& p, bool scaled) const {
  WSYNC_ASSIGN_OR_RETURN(Registration reg,
                         decodeRegistration(p.reg.registration.data(), p.reg.registration.size()));
  const std::string name = participantName(p);
  if (reg.role != p.hello.role || (!p.joiner && reg.rank != p.role_rank)) {
    return protocolError(name + " registered as " + rankName(reg.role, reg.rank));
  }
  WSYNC_RETURN_IF_ERROR(checkRegistration(reg).withContext(name + "'s registration"));
  if (reg.role == Role::kRollout) {
    reg.rank = p.role_rank;
    reg.replica = p.hello.replica;
    if (p.reg.slot_descriptors.size() < 2) {
      return invalidArgument(name + " exposes " + std::to_string(p.reg.slot_descriptors.size()) +
                             " slots; at least 2 are needed");
    }
    if (p.reg.buffer_byte_offsets.size() != reg.buffers.size()) {
      return protocolError(name + " sent buffer offsets that do not match its buffers");
    }
    if (scaled) {
      const std::vector<ScaledTensor> scalings(p.reg.block_scalings.begin(),
                                               p.reg.block_scalings.end());
      WSYNC_RETURN_IF_ERROR(applyRolloutScalings(reg, scalings));
    }
  }
  return reg;
}

Result<Plan> JobPlanning::plan() {
  std::vector<Registration> trainers(participants_.trainerIndices().size());
  std::vector<Registration> rollouts(participants_.rolloutIndices().size());
  for (Participant& p : participants_) {
    if (p.joiner) continue;
    WSYNC_ASSIGN_OR_RETURN(Registration reg, registrationOf(p, /*scaled=*/false));
    auto& role_regs = reg.role == Role::kRollout ? rollouts : trainers;
    role_regs[static_cast<size_t>(reg.rank)] = std::move(reg);
  }
  WSYNC_RETURN_IF_ERROR(
      block_scaling_.plan(trainers, rollouts).withContext("block-scaled tensors"));
  // No fixed rollout rank (an elastic job): nothing to broadcast to; replicas that join receive
  // by one-sided writes only.
  BroadcastChoice broadcast =
      rollouts.empty()
          ? BroadcastChoice{std::nullopt,
                            "the job has no fixed rollout rank; joining replicas receive writes"}
          : chooseBroadcastBackend(broadcastFacts(), options_.mpi_world_size > 0);
  wire_.log("broadcast groups: " + describeBroadcastChoice(broadcast));
  broadcast_backend_ = std::move(broadcast.backend);
  PlannerOptions planner_options;
  planner_options.allow_broadcast = broadcast_backend_.has_value();
  const auto t0 = std::chrono::steady_clock::now();
  Result<Plan> plan = makePlan(trainers, rollouts, planner_options);
  if (plan.isOk()) {  // every rank learns of a conversion no trainer can do, before collectives
    if (Status s = checkConversions(*plan, trainers); !s.isOk()) plan = s;
  }
  if (!plan.isOk()) return plan.status().withContext("planning");
  const double plan_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  wire_.log("plan: " + std::to_string(plan->tensors.size()) + " tensors, " +
            std::to_string(plan->groups.size()) + " broadcast groups, " +
            std::to_string(plan->writes.size()) + " write ops, " +
            std::to_string(plan->stats.bytes_total) + " bytes per version, planned in " +
            std::to_string(plan_s) + " s");
  trainers_ = std::move(trainers);
  return plan;
}

std::vector<RankBroadcastFacts> JobPlanning::broadcastFacts() const {
  std::vector<RankBroadcastFacts> facts;
  facts.reserve(participants_.size());
  auto add = [&](const Participant& p) {
    facts.push_back({participantName(p), p.reg.device_id,
                     std::vector<BroadcastOffer>(p.reg.broadcast_offers.begin(),
                                                 p.reg.broadcast_offers.end())});
  };
  for (int32_t t = 0; t < participants_.numTrainers(); ++t)
    add(participants_.trainer(t));
  for (int32_t r = 0; r < participants_.numRollouts(); ++r)
    add(participants_.rollout(r));
  return facts;
}

Result<std::vector<ReplicaSpec>> JobPlanning::replicas() {
  std::map<int32_t, std::vector<int32_t>> members;
  for (int32_t r = 0; r < participants_.numRollouts(); ++r)
    members[participants_.rollout(r).hello.replica].push_back(r);
  std::vector<int32_t> replica_of(static_cast<size_t>(participants_.numRollouts()), -1);
  std::vector<ReplicaSpec> specs;
  for (auto& [id, ranks] : members) {
    const auto num_slots =
        static_cast<int32_t>(participants_.rollout(ranks[0]).reg.slot_descriptors.size());
    for (int32_t r : ranks) {
      replica_of[static_cast<size_t>(r)] = id;
      const auto n = static_cast<int32_t>(participants_.rollout(r).reg.slot_descriptors.size());
      if (n != num_slots) {
        return invalidArgument("replica " + std::to_string(id) + ": rollout " +
                               std::to_string(ranks[0]) + " has " + std::to_string(num_slots) +
                               " slots but rollout " + std::to_string(r) + " has " +
                               std::to_string(n));
      }
    }
    specs.push_back({id, ranks, num_slots});
  }
  participants_.setReplicaOfRollout(std::move(replica_of));
  return specs;
}

// Broadcast communicators name world ranks of the chosen backend's world: MPI world ranks
// (BroadcastWorld::kMpiJob), or the job's ranks (kJobRanks, numberJobWorld), and then every rank
// joins that world.
void JobPlanning::sendAssignments(const Plan& plan) {
  const int32_t num_trainers = participants_.numTrainers();
  const int32_t num_rollouts = participants_.numRollouts();
  const bool job_world = broadcast_backend_ && !plan.groups.empty() &&
                         broadcast_backend_->needs.world == BroadcastWorld::kJobRanks;
  const JobWorldNumbering numbering = numberJobWorld(num_trainers, num_rollouts);
  std::vector<int32_t> trainer_world = numbering.trainer_ranks;
  std::vector<int32_t> rollout_world = numbering.rollout_ranks;
  if (!job_world) {
    for (int32_t t = 0; t < num_trainers; ++t)
      trainer_world[static_cast<size_t>(t)] = participants_.trainer(t).hello.world_rank;
    for (int32_t r = 0; r < num_rollouts; ++r)
      rollout_world[static_cast<size_t>(r)] = participants_.rollout(r).hello.world_rank;
  }
  const BroadcastCommMap comm_map = mapBroadcastComms(plan, trainer_world, rollout_world);
  if (job_world) {
    wire_.log(broadcast_backend_->name + " world of " + std::to_string(numbering.size) +
              " ranks, " + std::to_string(comm_map.comms.size()) + " broadcast communicators");
  }
  const DenseWriteBytes dense = denseWriteBytes(plan, num_trainers);
  auto assignment = [&](Role role, int32_t rank) {
    PlanAssignmentMsg msg;
    const RankPlan view = rankView(plan, role, rank);
    msg.rank_plan = encodeRankPlan(view);
    if (role == Role::kTrainer) {
      for (int32_t peer : view.peers) {
        msg.peers.push_back(
            trainerPeerInfo(options_.job, dense, rank, peer, participants_.rollout(peer)));
      }
    }
    if (job_world) {
      assignJobWorldBroadcasts(plan, comm_map, numbering, *broadcast_backend_, role, rank, &msg);
    } else {
      rankBroadcastComms(plan, comm_map, role, rank, &msg.comms, &msg.group_comm);
      if (broadcast_backend_ && !msg.comms.empty()) {  // the MPI job's world: MPI world ranks
        const Participant& self =
            role == Role::kTrainer ? participants_.trainer(rank) : participants_.rollout(rank);
        msg.broadcast.backend = broadcast_backend_->name;
        msg.broadcast.world_token = broadcast_backend_->world_token;
        msg.broadcast.world_rank = self.hello.world_rank;
        msg.broadcast.world_size = options_.mpi_world_size;
        msg.broadcast.root_ranks = trainer_world;
      }
    }
    msg.replica_of_rollout = participants_.replicaOfRollout();
    if (role == Role::kTrainer) block_scaling_.addTo(rank, msg);
    return encode(msg);
  };
  for (int32_t t = 0; t < num_trainers; ++t) {
    wire_.sendTo(participants_.trainer(t), MessageType::kPlanAssignment,
                 assignment(Role::kTrainer, t));
  }
  for (int32_t r = 0; r < num_rollouts; ++r) {
    wire_.sendTo(participants_.rollout(r), MessageType::kPlanAssignment,
                 assignment(Role::kRollout, r));
  }
}

}  // namespace wsync
