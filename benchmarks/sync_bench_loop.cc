// wsync-sync-bench: the sync loop (see the header).
#include "sync_bench_loop.h"

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

namespace wsync_bench {
namespace {

// Latencies (microseconds) of wsync_acquire on a rollout rank, taken while versions stream in.
class LeaseReader {
 public:
  LeaseReader(wsync_context_t ctx, int sleep_us) : ctx_(ctx), sleep_us_(sleep_us) {
    samples_.reserve(1 << 20);
    thread_ = std::thread([this] { loop(); });
  }
  ~LeaseReader() { stop(); }
  // Samples are recorded only while recording is on (set around each transfer).
  void setRecording(bool on) { recording_.store(on, std::memory_order_release); }
  void stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  // Valid after stop().
  const std::vector<double>& samples() const { return samples_; }
  int64_t failures() const { return failures_; }

 private:
  void loop() {
    while (!stop_.load(std::memory_order_acquire)) {
      const bool record = recording_.load(std::memory_order_acquire);
      const auto t0 = Clock::now();
      wsync_lease_t lease = nullptr;
      const wsync_status_t s = wsync_acquire(ctx_, WSYNC_VERSION_NEWEST, &lease);
      const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
      if (s == WSYNC_SUCCESS) {
        wsync_lease_release(lease);
        if (record) samples_.push_back(us);
      } else if (record) {
        ++failures_;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
    }
  }

  wsync_context_t ctx_;
  int sleep_us_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> recording_{false};
  std::vector<double> samples_;
  int64_t failures_ = 0;
  std::thread thread_;
};

wsync_context_t createContext(const Options& opt, const Roles& roles, const MemoryKind& memory) {
  wsync_config_t cfg = WSYNC_CONFIG_INITIALIZER;
  cfg.role = roles.trainer ? WSYNC_ROLE_TRAINER : WSYNC_ROLE_ROLLOUT;
  cfg.replica = roles.trainer ? -1 : roles.replica;
  cfg.num_slots = opt.slots;
  cfg.timeout_ms = opt.timeout_ms;
  cfg.checksums = opt.checksums ? 1 : 0;
  memory.configure(&cfg);
  wsync_context_t ctx = nullptr;
  const wsync_status_t s = wsync_context_create(&cfg, &ctx);
  if (s != WSYNC_SUCCESS) dieWsync(nullptr, roles.world_rank, "wsync_context_create", s);
  int rank = -1, num_trainers = 0, num_rollouts = 0;
  wsync_context_info(ctx, &rank, &num_trainers, &num_rollouts);
  if (rank != roles.role_rank || num_trainers != roles.trainers || num_rollouts != roles.rollouts) {
    dieBench(roles.world_rank,
             "wsync sees role rank " + std::to_string(rank) + " of " +
                 std::to_string(num_trainers) + " trainers, " + std::to_string(num_rollouts) +
                 " rollouts; expected " + std::to_string(roles.role_rank) + " of " +
                 std::to_string(roles.trainers) + ", " + std::to_string(roles.rollouts));
  }
  return ctx;
}

// Registers this rank's buffers (their indices into `indices`) and commits.
PlanSummary registerAndCommit(wsync_context_t ctx, const Roles& roles, const Comms& comms,
                              const std::vector<wsync_demo::TensorSpec>& tensors,
                              const MemoryKind& memory, PhaseClock& phases,
                              std::vector<int>* indices) {
  wsync_status_t s = wsync_demo::registerBuffers(ctx, tensors, memory.layout(), memory.dtype(),
                                                 memory.registered(), indices, memory.wsyncKind());
  if (s != WSYNC_SUCCESS) dieWsync(ctx, roles.world_rank, "wsync_register_buffer", s);
  phases.mark("register");
  const auto commit_t0 = Clock::now();
  s = wsync_commit(ctx);
  if (s != WSYNC_SUCCESS) dieWsync(ctx, roles.world_rank, "wsync_commit", s);
  PlanSummary plan;
  plan.commit_seconds = secondsSince(commit_t0);
  wsync_plan_info_t info{};
  wsync_plan_info(ctx, &info);
  plan.bytes_per_version = info.bytes_per_version;
  plan.num_replicas = info.num_replicas;
  int64_t mine[2] = {roles.trainer ? info.broadcast_groups : 0, roles.trainer ? info.write_ops : 0};
  int64_t sums[2] = {0, 0};
  MPI_Reduce(mine, sums, 2, MPI_INT64_T, MPI_SUM, 0, comms.bench);
  plan.broadcast_groups = sums[0];
  plan.write_ops = sums[1];
  phases.mark("commit");
  return plan;
}

// Versions on one rank, and what it records of them.
class VersionRunner {
 public:
  VersionRunner(wsync_context_t ctx, const Options& opt, const Roles& roles, const Comms& comms,
                MemoryKind& memory)
      : ctx_(ctx), opt_(opt), roles_(roles), comms_(comms), memory_(memory) {}

  void startReader() {
    if (!roles_.trainer && opt_.reader)
      reader_ = std::make_unique<LeaseReader>(ctx_, opt_.reader_sleep_us);
  }
  void stopReader(std::vector<double>* samples, int64_t* failures) {
    if (!reader_) return;
    reader_->stop();
    *samples = reader_->samples();
    *failures = reader_->failures();
    reader_.reset();
  }

  // One version (see the file comment); this rank's seconds. `record`: the reader's samples
  // and the publish times are kept; `checkable`: trainers write expectedValue(version).
  double sync(uint64_t version, bool record, bool checkable) {
    if (roles_.trainer) memory_.fillVersion(version, checkable);
    if (memory_.timing().busy_barrier) {
      MPI_Barrier(comms_.bench);
    } else {
      sleepingBarrier(comms_.bench);
    }
    return roles_.trainer ? publish(version, record) : waitReadable(version, record);
  }

  std::vector<double> block_seconds;   // trainers, per recorded version
  std::vector<double> stream_seconds;  // trainers with --snapshot, per recorded version

 private:
  // Publish -> delivered.
  double publish(uint64_t version, bool record) {
    const auto t0 = Clock::now();
    wsync_request_t request = nullptr;
    wsync_status_t st = wsync_publish_on_stream(ctx_, version, memory_.stream(), &request);
    if (st != WSYNC_SUCCESS) dieWsync(ctx_, roles_.world_rank, "wsync_publish_on_stream", st);
    const double blocked = secondsSince(t0);
    // Snapshot: how long the training stream is held by the copy into staging.
    if (opt_.snapshot) memory_.synchronizeStream();
    const double held = secondsSince(t0);
    st = wsync_request_wait(request, -1);
    wsync_request_free(request);
    if (st != WSYNC_SUCCESS) dieWsync(ctx_, roles_.world_rank, "wsync_request_wait", st);
    const double total = secondsSince(t0);
    if (record) {
      block_seconds.push_back(blocked);
      if (opt_.snapshot) stream_seconds.push_back(held);
    }
    return total;
  }

  // Until `version` is ready on this rollout's replica.
  double waitReadable(uint64_t version, bool record) {
    const auto t0 = Clock::now();
    if (reader_ && record) reader_->setRecording(true);
    uint64_t newest = 0;
    wsync_newest_version(ctx_, &newest);  // NOT_READY before the first version leaves it 0
    while (newest < version) {
      const wsync_status_t st = wsync_wait_version(ctx_, newest, -1, &newest);
      if (st != WSYNC_SUCCESS) dieWsync(ctx_, roles_.world_rank, "wsync_wait_version", st);
    }
    const double readable = secondsSince(t0);
    if (reader_) reader_->setRecording(false);
    return readable;
  }

  wsync_context_t ctx_;
  const Options& opt_;
  const Roles& roles_;
  const Comms& comms_;
  MemoryKind& memory_;
  std::unique_ptr<LeaseReader> reader_;
};

// --warmup untimed versions, then --iters timed ones (seconds into out->seconds on world rank 0).
// Returns the last version.
uint64_t runVersions(VersionRunner& runner, const Options& opt, const Roles& roles,
                     const Comms& comms, const MemoryKind& memory, PhaseClock& phases,
                     SyncResult* out) {
  const bool root = roles.world_rank == 0;
  uint64_t version = 0;
  for (int i = 0; i < opt.warmup; ++i) {
    const double sec = runner.sync(++version, false, false);
    if (root) memory.printWarmup(i + 1, sec);
  }
  phases.mark("warmup");
  for (int i = 0; i < opt.iters; ++i) {
    const double mine = runner.sync(++version, true, false);
    double sec = mine;
    if (memory.timing().slowest_rank)
      MPI_Allreduce(&mine, &sec, 1, MPI_DOUBLE, MPI_MAX, comms.bench);
    if (!root) continue;
    out->seconds.push_back(sec);
    TimedVersion timed;
    timed.iteration = i + 1;
    timed.version = version;
    timed.bytes = out->plan.bytes_per_version;
    timed.seconds = sec;
    timed.publish_blocked_s = runner.block_seconds.back();
    timed.stream_held_s = opt.snapshot ? runner.stream_seconds.back() : 0;
    memory.printTimedVersion(timed);
  }
  return version;
}

// --copy-flip: one rollout rank at a time, so each has the device to itself; that rank's
// seconds of each timed wsync_copy_flip (the first one is not timed).
std::vector<double> timeCopyFlips(wsync_context_t ctx, const Options& opt, const Roles& roles,
                                  const Comms& comms, const MemoryKind& memory) {
  std::vector<double> seconds;
  for (int r = 0; r < roles.rollouts; ++r) {
    sleepingBarrier(comms.bench);
    if (roles.trainer || roles.role_rank != r) continue;
    for (int i = 0; i <= opt.flip_iters; ++i) {
      const auto t0 = Clock::now();
      uint64_t flipped = 0;
      const wsync_status_t s =
          wsync_copy_flip(ctx, WSYNC_VERSION_NEWEST, memory.stream(), &flipped);
      if (s != WSYNC_SUCCESS) dieWsync(ctx, roles.world_rank, "wsync_copy_flip", s);
      if (i > 0) seconds.push_back(secondsSince(t0));
    }
  }
  return seconds;
}

// Rollouts: wrong elements of `version` in the slot (and, with --copy-flip, in the live buffers
// after a copy flip of it).
int64_t checkRollout(wsync_context_t ctx, const Options& opt, const Roles& roles,
                     const std::vector<int>& indices, uint64_t version, MemoryKind& memory) {
  wsync_lease_t lease = nullptr;
  wsync_status_t s = wsync_acquire(ctx, version, &lease);
  if (s != WSYNC_SUCCESS)
    dieWsync(ctx, roles.world_rank, "wsync_acquire of the verified version", s);
  std::vector<void*> slot(indices.size(), nullptr);
  for (size_t b = 0; b < indices.size(); ++b)
    wsync_lease_buffer(lease, indices[b], &slot[b]);
  int64_t bad = memory.countWrong(slot, version, "slot");
  wsync_lease_release(lease);
  if (opt.copy_flip) {
    uint64_t flipped = 0;
    s = wsync_copy_flip(ctx, version, memory.stream(), &flipped);
    if (s != WSYNC_SUCCESS)
      dieWsync(ctx, roles.world_rank, "wsync_copy_flip of the verified version", s);
    bad += memory.countWrong(memory.registered(), version, "live buffers after copy flip");
  }
  return bad;
}

// Pools the samples of every rank on world rank 0 (collective).
void poolStatistics(const VersionRunner& runner, const std::vector<double>& acquire_us,
                    int64_t acquire_failures, const std::vector<double>& flips, const Comms& comms,
                    SyncResult* out) {
  out->acquire_us = gatherSamples(acquire_us, comms.bench);
  out->copy_flip_seconds = gatherSamples(flips, comms.bench);
  std::sort(out->acquire_us.begin(), out->acquire_us.end());
  std::sort(out->copy_flip_seconds.begin(), out->copy_flip_seconds.end());
  MPI_Reduce(&acquire_failures, &out->acquire_failures, 1, MPI_INT64_T, MPI_SUM, 0, comms.bench);
  double publish_mine[2] = {median(runner.block_seconds), median(runner.stream_seconds)};
  double publish_max[2] = {0, 0};
  MPI_Reduce(publish_mine, publish_max, 2, MPI_DOUBLE, MPI_MAX, 0, comms.bench);
  out->publish_block_s = publish_max[0];
  out->publish_stream_s = publish_max[1];
}

}  // namespace

SyncResult runSync(const Options& opt, const Roles& roles, const Comms& comms,
                   const std::vector<wsync_demo::TensorSpec>& tensors, MemoryKind& memory,
                   PhaseClock& phases) {
  SyncResult out;
  wsync_context_t ctx = createContext(opt, roles, memory);
  std::vector<int> indices;
  out.plan = registerAndCommit(ctx, roles, comms, tensors, memory, phases, &indices);
  memory.beforeTimedVersions(out.plan);

  VersionRunner runner(ctx, opt, roles, comms, memory);
  runner.startReader();
  uint64_t version = runVersions(runner, opt, roles, comms, memory, phases, &out);
  std::vector<double> acquire_us;
  int64_t acquire_failures = 0;
  runner.stopReader(&acquire_us, &acquire_failures);
  phases.mark("timed");
  memory.afterTimedVersions();

  std::vector<double> flips;
  if (opt.copy_flip) {
    flips = timeCopyFlips(ctx, opt, roles, comms, memory);
    phases.mark("copy_flip");
  }

  out.verified_version = ++version;
  runner.sync(version, false, true);
  const int64_t bad = roles.trainer ? 0 : checkRollout(ctx, opt, roles, indices, version, memory);
  MPI_Allreduce(&bad, &out.mismatches, 1, MPI_INT64_T, MPI_SUM, comms.bench);
  phases.mark("verify");
  if (roles.world_rank == 0) {
    std::printf("[wsync] version %" PRIu64 " verified%s on every rollout rank%s: %s (%" PRId64
                " wrong elements)\n",
                version, memory.checkedWhere(), opt.copy_flip ? " (slot and live buffers)" : "",
                out.mismatches == 0 ? "ok" : "FAILED", out.mismatches);
    std::fflush(stdout);
  }

  poolStatistics(runner, acquire_us, acquire_failures, flips, comms, &out);
  const wsync_status_t s = wsync_context_destroy(ctx);
  if (s != WSYNC_SUCCESS) dieWsync(nullptr, roles.world_rank, "wsync_context_destroy", s);
  memory.release();
  phases.mark("teardown");
  return out;
}

}  // namespace wsync_bench
