// Plan -> communicators: every broadcast group runs on the communicator of its member set (the
// sender and its receivers, as world ranks). Communicators are numbered in plan order of first use,
// and every member creates them in increasing id order (which cannot deadlock). The same map serves
// MPI sub-communicators (host memory) and NCCL splits (device memory).
#pragma once

#include <cstdint>
#include <vector>

#include "coordinator/protocol.h"
#include "plan/plan.h"

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

}  // namespace wsync
