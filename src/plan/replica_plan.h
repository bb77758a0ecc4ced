// Planning one rollout replica that joins a running job, without re-planning the others: the
// trainers' layout against that replica's ranks only, every byte by one-sided writes (a joining
// replica is not a member of the job's broadcast communicators).
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "layout/registration.h"
#include "plan/plan.h"

namespace wsync {

// makePlan(trainers, replica, {allow_broadcast = false}) with the replica's ranks numbered
// first_rank, first_rank + 1, ... in the job: replica[j] is rollout rank first_rank + j (its
// Registration::rank is ignored and the Plan's write ops name the job's rank). Errors as makePlan
// (MISMATCH naming the tensor and the job's rollout rank). stats.rollout_ranks is the replica's
// rank count. Cost: makePlan's on the trainers' pieces that intersect the replica's, plus a copy
// of the replica's registrations. Thread-safe.
Result<Plan> makeReplicaPlan(const std::vector<Registration>& trainers,
                             std::vector<Registration> replica, int32_t first_rank);

}  // namespace wsync
