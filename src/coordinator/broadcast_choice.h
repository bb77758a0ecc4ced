// Which broadcast backend carries a job's broadcast groups (docs/architecture.md, "Backends and
// the registry"), chosen once by the coordinator from every rank's registration, before planning.
// The coordinator knows no backend: each rank offers the ones it can run (RegisterMsg::
// broadcast_offers, from the transport registry) with what each needs of the job, and the choice
// reads only those facts. With no backend the planner makes one-sided writes only.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "plan/broadcast_comm.h"

namespace wsync {

// What one rank registered that the choice reads.
struct RankBroadcastFacts {
  std::string rank_name;  // "trainer 0", "rollout 3": for the reason only
  std::string device_id;  // RegisterMsg::device_id: "host/GPU-uuid"; empty for host memory
  std::vector<BroadcastOffer> offers;  // RegisterMsg::broadcast_offers, in registry order
};

struct BroadcastChoice {
  // The chosen backend as trainer 0 offered it (its world token included); none: writes only.
  std::optional<BroadcastOffer> backend;
  std::string reason;  // why: names the ranks and needs that rule the others out
};

// The rule: the first of trainer 0's offers (`ranks[0]`; trainers first, then rollouts) that
//   - every rank offers, with the same needs;
//   - whose needs hold: BroadcastWorld::kMpiJob only when the job runs under MPI (`mpi_job`);
//     one_gpu_per_rank only when every rank holds a GPU of its own (distinct device ids);
//     world_token only when trainer 0's offer carries one.
// None (writes only) when no offer passes, or the job has no rank.
BroadcastChoice chooseBroadcastBackend(const std::vector<RankBroadcastFacts>& ranks, bool mpi_job);

// "mpi (...)" or "none (writes only)": the choice and its reason, for the coordinator's log.
std::string describeBroadcastChoice(const BroadcastChoice& choice);

}  // namespace wsync
