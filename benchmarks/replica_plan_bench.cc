// wsync-replica-plan-bench: what a replica joining a running job costs the coordinator. Builds a
// zoo model's registrations (default layouts, not timed), then times planning the whole job
// (makePlan, every byte by writes, as a job without broadcasts plans) against extending the plan
// for the last replica only (makeReplicaPlan), and the trainers' views of that extension
// (rankView + encodeRankPlan, what the PlanExtension messages carry).
//   wsync-replica-plan-bench --model kimi-k2 [--repeat 3] [layout flags]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cxxopts.hpp>
#include <string>
#include <vector>

#include "codec/plan_codec.h"
#include "model_layouts.h"
#include "model_zoo.h"
#include "plan/planner.h"
#include "plan/replica_plan.h"

namespace wsync {
namespace {

using Clock = std::chrono::steady_clock;

double msSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

int run(int argc, char** argv) {
  cxxopts::Options options("wsync-replica-plan-bench", "Times extending a plan by one replica");
  options.add_options()("model", "llama3-8b | qwen3-30b-a3b | kimi-k2",
                        cxxopts::value<std::string>()->default_value("kimi-k2"))(
      "repeat", "time each this many times (the fastest is reported)",
      cxxopts::value<int>()->default_value("1"));
  addLayoutOptions(options);
  const auto args = options.parse(argc, argv);
  Result<ModelSpec> model = makeModel(args["model"].as<std::string>());
  if (!model.isOk()) return std::fprintf(stderr, "%s\n", model.status().toString().c_str()), 2;
  Result<ModelLayouts> layouts = layoutsFromOptions(*model, args);
  if (!layouts.isOk()) return std::fprintf(stderr, "%s\n", layouts.status().toString().c_str()), 2;
  auto trainers = buildTrainerRegistrations(*model, layouts->trainer);
  auto rollouts = buildRolloutRegistrations(*model, layouts->rollout);
  if (!trainers.isOk() || !rollouts.isOk()) return std::fprintf(stderr, "registrations\n"), 1;
  std::printf("%s: %s\n", model->config().name.c_str(), describeLayouts(*layouts).c_str());
  const int per_replica = layouts->rollout.ranksPerReplica();
  const auto first = static_cast<int32_t>(rollouts->size()) - per_replica;
  const std::vector<Registration> replica(rollouts->begin() + first, rollouts->end());
  const int repeat = std::max(1, args["repeat"].as<int>());
  PlannerOptions writes_only;
  writes_only.allow_broadcast = false;
  double whole_ms = 0, extend_ms = 0, views_ms = 0;
  size_t whole_ops = 0, extend_ops = 0, view_bytes = 0;
  for (int i = 0; i < repeat; ++i) {
    auto t0 = Clock::now();
    Result<Plan> whole = makePlan(*trainers, *rollouts, writes_only);
    const double w = msSince(t0);
    if (!whole.isOk()) return std::fprintf(stderr, "%s\n", whole.status().toString().c_str()), 1;
    whole_ops = whole->writes.size();
    whole = internalError("freed");
    t0 = Clock::now();
    Result<Plan> ext = makeReplicaPlan(*trainers, replica, first);
    const double e = msSince(t0);
    if (!ext.isOk()) return std::fprintf(stderr, "%s\n", ext.status().toString().c_str()), 1;
    extend_ops = ext->writes.size();
    t0 = Clock::now();
    view_bytes = 0;
    for (int32_t t = 0; t < static_cast<int32_t>(trainers->size()); ++t)
      view_bytes += encodeRankPlan(rankView(*ext, Role::kTrainer, t)).size();
    const double v = msSince(t0);
    whole_ms = i == 0 ? w : std::min(whole_ms, w);
    extend_ms = i == 0 ? e : std::min(extend_ms, e);
    views_ms = i == 0 ? v : std::min(views_ms, v);
  }
  std::printf(
      "whole job:   %zu trainer ranks -> %zu rollout ranks, %zu write ops, planned in %.1f ms\n",
      trainers->size(), rollouts->size(), whole_ops, whole_ms);
  std::printf(
      "one replica: ranks %d..%zu, %zu write ops, planned in %.1f ms (%.1fx faster); "
      "%zu trainer views encoded (%zu bytes) in %.1f ms\n",
      first, rollouts->size() - 1, extend_ops, extend_ms, whole_ms / extend_ms, trainers->size(),
      view_bytes, views_ms);
  return 0;
}

}  // namespace
}  // namespace wsync

int main(int argc, char** argv) {
  try {
    return wsync::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wsync-replica-plan-bench: %s\n", e.what());
    return 2;
  }
}
