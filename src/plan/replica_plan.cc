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

Result<Plan> makeColdFillPlan(std::vector<Registration> sources, std::vector<Registration> joiner,
                              int32_t first_rank) {
  if (sources.empty()) return invalidArgument("makeColdFillPlan: no source rank");
  for (size_t i = 0; i < sources.size(); ++i) {  // the source replica's ranks act as the senders
    sources[i].role = Role::kTrainer;
    sources[i].rank = static_cast<int32_t>(i);
    sources[i].replica = -1;
  }
  WSYNC_ASSIGN_OR_RETURN(Plan plan, makeReplicaPlan(sources, std::move(joiner), first_rank));
  for (const WriteOp& op : plan.writes) {
    if (!op.converts()) continue;
    return Status(WSYNC_ERR_UNSUPPORTED,
                  "tensor '" + plan.tensors[static_cast<size_t>(op.tensor)].name +
                      "': the source replica holds it as " + dtypeName(op.src_dtype) +
                      " and the joining rollout " + std::to_string(op.dst_rank) + " wants " +
                      dtypeName(op.dst_dtype) +
                      " (a cold start copies bytes, it does not convert)");
  }
  return plan;
}

}  // namespace wsync
