// wsync-cluster-rank: one trainer or rollout rank of a validation job for the cluster model,
// joined with WSYNC_BOOTSTRAP_EXPLICIT to a standalone wsync-coordinator (no MPI), so that ranks
// can run in separate network namespaces ("hosts"; benchmarks/cluster_validate.sh,
// benchmarks/delta_link_bench.sh). It registers, through the public C API, exactly the
// registration wsync-cluster-model plans for the same model and layout flags
// (buildTrainerRegistration / buildRolloutRegistration), host memory only.
//  - Trainers fill every element with its version-1 value (version_changes.h), then publish
//    --warmup + --versions versions, timing each from publish to delivered (ready on every
//    replica). Before each later version they change --changed-share of every tensor's elements
//    (deterministic pseudo-random subsets, version_changes.h): a training step's sparse update.
//  - Rollouts keep an expected copy advanced with the same changes and check every element bit
//    for bit: of the last version, or with --sync-dir of every version (trainers then publish the
//    next version only after every rollout checked the last one, outside the timed publish).
// Each rank prints one JSON line: its role and rank, per-version seconds and delivered bytes
// (trainers; wsync_version_stats), per-version bytes through --nic (trainers tx, rollouts rx:
// what crossed the wire, headers included), the CPU seconds it used while versions were in flight
// and their wall time (to show whether the CPU is the limit), and whether every check passed
// (rollouts). Exit 0 only when everything succeeded and matched.
#include <dirent.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <cxxopts.hpp>

#include "layout/registration.h"
#include "model_options.h"
#include "version_changes.h"
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
  double changed_share = 0;  // of each tensor's elements, per version after the first
  std::string sync_dir;      // non-empty: rollouts check every version, trainers wait for it
  std::string nic;           // non-empty: per-version byte counters of this interface
};

// Seconds this process's threads spent runnable but waiting for a CPU (the run queue; the sum of
// the second field of /proc/self/task/*/schedstat), -1 when unreadable: with CPU time, it tells a
// rank that was starved of CPU from one that was waiting on the network.
double runQueueSeconds() {
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return -1;
  double total = 0;
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const std::string path = std::string("/proc/self/task/") + e->d_name + "/schedstat";
    if (FILE* f = std::fopen(path.c_str(), "r")) {
      unsigned long long run = 0, wait = 0;
      if (std::fscanf(f, "%llu %llu", &run, &wait) == 2) total += 1e-9 * static_cast<double>(wait);
      std::fclose(f);
    }
  }
  closedir(dir);
  return total;
}

// A network interface's byte counter (tx or rx) from sysfs, -1 when unreadable.
int64_t nicBytes(const std::string& nic, const char* which) {
  if (nic.empty()) return -1;
  const std::string path = "/sys/class/net/" + nic + "/statistics/" + which + "_bytes";
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return -1;
  long long v = -1;
  if (std::fscanf(f, "%lld", &v) != 1) v = -1;
  std::fclose(f);
  return v;
}

// wsync_version_stats_t::wire_bytes / full_bytes where this build's header has them (delta
// versions, issue 22), else -1: the rank compiles against headers with and without them.
template <typename S, typename = void>
struct HasWireBytes : std::false_type {};
template <typename S>
struct HasWireBytes<S, std::void_t<decltype(S::wire_bytes), decltype(S::full_bytes)>>
    : std::true_type {};
template <typename S>
std::pair<double, double> statsWireAndFullBytes(const S& s) {
  if constexpr (HasWireBytes<S>::value)
    return {static_cast<double>(s.wire_bytes), static_cast<double>(s.full_bytes)};
  else
    return {-1.0, -1.0};
}

std::string joinList(const std::vector<double>& v, const char* fmt) {
  std::string out;
  char buf[64];
  for (double x : v) {
    std::snprintf(buf, sizeof buf, fmt, x);
    out += (out.empty() ? "" : ",") + std::string(buf);
  }
  return out;
}

std::string verifiedPath(const JobFlags& f, int rollout) {
  return f.sync_dir + "/verified.r" + std::to_string(rollout);
}

// Rollout: records that every version up to `version` was checked (atomically, by rename).
void markVerified(const JobFlags& f, uint64_t version) {
  const std::string path = verifiedPath(f, f.rank), tmp = path + ".tmp";
  FILE* out = std::fopen(tmp.c_str(), "w");
  if (out == nullptr) return;
  std::fprintf(out, "%llu\n", static_cast<unsigned long long>(version));
  std::fclose(out);
  std::rename(tmp.c_str(), path.c_str());
}

// Trainer: waits until every rollout checked `version` (outside the timed publish).
bool waitVerified(const JobFlags& f, int rollouts, uint64_t version) {
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(f.timeout_ms);
  for (int r = 0; r < rollouts; ++r) {
    while (true) {
      unsigned long long v = 0;
      if (FILE* in = std::fopen(verifiedPath(f, r).c_str(), "r")) {
        if (std::fscanf(in, "%llu", &v) != 1) v = 0;
        std::fclose(in);
      }
      if (v >= version) break;
      if (Clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  return true;
}

int runTrainer(wsync_context_t ctx, const Registration& reg, const JobFlags& f, int rollouts) {
  std::vector<std::vector<uint8_t>> memory(reg.buffers.size());
  std::vector<void*> data;
  for (size_t b = 0; b < reg.buffers.size(); ++b) {
    const LocalBuffer& buf = reg.buffers[b];
    memory[b].resize(std::max<size_t>(1, buf.num_elements * dtypeSize(buf.dtype)));
    data.push_back(memory[b].data());
    fillOrCheckInitial(reg, buf, data.back(), /*check=*/false);
  }
  if (!registerAll(ctx, reg, data) || wsync_commit(ctx) != WSYNC_SUCCESS) {
    std::fprintf(stderr, "trainer %d: %s\n", f.rank, wsync_last_error(ctx));
    return 1;
  }
  const VersionChanges changes(reg, f.changed_share);
  std::vector<double> seconds, nic_tx, delivered, changed, stats_wire, stats_full;
  double cpu = 0, queued = 0;
  Clock::duration wall{};
  for (int v = 1; v <= f.warmup + f.versions; ++v) {
    const bool timed = v > f.warmup;
    if (v > 1) {  // the trainer's "step": this version's changes, before its publish
      if (!f.sync_dir.empty() && !waitVerified(f, rollouts, static_cast<uint64_t>(v - 1))) {
        std::fprintf(stderr, "trainer %d: rollouts did not check version %d\n", f.rank, v - 1);
        return 1;
      }
      const int64_t n = changes.apply(static_cast<uint64_t>(v), data);
      if (timed) changed.push_back(static_cast<double>(n));
    }
    const double c0 = cpuSeconds(), q0 = runQueueSeconds();
    const int64_t tx0 = nicBytes(f.nic, "tx");
    const Clock::time_point t0 = Clock::now();
    wsync_request_t req = nullptr;
    if (wsync_publish(ctx, static_cast<uint64_t>(v), &req) != WSYNC_SUCCESS ||
        wsync_request_wait(req, f.timeout_ms) != WSYNC_SUCCESS) {
      std::fprintf(stderr, "trainer %d: version %d: %s\n", f.rank, v, wsync_last_error(ctx));
      wsync_request_free(req);
      return 1;
    }
    wsync_request_free(req);
    const Clock::duration d = Clock::now() - t0;
    const int64_t tx1 = nicBytes(f.nic, "tx");
    if (!timed) continue;
    cpu += cpuSeconds() - c0;
    queued += runQueueSeconds() - q0;
    wall += d;
    seconds.push_back(std::chrono::duration<double>(d).count());
    nic_tx.push_back(tx0 >= 0 && tx1 >= 0 ? static_cast<double>(tx1 - tx0) : -1.0);
    wsync_version_stats_t st = WSYNC_VERSION_STATS_INITIALIZER;
    const bool have = wsync_version_stats(ctx, &st) == WSYNC_SUCCESS && st.version == uint64_t(v);
    delivered.push_back(have ? static_cast<double>(st.bytes) : -1.0);
    const std::pair<double, double> wf =
        have ? statsWireAndFullBytes(st) : std::make_pair(-1.0, -1.0);
    stats_wire.push_back(wf.first);
    stats_full.push_back(wf.second);
  }
  std::vector<double> sorted = seconds;
  std::sort(sorted.begin(), sorted.end());
  std::printf(
      "{\"role\":\"trainer\",\"rank\":%d,\"seconds\":[%s],\"median_seconds\":%.6f,"
      "\"min_seconds\":%.6f,\"nic_tx_bytes\":[%s],\"delivered_bytes\":[%s],"
      "\"stats_wire_bytes\":[%s],\"stats_full_bytes\":[%s],"
      "\"changed_share\":%.6g,\"changed_in_shard\":[%s],\"cpu_seconds\":%.3f,"
      "\"run_queue_seconds\":%.3f,\"wall_seconds\":%.3f}\n",
      f.rank, joinList(seconds, "%.6f").c_str(), sorted[sorted.size() / 2], sorted.front(),
      joinList(nic_tx, "%.0f").c_str(), joinList(delivered, "%.0f").c_str(),
      joinList(stats_wire, "%.0f").c_str(), joinList(stats_full, "%.0f").c_str(), f.changed_share,
      joinList(changed, "%.0f").c_str(), cpu, queued, std::chrono::duration<double>(wall).count());
  return 0;
}

// Compares the leased version with the expected copy, buffer by buffer (memcmp, then a count
// over the pieces when the bytes differ).
int64_t checkVersion(wsync_lease_t lease, const Registration& reg,
                     const std::vector<std::vector<uint8_t>>& expected) {
  int64_t wrong = 0;
  for (size_t b = 0; b < reg.buffers.size(); ++b) {
    void* p = nullptr;
    if (wsync_lease_buffer(lease, static_cast<int>(b), &p) != WSYNC_SUCCESS) return -1;
    const LocalBuffer& buf = reg.buffers[b];
    const size_t bytes = buf.num_elements * dtypeSize(buf.dtype);
    if (bytes > 0 && std::memcmp(p, expected[b].data(), bytes) != 0)
      wrong += countPieceMismatches(reg, buf, p, expected[b].data());
  }
  return wrong;
}

int runRollout(wsync_context_t ctx, const Registration& reg, const JobFlags& f) {
  std::vector<void*> none(reg.buffers.size(), nullptr);
  if (!registerAll(ctx, reg, none) || wsync_commit(ctx) != WSYNC_SUCCESS) {
    std::fprintf(stderr, "rollout %d: %s\n", f.rank, wsync_last_error(ctx));
    return 1;
  }
  // The expected contents, advanced version by version with the trainers' changes.
  std::vector<std::vector<uint8_t>> expected(reg.buffers.size());
  std::vector<void*> expected_data;
  for (size_t b = 0; b < reg.buffers.size(); ++b) {
    const LocalBuffer& buf = reg.buffers[b];
    expected[b].assign(std::max<size_t>(1, buf.num_elements * dtypeSize(buf.dtype)), 0);
    expected_data.push_back(expected[b].data());
    fillOrCheckInitial(reg, buf, expected_data.back(), /*check=*/false);
  }
  const VersionChanges changes(reg, f.changed_share);
  const bool every = !f.sync_dir.empty();  // else only the last version is checked
  const uint64_t last = static_cast<uint64_t>(f.warmup + f.versions);
  uint64_t newest = 0, expected_version = 1;
  int64_t wrong = 0;
  int checked = 0;
  std::vector<double> nic_rx;
  double cpu = 0, queued = 0;  // over the waits for versions (the receiving), not the checks
  Clock::duration wall{};
  while (newest < last) {
    const double c0 = cpuSeconds(), q0 = runQueueSeconds();
    const Clock::time_point w0 = Clock::now();
    const int64_t rx0 = nicBytes(f.nic, "rx");
    if (wsync_wait_version(ctx, newest, f.timeout_ms, &newest) != WSYNC_SUCCESS) {
      std::fprintf(stderr, "rollout %d: waiting after version %llu: %s\n", f.rank,
                   static_cast<unsigned long long>(newest), wsync_last_error(ctx));
      return 1;
    }
    const int64_t rx1 = nicBytes(f.nic, "rx");
    cpu += cpuSeconds() - c0;
    queued += runQueueSeconds() - q0;
    wall += Clock::now() - w0;
    if (newest > static_cast<uint64_t>(f.warmup))
      nic_rx.push_back(rx0 >= 0 && rx1 >= 0 ? static_cast<double>(rx1 - rx0) : -1.0);
    if (!every && newest < last) continue;
    wsync_lease_t lease = nullptr;
    if (wsync_acquire(ctx, newest, &lease) != WSYNC_SUCCESS) {
      std::fprintf(stderr, "rollout %d: acquire %llu: %s\n", f.rank,
                   static_cast<unsigned long long>(newest), wsync_last_error(ctx));
      return 1;
    }
    for (; expected_version < newest; ++expected_version)
      changes.apply(expected_version + 1, expected_data);
    const int64_t w = checkVersion(lease, reg, expected);
    wsync_lease_release(lease);
    if (w != 0)
      std::fprintf(stderr, "rollout %d: version %llu: %lld elements differ\n", f.rank,
                   static_cast<unsigned long long>(newest), static_cast<long long>(w));
    wrong += w < 0 ? 1 : w;
    ++checked;
    if (every) markVerified(f, newest);
  }
  std::printf(
      "{\"role\":\"rollout\",\"rank\":%d,\"replica\":%d,\"version\":%llu,\"versions_checked\":%d,"
      "\"mismatches\":%lld,\"verified\":%s,\"nic_rx_bytes\":[%s],\"cpu_seconds\":%.3f,"
      "\"run_queue_seconds\":%.3f,\"wall_seconds\":%.3f}\n",
      f.rank, reg.replica, static_cast<unsigned long long>(last), checked,
      static_cast<long long>(wrong), wrong == 0 ? "true" : "false",
      joinList(nic_rx, "%.0f").c_str(), cpu, queued, std::chrono::duration<double>(wall).count());
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
      ("changed-share", "share of each tensor's elements changed per version (0: none)",
       cxxopts::value<double>()->default_value("0"))
      ("sync-dir", "rollouts check every version and record it here; trainers publish the next "
       "version only after every rollout checked the last", cxxopts::value<std::string>())
      ("nic", "per-version byte counters of this network interface (trainers tx, rollouts rx)",
       cxxopts::value<std::string>())
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
  f.changed_share = args["changed-share"].as<double>();
  if (args.count("sync-dir")) f.sync_dir = args["sync-dir"].as<std::string>();
  if (args.count("nic")) f.nic = args["nic"].as<std::string>();
  if (f.changed_share < 0 || f.changed_share > 1) {
    std::fprintf(stderr, "error: --changed-share must be in [0, 1]\n");
    return 2;
  }
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
  const int rc = f.trainer ? runTrainer(ctx, *reg, f, cfg.num_rollouts) : runRollout(ctx, *reg, f);
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
