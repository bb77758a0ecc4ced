// wsync-coordinator: runs a job's coordinator as its own process.
//
// Under mpirun, as world rank 0 of the job (mpirun -np 1 wsync-coordinator --mpi : -np T trainer :
// -np R rollout): it tells every rank its address. Standalone (explicit bootstrap, ranks started by
// other launchers): --trainers, --rollouts, --port and a secret (--secret or WSYNC_SECRET);
// --rollouts 0 runs an elastic job (every replica joins at run time; docs/engines.md);
// --trainer-restart lets the job outlive its trainers (coordinator/coordinator.h).
// Progress: at most one line per second on stderr for the newest delivered version, and a summary
// at exit. --metrics-port N serves the metrics at http://<metrics-bind>:N/metrics (Prometheus
// text format) while the job runs (builds with cpp-httplib only).
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cxxopts.hpp>

#include "bootstrap/mpi_bootstrap.h"
#include "coordinator/coordinator.h"
#include "coordinator/metrics.h"
#include "options/options.h"
#ifdef WSYNC_HAVE_METRICS_HTTP
#include "coordinator/metrics_http.h"
#endif

namespace {

// This process's resident memory (VmRSS of /proc/self/status) in bytes; 0 when unknown.
uint64_t residentBytes() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  unsigned long long kib = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::sscanf(line, "VmRSS: %llu kB", &kib) == 1) break;
  }
  std::fclose(f);
  return kib * 1024;
}

// The metrics page: the job's metrics and the coordinator process's resident memory.
std::string metricsPage(const wsync::CoordinatorMetrics& metrics) {
  return wsync::prometheusText(metrics.snapshot()) +
         "# HELP process_resident_memory_bytes Resident memory of the coordinator process.\n"
         "# TYPE process_resident_memory_bytes gauge\n"
         "process_resident_memory_bytes " +
         std::to_string(residentBytes()) + "\n";
}

// Serves `metrics` on bind:port when port > 0. Returns false (with a message) when it cannot.
struct MetricsEndpoint {
#ifdef WSYNC_HAVE_METRICS_HTTP
  std::unique_ptr<wsync::MetricsHttpServer> server;
#endif
  bool start(const std::string& bind, int port,
             const std::shared_ptr<wsync::CoordinatorMetrics>& metrics) {
    if (port <= 0) return true;
#ifdef WSYNC_HAVE_METRICS_HTTP
    auto s = wsync::MetricsHttpServer::start(bind, static_cast<uint16_t>(port),
                                             [metrics] { return metricsPage(*metrics); });
    if (!s.isOk()) {
      std::fprintf(stderr, "wsync-coordinator: %s\n", s.status().toString().c_str());
      return false;
    }
    server = std::move(s).value();
    std::printf("wsync-coordinator metrics on http://%s:%u/metrics\n", bind.c_str(),
                server->port());
    std::fflush(stdout);
#else
    (void)bind;
    (void)metrics;
    std::fprintf(stderr,
                 "wsync-coordinator: built without cpp-httplib: --metrics-port %d ignored, the "
                 "metrics server is off\n",
                 port);
#endif
    return true;
  }
};

// Waits for the job's end; every second prints the newest delivered version's line (when a new
// one was delivered) unless quiet.
wsync::Status waitForJob(wsync::Coordinator& coordinator, const wsync::CoordinatorMetrics& metrics,
                         bool quiet) {
  uint64_t printed = 0;
  while (true) {
    wsync::Status s = coordinator.wait(std::chrono::seconds(1));
    const bool running =
        s.code() == WSYNC_ERR_TIMEOUT && s.message().find("did not finish") != std::string::npos;
    const wsync::MetricsSnapshot snap = metrics.snapshot();
    if (!quiet && !snap.recent.empty() && snap.newest_delivered > printed) {
      std::fprintf(stderr, "[wsync coordinator] %s (%llu delivered in the last second)\n",
                   wsync::versionLine(snap.recent.back()).c_str(),
                   static_cast<unsigned long long>(snap.newest_delivered - printed));
      printed = snap.newest_delivered;
    }
    if (!running) return s;
  }
}

int run(int argc, char** argv) {
  cxxopts::Options options("wsync-coordinator", "The coordinator of a wsync job");
  options.add_options()("mpi", "run as world rank 0 of an mpirun job")(
      "trainers", "trainer ranks (standalone)", cxxopts::value<int>()->default_value("0"))(
      "rollouts",
      "fixed rollout ranks (standalone; 0: an elastic job, every replica joins at run time)",
      cxxopts::value<int>()->default_value("0"))(
      "bind", "address to listen on (standalone)",
      cxxopts::value<std::string>()->default_value("127.0.0.1"))(
      "port", "port to listen on (standalone; 0: any, printed)",
      cxxopts::value<int>()->default_value("0"))("secret", "shared secret (default: $WSYNC_SECRET)",
                                                 cxxopts::value<std::string>()->default_value(""))(
      "timeout-ms", "bound on joining, committing and each version",
      cxxopts::value<int>()->default_value("60000"))(
      "max-staleness", "versions a replica may lag before publish waits (-1: unbounded)",
      cxxopts::value<int>()->default_value("-1"))(
      "skip-grace-ms", "wait this long for a busy replica before skipping it for a version",
      cxxopts::value<int>()->default_value("200"))(
      "heartbeat-timeout-ms",
      "drop a rollout rank silent this long (0: never; default: $WSYNC_HEARTBEAT_TIMEOUT_MS or "
      "10000)",
      cxxopts::value<int>()->default_value("-1"))(
      "checksums",
      "checksum versions: rollouts verify before a version is ready (default: "
      "$WSYNC_CHECKSUMS)")(
      "checksum-retries",
      "re-sends of a version whose checksum failed on a replica (default: $WSYNC_CHECKSUM_RETRIES "
      "or 3)",
      cxxopts::value<int>()->default_value("-1"))(
      "delta",
      "delta versions: only changed elements cross the network (implies --checksums; default: "
      "$WSYNC_DELTA)")("delta-max-share",
                       "with --delta, a write whose patch exceeds this share of its dense bytes "
                       "goes dense (default: "
                       "$WSYNC_DELTA_MAX_SHARE or 0.25)",
                       cxxopts::value<std::string>()->default_value(""))(
      "trainer-restart",
      "standalone: losing a trainer does not fail the job; rollouts keep serving their newest "
      "version while the trainers restart (same count, same registrations) and publish versions "
      "above the last started one")("trainer-restart-timeout-ms",
                                    "how long to wait for restarted trainers to commit",
                                    cxxopts::value<int>()->default_value("600000"))(
      "metrics-port", "serve Prometheus metrics at http://<metrics-bind>:PORT/metrics (0: off)",
      cxxopts::value<int>()->default_value("0"))(
      "spin-wait-us",
      "busy polling after each message while a version moves, in microseconds (-1: "
      "WSYNC_SPIN_WAIT_US, default 0: never)",
      cxxopts::value<int>()->default_value("-1"))(
      "metrics-bind", "address the metrics server listens on",
      cxxopts::value<std::string>()->default_value("127.0.0.1"))("quiet", "no progress lines")(
      "h,help", "this help");
  const auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::printf("%s\n", options.help().c_str());
    return 0;
  }
  wsync::CoordinatorOptions opt;
  opt.timeout = std::chrono::milliseconds(args["timeout-ms"].as<int>());
  opt.max_staleness = args["max-staleness"].as<int>();
  opt.skip_grace = std::chrono::milliseconds(args["skip-grace-ms"].as<int>());
  opt.control.secret = args["secret"].as<std::string>();
  wsync::Result<wsync::Options> environment = wsync::readOptions();
  if (!environment.isOk()) {
    std::fprintf(stderr, "wsync-coordinator: %s\n", environment.status().toString().c_str());
    return 2;
  }
  if (opt.control.secret.empty()) opt.control.secret = environment->secret;
  // The job-wide settings: this process's environment, overridden by its flags.
  opt.job = environment->job;
  const int heartbeat_ms = args["heartbeat-timeout-ms"].as<int>();
  if (heartbeat_ms >= 0) opt.job.heartbeat_timeout_ms = heartbeat_ms;
  if (args.count("checksums") > 0) opt.job.checksums = true;
  const int retries = args["checksum-retries"].as<int>();
  if (retries >= 0) opt.job.checksum_retries = retries;
  if (args.count("delta") > 0) opt.job.delta = true;
  if (const std::string share = args["delta-max-share"].as<std::string>(); !share.empty()) {
    wsync::Options parsed;
    const wsync::Status s = wsync::setOption(parsed, "WSYNC_DELTA_MAX_SHARE", share);
    if (!s.isOk()) {
      std::fprintf(stderr, "wsync-coordinator: --delta-max-share: %s\n", s.toString().c_str());
      return 2;
    }
    opt.job.delta_max_share = parsed.job.delta_max_share;
  }
  const int spin_us = args["spin-wait-us"].as<int>();
  opt.control.spin_wait =
      std::chrono::microseconds(spin_us >= 0 ? spin_us : environment->spin_wait_us);
  const bool quiet = args.count("quiet") > 0;
  if (!quiet) opt.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  const auto metrics = std::make_shared<wsync::CoordinatorMetrics>();
  opt.metrics = metrics;
  MetricsEndpoint endpoint;
  if (!endpoint.start(args["metrics-bind"].as<std::string>(), args["metrics-port"].as<int>(),
                      metrics))
    return 1;

  wsync::Result<std::unique_ptr<wsync::Coordinator>> coordinator =
      wsync::internalError("not started");
  if (args.count("mpi")) {
    opt.first_participant_world_rank = 1;
    coordinator = wsync::hostCoordinatorForMpiJob(std::move(opt), environment->coordinator_host);
  } else {
    if (opt.control.secret.empty()) {
      std::fprintf(stderr, "wsync-coordinator: a secret is required (--secret or WSYNC_SECRET)\n");
      return 2;
    }
    opt.num_trainers = args["trainers"].as<int>();
    opt.num_rollouts = args["rollouts"].as<int>();
    opt.bind_host = args["bind"].as<std::string>();
    opt.port = static_cast<uint16_t>(args["port"].as<int>());
    opt.trainer_restart = args.count("trainer-restart") > 0;
    opt.trainer_restart_timeout =
        std::chrono::milliseconds(args["trainer-restart-timeout-ms"].as<int>());
    if (args.count("rollouts") == 0) {  // 0 must be asked for: it makes the job elastic
      std::fprintf(stderr,
                   "wsync-coordinator: --rollouts is required (the fixed rollout ranks; 0: an "
                   "elastic job whose replicas all join at run time)\n");
      return 2;
    }
    if (opt.num_trainers <= 0 || opt.num_rollouts < 0) {
      std::fprintf(stderr,
                   "wsync-coordinator: --trainers must be positive and --rollouts >= 0 (0: an "
                   "elastic job whose replicas all join at run time), got --trainers %d "
                   "--rollouts %d\n",
                   opt.num_trainers, opt.num_rollouts);
      return 2;
    }
    coordinator = wsync::Coordinator::start(std::move(opt));
    if (coordinator.isOk())
      std::printf("wsync-coordinator listening on port %u\n", (*coordinator)->port());
    std::fflush(stdout);
  }
  if (!coordinator.isOk()) {
    std::fprintf(stderr, "wsync-coordinator: %s\n", coordinator.status().toString().c_str());
    return 1;
  }
  // The job ends when every rank said goodbye or it failed; a job runs as long as it runs.
  const wsync::Status s = waitForJob(**coordinator, *metrics, quiet);
  (*coordinator)->stop();
  if (!quiet)
    std::fprintf(stderr, "[wsync coordinator] %s\n",
                 wsync::summaryLine(metrics->snapshot()).c_str());
  if (!s.isOk()) {
    std::fprintf(stderr, "wsync-coordinator: job failed: %s\n", s.toString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool mpi = false;
  for (int i = 1; i < argc; ++i)
    mpi = mpi || std::string(argv[i]) == "--mpi";
  if (mpi) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  }
  int rc = 1;
  try {
    rc = run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wsync-coordinator: %s\n", e.what());
  }
  if (mpi) MPI_Finalize();
  return rc;
}
