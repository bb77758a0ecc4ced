// wsync-rollout-demo: a rollout worker of an inference engine replica.
//
// The ranks of this MPI app form `--replicas` replicas of TP size (ranks / replicas). A generation
// thread reads the weights continuously, one lease per "decode step". The first step that sees a
// new version checks every element of every buffer against the value the trainers published for
// it; the other steps are light: they check a sample of kSampleElements elements of the leased
// version, so reads during a transfer are still checked, without the full check's cost. The main
// thread waits for each version and, when the job is paced (demo_job.h), lets the trainers publish
// the next one only once every rollout rank has verified this one. A read that saw a torn or mixed
// version fails the job.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cxxopts.hpp>
#include <set>
#include <thread>
#include <vector>

#include "models/demo_policy.h"
#include "trainer_integration/demo_device.h"
#include "trainer_integration/demo_job.h"
#include "trainer_integration/demo_main.h"
#include "trainer_integration/demo_report.h"
#include "wsync/wsync.h"

namespace {

using wsync_demo::BufferSpec;
using wsync_demo::TensorSpec;

int fail(wsync_context_t ctx, const char* what, wsync_status_t s) {
  std::fprintf(stderr, "[rollout] %s failed: %s: %s\n", what, wsync_status_string(s),
               wsync_last_error(ctx));
  return 1;
}

cxxopts::Options rolloutOptions() {
  cxxopts::Options options("wsync-rollout-demo",
                           "Receives a demo policy through wsync and checks every version");
  options.add_options()("replicas", "engine replicas among this app's ranks",
                        cxxopts::value<int>()->default_value("2"))(
      "layout", "mixed | match | differ", cxxopts::value<std::string>()->default_value("mixed"))(
      "dtype", "float32 | bfloat16 | float16",
      cxxopts::value<std::string>()->default_value("bfloat16"))(
      "versions", "stop once this version is ready", cxxopts::value<int>()->default_value("20"))(
      "slots", "version slots per rank", cxxopts::value<int>()->default_value("2"))(
      "layers", "transformer layers of the demo policy", cxxopts::value<int>()->default_value("4"))(
      "hidden", "hidden size", cxxopts::value<int64_t>()->default_value("512"))(
      "ffn", "MLP intermediate size", cxxopts::value<int64_t>()->default_value("1536"))(
      "vocab", "vocabulary size", cxxopts::value<int64_t>()->default_value("8192"))(
      "decode-us", "simulated time a reader holds a lease",
      cxxopts::value<int>()->default_value("200"))("timeout-ms", "wsync timeout",
                                                   cxxopts::value<int>()->default_value("60000"))(
      "quiet", "print only the summary")("memory",
                                         "auto | host | device (auto: device when a GPU is usable)",
                                         cxxopts::value<std::string>()->default_value("auto"))(
      "copy-flip", "read through copy flips into live parameters instead of leases on the slots")(
      "skip-without-gpu",
      "exit 77 (skipped) without a usable GPU, as the device trainers of the job do")(
      "one-gpu-per-rank",
      "device memory on the GPU numbered by the MPI world rank, so that NCCL can broadcast; "
      "skips (exit 77) when the job has more ranks than the node has GPUs")(
      "expect-broadcast", "fail unless this rank receives broadcast groups")("h,help", "this help");
  // The trainer program's own flags, accepted so that one argument list serves the whole job.
  options.add_options("trainer (ignored here)")("snapshot", "")(
      "step-ms", "", cxxopts::value<int>())("expect-checksum-failures", "", cxxopts::value<int>())(
      "checksums", "");
  return options;
}

struct ReaderStats {
  int64_t reads = 0;
  int64_t mismatched_reads = 0;
  int64_t went_backwards = 0;
  std::set<uint64_t> versions;  // read
  std::set<uint64_t> verified;  // checked in full
  std::vector<double> acquire_us;
  std::vector<wsync_demo::Interval> steps;
  std::string first_error;
};

// The generation thread of one rollout rank: one lease (or, with copy flip, one read of the live
// parameters) per decode step.
class Generation {
 public:
  struct Setup {
    wsync_context_t ctx;
    const std::vector<TensorSpec>& tensors;
    const std::vector<BufferSpec>& buffers;
    const std::vector<int>& indices;
    wsync_dtype_t dtype;
    bool device;
    int cuda_device;
    const std::vector<void*>& live;  // copy flip: the live parameters; else empty
    std::chrono::microseconds decode;
  };
  explicit Generation(const Setup& setup) : s_(setup) {}

  void run(const std::atomic<bool>& stop) {
    if (s_.device) wsync_demo::selectDevice(s_.cuda_device);
    while (!stop.load())
      step();
  }
  // The newest version checked in full (and whose step has ended).
  uint64_t verifiedThrough() const { return verified_through_.load(); }
  const ReaderStats& stats() const { return stats_; }  // after run() returned

 private:
  void step() {
    const double t0 = wsync_demo::steadySeconds();
    wsync_lease_t lease = nullptr;
    uint64_t v = 0;
    if (!begin(&lease, &v)) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      return;
    }
    std::vector<void*> data = s_.live;
    data.resize(s_.buffers.size(), nullptr);
    for (size_t b = 0; lease != nullptr && b < s_.buffers.size(); ++b)
      wsync_lease_buffer(lease, s_.indices[b], &data[b]);
    const bool full = v > verified_through_.load();
    const int64_t bad = full ? checkAll(data, v) : checkSample(data, v);
    std::this_thread::sleep_for(s_.decode);
    if (lease) wsync_lease_release(lease);
    stats_.steps.push_back({t0, wsync_demo::steadySeconds()});
    ++stats_.reads;
    stats_.versions.insert(v);
    if (bad > 0) ++stats_.mismatched_reads;
    if (v < last_seen_) ++stats_.went_backwards;
    last_seen_ = v;
    if (full) {
      stats_.verified.insert(v);
      verified_through_.store(v);
    }
  }

  // Takes the step's version: a lease on the newest one, or (copy flip) the live parameters after
  // flipping in a newer version when there is one. False when no version is ready yet.
  bool begin(wsync_lease_t* lease, uint64_t* v) {
    const auto t0 = std::chrono::steady_clock::now();
    if (s_.live.empty()) {
      if (wsync_acquire(s_.ctx, WSYNC_VERSION_NEWEST, lease) != WSYNC_SUCCESS) return false;
      wsync_lease_version(*lease, v);
    } else {
      uint64_t newest = 0;
      if (wsync_newest_version(s_.ctx, &newest) == WSYNC_SUCCESS && newest > flipped_) {
        uint64_t flipped = 0;
        if (wsync_copy_flip(s_.ctx, WSYNC_VERSION_NEWEST,
                            static_cast<wsync_cuda_stream_t>(wsync_demo::demoStream()),
                            &flipped) == WSYNC_SUCCESS) {
          flipped_ = flipped;
        }
      }
      if (flipped_ == 0) return false;
      *v = flipped_;
    }
    stats_.acquire_us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    return true;
  }

  int64_t checkAll(const std::vector<void*>& data, uint64_t v) {
    int64_t bad = 0;
    for (size_t b = 0; b < s_.buffers.size(); ++b)
      bad += checkRange(b, data[b], v, 0, s_.buffers[b].num_elements);
    return bad;
  }

  // The next kSampleElements elements, round robin over the buffers.
  int64_t checkSample(const std::vector<void*>& data, uint64_t v) {
    for (size_t tries = 0; tries < s_.buffers.size(); ++tries) {
      if (sample_offset_ < s_.buffers[sample_buffer_].num_elements) break;
      sample_buffer_ = (sample_buffer_ + 1) % s_.buffers.size();
      sample_offset_ = 0;
    }
    const int64_t bad = checkRange(sample_buffer_, data[sample_buffer_], v, sample_offset_,
                                   wsync_demo::kSampleElements);
    sample_offset_ += wsync_demo::kSampleElements;
    return bad;
  }

  // Mismatches among elements [begin, begin + count) of buffer b at `data` (device or host).
  int64_t checkRange(size_t b, const void* data, uint64_t v, int64_t begin, int64_t count) {
    const BufferSpec& buffer = s_.buffers[b];
    count = std::min(count, buffer.num_elements - begin);
    if (count <= 0) return 0;
    const size_t esz = wsync_demo::dtypeBytes(s_.dtype);
    const void* src = static_cast<const uint8_t*>(data) + static_cast<size_t>(begin) * esz;
    if (s_.device) {  // look at the device bytes from the host
      const size_t bytes = static_cast<size_t>(count) * esz;
      if (check_host_.size() < bytes) check_host_.resize(bytes);
      if (!wsync_demo::copyToHost(check_host_.data(), src, bytes)) {
        if (stats_.first_error.empty())
          stats_.first_error = "cudaMemcpy of buffer '" + buffer.name + "' to the host failed";
        return 1;
      }
      src = check_host_.data();
    }
    return wsync_demo::countMismatchesInRange(
        s_.tensors, buffer, s_.dtype, src, v, begin, count,
        stats_.first_error.empty() ? &stats_.first_error : nullptr);
  }

  Setup s_;
  ReaderStats stats_;
  std::atomic<uint64_t> verified_through_{0};
  uint64_t last_seen_ = 0;
  uint64_t flipped_ = 0;  // copy flip: the version in the live parameters
  size_t sample_buffer_ = 0;
  int64_t sample_offset_ = 0;
  std::vector<uint8_t> check_host_;
};

// Waits for versions 1..last, each until the generation thread has verified it; in a paced job,
// then waits for every demo process (the trainers publish the next version after that).
int followVersions(wsync_context_t ctx, const wsync_demo::DemoJob& job, const Generation& reader,
                   uint64_t last, int timeout_ms) {
  uint64_t newest = 0;
  for (uint64_t v = 1; v <= last; ++v) {
    while (newest < v) {
      const wsync_status_t s = wsync_wait_version(ctx, newest, -1, &newest);
      if (s != WSYNC_SUCCESS) return fail(ctx, "wsync_wait_version", s);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (reader.verifiedThrough() < v) {
      if (std::chrono::steady_clock::now() > deadline) {
        std::fprintf(stderr, "[rollout] version %llu was not verified within %d ms\n",
                     static_cast<unsigned long long>(v), timeout_ms);
        return 1;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    if (job.paced() && v < last) job.barrier();
  }
  return 0;
}

void printRank(int index, int replica, int tp_rank, bool device, bool copy_flip,
               const ReaderStats& stats, uint64_t newest) {
  const double p99 = wsync_demo::percentile(stats.acquire_us, 0.99);
  std::printf(
      "[rollout %d, replica %d, tp rank %d, %s%s] %lld reads of %zu versions (newest %llu), %zu "
      "verified in full, %lld torn or wrong, %lld out of order, acquire p99 %.1f us%s%s\n",
      index, replica, tp_rank, device ? "device" : "host", copy_flip ? ", copy flip" : "",
      static_cast<long long>(stats.reads), stats.versions.size(),
      static_cast<unsigned long long>(newest), stats.verified.size(),
      static_cast<long long>(stats.mismatched_reads), static_cast<long long>(stats.went_backwards),
      p99, stats.first_error.empty() ? "" : "; first: ", stats.first_error.c_str());
  std::fflush(stdout);
}

// This rank's place in the rollout app: replica, and TP rank within it.
struct Place {
  int index = 0;  // in the rollout app
  int tp = 1;
  int replica = 0;
  int tp_rank = 0;
};

bool findPlace(int replicas, Place* place) {
  int count = 0;
  wsync_demo::mpmdAppRank(&place->index, &count);
  if (replicas <= 0 || count % replicas != 0) {
    std::fprintf(stderr, "[rollout] %d ranks cannot form %d equal replicas\n", count, replicas);
    return false;
  }
  place->tp = count / replicas;
  place->replica = place->index / place->tp;
  place->tp_rank = place->index % place->tp;
  return true;
}

// Copy flip: the engine's live parameters, which keep their addresses (CUDA graphs).
struct LiveParameters {
  std::vector<void*> data;  // empty without copy flip
  std::vector<std::vector<uint8_t>> host;
  bool device = false;
  ~LiveParameters() {
    for (size_t b = 0; device && b < data.size(); ++b)
      wsync_demo::deviceFree(data[b]);
  }
};

void allocateLive(const std::vector<BufferSpec>& buffers, wsync_dtype_t dtype, bool device,
                  LiveParameters* live) {
  live->device = device;
  for (const BufferSpec& buffer : buffers) {
    const size_t bytes = static_cast<size_t>(std::max<int64_t>(1, buffer.num_elements)) *
                         wsync_demo::dtypeBytes(dtype);
    live->host.emplace_back(bytes);
    live->data.push_back(device ? wsync_demo::deviceAlloc(bytes) : live->host.back().data());
  }
}

// Runs the generation thread until the last version is verified, prints this rank's line, destroys
// the context and sends this rank's report to the summary. 0 when every read was right.
int serve(const Generation::Setup& setup, const wsync_demo::DemoJob& job, const Place& place,
          uint64_t last_version, int timeout_ms) {
  std::atomic<bool> stop{false};
  Generation reader(setup);
  std::thread generation([&] { reader.run(stop); });
  const int followed = followVersions(setup.ctx, job, reader, last_version, timeout_ms);
  stop.store(true);
  generation.join();
  if (followed != 0) return followed;

  uint64_t newest = 0;
  wsync_newest_version(setup.ctx, &newest);
  const ReaderStats& stats = reader.stats();
  printRank(place.index, place.replica, place.tp_rank, setup.device, !setup.live.empty(), stats,
            newest);
  const bool ok = stats.mismatched_reads == 0 && stats.went_backwards == 0 && stats.reads > 0 &&
                  stats.versions.count(last_version) == 1 &&
                  (!job.paced() || stats.verified.size() == last_version);
  if (!ok) {
    std::fprintf(stderr,
                 "[rollout %d] FAILED: a read saw a wrong version, or a version was never "
                 "verified\n",
                 place.index);
  }
  const wsync_status_t s = wsync_context_destroy(setup.ctx);
  if (s != WSYNC_SUCCESS) return fail(nullptr, "wsync_context_destroy", s);

  wsync_demo::RolloutReport report;
  report.steps = stats.reads;
  report.versions_verified = static_cast<int64_t>(stats.verified.size());
  report.torn_or_wrong_reads = stats.mismatched_reads;
  report.out_of_order_reads = stats.went_backwards;
  report.acquire_p99_ns =
      static_cast<int64_t>(wsync_demo::percentile(stats.acquire_us, 0.99) * 1e3);
  job.collectReports({}, report, stats.steps);
  return ok ? 0 : 1;
}

int run(int argc, char** argv) {
  auto options = rolloutOptions();
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
  wsync_demo::RolloutLayout layout{};
  wsync_dtype_t dtype{};
  if (!wsync_demo::parseRolloutLayout(args["layout"].as<std::string>(), &layout) ||
      !wsync_demo::parseDtype(args["dtype"].as<std::string>(), &dtype)) {
    std::fprintf(stderr, "[rollout] bad --layout or --dtype\n");
    return 2;
  }
  const int versions = args["versions"].as<int>();
  Place place;
  if (!findPlace(args["replicas"].as<int>(), &place)) return 2;
  wsync_demo::MemoryChoice memory;
  const int chosen = wsync_demo::chooseMemory(
      "rollout", args["memory"].as<std::string>(), args.count("one-gpu-per-rank") > 0,
      args.count("skip-without-gpu") > 0, place.index, &memory);
  if (chosen != 0) return chosen;

  wsync_config_t cfg = WSYNC_CONFIG_INITIALIZER;
  cfg.role = WSYNC_ROLE_ROLLOUT;
  cfg.cuda_device = memory.cuda_device;
  cfg.replica = place.replica;
  cfg.num_slots = args["slots"].as<int>();
  cfg.timeout_ms = args["timeout-ms"].as<int>();
  wsync_context_t ctx = nullptr;
  wsync_status_t s = wsync_context_create(&cfg, &ctx);
  if (s != WSYNC_SUCCESS) return fail(nullptr, "wsync_context_create", s);
  int rank = 0, num_trainers = 0, num_rollouts = 0;
  wsync_context_info(ctx, &rank, &num_trainers, &num_rollouts);
  const wsync_demo::DemoJob job(false, rank, num_trainers, num_rollouts, versions);

  const auto buffers = wsync_demo::rolloutLayout(tensors, layout, place.tp, place.tp_rank);
  LiveParameters live;
  if (args.count("copy-flip") > 0) allocateLive(buffers, dtype, memory.device, &live);
  std::vector<int> indices;
  s = wsync_demo::registerBuffers(ctx, tensors, buffers, dtype, live.data, &indices,
                                  memory.device ? WSYNC_MEMORY_DEVICE : WSYNC_MEMORY_HOST);
  if (s != WSYNC_SUCCESS) return fail(ctx, "wsync_register_buffer", s);
  s = wsync_commit(ctx);
  if (s != WSYNC_SUCCESS) return fail(ctx, "wsync_commit", s);
  wsync_plan_info_t plan{};
  wsync_plan_info(ctx, &plan);
  if (args.count("expect-broadcast") > 0 && plan.broadcast_groups == 0) {
    std::fprintf(stderr, "[rollout] --expect-broadcast: rollout %d has no broadcast group\n",
                 place.index);
    return 1;
  }
  const Generation::Setup setup{ctx,
                                tensors,
                                buffers,
                                indices,
                                dtype,
                                memory.device,
                                memory.cuda_device,
                                live.data,
                                std::chrono::microseconds(args["decode-us"].as<int>())};
  return serve(setup, job, place, static_cast<uint64_t>(versions), cfg.timeout_ms);
}

}  // namespace

int main(int argc, char** argv) {
  return wsync_demo::demoMain("rollout", argc, argv, run);
}
