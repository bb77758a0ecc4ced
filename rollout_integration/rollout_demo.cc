// wsync-rollout-demo: a rollout worker of an inference engine replica.
//
// The ranks of this MPI app form `--replicas` replicas of TP size (ranks / replicas). A generation
// thread reads the weights continuously, one lease per "decode step", and checks that every
// element of every buffer equals the value the trainers published for the leased version: a read
// that saw a torn or mixed version would fail. The main thread waits for the last version.
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cxxopts.hpp>
#include <set>
#include <thread>
#include <vector>

#include "trainer_integration/demo_device.h"
#include "trainer_integration/demo_policy.h"
#include "wsync/wsync.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kSkipped = 77;  // ctest's SKIP_RETURN_CODE: the test needs a GPU this machine lacks

int fail(wsync_context_t ctx, const char* what, wsync_status_t s) {
  std::fprintf(stderr, "[rollout] %s failed: %s: %s\n", what, wsync_status_string(s),
               wsync_last_error(ctx));
  return 1;
}

struct ReaderStats {
  int64_t reads = 0;
  int64_t mismatched_reads = 0;
  int64_t went_backwards = 0;
  std::set<uint64_t> versions;
  std::vector<double> acquire_us;
  std::string first_error;
};

int run(int argc, char** argv) {
  cxxopts::Options options("wsync-rollout-demo",
                           "Receives a demo policy through wsync and checks every read");
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
  const uint64_t last_version = static_cast<uint64_t>(args["versions"].as<int>());

  int index = 0, count = 0;
  wsync_demo::mpmdAppRank(&index, &count);
  const int replicas = args["replicas"].as<int>();
  if (replicas <= 0 || count % replicas != 0) {
    std::fprintf(stderr, "[rollout] %d ranks cannot form %d equal replicas\n", count, replicas);
    return 2;
  }
  const int tp = count / replicas;
  const int replica = index / tp;
  const int tp_rank = index % tp;

  const bool one_gpu_per_rank = args.count("one-gpu-per-rank") > 0;
  const std::string memory = one_gpu_per_rank ? "device" : args["memory"].as<std::string>();
  const bool on_device = memory == "device" || (memory == "auto" && wsync_demo::deviceCount() > 0);
  int device = on_device ? index % std::max(1, wsync_demo::deviceCount()) : -1;
  if ((memory == "device" || args.count("skip-without-gpu") > 0) &&
      wsync_demo::deviceCount() == 0) {
    std::fprintf(stderr, "[%s] no usable CUDA device; skipping\n", "rollout");
    return kSkipped;
  }
  if (one_gpu_per_rank) {
    int world_rank = 0, world_size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    if (wsync_demo::deviceCount() < world_size) {
      std::fprintf(stderr, "[%s] --one-gpu-per-rank: %d ranks but %d GPUs; skipping\n", "rollout",
                   world_size, wsync_demo::deviceCount());
      return kSkipped;
    }
    device = world_rank;
  }
  if (on_device && !wsync_demo::selectDevice(device)) {
    std::fprintf(stderr, "[%s] cannot use CUDA device %d\n", "rollout", device);
    return 2;
  }
  const bool copy_flip = args.count("copy-flip") > 0;

  wsync_config_t cfg = WSYNC_CONFIG_INITIALIZER;
  cfg.role = WSYNC_ROLE_ROLLOUT;
  cfg.cuda_device = device;
  cfg.replica = replica;
  cfg.num_slots = args["slots"].as<int>();
  cfg.timeout_ms = args["timeout-ms"].as<int>();
  wsync_context_t ctx = nullptr;
  wsync_status_t s = wsync_context_create(&cfg, &ctx);
  if (s != WSYNC_SUCCESS) return fail(nullptr, "wsync_context_create", s);
  const auto buffers = wsync_demo::rolloutLayout(tensors, layout, tp, tp_rank);
  // Copy flip: the engine's live parameters, which keep their addresses (CUDA graphs).
  std::vector<void*> live;
  std::vector<std::vector<uint8_t>> live_host;
  if (copy_flip) {
    for (const auto& b : buffers) {
      const size_t bytes =
          static_cast<size_t>(std::max<int64_t>(1, b.num_elements)) * wsync_demo::dtypeBytes(dtype);
      live_host.emplace_back(bytes);
      live.push_back(on_device ? wsync_demo::deviceAlloc(bytes) : live_host.back().data());
    }
  }
  std::vector<int> indices;
  s = wsync_demo::registerBuffers(ctx, tensors, buffers, dtype, live, &indices,
                                  on_device ? WSYNC_MEMORY_DEVICE : WSYNC_MEMORY_HOST);
  if (s != WSYNC_SUCCESS) return fail(ctx, "wsync_register_buffer", s);
  s = wsync_commit(ctx);
  if (s != WSYNC_SUCCESS) return fail(ctx, "wsync_commit", s);
  if (args.count("expect-broadcast") > 0) {
    wsync_plan_info_t plan{};
    wsync_plan_info(ctx, &plan);
    if (plan.broadcast_groups == 0) {
      std::fprintf(stderr, "[rollout] --expect-broadcast: rollout %d has no broadcast group\n",
                   index);
      return 1;
    }
  }

  // The generation thread: one lease per decode step, every element checked.
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> last_read{0};  // the newest version the generation thread has checked
  ReaderStats stats;
  const auto decode = std::chrono::microseconds(args["decode-us"].as<int>());
  std::thread generation([&] {
    if (on_device) wsync_demo::selectDevice(device);
    std::vector<uint8_t> check_host;
    uint64_t last_seen = 0;
    while (!stop.load()) {
      const auto t0 = Clock::now();
      wsync_lease_t lease = nullptr;
      uint64_t v = 0;
      wsync_status_t a = WSYNC_SUCCESS;
      if (copy_flip) {
        a = wsync_copy_flip(ctx, WSYNC_VERSION_NEWEST,
                            static_cast<wsync_cuda_stream_t>(wsync_demo::demoStream()), &v);
      } else {
        a = wsync_acquire(ctx, WSYNC_VERSION_NEWEST, &lease);
      }
      stats.acquire_us.push_back(
          std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      if (a != WSYNC_SUCCESS) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        continue;
      }
      if (lease) wsync_lease_version(lease, &v);
      int64_t bad = 0;
      for (size_t b = 0; b < buffers.size(); ++b) {
        void* data = nullptr;
        if (copy_flip) {
          data = live[b];
        } else {
          wsync_lease_buffer(lease, indices[b], &data);
        }
        const size_t bytes =
            static_cast<size_t>(buffers[b].num_elements) * wsync_demo::dtypeBytes(dtype);
        if (on_device) {  // look at the device bytes from the host
          if (check_host.size() < bytes) check_host.resize(bytes);
          if (!wsync_demo::copyToHost(check_host.data(), data, bytes)) {
            if (stats.first_error.empty())
              stats.first_error =
                  "cudaMemcpy of buffer '" + buffers[b].name + "' to the host failed";
            ++bad;
            continue;
          }
          data = check_host.data();
        }
        bad +=
            wsync_demo::countMismatches(tensors, buffers[b], dtype, data, v,
                                        stats.first_error.empty() ? &stats.first_error : nullptr);
      }
      std::this_thread::sleep_for(decode);
      if (lease) wsync_lease_release(lease);
      ++stats.reads;
      stats.versions.insert(v);
      if (bad > 0) ++stats.mismatched_reads;
      if (v < last_seen) ++stats.went_backwards;
      last_seen = v;
      last_read = std::max(last_read.load(), v);
    }
  });

  uint64_t newest = 0;
  while (newest < last_version) {
    s = wsync_wait_version(ctx, newest, -1, &newest);
    if (s != WSYNC_SUCCESS) break;
  }
  // Keep reading until the generation thread has checked the last version too.
  std::atomic<bool>* stop_flag = &stop;
  const auto deadline = Clock::now() + std::chrono::milliseconds(cfg.timeout_ms);
  while (s == WSYNC_SUCCESS && last_read.load() < last_version && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  stop_flag->store(true);
  generation.join();
  if (s != WSYNC_SUCCESS) return fail(ctx, "wsync_wait_version", s);

  std::vector<double> lat = stats.acquire_us;
  std::sort(lat.begin(), lat.end());
  const double p99 = lat.empty() ? 0 : lat[std::min(lat.size() - 1, lat.size() * 99 / 100)];
  std::printf(
      "[rollout %d, replica %d, tp rank %d, %s%s] %lld reads of %zu versions (newest %llu), %lld "
      "torn or wrong, %lld out of order, acquire p99 %.1f us%s%s\n",
      index, replica, tp_rank, on_device ? "device" : "host", copy_flip ? ", copy flip" : "",
      static_cast<long long>(stats.reads), stats.versions.size(),
      static_cast<unsigned long long>(newest), static_cast<long long>(stats.mismatched_reads),
      static_cast<long long>(stats.went_backwards), p99,
      stats.first_error.empty() ? "" : "; first: ", stats.first_error.c_str());
  const bool ok = stats.mismatched_reads == 0 && stats.went_backwards == 0 && stats.reads > 0 &&
                  stats.versions.count(last_version) == 1;
  if (!ok)
    std::fprintf(
        stderr, "[rollout %d] FAILED: a read saw a wrong version, or the last one was never read\n",
        index);
  s = wsync_context_destroy(ctx);
  if (on_device) {
    for (void* p : live)
      wsync_demo::deviceFree(p);
  }
  if (s != WSYNC_SUCCESS) return fail(nullptr, "wsync_context_destroy", s);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rc = 1;
  try {
    rc = run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rollout] %s\n", e.what());
  }
  if (rc == kSkipped) {
    MPI_Finalize();
    return rc;
  }
  if (rc != 0) MPI_Abort(MPI_COMM_WORLD, rc);
  MPI_Finalize();
  return rc;
}
