// wsync-cluster-model: the predicted sync time of a model's weight sync on a cluster. Builds the
// trainer and rollout registrations of the model and layouts (src/models/model_layouts.h), plans
// them with makePlan (the coordinator's call), places the ranks on the nodes of --cluster and
// predicts each link's time (cluster_model.h). Prints the setup, one line per link (slowest first,
// --links of them), and as its LAST line one JSON object (docs/cluster_model.md lists the keys).
#include <cstdio>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "cluster_model.h"
#include "cluster_spec.h"
#include "layout/registration.h"
#include "model_options.h"
#include "plan/planner.h"

namespace wsync::cluster {
namespace {

std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out + "\"";
}

void printLinks(const Prediction& p, int limit) {
  const size_t n = limit <= 0 ? p.links.size() : std::min<size_t>(limit, p.links.size());
  for (size_t i = 0; i < n; ++i) {
    const LinkLoad& l = p.links[i];
    std::printf("link %-28s %-9s bytes %.6g messages %lld bandwidth %.4g GB/s seconds %.6f\n",
                l.name.c_str(), linkKindName(l.kind), l.bytes, static_cast<long long>(l.messages),
                l.gbyte_per_s, l.seconds);
  }
  if (n < p.links.size())
    std::printf("link ... %zu more links (--links 0: all)\n", p.links.size() - n);
}

// The slowest link of each kind, for the JSON line.
std::string slowestPerKind(const Prediction& p) {
  std::string out = "{";
  for (int k = 0; k <= static_cast<int>(LinkKind::kCoordinator); ++k) {
    for (const LinkLoad& l : p.links) {  // slowest first
      if (static_cast<int>(l.kind) != k) continue;
      char buf[256];
      std::snprintf(buf, sizeof buf, "%s\"%s\":{\"link\":%s,\"seconds\":%.6f,\"bytes\":%.0f}",
                    out.size() > 1 ? "," : "", linkKindName(l.kind), jsonString(l.name).c_str(),
                    l.seconds, l.bytes);
      out += buf;
      break;
    }
  }
  return out + "}";
}

// The last line: one JSON object (docs/cluster_model.md lists the keys).
void printJson(const ModelSpec& model_spec, const std::string& layout, const ClusterSpec& cluster,
               const std::string& memory, const Plan& plan_ref, const Prediction& pred,
               const FormatCosts& costs) {
  std::printf(
      "{\"model\":%s,\"layout\":%s,\"cluster\":%s,\"memory\":%s,\"trainer_ranks\":%d,"
      "\"rollout_ranks\":%d,\"trainer_nodes\":%d,\"rollout_nodes\":%d,\"broadcast_groups\":%zu,"
      "\"write_ops\":%zu,\"messages\":%lld,\"predicted_seconds\":%.6f,"
      "\"bandwidth_seconds\":%.6f,\"latency_seconds\":%.6f,\"control_seconds\":%.6f,"
      "\"bottleneck_link\":%s,\"busiest_rank\":%s,\"busiest_rank_bytes\":%.0f,"
      "\"bytes_delivered\":%.0f,\"bytes_over_network\":%.0f,\"bytes_over_network_dense\":%.0f,"
      "\"changed_share\":%.6f,\"region_link_gbit\":%.6g,\"bytes_within_nodes\":%.0f,"
      "\"sender_imbalance\":%.6f,\"trainer_nic_balance\":%.6f,\"rollout_nic_balance\":%.6f,"
      "\"rollout_format\":%s,\"quantized_tensors\":%lld,\"scale_bytes\":%.0f,"
      "\"straddling_blocks\":%lld,\"partial_maxima\":%lld,\"amax_trainers\":%d,"
      "\"amax_bytes_in\":%.0f,\"amax_bytes_out\":%.0f,\"amax_seconds\":%.6f,"
      "\"coordinator_nic_gbit\":%.6g,"
      "\"slowest_per_kind\":%s}\n",
      jsonString(model_spec.config().name).c_str(), jsonString(layout).c_str(),
      jsonString(cluster.name).c_str(), jsonString(memory).c_str(), pred.trainer_ranks,
      pred.rollout_ranks, pred.trainer_nodes, pred.rollout_nodes, plan_ref.groups.size(),
      plan_ref.writes.size(), static_cast<long long>(pred.messages), pred.predicted_seconds,
      pred.bandwidth_seconds, pred.latency_seconds, pred.control_seconds,
      jsonString(pred.bottleneck_link).c_str(), jsonString(pred.busiest_rank).c_str(),
      pred.busiest_rank_bytes, pred.bytes_delivered, pred.bytes_over_network,
      pred.bytes_over_network_dense, cluster.changed_share, cluster.region_link_gbit,
      pred.bytes_within_nodes, plan_ref.stats.senderImbalance(), pred.trainer_nic_balance,
      pred.rollout_nic_balance, jsonString(rolloutFormatName(cluster.rollout_format)).c_str(),
      static_cast<long long>(costs.quantized_tensors), pred.scale_bytes,
      static_cast<long long>(costs.straddling_blocks), static_cast<long long>(costs.partial_maxima),
      costs.amax_trainers, pred.amax_bytes_in, pred.amax_bytes_out, pred.amax_seconds,
      cluster.coordinator_nic_gbit, slowestPerKind(pred).c_str());
}

int run(int argc, char** argv) {
  cxxopts::Options options("wsync-cluster-model",
                           "Predicts a wsync plan's sync time per link on a described cluster");
  // clang-format off
  options.add_options()
      ("cluster", "cluster description file (docs/cluster_model.md)", cxxopts::value<std::string>())
      ("links", "per-link lines to print, slowest first (0: all)",
       cxxopts::value<int>()->default_value("12"))
      ("no-broadcast", "PlannerOptions.allow_broadcast = false")
      ("h,help", "this help");
  // clang-format on
  addModelOptions(options, "device");
  const cxxopts::ParseResult args = options.parse(argc, argv);
  if (args.count("help") || !args.count("model") || !args.count("cluster")) {
    std::printf("%s\n", options.help().c_str());
    return args.count("help") ? 0 : 2;
  }
  Result<ClusterSpec> spec = loadClusterSpec(args["cluster"].as<std::string>());
  Result<ModelSpec> model = modelFromOptions(args);
  if (!spec.isOk() || !model.isOk()) {
    std::fprintf(stderr, "error: %s\n",
                 (!spec.isOk() ? spec.status() : model.status()).toString().c_str());
    return 2;
  }
  Result<ModelLayouts> layouts = jobLayoutsFromOptions(*model, args);
  if (!layouts.isOk()) {
    std::fprintf(stderr, "error: %s\n", layouts.status().toString().c_str());
    return 2;
  }
  Result<std::vector<Registration>> trainers = buildTrainerRegistrations(*model, layouts->trainer);
  Result<std::vector<Registration>> rollouts = buildRolloutRegistrations(*model, layouts->rollout);
  if (!trainers.isOk() || !rollouts.isOk()) {
    std::fprintf(stderr, "error: %s\n",
                 (!trainers.isOk() ? trainers.status() : rollouts.status()).toString().c_str());
    return 1;
  }
  PlannerOptions planner_options;
  planner_options.allow_broadcast = !args.count("no-broadcast");
  Result<Plan> plan = makePlan(*trainers, *rollouts, planner_options);
  if (!plan.isOk()) {
    std::fprintf(stderr, "error: makePlan: %s\n", plan.status().toString().c_str());
    return 1;
  }
  const std::vector<MemoryKind> tm = memoryKinds(*trainers), rm = memoryKinds(*rollouts);
  Result<FormatCosts> costs = buildFormatCosts(*plan, *trainers, *rollouts, spec->rollout_format);
  trainers = internalError("released");
  rollouts = internalError("released");
  if (!costs.isOk()) {
    std::fprintf(stderr, "error: %s\n", costs.status().toString().c_str());
    return 1;
  }
  Result<Prediction> p = predictSync(*plan, tm, rm, *spec, &*costs);
  if (!p.isOk()) {
    std::fprintf(stderr, "error: %s\n", p.status().toString().c_str());
    return 1;
  }
  const std::string layout = describeLayouts(*layouts);
  std::printf("model      %s, %s memory\n", model->config().name.c_str(),
              args["memory"].as<std::string>().c_str());
  std::printf("layout     %s\n", layout.c_str());
  std::printf(
      "cluster    %s: %d trainer nodes (%d ranks, %d NICs x %g Gbit/s each), %d rollout "
      "nodes (%d ranks, %d NICs x %g Gbit/s each)\n",
      spec->name.c_str(), p->trainer_nodes, spec->trainer.ranks_per_node,
      spec->trainer.nics_per_node, spec->trainer.nic_gbit, p->rollout_nodes,
      spec->rollout.ranks_per_node, spec->rollout.nics_per_node, spec->rollout.nic_gbit);
  std::printf(
      "plan       %zu broadcast groups, %zu write ops, %.6g bytes delivered, sender "
      "imbalance %.4f\n",
      plan->groups.size(), plan->writes.size(), p->bytes_delivered, plan->stats.senderImbalance());
  if (spec->changed_share >= 0 || spec->region_link_gbit > 0)
    std::printf(
        "delta      changed share %g: %.6g bytes over the network against %.6g dense (%.4f); "
        "region link %g Gbit/s\n",
        spec->changed_share, p->bytes_over_network, p->bytes_over_network_dense,
        p->bytes_over_network_dense > 0 ? p->bytes_over_network / p->bytes_over_network_dense : 1.0,
        spec->region_link_gbit);
  if (spec->rollout_format != RolloutFormat::kAsRegistered)
    std::printf(
        "format     %s: %lld tensors quantized, %.6g scale bytes delivered; %lld blocks straddle "
        "trainers: %lld partial maxima from %d trainers, %.6g bytes into and %.6g out of the "
        "coordinator per version\n",
        rolloutFormatName(spec->rollout_format), static_cast<long long>(costs->quantized_tensors),
        p->scale_bytes, static_cast<long long>(costs->straddling_blocks),
        static_cast<long long>(costs->partial_maxima), costs->amax_trainers, p->amax_bytes_in,
        p->amax_bytes_out);
  printLinks(*p, args["links"].as<int>());
  std::printf(
      "predicted  %.4f s = slowest link %.4f s (%s) + latency %.6f s + control %.6f s + partial "
      "maxima %.6f s\n",
      p->predicted_seconds, p->bandwidth_seconds, p->bottleneck_link.c_str(), p->latency_seconds,
      p->control_seconds, p->amax_seconds);
  printJson(*model, layout, *spec, args["memory"].as<std::string>(), *plan, *p, *costs);
  return 0;
}

}  // namespace
}  // namespace wsync::cluster

int main(int argc, char** argv) {
  try {
    return wsync::cluster::run(argc, argv);
  } catch (const cxxopts::exceptions::exception& e) {  // bad flags: cxxopts reports by throwing
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
