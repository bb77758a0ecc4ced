// Plan -> communicators: every broadcast group runs on the communicator of its member set (the
// sender and its receivers, as world ranks). Communicators are numbered in plan order of first use,
// and every member creates them in increasing id order (which cannot deadlock). The same map serves
// every BroadcastWorld: communicators of the MPI job's world and of a world of the job's ranks.
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

// A world of the job's ranks (BroadcastWorld::kJobRanks): trainers first (trainer t is world rank
// t, rollout r is num_trainers + r). Build the BroadcastCommMap of such a job with these ranks
// (mapBroadcastComms(plan, trainer_ranks, rollout_ranks)).
struct JobWorldNumbering {
  std::vector<int32_t> trainer_ranks;  // world rank of trainer t
  std::vector<int32_t> rollout_ranks;  // world rank of rollout r
  int32_t size = 0;
};
JobWorldNumbering numberJobWorld(int32_t num_trainers, int32_t num_rollouts);

// One rank's share of its PlanAssignment when `backend` (the chosen offer) has a world of the
// job's ranks: sets msg->comms to every communicator of `map` (creating one is collective over
// the whole world), msg->group_comm to the communicator of each of its groups in plan order (its
// RankPlan's), and msg->broadcast to that world: the backend's name and world token, the rank's
// world rank, the world size and the trainers' world ranks. `map` was built with `world`'s ranks.
void assignJobWorldBroadcasts(const Plan& plan, const BroadcastCommMap& map,
                              const JobWorldNumbering& world, const BroadcastOffer& backend,
                              Role role, int32_t rank, PlanAssignmentMsg* msg);

}  // namespace wsync
