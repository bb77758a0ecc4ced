#include "coordinator/broadcast_comms.h"

#include <algorithm>
#include <map>

namespace wsync {

BroadcastCommMap mapBroadcastComms(const Plan& plan, const std::vector<int32_t>& trainer_world,
                                   const std::vector<int32_t>& rollout_world) {
  BroadcastCommMap map;
  std::map<std::vector<int32_t>, int32_t> ids;
  map.group_comm.reserve(plan.groups.size());
  for (const BroadcastGroup& group : plan.groups) {
    std::vector<int32_t> members{trainer_world[static_cast<size_t>(group.src.rank)]};
    for (const BufferSpan& d : group.dst)
      members.push_back(rollout_world[static_cast<size_t>(d.rank)]);
    std::sort(members.begin(), members.end());
    auto [it, inserted] = ids.emplace(members, static_cast<int32_t>(map.comms.size()));
    if (inserted) map.comms.push_back({it->second, members});
    map.group_comm.push_back(it->second);
  }
  return map;
}

namespace {
bool isMember(const BroadcastGroup& group, Role role, int32_t rank) {
  if (role == Role::kTrainer) return group.src.rank == rank;
  return std::any_of(group.dst.begin(), group.dst.end(),
                     [&](const BufferSpan& d) { return d.rank == rank; });
}
}  // namespace

void rankBroadcastComms(const Plan& plan, const BroadcastCommMap& map, Role role, int32_t rank,
                        std::vector<BroadcastComm>* comms, std::vector<int32_t>* group_comm) {
  comms->clear();
  group_comm->clear();
  std::vector<int32_t> global_of_group;
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    if (isMember(plan.groups[g], role, rank)) global_of_group.push_back(map.group_comm[g]);
  }
  std::vector<int32_t> ids = global_of_group;
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  std::map<int32_t, int32_t> local;
  for (int32_t id : ids) {
    local[id] = static_cast<int32_t>(comms->size());
    comms->push_back(map.comms[static_cast<size_t>(id)]);
  }
  for (int32_t id : global_of_group)
    group_comm->push_back(local[id]);
}

JobWorldNumbering numberJobWorld(int32_t num_trainers, int32_t num_rollouts) {
  JobWorldNumbering world;
  for (int32_t t = 0; t < num_trainers; ++t)
    world.trainer_ranks.push_back(t);
  for (int32_t r = 0; r < num_rollouts; ++r)
    world.rollout_ranks.push_back(num_trainers + r);
  world.size = num_trainers + num_rollouts;
  return world;
}

void assignJobWorldBroadcasts(const Plan& plan, const BroadcastCommMap& map,
                              const JobWorldNumbering& world, const BroadcastOffer& backend,
                              Role role, int32_t rank, PlanAssignmentMsg* msg) {
  msg->comms = map.comms;
  msg->group_comm.clear();
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    // comms[i].id == i, so a communicator's id is its index in msg->comms.
    if (isMember(plan.groups[g], role, rank)) msg->group_comm.push_back(map.group_comm[g]);
  }
  const auto& own = role == Role::kTrainer ? world.trainer_ranks : world.rollout_ranks;
  msg->broadcast.backend = backend.name;
  msg->broadcast.world_token = backend.world_token;
  msg->broadcast.world_rank = own[static_cast<size_t>(rank)];
  msg->broadcast.world_size = world.size;
  msg->broadcast.root_ranks = world.trainer_ranks;
}

}  // namespace wsync
