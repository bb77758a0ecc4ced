// wsync-trainer-demo: a trainer loop that publishes its parameters every step.
//
// Each "training step" sets every parameter to a known function of the version (see
// demo_policy.h), so the rollout side can check every byte it receives. Parameters are held in an
// FSDP-like layout: every tensor split along dim 0 over the trainer ranks. Run it under mpirun with
// wsync-rollout-demo (README.md); world rank 0 must be a trainer (it hosts the coordinator).
//
// Trainer rank 0 times every version from publish until it is ready on every replica, measures the
// copy limit of the same bytes (memcpy, or a device-to-device copy), and ends the job with the
// summary of demo_report.h. While versions are timed the rollouts only run light generation steps:
// they verify each version in full before the trainers publish the next (DemoJob::barrier).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cxxopts.hpp>
#include <thread>
#include <vector>

#include "models/demo_policy.h"
#include "trainer_integration/demo_device.h"
#include "trainer_integration/demo_job.h"
#include "trainer_integration/demo_main.h"
#include "trainer_integration/demo_report.h"
#include "wsync/wsync.h"

namespace {

constexpr uint64_t kLimitBytesCap = 1ull << 30;  // the limit copy: the version's bytes, <= 1 GiB

int fail(wsync_context_t ctx, const char* what, wsync_status_t s) {
  std::fprintf(stderr, "[trainer] %s failed: %s: %s\n", what, wsync_status_string(s),
               wsync_last_error(ctx));
  return 1;
}

cxxopts::Options trainerOptions() {
  cxxopts::Options options("wsync-trainer-demo",
                           "Publishes a demo policy every step through wsync");
  options.add_options()("versions", "versions to publish",
                        cxxopts::value<int>()->default_value("20"))(
      "layers", "transformer layers of the demo policy", cxxopts::value<int>()->default_value("4"))(
      "hidden", "hidden size", cxxopts::value<int64_t>()->default_value("512"))(
      "ffn", "MLP intermediate size", cxxopts::value<int64_t>()->default_value("1536"))(
      "vocab", "vocabulary size", cxxopts::value<int64_t>()->default_value("8192"))(
      "snapshot", "publish copies the parameters and returns; the next step overlaps the transfer")(
      "step-ms", "simulated compute time of a training step",
      cxxopts::value<int>()->default_value("0"))("timeout-ms", "wsync timeout",
                                                 cxxopts::value<int>()->default_value("60000"))(
      "quiet", "print only the summary")("memory",
                                         "auto | host | device (auto: device when a GPU is usable)",
                                         cxxopts::value<std::string>()->default_value("auto"))(
      "one-gpu-per-rank",
      "device memory on the GPU numbered by the MPI world rank, so that NCCL can broadcast; "
      "skips (exit 77) when the job has more ranks than the node has GPUs")(
      "expect-broadcast", "fail unless this rank sends broadcast groups")(
      "checksums", "config.checksums = 1: versions are checksummed (trainer 0's config decides)")(
      "expect-checksum-failures",
      "trainer 0 fails unless the versions' checksum failures and retries (wsync_version_stats) "
      "each sum to N (-1: not checked)",
      cxxopts::value<int>()->default_value("-1"))("h,help", "this help");
  // The rollout program's own flags, accepted so that one argument list serves the whole job.
  options.add_options("rollout (ignored here)")("replicas", "", cxxopts::value<int>())(
      "layout", "", cxxopts::value<std::string>())("dtype", "", cxxopts::value<std::string>())(
      "slots", "", cxxopts::value<int>())("decode-us", "", cxxopts::value<int>())("copy-flip", "")(
      "skip-without-gpu", "");
  return options;
}

// The parameters of this trainer rank: host vectors, and their device copies on device memory.
struct Parameters {
  std::vector<std::vector<float>> host;
  std::vector<void*> data;  // what wsync reads
  bool device = false;
  ~Parameters() {
    for (size_t b = 0; device && b < data.size(); ++b)
      wsync_demo::deviceFree(data[b]);
  }
};

bool allocate(const std::vector<wsync_demo::BufferSpec>& layout, bool device, Parameters* p) {
  p->device = device;
  for (const auto& buffer : layout) {
    p->host.emplace_back(static_cast<size_t>(std::max<int64_t>(1, buffer.num_elements)));
    p->data.push_back(device ? wsync_demo::deviceAlloc(p->host.back().size() * sizeof(float))
                             : p->host.back().data());
    if (p->data.back() == nullptr) return false;
  }
  return true;
}

void printSummary(const wsync_demo::DemoSummary& summary) {
  for (const std::string& line : wsync_demo::summaryLines(summary))
    std::printf("%s\n", line.c_str());
  std::printf("%s\n", wsync_demo::summaryJson(summary).c_str());
  std::fflush(stdout);
}

// One trainer rank's job after commit.
struct Trainer {
  const cxxopts::ParseResult& args;
  const std::vector<wsync_demo::TensorSpec>& tensors;
  const std::vector<wsync_demo::BufferSpec>& layout;
  const wsync_demo::DemoJob& job;
  wsync_context_t ctx;
  Parameters& params;
  bool quiet;
  bool reporter;  // trainer rank 0: prints, times, and reports
};

// The checksum failures and re-sends of the versions so far (wsync_version_stats).
struct ChecksumTally {
  uint64_t failures = 0;
  uint64_t retries = 0;
};

// Sets every parameter to version v (the "training step") and uploads it on device memory.
bool trainStep(const Trainer& t, uint64_t v) {
  for (size_t b = 0; b < t.layout.size(); ++b) {
    wsync_demo::fillTrainerBuffer(t.tensors, t.layout[b], v, t.params.host[b].data());
    if (t.params.device && !wsync_demo::copyToDevice(t.params.data[b], t.params.host[b].data(),
                                                     t.params.host[b].size() * sizeof(float))) {
      return false;
    }
  }
  const int step_ms = t.args["step-ms"].as<int>();
  if (step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
  return true;
}

// Publishes versions 1..N, each timed from publish until it is ready on every replica; appends
// each version's window and sync time.
// --expect-checksum-failures: every version's failures and re-sends add up to `expected`.
bool checksumsAsExpected(int expected, const ChecksumTally& tally, int versions) {
  if (expected < 0) return true;
  std::printf("[trainer] checksums: %llu failed verifications, %llu re-sends in %d versions\n",
              static_cast<unsigned long long>(tally.failures),
              static_cast<unsigned long long>(tally.retries), versions);
  if (tally.failures == static_cast<uint64_t>(expected) &&
      tally.retries == static_cast<uint64_t>(expected))
    return true;
  std::fprintf(stderr,
               "[trainer] --expect-checksum-failures %d: got %llu failures, %llu re-sends\n",
               expected, static_cast<unsigned long long>(tally.failures),
               static_cast<unsigned long long>(tally.retries));
  return false;
}

int publishVersions(const Trainer& t, wsync_demo::DemoSummary* summary,
                    std::vector<wsync_demo::Interval>* windows, ChecksumTally* checksums) {
  for (int v = 1; v <= summary->versions; ++v) {
    if (!trainStep(t, static_cast<uint64_t>(v))) return fail(t.ctx, "cudaMemcpy", WSYNC_ERR_SYSTEM);
    if (t.job.paced() && v > 1) t.job.barrier();  // the rollouts have verified version v - 1
    const double t0 = wsync_demo::steadySeconds();
    wsync_request_t request = nullptr;
    wsync_status_t s = wsync_publish_on_stream(
        t.ctx, static_cast<uint64_t>(v), static_cast<wsync_cuda_stream_t>(wsync_demo::demoStream()),
        &request);
    if (s != WSYNC_SUCCESS) return fail(t.ctx, "wsync_publish", s);
    const double publish_s = wsync_demo::steadySeconds() - t0;
    s = wsync_request_wait(request, -1);
    wsync_request_free(request);
    if (s != WSYNC_SUCCESS) return fail(t.ctx, "wsync_request_wait", s);
    windows->push_back({t0, wsync_demo::steadySeconds()});
    wsync_version_stats_t stats = WSYNC_VERSION_STATS_INITIALIZER;
    s = wsync_version_stats(t.ctx, &stats);
    if (s != WSYNC_SUCCESS) return fail(t.ctx, "wsync_version_stats", s);
    checksums->failures += stats.checksum_failures;
    checksums->retries += stats.retries;
    const double sync_s = windows->back().end_s - t0;
    summary->sync_s.push_back(sync_s);
    if (t.reporter && !t.quiet) {
      const double gbps = static_cast<double>(summary->bytes_per_version) / sync_s / 1e9;
      std::printf("[trainer] version %d: %.2f ms, %.2f GB/s; publish returned after %.3f ms\n", v,
                  sync_s * 1e3, gbps, publish_s * 1e3);
    }
  }
  return 0;
}

void printStart(const wsync_demo::DemoSummary& s, const wsync_plan_info_t& plan, size_t num_tensors,
                const wsync_demo::DemoJob& job) {
  std::printf(
      "[trainer] %s memory (%s); %d trainers -> %d rollout ranks in %d replicas; %zu tensors; "
      "%llu bytes per version; this rank: %lld broadcast groups, %lld writes; %s %.2f GB/s%s%s\n",
      s.device ? "device" : "host", s.memory_detail.c_str(), s.trainers, s.rollout_ranks,
      s.replicas, num_tensors, static_cast<unsigned long long>(s.bytes_per_version),
      static_cast<long long>(plan.broadcast_groups), static_cast<long long>(plan.write_ops),
      s.device ? "device-to-device copy" : "memcpy", s.limit_gbps,
      job.paced() ? "" : "; checks not paced: ", job.notPacedReason().c_str());
}

// What the summary knows before the first version.
wsync_demo::DemoSummary startSummary(const wsync_demo::MemoryChoice& memory,
                                     const wsync_plan_info_t& plan, int num_trainers,
                                     int num_rollouts, int versions) {
  wsync_demo::DemoSummary summary;
  summary.device = memory.device;
  summary.memory_detail = memory.detail;
  summary.trainers = num_trainers;
  summary.rollout_ranks = num_rollouts;
  summary.replicas = plan.num_replicas;
  summary.versions = versions;
  summary.bytes_per_version = plan.bytes_per_version;
  summary.limit_bytes = std::min<uint64_t>(plan.bytes_per_version, kLimitBytesCap);
  summary.sample_elements = wsync_demo::kSampleElements;
  return summary;
}

int run(int argc, char** argv) {
  auto options = trainerOptions();
  const auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::printf("%s\n", options.help().c_str());
    return 0;
  }
  wsync_demo::PolicyShape shape;
  shape.layers = args["layers"].as<int>();
  shape.hidden = args["hidden"].as<int64_t>();
  shape.ffn = args["ffn"].as<int64_t>();
  shape.vocab = args["vocab"].as<int64_t>();
  const auto tensors = wsync_demo::policyTensors(shape);
  const int versions = args["versions"].as<int>();

  int app_index = 0, app_count = 0;
  wsync_demo::mpmdAppRank(&app_index, &app_count);  // collective: the rollout app calls it too
  wsync_demo::MemoryChoice memory;
  const int chosen =
      wsync_demo::chooseMemory("trainer", args["memory"].as<std::string>(),
                               args.count("one-gpu-per-rank") > 0, false, app_index, &memory);
  if (chosen != 0) return chosen;

  wsync_config_t cfg = WSYNC_CONFIG_INITIALIZER;
  cfg.role = WSYNC_ROLE_TRAINER;
  cfg.cuda_device = memory.cuda_device;
  cfg.snapshot = args.count("snapshot") > 0 ? 1 : 0;
  cfg.timeout_ms = args["timeout-ms"].as<int>();
  cfg.checksums = args.count("checksums") > 0 ? 1 : 0;
  wsync_context_t ctx = nullptr;
  wsync_status_t s = wsync_context_create(&cfg, &ctx);
  if (s != WSYNC_SUCCESS) return fail(nullptr, "wsync_context_create", s);
  int rank = 0, num_trainers = 0, num_rollouts = 0;
  wsync_context_info(ctx, &rank, &num_trainers, &num_rollouts);
  const wsync_demo::DemoJob job(true, rank, num_trainers, num_rollouts, versions);

  const auto layout = wsync_demo::trainerLayout(tensors, num_trainers, rank);
  Parameters params;
  if (!allocate(layout, memory.device, &params)) return fail(ctx, "cudaMalloc", WSYNC_ERR_SYSTEM);
  std::vector<int> indices;
  s = wsync_demo::registerBuffers(ctx, tensors, layout, WSYNC_DTYPE_FLOAT32, params.data, &indices,
                                  memory.device ? WSYNC_MEMORY_DEVICE : WSYNC_MEMORY_HOST);
  if (s != WSYNC_SUCCESS) return fail(ctx, "wsync_register_buffer", s);
  s = wsync_commit(ctx);
  if (s != WSYNC_SUCCESS) return fail(ctx, "wsync_commit", s);
  wsync_plan_info_t plan{};
  wsync_plan_info(ctx, &plan);
  if (args.count("expect-broadcast") > 0 && plan.broadcast_groups == 0) {
    std::fprintf(stderr, "[trainer] --expect-broadcast: trainer %d has no broadcast group\n", rank);
    return 1;
  }

  const Trainer trainer{args,     tensors, layout, job, ctx, params, args.count("quiet") > 0,
                        rank == 0};
  wsync_demo::DemoSummary summary =
      startSummary(memory, plan, num_trainers, num_rollouts, versions);
  if (trainer.reporter) {
    summary.limit_gbps = memory.device ? wsync_demo::deviceCopyGbps(summary.limit_bytes)
                                       : wsync_demo::hostCopyGbps(summary.limit_bytes);
    if (getloadavg(&summary.load_average, 1) != 1) summary.load_average = -1;
    if (!trainer.quiet) printStart(summary, plan, tensors.size(), job);
  }
  std::vector<wsync_demo::Interval> windows;
  ChecksumTally checksums;
  const int published = publishVersions(trainer, &summary, &windows, &checksums);
  if (published != 0) return published;

  s = wsync_context_destroy(ctx);
  if (s != WSYNC_SUCCESS) return fail(nullptr, "wsync_context_destroy", s);

  summary.rollouts = job.collectReports(windows, {}, {});
  if (!trainer.reporter) return 0;
  summary.paced = job.paced();
  summary.not_paced_reason = job.notPacedReason();
  summary.processes_on_node = job.active() ? job.processesOnNode() : num_trainers + num_rollouts;
  summary.cores_on_node = static_cast<int>(std::thread::hardware_concurrency());
  printSummary(summary);
  const bool reads_ok = summary.rollouts.empty() || summary.readsOk();
  return reads_ok && checksumsAsExpected(args["expect-checksum-failures"].as<int>(), checksums,
                                         versions)
             ? 0
             : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return wsync_demo::demoMain("trainer", argc, argv, run);
}
