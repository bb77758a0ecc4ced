// The running job's membership (coordinator/coordinator.h; docs/membership.md): rollouts that
// die, go silent, stall or leave. A component of the coordinator's event loop: it owns the
// liveness rules (the heartbeat interval it asks for, the bound on how long a version waits on one
// replica, which ranks are silent or stalled) and the drop and leave bookkeeping of the ranks'
// participants (dropped, written_until, awaiting_left), and sends through a CoordinatorWire. What
// a drop means for versions and joins is the event loop's (RunningVersions, ReplicaJoins). No
// sockets and no clock (time is an argument); not thread-safe: the event thread owns it.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "coordinator/coordinator_wire.h"
#include "coordinator/metrics.h"
#include "coordinator/participants.h"
#include "options/options.h"

namespace wsync {

struct JobMembershipOptions {
  std::chrono::milliseconds timeout{60000};  // the job's timeout (CoordinatorOptions::timeout)
  JobSettings job;                           // job.heartbeatTimeout()
  bool mpi_job = false;  // MPI bootstrap: its own ranks are never dropped (the job fails)
};

class JobMembership {
 public:
  JobMembership(JobMembershipOptions options, ParticipantTable& participants, CoordinatorWire& wire,
                CoordinatorMetrics& metrics);

  // How long a version waits on one replica (or its confirmation of Ready) before the replica is
  // dropped as stalled: the heartbeat timeout, at most half the job's timeout (so the version
  // still completes for the others within it, whatever the two settings are).
  std::chrono::milliseconds replicaBound() const;
  // How often rollouts heartbeat (Welcome): a quarter of the heartbeat timeout, at most an eighth
  // of the job's timeout (so a stopped rank's silence shows within replicaBound()); 0: none.
  std::chrono::milliseconds heartbeatInterval() const;

  // Drops the replica of rollout participant `p` (connection closed, silent, left): its ranks are
  // marked dropped (trainers may write into them until `in_flight` is delivered; 0: none), the
  // trainers get ReplicaDropped. `crashed`: its ranks get an Error saying why, p's connection is
  // closed, the metrics count it (a clean leave tells them nothing). Returns the rollout ranks it
  // dropped; REMOTE (the job fails) when `p` crashed and is a rank of an MPI-bootstrap job.
  Result<std::vector<int32_t>> drop(Participant& p, const std::string& reason, bool crashed,
                                    uint64_t in_flight);
  // Left to every rank that said Leave and that no trainer can still be writing into (`in_flight`:
  // the version in flight now, 0: none), so the rank may free its slots.
  void sendDueLefts(uint64_t in_flight);
  // Why `p` is dropped as silent at `now`: a committed rollout rank of the running job that sent
  // nothing for the heartbeat timeout; nullopt otherwise (or without heartbeats).
  std::optional<std::string> silence(const Participant& p, CoordinatorClock::time_point now) const;
  // The replicas (id, reason) to drop as stalled at `now` while `version` is in flight:
  // `stalled` (the sequencer waited on them past replicaBound()), those of `holding_go` (Go waits
  // on their Prepared past the bound) with a rank silent for two heartbeats, and the replicas of
  // `overdue_ranks` (rollout ranks that did not confirm a Ready within the bound).
  std::vector<std::pair<int32_t, std::string>> stalledReplicas(
      const std::vector<int32_t>& stalled, uint64_t version, const std::vector<int32_t>& holding_go,
      const std::vector<int32_t>& overdue_ranks, CoordinatorClock::time_point now) const;
  // A committed rank of `replica` still in the job that may be dropped as stalled (nullptr: none,
  // or the replica is the MPI job's own: its versions keep the job's timeout).
  Participant* stalledRank(int32_t replica);

 private:
  JobMembershipOptions options_;
  ParticipantTable& participants_;
  CoordinatorWire& wire_;
  CoordinatorMetrics& metrics_;
};

}  // namespace wsync
