// wsync-cold-start-bench: time to first readable version of a rollout replica that joins a running
// job, filled by peer cold start (from a running replica's slots, over the data plane), against
// loading the same weights from a safetensors file with a warm page cache.
//
// Real processes on one machine: this process runs the coordinator (wsync::Coordinator) and forks
// a trainer (publishes version 1 once, then idles), a running rollout replica (reads version 1)
// and then the joining replica, which measures from before wsync_context_create until version 1
// can be acquired (only a peer can give it: the trainer publishes nothing more), checks every
// element, then writes its weights to a safetensors file (one entry per tensor, Hugging Face names)
// and times loading that file into memory of the rollout's kind (mmap, then memcpy / cudaMemcpy
// per tensor into preallocated, prefaulted buffers: the file's best case) after one untimed read.
// Rollouts hold bfloat16 in one-rank replicas (TP 1, fused qkv / gate_up as vLLM does).
//
// Models: the Llama-3-8B-shaped policy (--model llama3-8b, 16 GB in bfloat16), optionally cut to
// --layers layers and a --vocab vocabulary (host runs on small machines). --memory device puts
// every rank on --cuda-device (CUDA IPC between the processes); without a usable GPU it prints a
// skip line and exits 0. Output: human lines, then one JSON object as the last line.
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <cxxopts.hpp>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "bench_device.h"
#include "bench_pattern.h"
#include "cold_start_bench.h"
#include "coordinator/coordinator.h"
#include "models/demo_policy.h"
#include "safetensors_io.h"
#include "wsync/wsync.h"

namespace wsync_bench {
namespace {

using Clock = std::chrono::steady_clock;
using wsync_demo::BufferSpec;
using wsync_demo::TensorSpec;
constexpr char kSecret[] = "cold-start-bench-secret";
constexpr wsync_dtype_t kRolloutDtype = WSYNC_DTYPE_BFLOAT16;

struct Args {
  std::string model = "llama3-8b";
  int layers = 0;     // 0: the model's
  int64_t vocab = 0;  // 0: the model's
  bool device = false;
  int cuda_device = 0;
  std::string file = "/tmp/wsync_cold_start_bench.safetensors";
  int repeats = 3;
  int timeout_ms = 600000;
  std::string address;  // the coordinator's, set once it runs
};

double secondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::vector<TensorSpec> modelTensors(const Args& a) {
  wsync_demo::PolicyShape shape = wsync_demo::llama3_8b();
  if (a.layers > 0) shape.layers = a.layers;
  if (a.vocab > 0) shape.vocab = a.vocab;
  return wsync_demo::policyTensors(shape);
}

// ---- processes -----------------------------------------------------------------------------
// A forked role: it reports lines through `from` and ends when `to` reaches end of file.
struct Child {
  pid_t pid = -1;
  int from = -1;  // the parent reads the child's lines
  int to = -1;    // closing it tells the child to finish
};

Child spawn(const std::function<int(FILE* report, int finish_fd)>& body) {
  int up[2], down[2];
  if (pipe(up) != 0 || pipe(down) != 0) {
    std::perror("pipe");
    std::exit(1);
  }
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    close(up[0]);
    close(down[1]);
    FILE* report = fdopen(up[1], "w");
    const int rc = body(report, down[0]);
    std::fflush(report);
    std::fflush(stdout);
    _exit(rc);
  }
  close(up[1]);
  close(down[0]);
  return {pid, up[0], down[1]};
}

// The next line a child reported ("" at its end or after timeout_ms).
std::string readLine(const Child& c, int timeout_ms) {
  std::string line;
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  char ch = 0;
  while (Clock::now() < deadline) {
    pollfd p{c.from, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    if (read(c.from, &ch, 1) != 1) break;
    if (ch == '\n') return line;
    line.push_back(ch);
  }
  return line;
}

void say(FILE* report, const std::string& line) {
  std::fprintf(report, "%s\n", line.c_str());
  std::fflush(report);
}

// Blocks until the parent closes the pipe (its signal to finish).
void waitForFinish(int finish_fd) {
  char ch = 0;
  while (read(finish_fd, &ch, 1) > 0) {
  }
}

wsync_config_t configFor(const Args& a, wsync_role_t role, int replica) {
  wsync_config_t cfg = WSYNC_CONFIG_INITIALIZER;
  cfg.role = role;
  cfg.bootstrap = WSYNC_BOOTSTRAP_EXPLICIT;
  cfg.rank = 0;
  cfg.num_trainers = 1;
  cfg.num_rollouts = 1;
  cfg.replica = role == WSYNC_ROLE_TRAINER ? -1 : replica;
  cfg.coordinator_address = a.address.c_str();
  cfg.secret = kSecret;
  cfg.timeout_ms = a.timeout_ms;
  if (a.device) cfg.cuda_device = a.cuda_device;
  return cfg;
}

wsync_memory_kind_t memoryOf(const Args& a) {
  return a.device ? WSYNC_MEMORY_DEVICE : WSYNC_MEMORY_HOST;
}

// ---- roles -----------------------------------------------------------------------------------
// The trainer: whole tensors (host: float32, device: bfloat16), version 1 published once.
int runTrainer(const Args& a, FILE* report, int finish_fd) {
  const auto tensors = modelTensors(a);
  const auto layout = wsync_demo::trainerLayout(tensors, 1, 0);
  const wsync_dtype_t dtype = a.device ? kRolloutDtype : WSYNC_DTYPE_FLOAT32;
  std::vector<std::vector<float>> host(layout.size());
  std::vector<std::unique_ptr<DeviceMemory>> device;
  std::vector<void*> data;
  std::string error;
  if (a.device && !setDevice(a.cuda_device, &error)) return say(report, "error " + error), 1;
  for (size_t b = 0; b < layout.size(); ++b) {
    const auto n = static_cast<size_t>(std::max<int64_t>(1, layout[b].num_elements));
    if (a.device) {
      device.push_back(
          DeviceMemory::allocate(n * wsync_demo::dtypeBytes(dtype), layout[b].name, &error));
      if (!device.back()) return say(report, "error " + error), 1;
      data.push_back(device.back()->data());
    } else {
      host[b].resize(n);
      wsync_demo::fillTrainerBuffer(tensors, layout[b], 1, host[b].data());
      data.push_back(host[b].data());
    }
  }
  if (a.device) {
    std::vector<size_t> buffer_of;
    std::vector<PatternPiece> pieces;
    auto stream = DeviceStream::create(&error);
    if (!stream || !patternPieces(tensors, layout, data, &buffer_of, &pieces, &error) ||
        !fillExpected(pieces, dtype, 1, *stream, &error) || !stream->synchronize(&error))
      return say(report, "error " + error), 1;
  }
  wsync_config_t cfg = configFor(a, WSYNC_ROLE_TRAINER, -1);
  wsync_context_t ctx = nullptr;
  std::vector<int> indices;
  wsync_request_t req = nullptr;
  if (wsync_context_create(&cfg, &ctx) != WSYNC_SUCCESS ||
      wsync_demo::registerBuffers(ctx, tensors, layout, dtype, data, &indices, memoryOf(a)) !=
          WSYNC_SUCCESS ||
      wsync_commit(ctx) != WSYNC_SUCCESS || wsync_publish(ctx, 1, &req) != WSYNC_SUCCESS ||
      wsync_request_wait(req, -1) != WSYNC_SUCCESS) {
    say(report, std::string("error trainer: ") + wsync_last_error(ctx));
    return 1;
  }
  wsync_request_free(req);
  say(report, "published");
  waitForFinish(finish_fd);
  return wsync_context_destroy(ctx) == WSYNC_SUCCESS ? 0 : 1;
}

// Elements of `layout` (in the lease of `ctx`) that differ from version 1.
int64_t countWrong(const Args& a, const std::vector<TensorSpec>& tensors,
                   const std::vector<BufferSpec>& layout, const std::vector<void*>& data,
                   std::string* error) {
  if (!a.device) {
    int64_t wrong = 0;
    for (size_t b = 0; b < layout.size(); ++b)
      wrong += wsync_demo::countMismatches(tensors, layout[b], kRolloutDtype, data[b], 1, error);
    return wrong;
  }
  std::vector<size_t> buffer_of;
  std::vector<PatternPiece> pieces;
  int64_t wrong = -1;
  auto stream = DeviceStream::create(error);
  if (!stream || !patternPieces(tensors, layout, data, &buffer_of, &pieces, error) ||
      !countMismatches(pieces, kRolloutDtype, 1, *stream, &wrong, nullptr, error))
    return -1;
  return wrong;
}

// A rollout context of one-rank replica `replica` (joining the running job when `join`), committed.
wsync_context_t startRollout(const Args& a, int replica, bool join, std::vector<int>* indices) {
  const auto tensors = modelTensors(a);
  const auto layout = wsync_demo::rolloutLayout(tensors, wsync_demo::RolloutLayout::kMixed, 1, 0);
  wsync_config_t cfg = configFor(a, WSYNC_ROLE_ROLLOUT, replica);
  if (join) {
    cfg.replica_size = 1;
    cfg.replica_rank = 0;
  }
  wsync_context_t ctx = nullptr;
  const Clock::time_point t0 = Clock::now();
  if (wsync_context_create(&cfg, &ctx) != WSYNC_SUCCESS) return nullptr;
  const double created_s = secondsSince(t0);
  if (wsync_demo::registerBuffers(ctx, tensors, layout, kRolloutDtype, {}, indices, memoryOf(a)) !=
          WSYNC_SUCCESS ||
      wsync_commit(ctx) != WSYNC_SUCCESS) {
    wsync_context_destroy(ctx);
    return nullptr;
  }
  std::printf("replica %d: created in %.3f s, registered and committed %.3f s later\n", replica,
              created_s, secondsSince(t0) - created_s);
  return ctx;
}

// The running replica (0): holds version 1 and serves it to the joiner.
int runSource(const Args& a, FILE* report, int finish_fd) {
  std::vector<int> indices;
  wsync_context_t ctx = startRollout(a, 0, false, &indices);
  uint64_t v = 0;
  if (ctx == nullptr || wsync_wait_version(ctx, 0, a.timeout_ms, &v) != WSYNC_SUCCESS) {
    say(report, std::string("error source: ") + wsync_last_error(ctx));
    return 1;
  }
  say(report, "ready");
  waitForFinish(finish_fd);
  return wsync_context_destroy(ctx) == WSYNC_SUCCESS ? 0 : 1;
}

// The joining replica (1): time to first readable version, a full check, then the file.
int runJoiner(const Args& a, FILE* report, int finish_fd) {
  (void)finish_fd;
  const auto tensors = modelTensors(a);
  const auto layout = wsync_demo::rolloutLayout(tensors, wsync_demo::RolloutLayout::kMixed, 1, 0);
  std::string error;
  if (a.device && !setDevice(a.cuda_device, &error)) return say(report, "error " + error), 1;
  const Clock::time_point t0 = Clock::now();
  std::vector<int> indices;
  wsync_context_t ctx = startRollout(a, 1, true, &indices);
  const double committed_s = secondsSince(t0);
  uint64_t v = 0;
  wsync_lease_t lease = nullptr;
  if (ctx == nullptr || wsync_wait_version(ctx, 0, a.timeout_ms, &v) != WSYNC_SUCCESS ||
      wsync_acquire(ctx, WSYNC_VERSION_NEWEST, &lease) != WSYNC_SUCCESS) {
    say(report, std::string("error joiner: ") + wsync_last_error(ctx));
    return 1;
  }
  const double first_s = secondsSince(t0);
  wsync_version_stats_t stats = WSYNC_VERSION_STATS_INITIALIZER;
  wsync_version_stats(ctx, &stats);
  std::vector<void*> data(layout.size());
  for (size_t b = 0; b < layout.size(); ++b)
    wsync_lease_buffer(lease, indices[b], &data[b]);
  const auto count_wrong = [&](const std::vector<void*>& d, std::string* e) {
    return countWrong(a, tensors, layout, d, e);
  };
  const int64_t wrong = count_wrong(data, &error);
  const LoadResult load =
      timeSafetensorsLoad(tensors, layout, data, a.device, a.file, a.repeats, count_wrong);
  wsync_lease_release(lease);
  wsync_context_destroy(ctx);
  if (!load.ok) return say(report, "error " + load.error), 1;
  char line[1024];
  std::snprintf(line, sizeof line,
                "result %" PRIu64 " %d %.6f %.6f %.6f %" PRId64 " %" PRIu64 " %.6f %.6f %" PRId64,
                stats.first_version, stats.first_version_from_peer, stats.first_version_seconds,
                first_s, committed_s, wrong, load.file_bytes, load.first_s, load.best_s,
                load.wrong);
  say(report, line);
  return 0;
}

// Runs a child without a device and says whether it sees one (the parent never touches CUDA: a
// CUDA context does not survive fork).
bool probeDevice(const Args& a, std::string* why) {
  Child probe = spawn([&](FILE* report, int) {
    std::string reason;
    say(report, deviceCount(&reason) > a.cuda_device ? "yes" : "no " + reason);
    return 0;
  });
  const std::string line = readLine(probe, 60000);
  close(probe.to);
  waitpid(probe.pid, nullptr, 0);
  *why = line.size() > 3 ? line.substr(3) : "no answer";
  return line == "yes";
}

int run(Args a) {
  const auto tensors = modelTensors(a);
  uint64_t model_bytes = 0;
  for (const TensorSpec& t : tensors) {
    uint64_t n = 1;
    for (int64_t d : t.shape)
      n *= static_cast<uint64_t>(d);
    model_bytes += n * wsync_demo::dtypeBytes(kRolloutDtype);
  }
  std::string why;
  if (a.device && !probeDevice(a, &why)) {
    std::printf("{\"bench\":\"cold_start\",\"skipped\":\"no usable CUDA device %d: %s\"}\n",
                a.cuda_device, why.c_str());
    return 0;
  }
  std::mutex log_mu;
  std::string cold_line;
  const Clock::time_point bench_start = Clock::now();
  wsync::CoordinatorOptions opt;
  opt.num_trainers = 1;
  opt.num_rollouts = 1;
  opt.control.secret = kSecret;
  opt.timeout = std::chrono::milliseconds(a.timeout_ms);
  opt.log = [&](const std::string& line) {
    std::lock_guard lock(log_mu);
    if (line.find("cold-started") != std::string::npos) cold_line = line;
    if (line.find("replica 1") != std::string::npos)
      std::printf("%.3f s %s\n", secondsSince(bench_start), line.c_str());
  };
  auto coordinator = wsync::Coordinator::start(std::move(opt));
  if (!coordinator.isOk()) {
    std::fprintf(stderr, "coordinator: %s\n", coordinator.status().toString().c_str());
    return 1;
  }
  a.address = "127.0.0.1:" + std::to_string((*coordinator)->port());
  std::printf("model %s: %zu tensors, %" PRIu64 " bytes of bfloat16; %s memory\n", a.model.c_str(),
              tensors.size(), model_bytes, a.device ? "device" : "host");
  Child trainer = spawn([&](FILE* r, int f) { return runTrainer(a, r, f); });
  Child source = spawn([&](FILE* r, int f) { return runSource(a, r, f); });
  const std::string published = readLine(trainer, a.timeout_ms);
  const std::string ready = readLine(source, a.timeout_ms);
  std::string result;
  if (published == "published" && ready == "ready") {
    Child joiner = spawn([&](FILE* r, int f) { return runJoiner(a, r, f); });
    result = readLine(joiner, a.timeout_ms);
    close(joiner.to);
    waitpid(joiner.pid, nullptr, 0);
  }
  close(trainer.to);
  close(source.to);
  int status = 0;
  waitpid(trainer.pid, &status, 0);
  waitpid(source.pid, &status, 0);
  (void)(*coordinator)->wait(std::chrono::milliseconds(a.timeout_ms));
  uint64_t first_version = 0;
  int from_peer = 0;
  double stats_s = 0, first_s = 0, committed_s = 0, load_first_s = 0, load_best_s = 0;
  int64_t wrong = -1, load_wrong = -1;
  uint64_t file_bytes = 0;
  if (std::sscanf(result.c_str(),
                  "result %" SCNu64 " %d %lf %lf %lf %" SCNd64 " %" SCNu64 " %lf %lf %" SCNd64,
                  &first_version, &from_peer, &stats_s, &first_s, &committed_s, &wrong, &file_bytes,
                  &load_first_s, &load_best_s, &load_wrong) != 10) {
    std::fprintf(stderr, "the benchmark failed: trainer '%s', source '%s', joiner '%s'\n",
                 published.c_str(), ready.c_str(), result.c_str());
    return 1;
  }
  double fill_ms = 0;
  const size_t at = cold_line.find(" bytes in ");
  if (at != std::string::npos) fill_ms = std::atof(cold_line.c_str() + at + 10);
  const bool ok = wrong == 0 && load_wrong == 0 && from_peer == 1 && first_version == 1;
  std::printf("joiner: version %" PRIu64
              " from %s in %.3f s after create (%.3f s of it the fill, "
              "prepare to readied; committed after %.3f s); %" PRId64 " wrong elements\n",
              first_version, from_peer ? "a peer" : "the trainers", first_s, fill_ms / 1e3,
              committed_s, wrong);
  std::printf("safetensors (%" PRIu64
              " bytes, warm page cache): first load %.3f s, best of %d "
              "%.3f s; %" PRId64 " wrong elements\n",
              file_bytes, load_first_s, a.repeats, load_best_s, load_wrong);
  std::printf(
      "{\"bench\":\"cold_start\",\"model\":\"%s\",\"memory\":\"%s\",\"bytes\":%" PRIu64
      ",\"tensors\":%zu,\"first_version\":%" PRIu64
      ",\"from_peer\":%d,\"wsync_first_version_s\":%.6f,\"wsync_stats_first_version_s\":%.6f,"
      "\"wsync_commit_s\":%.6f,\"wsync_fill_s\":%.6f,\"safetensors_bytes\":%" PRIu64
      ",\"safetensors_first_s\":%.6f,\"safetensors_best_s\":%.6f,\"verified\":%s}\n",
      a.model.c_str(), a.device ? "device" : "host", model_bytes, tensors.size(), first_version,
      from_peer, first_s, stats_s, committed_s, fill_ms / 1e3, file_bytes, load_first_s,
      load_best_s, ok ? "true" : "false");
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace wsync_bench

int main(int argc, char** argv) {
  cxxopts::Options options("wsync-cold-start-bench",
                           "Time to first readable version of a joining replica: peer cold start "
                           "against loading a safetensors file");
  // clang-format off
  options.add_options()
      ("model", "llama3-8b (the Llama-3-8B-shaped policy)", cxxopts::value<std::string>()->default_value("llama3-8b"))
      ("layers", "decoder layers (0: the model's)", cxxopts::value<int>()->default_value("0"))
      ("vocab", "vocabulary size (0: the model's)", cxxopts::value<int64_t>()->default_value("0"))
      ("memory", "host | device", cxxopts::value<std::string>()->default_value("host"))
      ("cuda-device", "the GPU of every rank (device memory)", cxxopts::value<int>()->default_value("0"))
      ("file", "the safetensors file written and loaded", cxxopts::value<std::string>()->default_value("/tmp/wsync_cold_start_bench.safetensors"))
      ("repeats", "timed loads of the file", cxxopts::value<int>()->default_value("3"))
      ("timeout-ms", "config.timeout_ms, and the bound on each step", cxxopts::value<int>()->default_value("600000"))
      ("h,help", "this help");
  // clang-format on
  try {
    const auto parsed = options.parse(argc, argv);
    if (parsed.count("help") != 0) {
      std::printf("%s\n", options.help().c_str());
      return 0;
    }
    wsync_bench::Args a;
    a.model = parsed["model"].as<std::string>();
    a.layers = parsed["layers"].as<int>();
    a.vocab = parsed["vocab"].as<int64_t>();
    const std::string memory = parsed["memory"].as<std::string>();
    a.cuda_device = parsed["cuda-device"].as<int>();
    a.file = parsed["file"].as<std::string>();
    a.repeats = std::max(1, parsed["repeats"].as<int>());
    a.timeout_ms = parsed["timeout-ms"].as<int>();
    if (a.model != "llama3-8b" || (memory != "host" && memory != "device") || a.layers < 0 ||
        a.vocab < 0) {
      std::fprintf(stderr, "wsync-cold-start-bench: --model llama3-8b, --memory host|device\n");
      return 2;
    }
    a.device = memory == "device";
    return wsync_bench::run(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wsync-cold-start-bench: %s\n", e.what());
    return 2;
  }
}
