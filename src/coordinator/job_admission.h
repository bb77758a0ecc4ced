// The job's fixed ranks joining (coordinator/coordinator.h): each one's Hello checked against the
// job's shape and the ranks already there (coordinator/admission.h), and once all of them said
// Hello, their role ranks and Welcome. A component of the coordinator's event loop: it admits
// ranks into the participant table and sends through a CoordinatorWire; replicas that join the
// running job are ReplicaJoins', restarted trainers TrainerRestart's. No sockets; not
// thread-safe: the event thread owns it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "coordinator/admission.h"
#include "coordinator/coordinator_wire.h"
#include "coordinator/participants.h"
#include "options/options.h"
#include "protocol/protocol.h"

namespace wsync {

struct JobAdmissionOptions {
  JobShape shape;
  JobSettings job;                    // Welcome's settings; what ranks may set explicitly
  int32_t heartbeat_interval_ms = 0;  // Welcome's
};

class JobAdmission {
 public:
  JobAdmission(JobAdmissionOptions options, ParticipantTable& participants, CoordinatorWire& wire);

  // A fixed rank's Hello while the job is joining: admitted, or refused (an Error naming why, the
  // connection closed, a log line). True once every fixed rank of the job was admitted: admitAll()
  // is due.
  bool onHello(ConnectionId conn, const HelloMsg& hello);
  // Every fixed rank said Hello: their role ranks (MPI bootstrap: in world rank order), then
  // Welcome to each. The job's error (nothing sent): a rank set a job-wide setting explicitly to
  // another value than the coordinator's, the job has no trainer, or an MPI job has no rollout.
  Status admitAll();
  // The ranks that never said Hello, for the join timeout (coordinator/admission.h).
  std::string absentRanks() const { return describeAbsentRanks(options_.shape, joinedHellos()); }

 private:
  std::vector<const HelloMsg*> joinedHellos() const;  // the fixed ranks' (not joiners')
  // The job-wide settings the admitted ranks set explicitly against the coordinator's (trainers,
  // then rollouts, by rank).
  Status checkRanksJobSettings() const;

  JobAdmissionOptions options_;
  ParticipantTable& participants_;
  CoordinatorWire& wire_;
};

}  // namespace wsync
