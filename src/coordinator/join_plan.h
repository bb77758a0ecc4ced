// Planning a replica that joins the running job: the plan of the trainers' writes into it, as
// each rank's encoded view. A pure function of its arguments, run on a planner thread by
// ReplicaJoins (coordinator/replica_joins.h) so that versions keep being sequenced meanwhile (a
// Kimi-K2 replica takes about a second to plan).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"
#include "coordinator/delta_assign.h"
#include "layout/registration.h"

namespace wsync {

// Per trainer rank its encoded view (its writes to the replica) and the replica's ranks it writes
// to; per replica rank its encoded view.
struct JoinerPlan {
  size_t write_ops = 0;
  double plan_ms = 0;
  std::vector<std::vector<uint8_t>> trainer_views;
  std::vector<std::vector<int32_t>> trainer_peers;
  std::vector<std::vector<uint8_t>> rollout_views;  // by index in the replica's ranks
  DenseWriteBytes dense;  // per replica rank, each trainer's dense bytes (delta landing parts)
};

// `rollouts`: the replica's registrations (its rollout ranks `ranks`, in order); `trainers`: the
// job's, as planning saw them.
Result<JoinerPlan> planJoiningReplica(const std::vector<Registration>& trainers,
                                      std::vector<Registration> rollouts,
                                      const std::vector<int32_t>& ranks, int32_t num_trainers);

}  // namespace wsync
