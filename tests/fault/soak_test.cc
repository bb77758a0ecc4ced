// Soak: many versions of small tensors through a real job, every version checked on every rollout,
// and every process's resident memory flat.
//
//   mpirun -n 1 wsync-coordinator --mpi --quiet --max-staleness 0 --checksums --metrics-port P
//        : -n 4 wsync_soak_test --versions N --warmup W --metrics-port P
//
// World rank 0 is the coordinator; world ranks 1-2 are trainers (each holds one row of "w", both
// hold all of "b"), 3-4 are two one-rank replicas wanting both tensors whole (host memory: "w" by
// UCX one-sided writes, "b" by MPI broadcast). max_staleness 0: no replica ever skips a version.
// Each rollout verifies every version: it keeps a lease on v while v+1 lands in the other slot,
// so v+1 cannot be overwritten before it takes a lease on it, then checks every element of v+1
// under that lease (a torn or wrong version fails). VmRSS after version W and at the end must be
// within 5% on every rank, and (through /metrics, scraped by trainer 0) on the coordinator, whose
// counters must match the versions and bytes published. Checksums are on: every version's
// checksums must be equal on every rollout (wsync_version_stats: no failure, no re-send in any
// version; /metrics: 0 failures and one verification per rollout and version). Every rank's numbers
// go to trainer 0, which prints one table; the exit code is non-zero when any rank failed.
#include <mpi.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "wsync/wsync.h"
#ifdef WSYNC_HAVE_METRICS_HTTP
#include <httplib.h>
#endif

namespace {

constexpr int kTrainers = 2, kRollouts = 2;
constexpr int64_t kCols = 2048;  // "w" is [kTrainers, kCols]
constexpr int64_t kBias = 1024;  // "b" is [kBias]
constexpr int kAckTag = 7, kReportTag = 8;
constexpr double kRssTolerance = 0.05;

struct Args {
  uint64_t versions = 2000;
  uint64_t warmup = 500;
  int metrics_port = 0;
};

// Exact in float (24 bits), different for every version, element and tensor.
float valueOf(uint64_t version, int64_t i, uint32_t salt) {
  const uint32_t h = static_cast<uint32_t>(version * 2654435761u) ^ static_cast<uint32_t>(i) ^ salt;
  return static_cast<float>(h & 0xFFFFFF);
}
constexpr uint32_t kSaltW = 0, kSaltB = 0x5a5a5a;

long long rssKib() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return -1;
  char line[256];
  long long kib = -1;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::sscanf(line, "VmRSS: %lld kB", &kib) == 1) break;
  }
  std::fclose(f);
  return kib;
}

// What each rank sends trainer 0 at the end.
struct Report {
  int world_rank = 0;
  int failed = 0;
  long long rss_warm_kib = 0;
  long long rss_end_kib = 0;
  uint64_t checked = 0;  // rollouts: versions verified
  char error[200] = {};
};

bool fail(Report& r, const std::string& what) {
  if (!r.failed) std::snprintf(r.error, sizeof r.error, "%s", what.c_str());
  r.failed = 1;
  return false;
}

bool ok(Report& r, wsync_context_t ctx, wsync_status_t s, const char* what) {
  if (s == WSYNC_SUCCESS) return true;
  return fail(r, std::string(what) + ": " + wsync_status_string(s) + ": " + wsync_last_error(ctx));
}

bool registerTensors(wsync_context_t ctx, bool trainer, int rank, std::vector<float>& w,
                     std::vector<float>& b, int* w_index, int* b_index, Report& r) {
  const int64_t w_shape[2] = {kTrainers, kCols};
  const int64_t w_row[2] = {1, kCols};
  const int64_t w_offset[2] = {rank, 0};
  wsync_piece_t piece = WSYNC_PIECE_INITIALIZER;
  piece.tensor = "w";
  piece.ndim = 2;
  piece.global_shape = w_shape;
  if (trainer) {
    piece.box_offset = w_offset;
    piece.box_extent = w_row;
    w.assign(kCols, 0.0f);
    b.assign(kBias, 0.0f);
  }
  const int64_t w_elements = trainer ? kCols : kTrainers * kCols;
  if (!ok(r, ctx,
          wsync_register_buffer(ctx, "w", WSYNC_DTYPE_FLOAT32, WSYNC_MEMORY_HOST,
                                trainer ? w.data() : nullptr, w_elements, 1, &piece, w_index),
          "register w"))
    return false;
  const int64_t b_shape[1] = {kBias};
  wsync_piece_t bias = WSYNC_PIECE_INITIALIZER;
  bias.tensor = "b";
  bias.ndim = 1;
  bias.global_shape = b_shape;
  return ok(r, ctx,
            wsync_register_buffer(ctx, "b", WSYNC_DTYPE_FLOAT32, WSYNC_MEMORY_HOST,
                                  trainer ? b.data() : nullptr, kBias, 1, &bias, b_index),
            "register b");
}

#ifdef WSYNC_HAVE_METRICS_HTTP
// The value of an unlabelled sample on the coordinator's /metrics; -1 when it cannot be read.
double scrape(int port, const char* name) {
  httplib::Client client("127.0.0.1", port);
  httplib::Result res = client.Get("/metrics");
  if (!res || res->status != 200) return -1;
  const std::string key = std::string("\n") + name + " ";
  const size_t at = res->body.find(key);
  return at == std::string::npos ? -1 : std::stod(res->body.substr(at + key.size()));
}
#endif

void runTrainer(wsync_context_t ctx, int rank, const Args& a, Report& r, long long coord_rss[2]) {
  std::vector<float> w, b;
  int wi = -1, bi = -1;
  if (!registerTensors(ctx, true, rank, w, b, &wi, &bi, r)) return;
  if (!ok(r, ctx, wsync_commit(ctx), "commit")) return;
  wsync_plan_info_t plan{};
  wsync_plan_info(ctx, &plan);
  for (uint64_t v = 1; v <= a.versions; ++v) {
    for (int64_t i = 0; i < kCols; ++i)
      w[static_cast<size_t>(i)] = valueOf(v, rank * kCols + i, kSaltW);
    for (int64_t i = 0; i < kBias; ++i)
      b[static_cast<size_t>(i)] = valueOf(v, i, kSaltB);
    wsync_request_t req = nullptr;
    if (!ok(r, ctx, wsync_publish(ctx, v, &req), "publish")) return;
    const wsync_status_t s = wsync_request_wait(req, -1);
    wsync_request_free(req);
    if (!ok(r, ctx, s, ("version " + std::to_string(v)).c_str())) return;
    wsync_version_stats_t delivered = WSYNC_VERSION_STATS_INITIALIZER;
    if (!ok(r, ctx, wsync_version_stats(ctx, &delivered), "version_stats")) return;
    if (delivered.checksum_failures != 0 || delivered.retries != 0) {
      fail(r, "version " + std::to_string(v) + ": " + std::to_string(delivered.checksum_failures) +
                  " checksum failures, " + std::to_string(delivered.retries) + " re-sends");
      return;
    }
    if (v == 1 && rank == 0) {  // the rollouts hold a lease on version 1 before version 2 starts
      for (int q = 0; q < kRollouts; ++q)
        MPI_Recv(nullptr, 0, MPI_BYTE, 1 + kTrainers + q, kAckTag, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    }
    if (v == a.warmup || v == a.versions) {
      (v == a.warmup ? r.rss_warm_kib : r.rss_end_kib) = rssKib();
#ifdef WSYNC_HAVE_METRICS_HTTP
      if (rank == 0 && a.metrics_port > 0) {
        const double rss = scrape(a.metrics_port, "process_resident_memory_bytes");
        coord_rss[v == a.warmup ? 0 : 1] = static_cast<long long>(rss / 1024);
      }
#endif
    }
  }
  wsync_version_stats_t stats = WSYNC_VERSION_STATS_INITIALIZER;
  if (!ok(r, ctx, wsync_version_stats(ctx, &stats), "version_stats")) return;
  if (stats.version != a.versions || stats.bytes != plan.bytes_per_version ||
      stats.replicas_ready != kRollouts || stats.replicas_skipped != 0) {
    fail(r, "last delivered stats: version " + std::to_string(stats.version) + ", " +
                std::to_string(stats.bytes) + " bytes, " + std::to_string(stats.replicas_ready) +
                " ready, " + std::to_string(stats.replicas_skipped) + " skipped");
    return;
  }
#ifdef WSYNC_HAVE_METRICS_HTTP
  if (rank == 0 && a.metrics_port > 0) {
    const double delivered = scrape(a.metrics_port, "wsync_versions_delivered_total");
    const double bytes = scrape(a.metrics_port, "wsync_delivered_bytes_total");
    const double skips = scrape(a.metrics_port, "wsync_replica_skips_total");
    const double failures = scrape(a.metrics_port, "wsync_checksum_failures_total");
    const double verified = scrape(a.metrics_port, "wsync_checksum_verifications_total");
    if (delivered != static_cast<double>(a.versions) ||
        bytes != static_cast<double>(a.versions * plan.bytes_per_version) || skips != 0 ||
        failures != 0 || verified != static_cast<double>(a.versions * kRollouts)) {
      fail(r, "/metrics: " + std::to_string(delivered) + " versions, " + std::to_string(bytes) +
                  " bytes, " + std::to_string(skips) + " skips, " + std::to_string(failures) +
                  " checksum failures, " + std::to_string(verified) + " verifications");
    }
  }
#endif
  r.checked = a.versions;
}

// Checks every element of the leased version; false (with the first wrong element) otherwise.
bool verify(wsync_lease_t lease, uint64_t v, int wi, int bi, Report& r) {
  void* w = nullptr;
  void* b = nullptr;
  if (wsync_lease_buffer(lease, wi, &w) != WSYNC_SUCCESS ||
      wsync_lease_buffer(lease, bi, &b) != WSYNC_SUCCESS)
    return fail(r, "lease_buffer failed");
  const auto* wf = static_cast<const float*>(w);
  const auto* bf = static_cast<const float*>(b);
  for (int64_t i = 0; i < kTrainers * kCols; ++i) {
    if (wf[i] != valueOf(v, i, kSaltW))
      return fail(r, "version " + std::to_string(v) + ": w[" + std::to_string(i) + "] wrong");
  }
  for (int64_t i = 0; i < kBias; ++i) {
    if (bf[i] != valueOf(v, i, kSaltB))
      return fail(r, "version " + std::to_string(v) + ": b[" + std::to_string(i) + "] wrong");
  }
  return true;
}

void runRollout(wsync_context_t ctx, int rank, const Args& a, Report& r) {
  std::vector<float> unused_w, unused_b;
  int wi = -1, bi = -1;
  if (!registerTensors(ctx, false, rank, unused_w, unused_b, &wi, &bi, r)) return;
  if (!ok(r, ctx, wsync_commit(ctx), "commit")) return;
  wsync_lease_t held = nullptr;
  for (uint64_t v = 1; v <= a.versions; ++v) {
    uint64_t newest = 0;
    if (!ok(r, ctx, wsync_wait_version(ctx, v - 1, -1, &newest), "wait_version")) break;
    wsync_lease_t next = nullptr;
    if (!ok(r, ctx, wsync_acquire(ctx, v, &next), ("acquire " + std::to_string(v)).c_str())) break;
    if (held != nullptr) wsync_lease_release(held);
    held = next;
    if (v == 1) MPI_Send(nullptr, 0, MPI_BYTE, 1, kAckTag, MPI_COMM_WORLD);
    if (!verify(held, v, wi, bi, r)) break;
    ++r.checked;
    if (v == a.warmup) r.rss_warm_kib = rssKib();
  }
  if (held != nullptr) wsync_lease_release(held);
  r.rss_end_kib = rssKib();
  wsync_version_stats_t stats = WSYNC_VERSION_STATS_INITIALIZER;
  if (!r.failed && ok(r, ctx, wsync_version_stats(ctx, &stats), "version_stats") &&
      (stats.version != a.versions || stats.lag != 0))
    fail(r, "staleness: newest ready " + std::to_string(stats.version) + ", lag " +
                std::to_string(stats.lag));
}

void checkRss(Report& r, const char* who) {
  if (r.failed || r.rss_warm_kib <= 0) return;
  const double growth =
      static_cast<double>(r.rss_end_kib - r.rss_warm_kib) / static_cast<double>(r.rss_warm_kib);
  if (growth > kRssTolerance) {
    fail(r, std::string(who) + " RSS grew " + std::to_string(100 * growth) + "% after warm-up");
  }
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--versions") a.versions = std::strtoull(v, nullptr, 10);
    if (k == "--warmup") a.warmup = std::strtoull(v, nullptr, 10);
    if (k == "--metrics-port") a.metrics_port = std::atoi(v);
  }
  if (a.warmup == 0 || a.warmup >= a.versions) a.warmup = a.versions / 2;
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int world_rank = 0, world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  const Args a = parse(argc, argv);
  Report r;
  r.world_rank = world_rank;
  long long coord_rss[2] = {0, 0};
  if (world_size != 1 + kTrainers + kRollouts) {
    std::fprintf(stderr, "soak: needs wsync-coordinator + %d ranks\n", kTrainers + kRollouts);
    MPI_Finalize();
    return 2;
  }
  const bool trainer = world_rank <= kTrainers;
  const int rank = trainer ? world_rank - 1 : world_rank - 1 - kTrainers;
  wsync_config_t cfg = WSYNC_CONFIG_INITIALIZER;
  cfg.role = trainer ? WSYNC_ROLE_TRAINER : WSYNC_ROLE_ROLLOUT;
  cfg.replica = trainer ? -1 : rank;
  cfg.max_staleness = 0;
  cfg.timeout_ms = 60000;
  wsync_context_t ctx = nullptr;
  const auto t0 = std::chrono::steady_clock::now();
  if (ok(r, nullptr, wsync_context_create(&cfg, &ctx), "create")) {
    if (trainer) {
      runTrainer(ctx, rank, a, r, coord_rss);
    } else {
      runRollout(ctx, rank, a, r);
    }
    checkRss(r, trainer ? "trainer" : "rollout");
    if (r.failed) wsync_context_abort(ctx);
    wsync_context_destroy(ctx);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int failed = r.failed;
  if (world_rank != 1) {
    MPI_Send(&r, sizeof r, MPI_BYTE, 1, kReportTag, MPI_COMM_WORLD);
  } else {
    std::printf("soak: %" PRIu64 " versions in %.1f s (%.0f versions/s), RSS after version %" PRIu64
                " -> at the end (KiB):\n",
                a.versions, seconds, static_cast<double>(a.versions) / seconds, a.warmup);
    if (a.metrics_port > 0) {
      const double growth = coord_rss[0] > 0
                                ? 100.0 * static_cast<double>(coord_rss[1] - coord_rss[0]) /
                                      static_cast<double>(coord_rss[0])
                                : 0.0;
      std::printf("  coordinator (world 0): %lld -> %lld (%+.2f%%)\n", coord_rss[0], coord_rss[1],
                  growth);
      if (coord_rss[0] <= 0 || coord_rss[1] <= 0 || growth > 100 * kRssTolerance) {
        std::printf("  FAIL coordinator: RSS not read or grew more than 5%%\n");
        failed = 1;
      }
    }
    for (int q = 1; q < world_size; ++q) {
      Report x = r;
      if (q != 1)
        MPI_Recv(&x, sizeof x, MPI_BYTE, q, kReportTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      const bool t = q <= kTrainers;
      const double growth = x.rss_warm_kib > 0
                                ? 100.0 * static_cast<double>(x.rss_end_kib - x.rss_warm_kib) /
                                      static_cast<double>(x.rss_warm_kib)
                                : 0.0;
      std::printf("  %s %d (world %d): %lld -> %lld (%+.2f%%), %" PRIu64 " versions %s%s%s\n",
                  t ? "trainer" : "rollout", t ? q - 1 : q - 1 - kTrainers, q, x.rss_warm_kib,
                  x.rss_end_kib, growth, x.checked, t ? "delivered" : "verified",
                  x.failed ? "  FAIL: " : "", x.error);
      failed |= x.failed;
    }
    std::printf("soak: %s\n", failed ? "FAILED" : "PASSED");
    std::fflush(stdout);
  }
  MPI_Finalize();
  return failed ? 1 : 0;
}
