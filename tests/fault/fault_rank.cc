// wsync-fault-rank: one trainer or rollout process of a fault-injection job (tests/fault/), joined
// by explicit bootstrap to a standalone wsync-coordinator. The scripts kill, stop or start these
// processes while versions stream; every process checks what it sees and says so in its exit code.
//
// Trainer: publishes versions 1..N of the demo policy (a pause between them), and checks each
// delivered version's outcome (wsync_request_replicas): no replica outside --may-lose is ever lost,
// and the last version is ready on exactly --final-ready. Prints "trainer T version V ready=..
// lost=..". --hold-after K --resume-file F: after version K it publishes nothing until file F
// exists (a replica joining then can only be filled by a peer). --first-version F: publishes
// F..N (trainers restarted against a coordinator run with --trainer-restart).
// Rollout: reads the newest version whenever one is ready and checks every element of every
// buffer (bit-exact), until it has seen version N; prints "rollout R version V ok". --join: the
// replica joins the running job (config.replica_size); --rejoin: when the job drops this rank (a
// stop past the heartbeat timeout), it joins again as a new member of the same replica id. A rank
// that joined prints "rollout R first version V from peer|trainers in S s" (wsync_version_stats);
// --expect-peer makes a first version the trainers sent a wrong outcome. --tp T --tp-rank i: the
// rank is number i of a tensor-parallel replica of T ranks (vLLM-like layout). --watch-outage:
// whenever no new version came for 500 ms (the trainers are down), it reads the newest ready one
// again (bit-exact) and checks its wsync_version_stats: the same version's age never decreases;
// prints "rollout R serving version V age_ms A lag L".
// --rank-from-launcher: the rank is the process's rank in its mpirun (trainers launched by mpirun
// that join the coordinator by explicit bootstrap; wsync itself does not use MPI here).
// Exit codes: 0 ok, 2 usage, 3 a wrong outcome, 4 a wrong byte, 5 a wsync error.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cxxopts.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "models/demo_policy.h"
#include "wsync/wsync.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  bool trainer = true;
  std::string address;
  std::string secret;
  int rank = 0;
  int trainers = 1;
  int rollouts = 1;
  int replica = 0;
  int versions = 50;
  int pause_ms = 10;
  int timeout_ms = 20000;
  bool join = false;
  bool rejoin = false;
  bool expect_peer = false;
  int tp = 1;       // rollouts: ranks of the replica (tensor parallel)
  int tp_rank = 0;  // this rank's index in it
  int hold_after = 0;
  int first_version = 1;
  bool watch_outage = false;
  std::string resume_file;
  std::set<int> may_lose;
  std::string final_ready;  // "0,1"
  wsync_demo::PolicyShape shape;
};

std::set<int> parseList(const std::string& text) {
  std::set<int> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) out.insert(std::stoi(item));
  return out;
}

std::string joinList(const std::vector<int>& v) {
  std::string s;
  for (int x : v)
    s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

wsync_config_t configFor(const Args& a, bool joining) {
  wsync_config_t cfg = WSYNC_CONFIG_INITIALIZER;
  cfg.role = a.trainer ? WSYNC_ROLE_TRAINER : WSYNC_ROLE_ROLLOUT;
  cfg.bootstrap = WSYNC_BOOTSTRAP_EXPLICIT;
  cfg.rank = a.rank;
  cfg.num_trainers = a.trainers;
  cfg.num_rollouts = a.rollouts;
  cfg.replica = a.trainer ? -1 : a.replica;
  cfg.coordinator_address = a.address.c_str();
  cfg.secret = a.secret.c_str();
  cfg.timeout_ms = a.timeout_ms;
  if (joining) {
    cfg.replica_size = a.tp;
    cfg.replica_rank = a.tp_rank;
  }
  return cfg;
}

std::vector<int> replicasOf(wsync_request_t req, wsync_replicas_kind_t kind) {
  int count = 0;
  if (wsync_request_replicas(req, kind, 0, nullptr, &count) != WSYNC_SUCCESS) return {-1};
  std::vector<int> ids(static_cast<size_t>(count));
  wsync_request_replicas(req, kind, count, ids.data(), &count);
  return ids;
}

// This process's rank in its launcher's job (Open MPI, or any PMIx launcher); -1 when not launched
// by one.
int launcherRank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && *value != '\0') return std::atoi(value);
  }
  return -1;
}

bool waitForFile(const std::string& path, int timeout_ms) {
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  struct stat st {};
  while (stat(path.c_str(), &st) != 0) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// A joined rank's first version: where it came from and how long it took, checked against
// --expect-peer. Returns the exit code (0 or 3).
int reportFirstVersion(const Args& a, wsync_context_t ctx) {
  wsync_version_stats_t stats = WSYNC_VERSION_STATS_INITIALIZER;
  if (wsync_version_stats(ctx, &stats) != WSYNC_SUCCESS) {
    std::fprintf(stderr, "rollout %d: version_stats: %s\n", a.rank, wsync_last_error(ctx));
    return 3;
  }
  std::printf("rollout %d first version %llu from %s in %.3f s\n", a.rank,
              static_cast<unsigned long long>(stats.first_version),
              stats.first_version_from_peer ? "peer" : "trainers", stats.first_version_seconds);
  if (a.expect_peer && !stats.first_version_from_peer) {
    std::fprintf(stderr, "rollout %d: its first version came from the trainers, not a peer\n",
                 a.rank);
    return 3;
  }
  return 0;
}

int runTrainer(const Args& a) {
  const auto tensors = wsync_demo::policyTensors(a.shape);
  wsync_config_t cfg = configFor(a, false);
  wsync_context_t ctx = nullptr;
  if (wsync_context_create(&cfg, &ctx) != WSYNC_SUCCESS) {
    std::fprintf(stderr, "trainer %d: create: %s\n", a.rank, wsync_last_error(nullptr));
    return 5;
  }
  const auto layout = wsync_demo::trainerLayout(tensors, a.trainers, a.rank);
  std::vector<std::vector<float>> params(layout.size());
  std::vector<void*> data;
  for (size_t b = 0; b < layout.size(); ++b) {
    params[b].resize(static_cast<size_t>(std::max<int64_t>(1, layout[b].num_elements)));
    data.push_back(params[b].data());
  }
  std::vector<int> indices;
  if (wsync_demo::registerBuffers(ctx, tensors, layout, WSYNC_DTYPE_FLOAT32, data, &indices) !=
          WSYNC_SUCCESS ||
      wsync_commit(ctx) != WSYNC_SUCCESS) {
    std::fprintf(stderr, "trainer %d: commit: %s\n", a.rank, wsync_last_error(ctx));
    return 5;
  }
  int rc = 0;
  for (uint64_t v = static_cast<uint64_t>(a.first_version);
       v <= static_cast<uint64_t>(a.versions) && rc == 0; ++v) {
    for (size_t b = 0; b < layout.size(); ++b)
      wsync_demo::fillTrainerBuffer(tensors, layout[b], v, params[b].data());
    wsync_request_t req = nullptr;
    if (wsync_publish(ctx, v, &req) != WSYNC_SUCCESS ||
        wsync_request_wait(req, -1) != WSYNC_SUCCESS) {
      std::fprintf(stderr, "trainer %d: version %llu: %s\n", a.rank,
                   static_cast<unsigned long long>(v), wsync_last_error(ctx));
      wsync_request_free(req);
      rc = 5;
      break;
    }
    const std::vector<int> ready = replicasOf(req, WSYNC_REPLICAS_READY);
    const std::vector<int> lost = replicasOf(req, WSYNC_REPLICAS_LOST);
    wsync_request_free(req);
    std::printf("trainer %d version %llu ready=%s lost=%s\n", a.rank,
                static_cast<unsigned long long>(v), joinList(ready).c_str(),
                joinList(lost).c_str());
    std::fflush(stdout);
    for (int r : lost) {
      if (a.may_lose.count(r) == 0) {
        std::fprintf(stderr, "trainer %d: version %llu lost replica %d unexpectedly\n", a.rank,
                     static_cast<unsigned long long>(v), r);
        rc = 3;
      }
    }
    if (v == static_cast<uint64_t>(a.versions) && !a.final_ready.empty() &&
        joinList(ready) != a.final_ready) {
      std::fprintf(stderr, "trainer %d: the last version is ready on %s, expected %s\n", a.rank,
                   joinList(ready).c_str(), a.final_ready.c_str());
      rc = 3;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(a.pause_ms));
    if (static_cast<int>(v) == a.hold_after && !waitForFile(a.resume_file, a.timeout_ms)) {
      std::fprintf(stderr, "trainer %d: %s did not appear within %d ms\n", a.rank,
                   a.resume_file.c_str(), a.timeout_ms);
      rc = 3;
    }
  }
  if (wsync_context_destroy(ctx) != WSYNC_SUCCESS && rc == 0) {
    std::fprintf(stderr, "trainer %d: destroy: %s\n", a.rank, wsync_last_error(nullptr));
    rc = 5;
  }
  return rc;
}

// Reads the newest ready version and checks every element (bit-exact); its version in *v. Returns
// 0, 4 (a wrong byte) or -1 (nothing to acquire).
int checkNewest(const Args& a, wsync_context_t ctx,
                const std::vector<wsync_demo::TensorSpec>& tensors,
                const std::vector<wsync_demo::BufferSpec>& layout, const std::vector<int>& indices,
                uint64_t* v) {
  wsync_lease_t lease = nullptr;
  if (wsync_acquire(ctx, WSYNC_VERSION_NEWEST, &lease) != WSYNC_SUCCESS) return -1;
  wsync_lease_version(lease, v);
  int rc = 0;
  for (size_t b = 0; b < layout.size(); ++b) {
    void* p = nullptr;
    wsync_lease_buffer(lease, indices[b], &p);
    std::string error;
    if (wsync_demo::countMismatches(tensors, layout[b], WSYNC_DTYPE_BFLOAT16, p, *v, &error) != 0) {
      std::fprintf(stderr, "rollout %d version %llu: %s\n", a.rank,
                   static_cast<unsigned long long>(*v), error.c_str());
      rc = 4;
    }
  }
  wsync_lease_release(lease);
  return rc;
}

// --watch-outage, after a wait without a new version: the newest ready version still reads
// bit-exact and its age grows. Returns the exit code (0, 3 or 4).
int checkOutage(const Args& a, wsync_context_t ctx,
                const std::vector<wsync_demo::TensorSpec>& tensors,
                const std::vector<wsync_demo::BufferSpec>& layout, const std::vector<int>& indices,
                wsync_version_stats_t* last) {
  uint64_t v = 0;
  const int read = checkNewest(a, ctx, tensors, layout, indices, &v);
  if (read != 0) return read < 0 ? 0 : read;
  wsync_version_stats_t stats = WSYNC_VERSION_STATS_INITIALIZER;
  if (wsync_version_stats(ctx, &stats) != WSYNC_SUCCESS) {
    std::fprintf(stderr, "rollout %d: version_stats: %s\n", a.rank, wsync_last_error(ctx));
    return 3;
  }
  std::printf("rollout %d serving version %llu age_ms %lld lag %llu\n", a.rank,
              static_cast<unsigned long long>(stats.version), static_cast<long long>(stats.age_ms),
              static_cast<unsigned long long>(stats.lag));
  std::fflush(stdout);
  if (stats.version == last->version && stats.age_ms < last->age_ms) {
    std::fprintf(stderr, "rollout %d: version %llu got younger: %lld ms, then %lld ms\n", a.rank,
                 static_cast<unsigned long long>(stats.version),
                 static_cast<long long>(last->age_ms), static_cast<long long>(stats.age_ms));
    return 3;
  }
  *last = stats;
  return 0;
}

// One rollout membership: reads until version N (0), the job dropped it (1, *dropped_error set),
// or a failure (exit code).
int readVersions(const Args& a, bool joining, std::string* dropped_error) {
  const auto tensors = wsync_demo::policyTensors(a.shape);
  wsync_config_t cfg = configFor(a, joining);
  wsync_context_t ctx = nullptr;
  if (wsync_context_create(&cfg, &ctx) != WSYNC_SUCCESS) {
    std::fprintf(stderr, "rollout %d: create: %s\n", a.rank, wsync_last_error(nullptr));
    return 5;
  }
  const auto layout =
      wsync_demo::rolloutLayout(tensors, wsync_demo::RolloutLayout::kMixed, a.tp, a.tp_rank);
  std::vector<int> indices;
  if (wsync_demo::registerBuffers(ctx, tensors, layout, WSYNC_DTYPE_BFLOAT16, {}, &indices) !=
          WSYNC_SUCCESS ||
      wsync_commit(ctx) != WSYNC_SUCCESS) {
    std::fprintf(stderr, "rollout %d: commit: %s\n", a.rank, wsync_last_error(ctx));
    return 5;
  }
  int rank = -1;
  wsync_context_info(ctx, &rank, nullptr, nullptr);
  std::printf("rollout %d committed as rank %d%s\n", a.rank, rank, joining ? " (joined)" : "");
  std::fflush(stdout);
  uint64_t newest = 0;
  // Bounds the time without a new version (not the whole run: sanitizer builds on a loaded
  // machine deliver slowly but steadily).
  Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(a.timeout_ms);
  int rc = 0;
  bool reported_first = false;
  wsync_version_stats_t last_stats = WSYNC_VERSION_STATS_INITIALIZER;
  while (newest < static_cast<uint64_t>(a.versions) && rc == 0) {
    const wsync_status_t s = wsync_wait_version(ctx, newest, 500, &newest);
    if (s == WSYNC_ERR_TIMEOUT) {
      if (a.watch_outage) rc = checkOutage(a, ctx, tensors, layout, indices, &last_stats);
      if (Clock::now() > deadline) {
        std::fprintf(stderr, "rollout %d: no version after %llu\n", a.rank,
                     static_cast<unsigned long long>(newest));
        rc = 5;
      }
      continue;
    }
    if (s != WSYNC_SUCCESS) {
      *dropped_error = wsync_last_error(ctx);
      rc = 1;
      break;
    }
    deadline = Clock::now() + std::chrono::milliseconds(a.timeout_ms);
    uint64_t v = 0;
    rc = checkNewest(a, ctx, tensors, layout, indices, &v);
    if (rc < 0) {
      rc = 0;
      continue;
    }
    if (rc == 0)
      std::printf("rollout %d version %llu ok\n", a.rank, static_cast<unsigned long long>(v));
    if (rc == 0 && joining && !reported_first) {
      rc = reportFirstVersion(a, ctx);
      reported_first = true;
    }
    std::fflush(stdout);
  }
  const wsync_status_t destroyed = wsync_context_destroy(ctx);
  if (rc == 0 && destroyed != WSYNC_SUCCESS) {
    std::fprintf(stderr, "rollout %d: destroy: %s\n", a.rank, wsync_last_error(nullptr));
    rc = 5;
  }
  return rc;
}

int runRollout(const Args& a) {
  bool joining = a.join;
  for (int memberships = 0; memberships < 3; ++memberships) {
    std::string dropped;
    const int rc = readVersions(a, joining, &dropped);
    if (rc != 1) return rc;
    std::printf("rollout %d dropped: %s\n", a.rank, dropped.c_str());
    std::fflush(stdout);
    if (!a.rejoin) return 5;
    joining = true;
  }
  return 5;
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options options("wsync-fault-rank", "A trainer or rollout of a fault-injection job");
  // clang-format off
  options.add_options()
      ("role", "trainer | rollout", cxxopts::value<std::string>())
      ("address", "the coordinator's host:port", cxxopts::value<std::string>())
      ("secret", "the job's secret", cxxopts::value<std::string>())
      ("rank", "role rank (fixed membership)", cxxopts::value<int>()->default_value("0"))
      ("rank-from-launcher", "the role rank is this process's rank in its mpirun")
      ("trainers", "trainer ranks", cxxopts::value<int>()->default_value("1"))
      ("rollouts", "rollout ranks of the fixed membership", cxxopts::value<int>()->default_value("1"))
      ("replica", "rollouts: replica id", cxxopts::value<int>()->default_value("0"))
      ("versions", "versions N", cxxopts::value<int>()->default_value("50"))
      ("pause-ms", "trainers: pause between versions", cxxopts::value<int>()->default_value("10"))
      ("timeout-ms", "config.timeout_ms, and a rollout's bound on the wait for its next version",
       cxxopts::value<int>()->default_value("20000"))
      ("join", "rollouts: join the running job")
      ("rejoin", "rollouts: join again when dropped")
      ("expect-peer", "rollouts: a joined rank's first version must come from a peer replica")
      ("tp", "rollouts: ranks of the replica (tensor parallel)", cxxopts::value<int>()->default_value("1"))
      ("tp-rank", "rollouts: this rank's index in its replica", cxxopts::value<int>()->default_value("0"))
      ("hold-after", "trainers: after this version, wait for --resume-file",
       cxxopts::value<int>()->default_value("0"))
      ("resume-file", "trainers: the file that ends the hold", cxxopts::value<std::string>()->default_value(""))
      ("first-version", "trainers: the first version published", cxxopts::value<int>()->default_value("1"))
      ("watch-outage", "rollouts: while no version comes, check the newest one and its age")
      ("may-lose", "trainers: replica ids that may be lost", cxxopts::value<std::string>()->default_value(""))
      ("final-ready", "trainers: the replicas the last version must be ready on (\"0,1\")",
       cxxopts::value<std::string>()->default_value(""))
      ("hidden", "policy hidden size", cxxopts::value<int>()->default_value("256"));
  // clang-format on
  try {
    const auto parsed = options.parse(argc, argv);
    Args a;
    a.trainer = parsed["role"].as<std::string>() == "trainer";
    a.address = parsed["address"].as<std::string>();
    a.secret = parsed["secret"].as<std::string>();
    a.rank = parsed["rank"].as<int>();
    if (parsed.count("rank-from-launcher") != 0) {
      a.rank = launcherRank();
      if (a.rank < 0) {
        std::fprintf(stderr,
                     "wsync-fault-rank: --rank-from-launcher outside mpirun (no "
                     "OMPI_COMM_WORLD_RANK or PMIX_RANK)\n");
        return 2;
      }
    }
    a.trainers = parsed["trainers"].as<int>();
    a.rollouts = parsed["rollouts"].as<int>();
    a.replica = parsed["replica"].as<int>();
    a.versions = parsed["versions"].as<int>();
    a.pause_ms = parsed["pause-ms"].as<int>();
    a.timeout_ms = parsed["timeout-ms"].as<int>();
    a.join = parsed.count("join") != 0;
    a.rejoin = parsed.count("rejoin") != 0;
    a.expect_peer = parsed.count("expect-peer") != 0;
    a.tp = parsed["tp"].as<int>();
    a.tp_rank = parsed["tp-rank"].as<int>();
    a.hold_after = parsed["hold-after"].as<int>();
    a.resume_file = parsed["resume-file"].as<std::string>();
    a.first_version = parsed["first-version"].as<int>();
    a.watch_outage = parsed.count("watch-outage") != 0;
    a.may_lose = parseList(parsed["may-lose"].as<std::string>());
    a.final_ready = parsed["final-ready"].as<std::string>();
    a.shape.layers = 2;
    a.shape.hidden = parsed["hidden"].as<int>();
    a.shape.ffn = 2 * a.shape.hidden;
    a.shape.vocab = 4 * a.shape.hidden;
    return a.trainer ? runTrainer(a) : runRollout(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wsync-fault-rank: %s\n", e.what());
    return 2;
  }
}
