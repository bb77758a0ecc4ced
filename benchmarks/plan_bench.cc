// wsync-plan-bench: how long the coordinator takes to plan a real model's weight sync, and how
// much memory it needs. Builds the trainer and rollout registrations of a zoo model (not timed),
// times makePlan (`--repeat` times, one thread), optionally encodes the plan and every rank's view,
// prints a human summary and, as its LAST line, one JSON object (see benchmarks/README.md).
#include <sys/resource.h>
#include <unistd.h>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "codec/plan_codec.h"
#include "layout/registration.h"
#include "model_layouts.h"
#include "model_zoo.h"
#include "plan/planner.h"

namespace wsync {
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// CPU seconds this thread has run (unaffected by other processes sharing the cores).
double threadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// What one makePlan cost this thread: wall and CPU seconds (user + system, and the system part:
// page faults are charged there), and the page faults it took.
struct PlanCost {
  double wall = 0;
  double cpu = 0;
  double sys = 0;
  int64_t minor_faults = 0;
};

// This thread's system CPU seconds and minor page faults so far (getrusage RUSAGE_THREAD).
void threadUsage(double* sys_seconds, int64_t* minor_faults) {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  *sys_seconds =
      static_cast<double>(u.ru_stime.tv_sec) + 1e-6 * static_cast<double>(u.ru_stime.tv_usec);
  *minor_faults = static_cast<int64_t>(u.ru_minflt);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int64_t peakRssBytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;  // Linux reports KiB
}

// Resident bytes now (the second field of /proc/self/statm, in pages); 0 when unreadable.
int64_t currentRssBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return resident * sysconf(_SC_PAGESIZE);
}

struct Counts {
  int64_t buffers = 0;
  int64_t pieces = 0;
};

Counts count(const std::vector<Registration>& regs) {
  Counts c;
  for (const Registration& r : regs) {
    c.buffers += static_cast<int64_t>(r.buffers.size());
    for (const LocalBuffer& b : r.buffers)
      c.pieces += static_cast<int64_t>(b.pieces.size());
  }
  return c;
}

std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out + "\"";
}

// FNV-1a of `bytes` (to tell whether two builds produce the same encoded plan).
uint64_t fnv1a(const std::vector<uint8_t>& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const uint8_t b : bytes) {
    h ^= b;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f GiB", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
  return buf;
}

int run(int argc, char** argv) {
  cxxopts::Options options("wsync-plan-bench",
                           "Times the wsync planner on a real model's trainer/rollout layouts");
  // clang-format off
  options.add_options()
      ("model", "llama3-8b | qwen3-30b-a3b | kimi-k2", cxxopts::value<std::string>())
      ("repeat", "plan this many times (the first is the cold plan; reports the fastest, the mean "
                 "and the median of the others)",
       cxxopts::value<int>()->default_value("1"))
      ("no-broadcast", "PlannerOptions.allow_broadcast = false: only write ops")
      ("encode", "also time encodePlan, and rankView + encodeRankPlan for every rank")
      ("h,help", "this help");
  // clang-format on
  addLayoutOptions(options);
  const cxxopts::ParseResult args = options.parse(argc, argv);
  if (args.count("help") || !args.count("model")) {
    std::printf("%s\n", options.help().c_str());
    return args.count("help") ? 0 : 2;
  }
  const int repeat = std::max(1, args["repeat"].as<int>());

  Result<ModelSpec> model = makeModel(args["model"].as<std::string>());
  if (!model.isOk()) {
    std::fprintf(stderr, "error: %s\n", model.status().toString().c_str());
    return 2;
  }
  Result<ModelLayouts> layouts = layoutsFromOptions(*model, args);
  if (!layouts.isOk()) {
    std::fprintf(stderr, "error: %s\n", layouts.status().toString().c_str());
    return 2;
  }
  const std::string model_name = model->config().name;
  std::printf("model      %s: %zu tensors, %.4g parameters\n", model_name.c_str(),
              model->tensors().size(), static_cast<double>(model->numParameters()));
  std::printf("layout     %s\n", describeLayouts(*layouts).c_str());

  const Clock::time_point build_start = Clock::now();
  Result<std::vector<Registration>> trainers = buildTrainerRegistrations(*model, layouts->trainer);
  if (!trainers.isOk()) {
    std::fprintf(stderr, "error: %s\n", trainers.status().toString().c_str());
    return 1;
  }
  Result<std::vector<Registration>> rollouts = buildRolloutRegistrations(*model, layouts->rollout);
  if (!rollouts.isOk()) {
    std::fprintf(stderr, "error: %s\n", rollouts.status().toString().c_str());
    return 1;
  }
  const double build_seconds = secondsSince(build_start);
  // From here on the process holds what a coordinator holds: the registrations, then the plan.
  // The zoo's parameter table (13 MB for kimi-k2) is not part of that.
  model = internalError("released after building the registrations");
  const Counts tc = count(*trainers);
  const Counts rc = count(*rollouts);
  const int64_t registrations_rss = currentRssBytes();
  const int64_t peak_before_plan = peakRssBytes();
  std::printf(
      "registered %zu trainer ranks (%lld buffers, %lld pieces), %zu rollout ranks "
      "(%lld buffers, %lld pieces) in %.3f s; RSS %s\n",
      trainers->size(), static_cast<long long>(tc.buffers), static_cast<long long>(tc.pieces),
      rollouts->size(), static_cast<long long>(rc.buffers), static_cast<long long>(rc.pieces),
      build_seconds, gib(registrations_rss).c_str());

  PlannerOptions planner_options;
  planner_options.allow_broadcast = !args.count("no-broadcast");
  std::vector<PlanCost> costs;
  int64_t peak_rss_cold = 0;
  Result<Plan> plan = internalError("not planned");
  for (int i = 0; i < repeat; ++i) {
    plan = internalError("not planned");  // free the previous plan before timing the next
    PlanCost c;
    double sys0 = 0;
    int64_t faults0 = 0;
    threadUsage(&sys0, &faults0);
    const Clock::time_point t0 = Clock::now();
    const double c0 = threadCpuSeconds();
    plan = makePlan(*trainers, *rollouts, planner_options);
    c.cpu = threadCpuSeconds() - c0;
    c.wall = secondsSince(t0);
    threadUsage(&c.sys, &c.minor_faults);
    c.sys -= sys0;
    c.minor_faults -= faults0;
    if (!plan.isOk()) {
      std::fprintf(stderr, "error: makePlan: %s\n", plan.status().toString().c_str());
      return 1;
    }
    if (i == 0) peak_rss_cold = peakRssBytes();
    costs.push_back(c);
  }
  double best = costs[0].wall, best_cpu = costs[0].cpu, total = 0;
  std::vector<double> warm_cpu, warm_wall;
  for (size_t i = 0; i < costs.size(); ++i) {
    best = std::min(best, costs[i].wall);
    best_cpu = std::min(best_cpu, costs[i].cpu);
    total += costs[i].wall;
    if (i > 0) {
      warm_cpu.push_back(costs[i].cpu);
      warm_wall.push_back(costs[i].wall);
    }
  }
  const PlanCost& cold = costs[0];
  const double mean = total / repeat;
  const int64_t peak_rss = peakRssBytes();
  const PlanStats& st = plan->stats;
  int64_t smin = 0, smax = 0, ssum = 0;
  for (size_t i = 0; i < st.bytes_per_sender.size(); ++i) {
    const int64_t b = st.bytes_per_sender[i];
    smin = i == 0 ? b : std::min(smin, b);
    smax = std::max(smax, b);
    ssum += b;
  }
  const double smean =
      st.bytes_per_sender.empty() ? 0.0 : static_cast<double>(ssum) / st.bytes_per_sender.size();
  std::printf(
      "plan       %zu tensors, %zu broadcast groups (%s), %zu write ops (%s), %s total "
      "to %d replicas\n",
      plan->tensors.size(), plan->groups.size(), gib(st.broadcast_bytes).c_str(),
      plan->writes.size(), gib(st.write_bytes).c_str(), gib(st.bytes_total).c_str(), st.replicas);
  std::printf("senders    per trainer rank: min %s, mean %s, max %s; imbalance %.4f\n",
              gib(smin).c_str(), gib(static_cast<int64_t>(smean)).c_str(), gib(smax).c_str(),
              st.senderImbalance());
  std::printf(
      "time       makePlan %.4f s wall (fastest of %d), mean %.4f s, %.4f s CPU; peak RSS %s "
      "(%s before planning)\n",
      best, repeat, mean, best_cpu, gib(peak_rss).c_str(), gib(peak_before_plan).c_str());
  std::printf(
      "cold       first plan %.4f s CPU (%.4f s system, %lld page faults), %.4f s wall; "
      "peak RSS %s after it\n",
      cold.cpu, cold.sys, static_cast<long long>(cold.minor_faults), cold.wall,
      gib(peak_rss_cold).c_str());
  if (repeat > 1) {
    std::printf("warm       median of the %d later plans %.4f s CPU, %.4f s wall\n", repeat - 1,
                median(warm_cpu), median(warm_wall));
  }

  std::string codec_json;
  if (args.count("encode")) {
    Clock::time_point t0 = Clock::now();
    const std::vector<uint8_t> encoded = encodePlan(*plan);
    const double encode_s = secondsSince(t0);
    t0 = Clock::now();
    int64_t rank_bytes = 0, rank_max = 0;
    const int32_t nt = static_cast<int32_t>(trainers->size());
    const int32_t nr = static_cast<int32_t>(rollouts->size());
    for (int32_t i = 0; i < nt + nr; ++i) {
      const Role role = i < nt ? Role::kTrainer : Role::kRollout;
      const RankPlan view = rankView(*plan, role, i < nt ? i : i - nt);
      const int64_t n = static_cast<int64_t>(encodeRankPlan(view).size());
      rank_bytes += n;
      rank_max = std::max(rank_max, n);
    }
    const double views_s = secondsSince(t0);
    std::printf(
        "codec      encodePlan %.4f s, %lld bytes; rankView+encodeRankPlan for %d ranks "
        "%.4f s, %lld bytes (max %lld per rank)\n",
        encode_s, static_cast<long long>(encoded.size()), nt + nr, views_s,
        static_cast<long long>(rank_bytes), static_cast<long long>(rank_max));
    codec_json = ",\"encode_plan_seconds\":" + std::to_string(encode_s) +
                 ",\"plan_encoded_bytes\":" + std::to_string(encoded.size()) +
                 ",\"plan_encoded_fnv1a\":\"" + std::to_string(fnv1a(encoded)) + "\"" +
                 ",\"rank_views_seconds\":" + std::to_string(views_s) +
                 ",\"rank_views_encoded_bytes\":" + std::to_string(rank_bytes) +
                 ",\"rank_view_max_encoded_bytes\":" + std::to_string(rank_max);
  }

  char nums[1536];
  std::snprintf(nums, sizeof nums,
                ",\"trainer_ranks\":%d,\"rollout_ranks\":%d,\"replicas\":%d,\"tensors\":%zu,"
                "\"trainer_pieces\":%lld,\"rollout_pieces\":%lld,\"broadcast_groups\":%zu,"
                "\"write_ops\":%zu,\"bytes_total\":%lld,\"broadcast_bytes\":%lld,"
                "\"write_bytes\":%lld,\"allow_broadcast\":%s,\"repeat\":%d,"
                "\"plan_seconds\":%.6f,\"plan_seconds_mean\":%.6f,\"plan_cpu_seconds\":%.6f,"
                "\"build_seconds\":%.6f,"
                "\"registrations_rss_bytes\":%lld,\"peak_rss_before_plan_bytes\":%lld,"
                "\"peak_rss_bytes\":%lld,\"sender_bytes_min\":%lld,\"sender_bytes_mean\":%.1f,"
                "\"sender_bytes_max\":%lld,\"sender_imbalance\":%.6f,"
                "\"cold_plan_cpu_seconds\":%.6f,\"cold_plan_sys_seconds\":%.6f,"
                "\"cold_plan_wall_seconds\":%.6f,\"cold_plan_minor_faults\":%lld,"
                "\"cold_peak_rss_bytes\":%lld",
                st.trainer_ranks, st.rollout_ranks, st.replicas, plan->tensors.size(),
                static_cast<long long>(tc.pieces), static_cast<long long>(rc.pieces),
                plan->groups.size(), plan->writes.size(), static_cast<long long>(st.bytes_total),
                static_cast<long long>(st.broadcast_bytes), static_cast<long long>(st.write_bytes),
                planner_options.allow_broadcast ? "true" : "false", repeat, best, mean, best_cpu,
                build_seconds, static_cast<long long>(registrations_rss),
                static_cast<long long>(peak_before_plan), static_cast<long long>(peak_rss),
                static_cast<long long>(smin), smean, static_cast<long long>(smax),
                st.senderImbalance(), cold.cpu, cold.sys, cold.wall,
                static_cast<long long>(cold.minor_faults), static_cast<long long>(peak_rss_cold));
  std::string warm_json;
  if (repeat > 1) {
    char warm[256];
    std::snprintf(warm, sizeof warm,
                  ",\"warm_plan_cpu_seconds_median\":%.6f,\"warm_plan_wall_seconds_median\":%.6f",
                  median(warm_cpu), median(warm_wall));
    warm_json = warm;
  }
  std::printf("{\"model\":%s,\"layout\":%s%s%s%s}\n", jsonString(model_name).c_str(),
              jsonString(describeLayouts(*layouts)).c_str(), nums, warm_json.c_str(),
              codec_json.c_str());
  return 0;
}

}  // namespace
}  // namespace wsync

int main(int argc, char** argv) {
  try {
    return wsync::run(argc, argv);
  } catch (const cxxopts::exceptions::exception& e) {  // bad flags: cxxopts reports by throwing
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
