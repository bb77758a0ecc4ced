// Who belongs to a job: the coordinator's admission rules (coordinator/coordinator.h), as pure
// functions of the job's shape and of the Hellos received so far.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "options/options.h"  // JobSettings
#include "plan/plan.h"
#include "protocol/protocol.h"

namespace wsync {

// Who joins: with MPI bootstrap world ranks [first_participant_world_rank, mpi_world_size), with
// explicit bootstrap num_trainers and num_rollouts role ranks.
struct JobShape {
  int mpi_world_size = 0;  // > 0: MPI bootstrap
  int first_participant_world_rank = 0;
  int num_trainers = 0;
  int num_rollouts = 0;
};

std::string rankName(Role role, int32_t rank);  // "trainer 3"

int expectedParticipants(const JobShape& job);

// INVALID_ARGUMENT when `hello` cannot be one of the job's ranks: a rollout without a replica
// index, a fixed rollout of an elastic job (explicit bootstrap, num_rollouts 0), a world rank or
// role rank out of the job's range, or the identity of a rank in `joined`.
Status checkHello(const JobShape& job, const HelloMsg& hello,
                  const std::vector<const HelloMsg*>& joined);

// UNSUPPORTED when the plan asks a host-memory trainer for a conversion only device memory does
// (host memory converts between float32, bfloat16 and float16; float8 needs device memory), naming
// the tensor, the trainer and the rollout ranks. Checked at planning, before any rank starts a
// collective for the plan, so that every rank gets the same error.
Status checkConversions(const Plan& plan, const std::vector<Registration>& trainers);

// INVALID_ARGUMENT when a rank set a job-wide setting explicitly (HelloMsg::job_settings) to a
// value other than the coordinator's `decided`, naming each such setting, the coordinator's value
// and every rank that set it otherwise (checkJobSettingsAgree); a setting a rank left unset
// agrees. `ranks`: each rank's name and Hello.
Status checkExplicitJobSettings(const JobSettings& decided,
                                const std::vector<std::pair<std::string, const HelloMsg*>>& ranks);

// "2 of 3 ranks joined; never arrived: ..." naming the ranks that never said Hello.
std::string describeAbsentRanks(const JobShape& job, const std::vector<const HelloMsg*>& joined);

}  // namespace wsync
