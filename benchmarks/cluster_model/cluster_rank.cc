// wsync-cluster-rank: one trainer or rollout rank of a validation job for the cluster model,
// joined with WSYNC_BOOTSTRAP_EXPLICIT to a standalone wsync-coordinator (no MPI), so that ranks
// can run in separate network namespaces ("hosts"; benchmarks/cluster_validate.sh). It registers,
// through the public C API, exactly the registration wsync-cluster-model plans for the same model
// and layout flags (buildTrainerRegistration / buildRolloutRegistration), host memory only.
//  - Trainers fill every element once with a value of its tensor and global index, then publish
//    --warmup + --versions versions, timing each from publish to delivered (ready on every
//    replica).
//  - Rollouts wait for the last version and check every element of it.
// Each rank prints one JSON line: its role and rank, per-version seconds (trainers), the CPU
// seconds it used over the timed versions and their wall time (to show the CPU is not the limit),
// and whether the check passed (rollouts). Exit 0 only when everything succeeded and matched.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "layout/registration.h"
#include "model_options.h"
#include "wsync/wsync.h"

namespace wsync::cluster {
namespace {

using Clock = std::chrono::steady_clock;

double cpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

uint32_t nameHash(const std::string& s) {
  uint32_t h = 2166136261u;
  for (char c : s)
    h = (h ^ static_cast<uint8_t>(c)) * 16777619u;
  return h;
}

// The value of global element `flat` of a tensor: a small integer, exact in bfloat16.
float expectedValue(uint32_t tensor_hash, int64_t flat) {
  return static_cast<float>((tensor_hash + static_cast<uint64_t>(flat)) % 251);
}

uint16_t toBFloat16(float f) {  // exact for the small integers of expectedValue
  uint32_t bits = 0;
  std::memcpy(&bits, &f, sizeof bits);
  return static_cast<uint16_t>(bits >> 16);
}

// Calls visit(local_index, global_flat_index) for every element of `piece` of a tensor of
// global shape `shape`.
template <typename Visit>
void forEachElement(const Piece& piece, const Dims& shape, Visit visit) {
  const int rank = shape.size();
  if (piece.box.empty()) return;
  const Dims global_strides = rowMajorStrides(shape);
  Dims idx = Dims::zeros(rank);
  const int64_t inner = rank == 0 ? 1 : piece.box.extent[rank - 1];
  while (true) {
    int64_t local = piece.local_offset, global = 0;
    for (int d = 0; d < rank; ++d) {
      local += idx[d] * piece.local_strides[d];
      global += (piece.box.offset[d] + idx[d]) * global_strides[d];
    }
    for (int64_t i = 0; i < inner; ++i)
      visit(local + i, global + i);
    int d = rank - 2;
    while (d >= 0 && ++idx[d] == piece.box.extent[d])
      idx[d--] = 0;
    if (d < 0) return;
  }
}

// Fills (or, with check, counts the mismatches of) one buffer of `reg` at `data`.
int64_t fillOrCheck(const Registration& reg, const LocalBuffer& buf, void* data, bool check) {
  int64_t wrong = 0;
  for (const Piece& piece : buf.pieces) {
    const TensorDecl& t = reg.tensors[piece.tensor];
    const uint32_t h = nameHash(t.name);
    if (buf.dtype == DType::kFloat32) {
      float* p = static_cast<float*>(data);
      forEachElement(piece, t.shape, [&](int64_t local, int64_t flat) {
        if (check)
          wrong += p[local] != expectedValue(h, flat);
        else
          p[local] = expectedValue(h, flat);
      });
    } else {
      uint16_t* p = static_cast<uint16_t*>(data);
      forEachElement(piece, t.shape, [&](int64_t local, int64_t flat) {
        if (check)
          wrong += p[local] != toBFloat16(expectedValue(h, flat));
        else
          p[local] = toBFloat16(expectedValue(h, flat));
      });
    }
  }
  return wrong;
}

// Registers every buffer of `reg` through the C API; trainers pass their own memory in `data`.
bool registerAll(wsync_context_t ctx, const Registration& reg, std::vector<void*>& data) {
  for (size_t b = 0; b < reg.buffers.size(); ++b) {
    const LocalBuffer& buf = reg.buffers[b];
    std::vector<wsync_piece_t> pieces(buf.pieces.size());
    for (size_t i = 0; i < buf.pieces.size(); ++i) {
      const Piece& p = buf.pieces[i];
      const TensorDecl& t = reg.tensors[p.tensor];
      pieces[i] = WSYNC_PIECE_INITIALIZER;
      pieces[i].tensor = t.name.c_str();
      pieces[i].ndim = t.shape.size();
      pieces[i].global_shape = t.shape.v.data();
      pieces[i].box_offset = p.box.offset.v.data();
      pieces[i].box_extent = p.box.extent.v.data();
      pieces[i].local_offset = p.local_offset;
      pieces[i].local_strides = p.local_strides.v.data();
    }
    const wsync_status_t s = wsync_register_buffer(
        ctx, buf.name.c_str(), static_cast<wsync_dtype_t>(buf.dtype), WSYNC_MEMORY_HOST,
        reg.role == Role::kTrainer ? data[b] : nullptr, buf.num_elements,
        static_cast<int>(pieces.size()), pieces.data(), nullptr);
    if (s != WSYNC_SUCCESS) {
      std::fprintf(stderr, "register %s: %s\n", buf.name.c_str(), wsync_last_error(ctx));
      return false;
    }
  }
  return true;
}

struct JobFlags {
  bool trainer = true;
  int rank = 0, versions = 3, warmup = 1;
  std::string address, secret;
  int timeout_ms = 120000;
};

int runTrainer(wsync_context_t ctx, const Registration& reg, const JobFlags& f) {
  std::vector<std::vector<uint8_t>> memory(reg.buffers.size());
  std::vector<void*> data;
  for (size_t b = 0; b < reg.buffers.size(); ++b) {
    const LocalBuffer& buf = reg.buffers[b];
    memory[b].resize(std::max<size_t>(1, buf.num_elements * dtypeSize(buf.dtype)));
    data.push_back(memory[b].data());
    fillOrCheck(reg, buf, data.back(), /*check=*/false);
  }
  if (!registerAll(ctx, reg, data) || wsync_commit(ctx) != WSYNC_SUCCESS) {
    std::fprintf(stderr, "trainer %d: %s\n", f.rank, wsync_last_error(ctx));
    return 1;
  }
  std::vector<double> seconds;
  double cpu0 = 0;
  Clock::time_point wall0;
  for (int v = 1; v <= f.warmup + f.versions; ++v) {
    if (v == f.warmup + 1) {
      cpu0 = cpuSeconds();
      wall0 = Clock::now();
    }
    const Clock::time_point t0 = Clock::now();
    wsync_request_t req = nullptr;
    if (wsync_publish(ctx, static_cast<uint64_t>(v), &req) != WSYNC_SUCCESS ||
        wsync_request_wait(req, f.timeout_ms) != WSYNC_SUCCESS) {
      std::fprintf(stderr, "trainer %d: version %d: %s\n", f.rank, v, wsync_last_error(ctx));
      wsync_request_free(req);
      return 1;
    }
    wsync_request_free(req);
    if (v > f.warmup) seconds.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  const double wall = std::chrono::duration<double>(Clock::now() - wall0).count();
  const double cpu = cpuSeconds() - cpu0;
  std::vector<double> sorted = seconds;
  std::sort(sorted.begin(), sorted.end());
  std::string list;
  for (double s : seconds)
    list += (list.empty() ? "" : ",") + std::to_string(s);
  std::printf(
      "{\"role\":\"trainer\",\"rank\":%d,\"seconds\":[%s],\"median_seconds\":%.6f,"
      "\"min_seconds\":%.6f,\"cpu_seconds\":%.3f,\"wall_seconds\":%.3f}\n",
      f.rank, list.c_str(), sorted[sorted.size() / 2], sorted.front(), cpu, wall);
  return 0;
}

int runRollout(wsync_context_t ctx, const Registration& reg, const JobFlags& f) {
  std::vector<void*> none(reg.buffers.size(), nullptr);
  if (!registerAll(ctx, reg, none) || wsync_commit(ctx) != WSYNC_SUCCESS) {
    std::fprintf(stderr, "rollout %d: %s\n", f.rank, wsync_last_error(ctx));
    return 1;
  }
  const uint64_t last = static_cast<uint64_t>(f.warmup + f.versions);
  uint64_t newest = 0;
  const double cpu0 = cpuSeconds();
  const Clock::time_point wall0 = Clock::now();
  while (newest < last) {
    if (wsync_wait_version(ctx, newest, f.timeout_ms, &newest) != WSYNC_SUCCESS) {
      std::fprintf(stderr, "rollout %d: waiting after version %llu: %s\n", f.rank,
                   static_cast<unsigned long long>(newest), wsync_last_error(ctx));
      return 1;
    }
  }
  const double cpu = cpuSeconds() - cpu0;
  const double wall = std::chrono::duration<double>(Clock::now() - wall0).count();
  wsync_lease_t lease = nullptr;
  if (wsync_acquire(ctx, last, &lease) != WSYNC_SUCCESS) {
    std::fprintf(stderr, "rollout %d: acquire: %s\n", f.rank, wsync_last_error(ctx));
    return 1;
  }
  int64_t wrong = 0;
  for (size_t b = 0; b < reg.buffers.size(); ++b) {
    void* p = nullptr;
    if (wsync_lease_buffer(lease, static_cast<int>(b), &p) != WSYNC_SUCCESS) return 1;
    wrong += fillOrCheck(reg, reg.buffers[b], p, /*check=*/true);
  }
  wsync_lease_release(lease);
  std::printf(
      "{\"role\":\"rollout\",\"rank\":%d,\"replica\":%d,\"version\":%llu,"
      "\"mismatches\":%lld,\"verified\":%s,\"cpu_seconds\":%.3f,\"wall_seconds\":%.3f}\n",
      f.rank, reg.replica, static_cast<unsigned long long>(last), static_cast<long long>(wrong),
      wrong == 0 ? "true" : "false", cpu, wall);
  return wrong == 0 ? 0 : 1;
}

int run(int argc, char** argv) {
  cxxopts::Options options("wsync-cluster-rank", "One rank of a cluster-model validation job");
  // clang-format off
  options.add_options()
      ("role", "trainer | rollout", cxxopts::value<std::string>())
      ("rank", "index among the ranks of its role", cxxopts::value<int>())
      ("coordinator", "host:port of the wsync-coordinator", cxxopts::value<std::string>())
      ("secret", "the job's shared secret", cxxopts::value<std::string>())
      ("versions", "timed versions", cxxopts::value<int>()->default_value("3"))
      ("warmup", "untimed versions first", cxxopts::value<int>()->default_value("1"))
      ("timeout-ms", "bound on every wait", cxxopts::value<int>()->default_value("120000"))
      ("h,help", "this help");
  // clang-format on
  addModelOptions(options, "host");
  const cxxopts::ParseResult args = options.parse(argc, argv);
  if (args.count("help") || !args.count("role") || !args.count("rank") ||
      !args.count("coordinator") || !args.count("secret")) {
    std::printf("%s\n", options.help().c_str());
    return args.count("help") ? 0 : 2;
  }
  JobFlags f;
  f.trainer = args["role"].as<std::string>() == "trainer";
  f.rank = args["rank"].as<int>();
  f.versions = std::max(1, args["versions"].as<int>());
  f.warmup = std::max(0, args["warmup"].as<int>());
  f.address = args["coordinator"].as<std::string>();
  f.secret = args["secret"].as<std::string>();
  f.timeout_ms = args["timeout-ms"].as<int>();
  Result<ModelSpec> model = modelFromOptions(args);
  Result<ModelLayouts> layouts =
      model.isOk() ? jobLayoutsFromOptions(*model, args) : Result<ModelLayouts>(model.status());
  if (!layouts.isOk() || args["memory"].as<std::string>() != "host") {
    std::fprintf(stderr, "error: %s\n",
                 layouts.isOk() ? "only --memory host" : layouts.status().toString().c_str());
    return 2;
  }
  Result<Registration> reg = f.trainer ? buildTrainerRegistration(*model, layouts->trainer, f.rank)
                                       : buildRolloutRegistration(*model, layouts->rollout, f.rank);
  if (!reg.isOk()) {
    std::fprintf(stderr, "error: %s\n", reg.status().toString().c_str());
    return 2;
  }
  for (const LocalBuffer& b : reg->buffers)
    if (b.dtype != DType::kFloat32 && b.dtype != DType::kBFloat16) {
      std::fprintf(stderr, "error: only float32 and bfloat16 buffers (%s)\n", b.name.c_str());
      return 2;
    }
  wsync_config_t cfg = WSYNC_CONFIG_INITIALIZER;
  cfg.role = f.trainer ? WSYNC_ROLE_TRAINER : WSYNC_ROLE_ROLLOUT;
  cfg.bootstrap = WSYNC_BOOTSTRAP_EXPLICIT;
  cfg.rank = f.rank;
  cfg.num_trainers = layouts->trainer.ranks();
  cfg.num_rollouts = layouts->rollout.ranks();
  cfg.replica = f.trainer ? -1 : reg->replica;
  cfg.coordinator_address = f.address.c_str();
  cfg.secret = f.secret.c_str();
  cfg.timeout_ms = f.timeout_ms;
  wsync_context_t ctx = nullptr;
  if (wsync_context_create(&cfg, &ctx) != WSYNC_SUCCESS) {
    std::fprintf(stderr, "%s %d: create: %s\n", f.trainer ? "trainer" : "rollout", f.rank,
                 wsync_last_error(nullptr));
    return 1;
  }
  const int rc = f.trainer ? runTrainer(ctx, *reg, f) : runRollout(ctx, *reg, f);
  std::fflush(stdout);
  if (rc != 0) wsync_context_abort(ctx);
  wsync_context_destroy(ctx);
  return rc;
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
