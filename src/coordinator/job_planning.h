// The job's plan at commit (coordinator/coordinator.h): every fixed rank's Register, then, once
// all of them registered, their registrations decoded and checked, the block-scaled tensors
// (coordinator/block_scaling.h), the broadcast backend (coordinator/broadcast_choice.h), the plan
// (plan/planner.h), the replicas the version sequencer takes, and each rank's PlanAssignment. A
// component of the coordinator's event loop: it owns the planning's products (the trainers'
// registrations as planned, which joining replicas and a trainer restart read, and the chosen
// broadcast backend), reads the ranks from the participant table and sends through a
// CoordinatorWire. No sockets; not thread-safe: the event thread owns it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "common/status.h"
#include "coordinator/block_scaling.h"
#include "coordinator/broadcast_choice.h"
#include "coordinator/coordinator_wire.h"
#include "coordinator/participants.h"
#include "coordinator/version_sequencer.h"
#include "layout/registration.h"
#include "options/options.h"
#include "plan/plan.h"
#include "protocol/protocol.h"

namespace wsync {

struct JobPlanningOptions {
  // > 0: MPI bootstrap, of that many world ranks (broadcasts in the MPI job's world); 0: explicit.
  int mpi_world_size = 0;
  JobSettings job;  // the trainers' part of their peers' delta landing areas
};

class JobPlanning {
 public:
  JobPlanning(JobPlanningOptions options, ParticipantTable& participants, CoordinatorWire& wire,
              CoordinatorBlockScaling& block_scaling);

  // A fixed rank's Register (the job is registering): kept in its participant; true once every
  // fixed rank registered. INVALID_USAGE when it registered already; PROTOCOL when malformed.
  Result<bool> onRegister(Participant& p, const std::vector<uint8_t>& payload);
  // p's registration, decoded and checked against its identity (rollouts: slots and offsets);
  // a rollout's block-scaled tensors renamed (plan/block_scaling_plan.h) when `scaled`.
  Result<Registration> registrationOf(const Participant& p, bool scaled = true) const;

  // Every fixed rank registered: the job's plan (logged with the broadcast choice). Its error
  // names its cause (a rank's registration, the block-scaled tensors, or planning); the job fails
  // with it as it is.
  Result<Plan> plan();
  // After plan(): the replicas of the fixed rollout ranks with their slot count, in increasing
  // id order, for the version sequencer; each rollout rank's replica set in the participant table.
  // INVALID_ARGUMENT when the ranks of a replica expose different numbers of slots.
  Result<std::vector<ReplicaSpec>> replicas();
  // PlanAssignment of `plan` to every fixed rank (after replicas()).
  void sendAssignments(const Plan& plan);
  // The trainers' registrations as planned (by trainer rank), after plan().
  const std::vector<Registration>& trainerRegistrations() const { return trainers_; }

 private:
  // What every rank registered for the broadcast choice, trainers (trainer 0 first) then rollouts.
  std::vector<RankBroadcastFacts> broadcastFacts() const;

  JobPlanningOptions options_;
  ParticipantTable& participants_;
  CoordinatorWire& wire_;
  CoordinatorBlockScaling& block_scaling_;
  std::vector<Registration> trainers_;               // as planned; kept for joining replicas
  std::optional<BroadcastOffer> broadcast_backend_;  // chosen at planning; none: writes only
};

}  // namespace wsync
