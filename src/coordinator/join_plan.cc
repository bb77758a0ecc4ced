#include "coordinator/join_plan.h"

#include <chrono>
#include <utility>

#include "codec/plan_codec.h"
#include "plan/planner.h"
#include "plan/replica_plan.h"

namespace wsync {

Result<JoinerPlan> planJoiningReplica(const std::vector<Registration>& trainers,
                                      std::vector<Registration> rollouts,
                                      const std::vector<int32_t>& ranks, int32_t num_trainers) {
  const auto t0 = std::chrono::steady_clock::now();
  Result<Plan> plan = makeReplicaPlan(trainers, std::move(rollouts), ranks[0]);
  if (!plan.isOk()) return plan.status().withContext("planning the replica");
  JoinerPlan out;
  out.plan_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  out.write_ops = plan->writes.size();
  out.dense = denseWriteBytes(*plan, num_trainers);
  for (int32_t t = 0; t < num_trainers; ++t) {
    const RankPlan view = rankView(*plan, Role::kTrainer, t);
    out.trainer_views.push_back(encodeRankPlan(view));
    out.trainer_peers.push_back(view.peers);
  }
  for (int32_t r : ranks)
    out.rollout_views.push_back(encodeRankPlan(rankView(*plan, Role::kRollout, r)));
  return out;
}

}  // namespace wsync
