// Plan -> communicators: every broadcast group runs on the communicator of its member set (the
// sender and its receivers, as world ranks). Communicators are numbered in plan order of first use,
// and every member creates them in increasing id order (which cannot deadlock). The same map serves
// MPI sub-communicators (host memory) and NCCL splits (device memory).
#pragma once

#include <cstdint>
#include <vector>

#include "plan/plan.h"
#include "protocol/protocol.h"

namespace wsync {

struct BroadcastCommMap {
  std::vector<BroadcastComm> comms;  // comms[i].id == i; world ranks sorted
  std::vector<int32_t> group_comm;   // per plan group: its communicator id
};

// `trainer_world[t]` / `rollout_world[r]`: the world rank of trainer t / rollout r.
BroadcastCommMap mapBroadcastComms(const Plan& plan, const std::vector<int32_t>& trainer_world,
                                   const std::vector<int32_t>& rollout_world);

// One rank's share: the communicators it belongs to (increasing id) and, for each of its groups
// in plan order (the order of its RankPlan), the index of the group's communicator in `comms`.
void rankBroadcastComms(const Plan& plan, const BroadcastCommMap& map, Role role, int32_t rank,
                        std::vector<BroadcastComm>* comms, std::vector<int32_t>* group_comm);

// The NCCL world of device broadcast groups: every rank of the job, trainers first (trainer t is
// NCCL rank t, rollout r is NCCL rank num_trainers + r). Build the BroadcastCommMap of an NCCL job
// with these ranks (mapBroadcastComms(plan, trainer_ranks, rollout_ranks)).
struct NcclWorldNumbering {
  std::vector<int32_t> trainer_ranks;  // NCCL world rank of trainer t
  std::vector<int32_t> rollout_ranks;  // NCCL world rank of rollout r
  int32_t size = 0;
};
NcclWorldNumbering numberNcclWorld(int32_t num_trainers, int32_t num_rollouts);

// One rank's device-broadcast share of its PlanAssignment: sets msg->comms to every communicator
// of `map` (each NCCL split is collective over the whole world), msg->group_comm to the
// communicator of each of its groups in plan order (its RankPlan's), and msg->broadcast to the
// "nccl" world: the unique id, its NCCL rank, the world size and the trainers' NCCL ranks. `map`
// was built with `world`'s ranks.
void assignNcclBroadcasts(const Plan& plan, const BroadcastCommMap& map,
                          const NcclWorldNumbering& world, const std::vector<uint8_t>& unique_id,
                          Role role, int32_t rank, PlanAssignmentMsg* msg);

}  // namespace wsync
