#include "runtime/trainer_membership.h"

#include <algorithm>
#include <string>
#include <utility>

#include "codec/plan_codec.h"

namespace wsync {

int32_t TrainerMembership::replicaOf(int32_t rollout) const {
  if (rollout < 0 || static_cast<size_t>(rollout) >= replica_of_rollout_.size()) return -1;
  return replica_of_rollout_[static_cast<size_t>(rollout)];
}

int32_t TrainerMembership::slotFor(const GoMsg& go, int32_t rollout) const {
  const int32_t replica = replicaOf(rollout);
  if (replica < 0 || static_cast<size_t>(replica) >= go.slot_of_replica.size()) return -1;
  return go.slot_of_replica[static_cast<size_t>(replica)];
}

bool TrainerMembership::replicaTakes(const GoMsg& go, const BroadcastGroup& group) const {
  if (group.dst.empty() || slotFor(go, group.dst.front().rank) < 0) return false;
  return replicaOf(group.dst.front().rank) == group.replica;
}

void TrainerMembership::forget(const ReplicaMsg& dropped) {
  auto drop = [this](int32_t r) {
    if (r >= 0 && static_cast<size_t>(r) < replica_of_rollout_.size())
      replica_of_rollout_[static_cast<size_t>(r)] = -1;
  };
  for (int32_t r : dropped.ranks)
    drop(r);
  for (auto& part : extensions_) {
    if (part->replica != dropped.replica || !part->active) continue;
    part->active = false;
    for (int32_t r : part->ranks)
      drop(r);
  }
}

Result<RankPlan> TrainerMembership::checkExtension(
    const PlanExtensionMsg& extension, const std::function<bool(int32_t rollout)>& connected) {
  const std::string what = "replica " + std::to_string(extension.replica) + " joining";
  WSYNC_ASSIGN_OR_RETURN(RankPlan plan,
                         decodeRankPlan(extension.rank_plan.data(), extension.rank_plan.size()));
  const auto in_replica = [&](int32_t r) {
    return std::find(extension.ranks.begin(), extension.ranks.end(), r) != extension.ranks.end();
  };
  if (!plan.groups.empty()) return protocolError(what + ": an extension has broadcast groups");
  for (const PeerInfo& p : extension.peers) {
    if (!in_replica(p.rank))
      return protocolError(what + ": names rollout " + std::to_string(p.rank));
    if (connected(p.rank))
      return protocolError(what + ": rollout " + std::to_string(p.rank) + " is known");
  }
  for (const WriteOp& op : plan.writes) {
    if (!in_replica(op.dst_rank)) {
      return protocolError(what + ": a write targets rollout " + std::to_string(op.dst_rank));
    }
  }
  return plan;
}

void TrainerMembership::add(std::unique_ptr<ExtensionPart> part) {
  for (int32_t r : part->ranks) {
    if (r < 0) continue;
    if (replica_of_rollout_.size() <= static_cast<size_t>(r))
      replica_of_rollout_.resize(static_cast<size_t>(r) + 1, -1);
    replica_of_rollout_[static_cast<size_t>(r)] = part->replica;
  }
  extensions_.push_back(std::move(part));
}

}  // namespace wsync
