// The coordinator's registering and planning: each rank's Register, the plan once every rank
// registered, the replicas' slots and the assignments, CommitDone (coordinator_impl.h).
#include <algorithm>
#include <map>

#include "codec/plan_codec.h"
#include "codec/registration_codec.h"
#include "coordinator/broadcast_comms.h"
#include "coordinator/coordinator_impl.h"
#include "coordinator/delta_assign.h"
#include "layout/registration_checks.h"
#include "plan/block_scaling_plan.h"
#include "plan/planner.h"

namespace wsync {

using coordinator_internal::Clock;

// ---- registering and planning ------------------------------------------------------------
Status Coordinator::Impl::onRegister(Participant& p, const std::vector<uint8_t>& payload) {
  if (phase_ != Phase::kRegistering || p.registered) {
    return invalidUsage("Register out of order (twice, or before every rank joined)");
  }
  WSYNC_RETURN_IF_ERROR(decode(payload, p.reg));
  p.registered = true;
  if (std::all_of(participants_.begin(), participants_.end(),
                  [](const Participant& q) { return q.joiner || q.registered; })) {
    return planAll();
  }
  return Status::ok();
}

Result<Registration> Coordinator::Impl::decodeRegistrationOf(const Participant& p,
                                                             bool scaled) const {
  WSYNC_ASSIGN_OR_RETURN(Registration reg,
                         decodeRegistration(p.reg.registration.data(), p.reg.registration.size()));
  if (reg.role != p.hello.role || (!p.joiner && reg.rank != p.role_rank)) {
    return protocolError(nameOf(p) + " registered as " + rankName(reg.role, reg.rank));
  }
  WSYNC_RETURN_IF_ERROR(checkRegistration(reg).withContext(nameOf(p) + "'s registration"));
  if (reg.role == Role::kRollout) {
    reg.rank = p.role_rank;
    reg.replica = p.hello.replica;
    if (p.reg.slot_descriptors.size() < 2) {
      return invalidArgument(nameOf(p) + " exposes " +
                             std::to_string(p.reg.slot_descriptors.size()) +
                             " slots; at least 2 are needed");
    }
    if (p.reg.buffer_byte_offsets.size() != reg.buffers.size()) {
      return protocolError(nameOf(p) + " sent buffer offsets that do not match its buffers");
    }
    if (scaled) {
      const std::vector<ScaledTensor> scalings(p.reg.block_scalings.begin(),
                                               p.reg.block_scalings.end());
      WSYNC_RETURN_IF_ERROR(applyRolloutScalings(reg, scalings));
    }
  }
  return reg;
}

Status Coordinator::Impl::planAll() {
  std::vector<Registration> trainers(participants_.trainerIndices().size());
  std::vector<Registration> rollouts(participants_.rolloutIndices().size());
  for (Participant& p : participants_) {
    if (p.joiner) continue;
    Result<Registration> decoded = decodeRegistrationOf(p, /*scaled=*/false);
    if (!decoded.isOk()) {  // blame the rank that sent it, not the one whose message came last
      fail(decoded.status());
      return Status::ok();
    }
    Registration reg = std::move(*decoded);
    auto& role_regs = reg.role == Role::kRollout ? rollouts : trainers;
    role_regs[static_cast<size_t>(reg.rank)] = std::move(reg);
  }
  if (Status s = block_scaling_.plan(trainers, rollouts); !s.isOk()) {
    fail(s.withContext("block-scaled tensors"));
    return Status::ok();
  }
  // No fixed rollout rank (an elastic job): nothing to broadcast to; replicas that join receive
  // by one-sided writes only.
  BroadcastChoice broadcast =
      rollouts.empty()
          ? BroadcastChoice{std::nullopt,
                            "the job has no fixed rollout rank; joining replicas receive writes"}
          : chooseBroadcastBackend(broadcastFacts(), opt_.mpi_world_size > 0);
  log("broadcast groups: " + describeBroadcastChoice(broadcast));
  broadcast_backend_ = std::move(broadcast.backend);
  PlannerOptions planner_options;
  planner_options.allow_broadcast = broadcast_backend_.has_value();
  const auto t0 = Clock::now();
  Result<Plan> plan = makePlan(trainers, rollouts, planner_options);
  if (plan.isOk()) {  // every rank learns of a conversion no trainer can do, before collectives
    if (Status s = checkConversions(*plan, trainers); !s.isOk()) plan = s;
  }
  if (!plan.isOk()) {
    fail(plan.status().withContext("planning"));
    return Status::ok();
  }
  const double plan_s = std::chrono::duration<double>(Clock::now() - t0).count();
  log("plan: " + std::to_string(plan->tensors.size()) + " tensors, " +
      std::to_string(plan->groups.size()) + " broadcast groups, " +
      std::to_string(plan->writes.size()) + " write ops, " +
      std::to_string(plan->stats.bytes_total) + " bytes per version, planned in " +
      std::to_string(plan_s) + " s");
  WSYNC_RETURN_IF_ERROR(setupReplicas(rollouts));
  opt_.metrics->setReplicaBytes(replicaBytes(*plan, participants_.replicaOfRollout()));
  sendAssignments(*plan);
  trainer_registrations_ = std::move(trainers);
  restart_.keepPlan(std::move(plan).value(), &trainer_registrations_);
  phase_ = Phase::kCommitting;
  return Status::ok();
}

// What every rank registered for the broadcast choice, trainers (trainer 0 first) then rollouts.
std::vector<RankBroadcastFacts> Coordinator::Impl::broadcastFacts() {
  std::vector<RankBroadcastFacts> facts;
  facts.reserve(participants_.size());
  auto add = [&](const Participant& p) {
    facts.push_back({nameOf(p), p.reg.device_id,
                     std::vector<BroadcastOffer>(p.reg.broadcast_offers.begin(),
                                                 p.reg.broadcast_offers.end())});
  };
  for (int32_t t = 0; t < numTrainers(); ++t)
    add(trainer(t));
  for (int32_t r = 0; r < participants_.numRollouts(); ++r)
    add(rollout(r));
  return facts;
}

// Groups the rollout ranks into replicas (each with one slot count) for the sequencer.
Status Coordinator::Impl::setupReplicas(const std::vector<Registration>& rollouts) {
  std::map<int32_t, std::vector<int32_t>> members;
  for (const Registration& r : rollouts)
    members[r.replica].push_back(r.rank);
  std::vector<int32_t> replica_of(rollouts.size(), -1);
  SequencerOptions options{opt_.timeout, opt_.skip_grace, opt_.max_staleness, opt_.job,
                           /*prepare_ahead=*/true};
  options.replica_timeout = replicaBound();
  std::vector<ReplicaSpec> replicas;
  for (auto& [id, ranks] : members) {
    const auto num_slots = static_cast<int32_t>(rollout(ranks[0]).reg.slot_descriptors.size());
    for (int32_t r : ranks) {
      replica_of[static_cast<size_t>(r)] = id;
      const auto n = static_cast<int32_t>(rollout(r).reg.slot_descriptors.size());
      if (n != num_slots) {
        return invalidArgument("replica " + std::to_string(id) + ": rollout " +
                               std::to_string(ranks[0]) + " has " + std::to_string(num_slots) +
                               " slots but rollout " + std::to_string(r) + " has " +
                               std::to_string(n));
      }
    }
    replicas.push_back({id, ranks, num_slots});
  }
  WSYNC_RETURN_IF_ERROR(versions_.start(options, numTrainers(), replicas));
  participants_.setReplicaOfRollout(std::move(replica_of));
  return Status::ok();
}

// Broadcast communicators name world ranks of the chosen backend's world: MPI world ranks
// (BroadcastWorld::kMpiJob), or the job's ranks (kJobRanks, numberJobWorld), and then every rank
// joins that world.
void Coordinator::Impl::sendAssignments(const Plan& plan) {
  const bool job_world = broadcast_backend_ && !plan.groups.empty() &&
                         broadcast_backend_->needs.world == BroadcastWorld::kJobRanks;
  const JobWorldNumbering numbering = numberJobWorld(numTrainers(), participants_.numRollouts());
  std::vector<int32_t> trainer_world = numbering.trainer_ranks;
  std::vector<int32_t> rollout_world = numbering.rollout_ranks;
  if (!job_world) {
    for (int32_t t = 0; t < numTrainers(); ++t)
      trainer_world[static_cast<size_t>(t)] = trainer(t).hello.world_rank;
    for (int32_t r = 0; r < participants_.numRollouts(); ++r)
      rollout_world[static_cast<size_t>(r)] = rollout(r).hello.world_rank;
  }
  const BroadcastCommMap comm_map = mapBroadcastComms(plan, trainer_world, rollout_world);
  if (job_world) {
    log(broadcast_backend_->name + " world of " + std::to_string(numbering.size) + " ranks, " +
        std::to_string(comm_map.comms.size()) + " broadcast communicators");
  }
  const DenseWriteBytes dense = denseWriteBytes(plan, numTrainers());
  auto assignment = [&](Role role, int32_t rank) {
    PlanAssignmentMsg msg;
    const RankPlan view = rankView(plan, role, rank);
    msg.rank_plan = encodeRankPlan(view);
    if (role == Role::kTrainer) {
      for (int32_t peer : view.peers)
        msg.peers.push_back(trainerPeerInfo(opt_.job, dense, rank, peer, rollout(peer)));
    }
    if (job_world) {
      assignJobWorldBroadcasts(plan, comm_map, numbering, *broadcast_backend_, role, rank, &msg);
    } else {
      rankBroadcastComms(plan, comm_map, role, rank, &msg.comms, &msg.group_comm);
      if (broadcast_backend_ && !msg.comms.empty()) {  // the MPI job's world: MPI world ranks
        const Participant& self = role == Role::kTrainer ? trainer(rank) : rollout(rank);
        msg.broadcast.backend = broadcast_backend_->name;
        msg.broadcast.world_token = broadcast_backend_->world_token;
        msg.broadcast.world_rank = self.hello.world_rank;
        msg.broadcast.world_size = opt_.mpi_world_size;
        msg.broadcast.root_ranks = trainer_world;
      }
    }
    msg.replica_of_rollout = participants_.replicaOfRollout();
    if (role == Role::kTrainer) block_scaling_.addTo(rank, msg);
    return encode(msg);
  };
  for (int32_t t = 0; t < numTrainers(); ++t) {
    sendTo(trainer(t), MessageType::kPlanAssignment, assignment(Role::kTrainer, t));
  }
  for (int32_t r = 0; r < participants_.numRollouts(); ++r) {
    sendTo(rollout(r), MessageType::kPlanAssignment, assignment(Role::kRollout, r));
  }
}

Status Coordinator::Impl::onCommitDone(Participant& p) {
  if (p.joiner) return joins_.onCommitDone(p);
  if (phase_ != Phase::kCommitting || p.committed) return invalidUsage("CommitDone out of order");
  p.committed = true;
  if (std::all_of(participants_.begin(), participants_.end(),
                  [](const Participant& q) { return q.joiner || q.committed; })) {
    const auto now = Clock::now();
    for (Participant& q : participants_) {
      if (q.joiner) continue;
      q.last_heard = now;
      sendTo(q, MessageType::kCommitOk, {});
    }
    phase_ = Phase::kRunning;
    log("commit complete");
    joins_.welcomeWaiting();  // replicas that asked to join before the job ran
  }
  return Status::ok();
}

}  // namespace wsync
