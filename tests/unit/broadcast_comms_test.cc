// Plan -> broadcast communicators: the mapping every broadcast world (the MPI job's, the job's
// ranks) uses.
#include <gtest/gtest.h>

#include "coordinator/broadcast_comms.h"

namespace wsync {
namespace {

BroadcastGroup group(int32_t src, std::vector<int32_t> dst, int32_t replica) {
  BroadcastGroup g;
  g.src.rank = src;
  for (int32_t d : dst)
    g.dst.push_back({d, 0, 0});
  g.replica = replica;
  return g;
}

TEST(BroadcastComms, OneCommunicatorPerMemberSetInPlanOrder) {
  Plan plan;
  // trainers 0,1 are world ranks 0,1; rollouts 0..3 are world ranks 2..5 (2 replicas of 2).
  plan.groups = {group(1, {2, 3}, 1), group(0, {0, 1}, 0), group(1, {2, 3}, 1),
                 group(1, {0, 1}, 0)};
  const BroadcastCommMap map = mapBroadcastComms(plan, {0, 1}, {2, 3, 4, 5});
  ASSERT_EQ(map.comms.size(), 3u);
  EXPECT_EQ(map.comms[0].world_ranks, (std::vector<int32_t>{1, 4, 5}));
  EXPECT_EQ(map.comms[1].world_ranks, (std::vector<int32_t>{0, 2, 3}));
  EXPECT_EQ(map.comms[2].world_ranks, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(map.group_comm, (std::vector<int32_t>{0, 1, 0, 2}));
  for (size_t i = 0; i < map.comms.size(); ++i)
    EXPECT_EQ(map.comms[i].id, static_cast<int32_t>(i));
}

TEST(BroadcastComms, EachRankGetsItsCommunicatorsAndGroupIndices) {
  Plan plan;
  plan.groups = {group(1, {2, 3}, 1), group(0, {0, 1}, 0), group(1, {2, 3}, 1),
                 group(1, {0, 1}, 0)};
  const BroadcastCommMap map = mapBroadcastComms(plan, {0, 1}, {2, 3, 4, 5});
  std::vector<BroadcastComm> comms;
  std::vector<int32_t> group_comm;
  // Trainer 1 sends groups 0, 2 (comm 0) and 3 (comm 2).
  rankBroadcastComms(plan, map, Role::kTrainer, 1, &comms, &group_comm);
  ASSERT_EQ(comms.size(), 2u);
  EXPECT_EQ(comms[0].id, 0);
  EXPECT_EQ(comms[1].id, 2);
  EXPECT_EQ(group_comm, (std::vector<int32_t>{0, 0, 1}));
  // Rollout 0 (world 2) receives groups 1 (comm 1) and 3 (comm 2), in increasing id.
  rankBroadcastComms(plan, map, Role::kRollout, 0, &comms, &group_comm);
  ASSERT_EQ(comms.size(), 2u);
  EXPECT_EQ(comms[0].id, 1);
  EXPECT_EQ(comms[1].id, 2);
  EXPECT_EQ(group_comm, (std::vector<int32_t>{0, 1}));
  // Rollout 3 is in comm 0 only; trainer 0 in comm 1 only.
  rankBroadcastComms(plan, map, Role::kRollout, 3, &comms, &group_comm);
  EXPECT_EQ(group_comm, (std::vector<int32_t>{0, 0}));
  rankBroadcastComms(plan, map, Role::kTrainer, 0, &comms, &group_comm);
  ASSERT_EQ(comms.size(), 1u);
  EXPECT_EQ(comms[0].world_ranks, (std::vector<int32_t>{0, 2, 3}));
}

TEST(BroadcastComms, JobWorldNumbersTrainersThenRollouts) {
  const JobWorldNumbering world = numberJobWorld(2, 3);
  EXPECT_EQ(world.trainer_ranks, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(world.rollout_ranks, (std::vector<int32_t>{2, 3, 4}));
  EXPECT_EQ(world.size, 5);
}

TEST(BroadcastComms, JobWorldAssignmentCarriesEveryCommunicatorAndTheWorld) {
  Plan plan;
  plan.groups = {group(1, {2, 3}, 1), group(0, {0, 1}, 0), group(1, {2, 3}, 1),
                 group(1, {0, 1}, 0)};
  const JobWorldNumbering world = numberJobWorld(2, 4);
  const BroadcastCommMap map = mapBroadcastComms(plan, world.trainer_ranks, world.rollout_ranks);
  const std::vector<uint8_t> id(128, 7);
  const BroadcastOffer backend{"any", {BroadcastWorld::kJobRanks, true, true}, id};
  // Trainer 0 sends group 1 only, yet joins every split: it gets every communicator.
  PlanAssignmentMsg msg;
  assignJobWorldBroadcasts(plan, map, world, backend, Role::kTrainer, 0, &msg);
  ASSERT_EQ(msg.comms.size(), 3u);
  EXPECT_EQ(msg.comms[0].world_ranks, (std::vector<int32_t>{1, 4, 5}));
  EXPECT_EQ(msg.comms[1].world_ranks, (std::vector<int32_t>{0, 2, 3}));
  EXPECT_EQ(msg.comms[2].world_ranks, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(msg.group_comm, (std::vector<int32_t>{1}));
  EXPECT_EQ(msg.broadcast.backend, "any");
  EXPECT_EQ(msg.broadcast.world_token, id);
  EXPECT_EQ(msg.broadcast.world_rank, 0);
  EXPECT_EQ(msg.broadcast.world_size, 6);
  EXPECT_EQ(msg.broadcast.root_ranks, (std::vector<int32_t>{0, 1}));
  // Trainer 1 sends groups 0, 2 (comm 0) and 3 (comm 2); indices are communicator ids.
  assignJobWorldBroadcasts(plan, map, world, backend, Role::kTrainer, 1, &msg);
  EXPECT_EQ(msg.group_comm, (std::vector<int32_t>{0, 0, 2}));
  EXPECT_EQ(msg.broadcast.world_rank, 1);
  // Rollout 0 (world rank 2) receives groups 1 (comm 1) and 3 (comm 2).
  assignJobWorldBroadcasts(plan, map, world, backend, Role::kRollout, 0, &msg);
  EXPECT_EQ(msg.group_comm, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(msg.broadcast.world_rank, 2);
  EXPECT_EQ(msg.comms.size(), 3u);
  // Rollout 3 (world rank 5) receives groups 0 and 2 (comm 0).
  assignJobWorldBroadcasts(plan, map, world, backend, Role::kRollout, 3, &msg);
  EXPECT_EQ(msg.group_comm, (std::vector<int32_t>{0, 0}));
  EXPECT_EQ(msg.broadcast.world_rank, 5);
  // Round trip: what the rank decodes is what the coordinator built.
  PlanAssignmentMsg decoded;
  ASSERT_TRUE(decode(encode(msg), decoded).isOk());
  EXPECT_EQ(decoded.group_comm, msg.group_comm);
  EXPECT_EQ(decoded.broadcast.world_rank, 5);
  EXPECT_EQ(decoded.comms.size(), 3u);
}

TEST(BroadcastComms, NoGroupsNoCommunicators) {
  const BroadcastCommMap map = mapBroadcastComms(Plan{}, {0}, {1});
  EXPECT_TRUE(map.comms.empty());
  EXPECT_TRUE(map.group_comm.empty());
}

}  // namespace
}  // namespace wsync
