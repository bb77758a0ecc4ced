#include "plan/replica_plan.h"

#include <string>

#include "plan/planner.h"

namespace wsync {

Result<Plan> makeReplicaPlan(const std::vector<Registration>& trainers,
                             std::vector<Registration> replica, int32_t first_rank) {
  if (first_rank < 0) return invalidArgument("makeReplicaPlan: first_rank must be >= 0");
  for (size_t j = 0; j < replica.size(); ++j)
    replica[j].rank = static_cast<int32_t>(j);
  PlannerOptions options;
  options.allow_broadcast = false;
  Result<Plan> plan = makePlan(trainers, replica, options);
  if (!plan.isOk()) {
    // The planner names the replica's ranks from 0: say which ranks of the job they are.
    return Status(plan.status().code(), plan.status().message() +
                                            " (rollout ranks of the joining replica counted from " +
                                            std::to_string(first_rank) + ")");
  }
  for (WriteOp& op : plan->writes)
    op.dst_rank += first_rank;  // a constant shift keeps the (src_rank, dst_rank, ...) order
  return plan;
}

}  // namespace wsync
