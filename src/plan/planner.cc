// makePlan: the planner's phases in order (planner_internal.h says what each file does).
#include "plan/planner.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "plan/planner_emit.h"
#include "plan/planner_internal.h"

namespace wsync {
namespace {

using plan_internal::UnifiedInput;

// The tensor table and the stats of `plan`, whose groups and writes are final.
void finishPlan(const UnifiedInput& input, const std::vector<Registration>& rollouts,
                std::vector<int64_t> loads, Plan& plan) {
  if (plan.groups.capacity() - plan.groups.size() > plan.groups.size() / 8) {
    plan.groups.shrink_to_fit();
  }
  plan.tensors.reserve(input.tensors.size());
  for (const plan_internal::TensorInfo& t : input.tensors)
    plan.tensors.push_back({std::string(t.name), *t.shape});
  PlanStats& stats = plan.stats;
  stats.trainer_ranks = input.num_trainers;
  stats.rollout_ranks = input.num_rollouts;
  std::vector<int32_t> replicas;
  replicas.reserve(rollouts.size());
  for (const Registration& r : rollouts)
    replicas.push_back(r.replica);
  std::sort(replicas.begin(), replicas.end());
  stats.replicas =
      static_cast<int32_t>(std::unique(replicas.begin(), replicas.end()) - replicas.begin());
  for (const BroadcastGroup& g : plan.groups) {
    stats.broadcast_bytes += g.num_elements * static_cast<int64_t>(dtypeSize(g.dst_dtype)) *
                             static_cast<int64_t>(g.dst.size());
  }
  stats.bytes_total = stats.broadcast_bytes + stats.write_bytes;
  stats.bytes_per_sender = std::move(loads);
}

}  // namespace

Result<Plan> makePlan(const std::vector<Registration>& trainers,
                      const std::vector<Registration>& rollouts, const PlannerOptions& options) {
  UnifiedInput input;
  WSYNC_RETURN_IF_ERROR(plan_internal::unify(trainers, rollouts, &input));
  plan_internal::PlanEmitter emitter(rollouts, options, input);
  WSYNC_RETURN_IF_ERROR(emitter.groupAndCount());
  emitter.chooseSenders();
  emitter.countFlexible();
  emitter.emitWrites();
  // Free what the passes needed before the plan's remaining parts are allocated.
  emitter.freeScratch();
  input.freePieces();
  emitter.finishWrites();
  std::vector<int64_t> loads;
  Plan plan = emitter.takePlan(&loads);
  finishPlan(input, rollouts, std::move(loads), plan);
  return plan;
}

}  // namespace wsync
