// Planning one rollout replica that joins a running job, without re-planning the others: the
// trainers' layout against that replica's ranks only, every byte by one-sided writes (a joining
// replica is not a member of the job's broadcast communicators). And planning its peer cold
// start: the same replica filled from the slots of a replica that already holds a version.
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

// The peer cold start of a joining replica: `sources` are the rollout registrations of a replica
// that holds a version (sources[i] is the fill's sender i: a write op's src_rank i names it, and
// its src_buffer / src_offset are that rank's buffer and element offset, which live at
// buffer_byte_offsets[src_buffer] of its slot); `joiner` and `first_rank` as in makeReplicaPlan.
// One-sided writes only, balanced across the senders that hold the same boxes (replicated
// tensors). Errors: MISMATCH (makePlan's) when the sources do not hold an element the joiner
// wants, or declare a tensor with another shape; UNSUPPORTED naming the tensor and both dtypes
// when a byte would need a dtype conversion (a source rank has no staging to convert into: such a
// joiner gets its first version from the trainers). Thread-safe; cost as makeReplicaPlan's.
Result<Plan> makeColdFillPlan(std::vector<Registration> sources, std::vector<Registration> joiner,
                              int32_t first_rank);

}  // namespace wsync
