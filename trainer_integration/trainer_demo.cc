// wsync-trainer-demo: a trainer loop that publishes its parameters every step.
//
// Each "training step" sets every parameter to a known function of the version (see
// demo_policy.h), so the rollout side can check every byte it receives. Parameters are held in an
// FSDP-like layout: every tensor split along dim 0 over the trainer ranks. Run it under mpirun with
// wsync-rollout-demo (README.md); world rank 0 must be a trainer (it hosts the coordinator).
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <cxxopts.hpp>
#include <thread>
#include <vector>

#include "trainer_integration/demo_device.h"
#include "trainer_integration/demo_policy.h"
#include "wsync/wsync.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kSkipped = 77;  // ctest's SKIP_RETURN_CODE: the test needs a GPU this machine lacks

int fail(wsync_context_t ctx, const char* what, wsync_status_t s) {
  std::fprintf(stderr, "[trainer] %s failed: %s: %s\n", what, wsync_status_string(s),
               wsync_last_error(ctx));
  return 1;
}

// GB/s of one memcpy of `bytes` (the physical limit the sync is compared with).
double memcpyGbps(size_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes, 2);
  std::memcpy(b.data(), a.data(), bytes);  // touch the pages
  const auto t0 = Clock::now();
  std::memcpy(b.data(), a.data(), bytes);
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  return static_cast<double>(bytes) / s / 1e9;
}

int run(int argc, char** argv) {
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
      "expect-broadcast", "fail unless this rank sends broadcast groups")("h,help", "this help");
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
  const bool snapshot = args.count("snapshot") > 0;
  const bool quiet = args.count("quiet") > 0;

  int app_index = 0, app_count = 0;
  wsync_demo::mpmdAppRank(&app_index, &app_count);  // collective: the rollout app calls it too

  const bool one_gpu_per_rank = args.count("one-gpu-per-rank") > 0;
  const std::string memory = one_gpu_per_rank ? "device" : args["memory"].as<std::string>();
  const bool on_device = memory == "device" || (memory == "auto" && wsync_demo::deviceCount() > 0);
  int device = on_device ? app_index % std::max(1, wsync_demo::deviceCount()) : -1;
  if (memory == "device" && wsync_demo::deviceCount() == 0) {
    std::fprintf(stderr, "[%s] --memory device: no usable CUDA device; skipping\n", "trainer");
    return kSkipped;
  }
  if (one_gpu_per_rank) {
    int world_rank = 0, world_size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    if (wsync_demo::deviceCount() < world_size) {
      std::fprintf(stderr, "[%s] --one-gpu-per-rank: %d ranks but %d GPUs; skipping\n", "trainer",
                   world_size, wsync_demo::deviceCount());
      return kSkipped;
    }
    device = world_rank;
  }
  if (on_device && !wsync_demo::selectDevice(device)) {
    std::fprintf(stderr, "[%s] cannot use CUDA device %d\n", "trainer", device);
    return 2;
  }

  wsync_config_t cfg = WSYNC_CONFIG_INITIALIZER;
  cfg.role = WSYNC_ROLE_TRAINER;
  cfg.cuda_device = device;
  cfg.snapshot = snapshot ? 1 : 0;
  cfg.timeout_ms = args["timeout-ms"].as<int>();
  wsync_context_t ctx = nullptr;
  wsync_status_t s = wsync_context_create(&cfg, &ctx);
  if (s != WSYNC_SUCCESS) return fail(nullptr, "wsync_context_create", s);
  int rank = 0, num_trainers = 0, num_rollouts = 0;
  wsync_context_info(ctx, &rank, &num_trainers, &num_rollouts);

  const auto layout = wsync_demo::trainerLayout(tensors, num_trainers, rank);
  std::vector<std::vector<float>> params(layout.size());
  std::vector<void*> data;  // what wsync reads: the host vectors, or their device copies
  for (size_t b = 0; b < layout.size(); ++b) {
    params[b].resize(static_cast<size_t>(std::max<int64_t>(1, layout[b].num_elements)));
    data.push_back(on_device ? wsync_demo::deviceAlloc(params[b].size() * sizeof(float))
                             : params[b].data());
    if (data.back() == nullptr) return fail(ctx, "cudaMalloc", WSYNC_ERR_SYSTEM);
  }
  std::vector<int> indices;
  s = wsync_demo::registerBuffers(ctx, tensors, layout, WSYNC_DTYPE_FLOAT32, data, &indices,
                                  on_device ? WSYNC_MEMORY_DEVICE : WSYNC_MEMORY_HOST);
  if (s != WSYNC_SUCCESS) return fail(ctx, "wsync_register_buffer", s);
  s = wsync_commit(ctx);
  if (s != WSYNC_SUCCESS) return fail(ctx, "wsync_commit", s);
  wsync_plan_info_t plan{};
  wsync_plan_info(ctx, &plan);
  if (args.count("expect-broadcast") > 0 && plan.broadcast_groups == 0) {
    std::fprintf(stderr, "[trainer] --expect-broadcast: trainer %d has no broadcast group\n", rank);
    return 1;
  }
  const double memcpy_gbps =
      rank == 0 ? memcpyGbps(std::min<uint64_t>(plan.bytes_per_version, 1ull << 30)) : 0;
  if (rank == 0 && !quiet) {
    std::printf(
        "[trainer] %s memory; %d trainers -> %d rollout ranks in %d replicas; %zu tensors; %llu "
        "bytes per version; this rank: %lld broadcast groups, %lld writes; memcpy %.2f GB/s\n",
        on_device ? "device" : "host", num_trainers, num_rollouts, plan.num_replicas,
        tensors.size(), static_cast<unsigned long long>(plan.bytes_per_version),
        static_cast<long long>(plan.broadcast_groups), static_cast<long long>(plan.write_ops),
        memcpy_gbps);
  }

  auto train_step = [&](uint64_t v) {
    for (size_t b = 0; b < layout.size(); ++b) {
      wsync_demo::fillTrainerBuffer(tensors, layout[b], v, params[b].data());
      if (on_device &&
          !wsync_demo::copyToDevice(data[b], params[b].data(), params[b].size() * sizeof(float))) {
        return false;
      }
    }
    if (args["step-ms"].as<int>() > 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(args["step-ms"].as<int>()));
    return true;
  };
  double total_s = 0;
  for (int v = 1; v <= versions; ++v) {
    if (!train_step(static_cast<uint64_t>(v))) return fail(ctx, "cudaMemcpy", WSYNC_ERR_SYSTEM);
    const auto t0 = Clock::now();
    wsync_request_t request = nullptr;
    s = wsync_publish_on_stream(ctx, static_cast<uint64_t>(v),
                                static_cast<wsync_cuda_stream_t>(wsync_demo::demoStream()),
                                &request);
    if (s != WSYNC_SUCCESS) return fail(ctx, "wsync_publish", s);
    const double publish_s = std::chrono::duration<double>(Clock::now() - t0).count();
    s = wsync_request_wait(request, -1);
    wsync_request_free(request);
    if (s != WSYNC_SUCCESS) return fail(ctx, "wsync_request_wait", s);
    const double sync_s = std::chrono::duration<double>(Clock::now() - t0).count();
    total_s += sync_s;
    if (rank == 0 && !quiet) {
      const double gbps = static_cast<double>(plan.bytes_per_version) / sync_s / 1e9;
      std::printf(
          "[trainer] version %d: %llu bytes in %.4f s, %.2f GB/s, %.2f x memcpy; publish returned "
          "after %.6f s\n",
          v, static_cast<unsigned long long>(plan.bytes_per_version), sync_s, gbps,
          gbps / memcpy_gbps, publish_s);
    }
  }
  if (rank == 0) {
    const double gbps = static_cast<double>(plan.bytes_per_version) * versions / total_s / 1e9;
    std::printf("[trainer] done: %d versions, %.2f GB/s average, %.2f x memcpy\n", versions, gbps,
                memcpy_gbps > 0 ? gbps / memcpy_gbps : 0.0);
  }
  s = wsync_context_destroy(ctx);
  if (on_device) {
    for (void* p : data)
      wsync_demo::deviceFree(p);
  }
  if (s != WSYNC_SUCCESS) return fail(nullptr, "wsync_context_destroy", s);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rc = 1;
  try {
    rc = run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[trainer] %s\n", e.what());
  }
  if (rc == kSkipped) {
    MPI_Finalize();
    return rc;
  }
  if (rc != 0) MPI_Abort(MPI_COMM_WORLD, rc);
  MPI_Finalize();
  return rc;
}
