// wsync-sync-bench: the host-memory weight-sync benchmark of wsync against the baseline open RL
// frameworks use today (gather every tensor to trainer rank 0, broadcast it to every rollout rank).
//
// One SPMD binary: the first --trainers world ranks (default: half) are trainers, the rest rollout
// ranks (world rank 0 is a trainer and hosts wsync's coordinator). The model is the demo policy
// (trainer_integration/demo_policy.h) scaled to about --bytes of float32. Trainers hold it
// FSDP-like (Shard(0) over the trainers); rollouts form --replicas replicas of TP = rollouts /
// replicas in the
// --layout asked for (match: every byte by broadcast groups; differ: every byte by one-sided
// writes; mixed: vLLM-like, some of each).
//
// Phases, all in one run:
//   1. wsync: register, commit; memcpy reference on rank 0; --warmup, then --iters timed versions
//      (publish -> delivered, on trainer rank 0) while a reader thread on every rollout rank
//      acquires and releases leases and records how long wsync_acquire takes; then one version
//      filled with known values is verified bit for bit on every rollout rank.
//   2. baseline: the same layouts in plain float32 host buffers; per version, for each tensor in
//      order, MPI_Gatherv of the trainers' Shard(0) pieces to trainer rank 0, MPI_Bcast of the full
//      tensor from trainer rank 0 to every rollout rank, and each rollout copies out its shard.
//      Timed the same way (sleeping barrier, then until a final barrier), and verified.
// Output on rank 0: a human line per iteration, then, as the last line, one JSON object.
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <cxxopts.hpp>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "trainer_integration/demo_policy.h"
#include "wsync/wsync.h"

namespace {

using Clock = std::chrono::steady_clock;
using wsync_demo::BufferSpec;
using wsync_demo::PieceSpec;
using wsync_demo::TensorSpec;

constexpr size_t kMemcpyChunkBytes = size_t{512} << 20;  // memcpy reference buffer cap

double secondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A barrier that sleeps while it waits: a busy MPI_Barrier would take the CPU from wsync's
// background threads (publisher, receiver, coordinator) on a machine with few cores.
void sleepingBarrier(MPI_Comm comm) {
  MPI_Request req = MPI_REQUEST_NULL;
  MPI_Ibarrier(comm, &req);
  int done = 0;
  while (true) {
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (done) return;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The q-quantile (0..1) of sorted samples, nearest rank.
double quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const size_t i =
      std::min(sorted.size() - 1, static_cast<size_t>(q * static_cast<double>(sorted.size())));
  return sorted[i];
}

std::string loadAverage() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

// GB/s (1e9 bytes per second) of copying `total` bytes in one process with memcpy, best of
// `repeats`; buffers of at most kMemcpyChunkBytes, copied repeatedly to make up `total`.
double memcpyGbps(uint64_t total, int repeats) {
  const size_t chunk =
      static_cast<size_t>(std::min<uint64_t>(std::max<uint64_t>(total, 1), kMemcpyChunkBytes));
  std::vector<char> src(chunk, 1), dst(chunk, 2);  // both touched before timing
  std::memcpy(dst.data(), src.data(), chunk);
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    for (uint64_t done = 0; done < total;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk, total - done));
      std::memcpy(dst.data(), src.data(), n);
      done += n;
    }
    const double s = secondsSince(t0);
    best = std::max(best, static_cast<double>(total) / s / 1e9);
  }
  return best;
}

// Copies the elements of piece `p` (see PieceSpec) out of `full`, the whole tensor row-major, into
// `dst`, one memcpy per innermost run.
void copyPieceFromTensor(const TensorSpec& t, const PieceSpec& p, const float* full, float* dst) {
  const size_t rank = t.shape.size();
  if (rank == 0) {
    dst[p.local_offset] = full[0];
    return;
  }
  for (int64_t e : p.extent) {
    if (e == 0) return;
  }
  std::vector<int64_t> global(rank, 1);
  for (int d = static_cast<int>(rank) - 2; d >= 0; --d)
    global[d] = global[d + 1] * t.shape[d + 1];
  std::vector<int64_t> idx(rank, 0);
  const size_t run_bytes = static_cast<size_t>(p.extent[rank - 1]) * sizeof(float);
  while (true) {
    int64_t local = p.local_offset;
    int64_t flat = 0;
    for (size_t d = 0; d < rank; ++d) {
      local += idx[d] * p.strides[d];
      flat += (p.offset[d] + idx[d]) * global[d];
    }
    std::memcpy(dst + local, full + flat, run_bytes);
    int d = static_cast<int>(rank) - 2;
    while (d >= 0 && ++idx[static_cast<size_t>(d)] == p.extent[static_cast<size_t>(d)]) {
      idx[static_cast<size_t>(d)] = 0;
      --d;
    }
    if (d < 0) return;
  }
}

struct Options {
  int64_t bytes = int64_t{1} << 30;
  std::string layout_name = "differ";
  wsync_demo::RolloutLayout layout = wsync_demo::RolloutLayout::kDiffer;
  std::string dtype_name = "float32";
  wsync_dtype_t dtype = WSYNC_DTYPE_FLOAT32;
  int trainers = 0;  // 0: half the world
  int replicas = 1;
  int iters = 5;
  int warmup = 1;
  int baseline_iters = -1;  // -1: --iters
  int reader_sleep_us = 50;
  int timeout_ms = 120000;
  bool baseline = true;
  bool reader = true;
};

// Where this process sits in the job.
struct Roles {
  int world_rank = 0;
  int world_size = 0;
  int trainers = 0;
  int rollouts = 0;
  bool trainer = false;
  int role_rank = 0;  // index among the ranks of its role
  int tp = 1;
  int replica = 0;
  int tp_rank = 0;
};

// Communicators of the benchmark itself (wsync uses MPI_COMM_WORLD and its own).
struct Comms {
  MPI_Comm bench = MPI_COMM_NULL;    // every rank
  MPI_Comm trainer = MPI_COMM_NULL;  // trainers only (baseline gather)
  MPI_Comm bcast = MPI_COMM_NULL;    // trainer rank 0 + every rollout (baseline broadcast), root 0
  ~Comms() {
    for (MPI_Comm* c : {&bench, &trainer, &bcast}) {
      if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
    }
  }
};

[[noreturn]] void die(wsync_context_t ctx, const Roles& roles, const char* what, wsync_status_t s) {
  std::fprintf(stderr, "[world rank %d] %s failed: %s: %s\n", roles.world_rank, what,
               wsync_status_string(s), wsync_last_error(ctx));
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

// Latencies (microseconds) of wsync_acquire on a rollout rank, taken while a version streams in.
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

// Results of the wsync phase, as rank 0 sees them.
struct WsyncResult {
  uint64_t bytes_delivered = 0;
  int num_replicas = 0;
  int64_t broadcast_groups = 0;  // summed over the trainers
  int64_t write_ops = 0;         // summed over the trainers
  std::vector<double> seconds;
  double memcpy_gbps = 0;         // the best of memcpy_before_gbps and memcpy_after_gbps
  double memcpy_before_gbps = 0;  // best of 3 just before the timed versions
  double memcpy_after_gbps = 0;   // best of 3 just after them (the machine's load changes)
  double acquire_p50 = 0, acquire_p99 = 0, acquire_max = 0;
  int64_t acquire_samples = 0;
  int64_t acquire_failures = 0;
  int64_t mismatches = 0;
};

// Phase 1: wsync. Returns with the context destroyed.
WsyncResult runWsync(const Options& opt, const Roles& roles, const Comms& comms,
                     const std::vector<TensorSpec>& tensors,
                     const std::vector<BufferSpec>& trainer_layout,
                     std::vector<std::vector<float>>& trainer_data) {
  WsyncResult out;
  wsync_config_t cfg = WSYNC_CONFIG_INITIALIZER;
  cfg.role = roles.trainer ? WSYNC_ROLE_TRAINER : WSYNC_ROLE_ROLLOUT;
  cfg.replica = roles.trainer ? -1 : roles.replica;
  cfg.num_slots = 2;
  cfg.timeout_ms = opt.timeout_ms;
  wsync_context_t ctx = nullptr;
  wsync_status_t s = wsync_context_create(&cfg, &ctx);
  if (s != WSYNC_SUCCESS) die(nullptr, roles, "wsync_context_create", s);
  int rank = -1, num_trainers = 0, num_rollouts = 0;
  wsync_context_info(ctx, &rank, &num_trainers, &num_rollouts);
  if (rank != roles.role_rank || num_trainers != roles.trainers || num_rollouts != roles.rollouts) {
    std::fprintf(stderr,
                 "[world rank %d] wsync sees role rank %d of %d trainers, %d rollouts; expected %d "
                 "of %d, %d\n",
                 roles.world_rank, rank, num_trainers, num_rollouts, roles.role_rank,
                 roles.trainers, roles.rollouts);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

  std::vector<BufferSpec> rollout_layout;
  std::vector<int> indices;
  if (roles.trainer) {
    std::vector<void*> data;
    for (auto& d : trainer_data)
      data.push_back(d.data());
    s = wsync_demo::registerBuffers(ctx, tensors, trainer_layout, WSYNC_DTYPE_FLOAT32, data,
                                    &indices);
  } else {
    rollout_layout = wsync_demo::rolloutLayout(tensors, opt.layout, roles.tp, roles.tp_rank);
    s = wsync_demo::registerBuffers(ctx, tensors, rollout_layout, opt.dtype, {}, &indices);
  }
  if (s != WSYNC_SUCCESS) die(ctx, roles, "wsync_register_buffer", s);
  const auto commit_t0 = Clock::now();
  s = wsync_commit(ctx);
  if (s != WSYNC_SUCCESS) die(ctx, roles, "wsync_commit", s);
  const double commit_s = secondsSince(commit_t0);
  wsync_plan_info_t plan{};
  wsync_plan_info(ctx, &plan);
  out.bytes_delivered = plan.bytes_per_version;
  out.num_replicas = plan.num_replicas;
  int64_t mine[2] = {roles.trainer ? plan.broadcast_groups : 0, roles.trainer ? plan.write_ops : 0};
  int64_t sums[2] = {0, 0};
  MPI_Reduce(mine, sums, 2, MPI_INT64_T, MPI_SUM, 0, comms.bench);
  out.broadcast_groups = sums[0];
  out.write_ops = sums[1];

  // The physical reference, on rank 0 while every other rank sleeps in the barrier.
  if (roles.world_rank == 0) {
    out.memcpy_before_gbps = memcpyGbps(plan.bytes_per_version, 3);
    out.memcpy_gbps = out.memcpy_before_gbps;
    std::printf(
        "[bench] %d trainers -> %d rollout ranks (%d replicas of TP %d), layout %s, dtype %s: %zu "
        "tensors, "
        "%" PRIu64 " bytes delivered per version; %" PRId64 " broadcast groups, %" PRId64
        " writes; commit %.3f s; memcpy %.2f GB/s\n",
        roles.trainers, roles.rollouts, plan.num_replicas, roles.tp, opt.layout_name.c_str(),
        opt.dtype_name.c_str(), tensors.size(), plan.bytes_per_version, sums[0], sums[1], commit_s,
        out.memcpy_gbps);
    std::fflush(stdout);
  }
  sleepingBarrier(comms.bench);

  std::unique_ptr<LeaseReader> reader;
  if (!roles.trainer && opt.reader)
    reader = std::make_unique<LeaseReader>(ctx, opt.reader_sleep_us);

  // One version: trainers publish and wait; rollouts wait until it is ready on their replica
  // (with the reader's samples recorded meanwhile when `record`).
  auto syncVersion = [&](uint64_t v, bool record) -> double {
    sleepingBarrier(comms.bench);
    if (roles.trainer) {
      const auto t0 = Clock::now();
      wsync_request_t request = nullptr;
      wsync_status_t st = wsync_publish(ctx, v, &request);
      if (st != WSYNC_SUCCESS) die(ctx, roles, "wsync_publish", st);
      st = wsync_request_wait(request, -1);
      wsync_request_free(request);
      if (st != WSYNC_SUCCESS) die(ctx, roles, "wsync_request_wait", st);
      return secondsSince(t0);
    }
    if (reader && record) reader->setRecording(true);
    uint64_t newest = 0;
    wsync_newest_version(ctx, &newest);  // NOT_READY before the first version leaves it 0
    while (newest < v) {
      const wsync_status_t st = wsync_wait_version(ctx, newest, -1, &newest);
      if (st != WSYNC_SUCCESS) die(ctx, roles, "wsync_wait_version", st);
    }
    if (reader) reader->setRecording(false);
    return 0;
  };

  uint64_t version = 0;
  for (int i = 0; i < opt.warmup; ++i) {
    const double sec = syncVersion(++version, false);
    if (roles.world_rank == 0) {
      std::printf("[wsync] warmup %d: %.4f s\n", i + 1, sec);
      std::fflush(stdout);
    }
  }
  for (int i = 0; i < opt.iters; ++i) {
    const double sec = syncVersion(++version, true);
    if (roles.world_rank == 0) {
      const double gbps = static_cast<double>(plan.bytes_per_version) / sec / 1e9;
      std::printf("[wsync] iteration %d (version %" PRIu64 "): %" PRIu64
                  " bytes in %.4f s, %.2f GB/s, %.2f x memcpy\n",
                  i + 1, version, plan.bytes_per_version, sec, gbps, gbps / out.memcpy_gbps);
      std::fflush(stdout);
      out.seconds.push_back(sec);
    }
  }
  std::vector<double> samples;
  int64_t failures = 0;
  if (reader) {
    reader->stop();
    samples = reader->samples();
    failures = reader->failures();
    reader.reset();
  }
  sleepingBarrier(comms.bench);
  if (roles.world_rank == 0) {
    out.memcpy_after_gbps = memcpyGbps(plan.bytes_per_version, 3);
    out.memcpy_gbps = std::max(out.memcpy_before_gbps, out.memcpy_after_gbps);
    std::printf("[bench] memcpy %.2f GB/s before, %.2f GB/s after the timed versions\n",
                out.memcpy_before_gbps, out.memcpy_after_gbps);
  }
  sleepingBarrier(comms.bench);

  // Verification: one version of known values, every element on every rollout rank.
  ++version;
  if (roles.trainer) {
    for (size_t b = 0; b < trainer_layout.size(); ++b) {
      wsync_demo::fillTrainerBuffer(tensors, trainer_layout[b], version, trainer_data[b].data());
    }
  }
  syncVersion(version, false);
  int64_t bad = 0;
  if (!roles.trainer) {
    wsync_lease_t lease = nullptr;
    s = wsync_acquire(ctx, version, &lease);
    if (s != WSYNC_SUCCESS) die(ctx, roles, "wsync_acquire of the verified version", s);
    std::string first;
    for (size_t b = 0; b < rollout_layout.size(); ++b) {
      void* data = nullptr;
      wsync_lease_buffer(lease, indices[b], &data);
      bad += wsync_demo::countMismatches(tensors, rollout_layout[b], opt.dtype, data, version,
                                         first.empty() ? &first : nullptr);
    }
    wsync_lease_release(lease);
    if (bad > 0) {
      std::fprintf(stderr,
                   "[wsync] rollout %d: %" PRId64 " elements of version %" PRIu64
                   " are wrong; first: %s\n",
                   roles.role_rank, bad, version, first.c_str());
    }
  }
  MPI_Allreduce(&bad, &out.mismatches, 1, MPI_INT64_T, MPI_SUM, comms.bench);
  if (roles.world_rank == 0) {
    std::printf("[wsync] version %" PRIu64 " verified on every rollout rank: %s (%" PRId64
                " wrong elements)\n",
                version, out.mismatches == 0 ? "ok" : "FAILED", out.mismatches);
    std::fflush(stdout);
  }

  // Acquire latencies of every rollout rank, pooled on rank 0.
  int n = static_cast<int>(samples.size());
  std::vector<int> counts(static_cast<size_t>(roles.world_size)),
      displs(static_cast<size_t>(roles.world_size));
  MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comms.bench);
  std::vector<double> all;
  if (roles.world_rank == 0) {
    int total = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
      displs[i] = total;
      total += counts[i];
    }
    all.resize(static_cast<size_t>(std::max(total, 1)));
  }
  MPI_Gatherv(samples.data(), n, MPI_DOUBLE, all.data(), counts.data(), displs.data(), MPI_DOUBLE,
              0, comms.bench);
  MPI_Reduce(&failures, &out.acquire_failures, 1, MPI_INT64_T, MPI_SUM, 0, comms.bench);
  if (roles.world_rank == 0) {
    all.resize(static_cast<size_t>(displs.back() + counts.back()));
    std::sort(all.begin(), all.end());
    out.acquire_samples = static_cast<int64_t>(all.size());
    out.acquire_p50 = quantile(all, 0.5);
    out.acquire_p99 = quantile(all, 0.99);
    out.acquire_max = all.empty() ? 0 : all.back();
  }

  s = wsync_context_destroy(ctx);
  if (s != WSYNC_SUCCESS) die(nullptr, roles, "wsync_context_destroy", s);
  return out;
}

// Phase 2: the baseline. Trainers' buffers hold version `version` (filled by phase 1); returns the
// per-iteration seconds on rank 0 and the number of wrong elements (all ranks).
std::vector<double> runBaseline(const Options& opt, const Roles& roles, const Comms& comms,
                                const std::vector<TensorSpec>& tensors,
                                const std::vector<std::vector<float>>& trainer_data,
                                uint64_t version, int64_t* mismatches) {
  // Every trainer's Shard(0) piece of tensor t is one contiguous range of the flattened tensor.
  std::vector<std::vector<int>> counts(tensors.size(),
                                       std::vector<int>(static_cast<size_t>(roles.trainers)));
  std::vector<std::vector<int>> displs = counts;
  for (int tr = 0; tr < roles.trainers; ++tr) {
    const auto layout = wsync_demo::trainerLayout(tensors, roles.trainers, tr);
    for (size_t t = 0; t < tensors.size(); ++t) {
      const PieceSpec& p = layout[t].pieces[0];
      int64_t row = 1;
      for (size_t d = 1; d < tensors[t].shape.size(); ++d)
        row *= tensors[t].shape[d];
      counts[t][static_cast<size_t>(tr)] = static_cast<int>(layout[t].num_elements);
      displs[t][static_cast<size_t>(tr)] =
          static_cast<int>(tensors[t].shape.empty() ? 0 : p.offset[0] * row);
    }
  }
  int64_t max_elements = 1;
  for (const TensorSpec& t : tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape)
      n *= d;
    max_elements = std::max(max_elements, n);
  }
  const bool in_bcast = comms.bcast != MPI_COMM_NULL;
  std::vector<float> full(in_bcast ? static_cast<size_t>(max_elements) : 0);

  // Rollouts: float32 buffers of their layout, and which pieces each tensor feeds.
  std::vector<BufferSpec> layout;
  std::vector<std::vector<float>> buffers;
  std::vector<std::vector<std::pair<size_t, size_t>>> pieces_of(tensors.size());  // (buffer, piece)
  if (!roles.trainer) {
    layout = wsync_demo::rolloutLayout(tensors, opt.layout, roles.tp, roles.tp_rank);
    for (size_t b = 0; b < layout.size(); ++b) {
      buffers.emplace_back(static_cast<size_t>(std::max<int64_t>(1, layout[b].num_elements)), 0.0f);
      for (size_t p = 0; p < layout[b].pieces.size(); ++p) {
        pieces_of[static_cast<size_t>(layout[b].pieces[p].tensor)].push_back({b, p});
      }
    }
  }

  auto oneVersion = [&]() -> double {
    sleepingBarrier(comms.bench);
    const auto t0 = Clock::now();
    for (size_t t = 0; t < tensors.size(); ++t) {
      int n = 1;
      for (int64_t d : tensors[t].shape)
        n *= static_cast<int>(d);
      if (roles.trainer) {
        const int me = counts[t][static_cast<size_t>(roles.role_rank)];
        MPI_Gatherv(trainer_data[t].data(), me, MPI_FLOAT, full.data(), counts[t].data(),
                    displs[t].data(), MPI_FLOAT, 0, comms.trainer);
      }
      if (in_bcast) MPI_Bcast(full.data(), n, MPI_FLOAT, 0, comms.bcast);
      if (!roles.trainer) {
        for (const auto& [b, p] : pieces_of[t]) {
          copyPieceFromTensor(tensors[t], layout[b].pieces[p], full.data(), buffers[b].data());
        }
      }
    }
    sleepingBarrier(comms.bench);
    return secondsSince(t0);
  };

  std::vector<double> seconds;
  const int iters = opt.baseline_iters >= 0 ? opt.baseline_iters : opt.iters;
  for (int i = 0; i < opt.warmup + iters; ++i) {
    const double sec = oneVersion();
    if (roles.world_rank == 0) {
      if (i < opt.warmup) {
        std::printf("[baseline] warmup %d: %.4f s\n", i + 1, sec);
      } else {
        std::printf("[baseline] iteration %d: %.4f s\n", i - opt.warmup + 1, sec);
        seconds.push_back(sec);
      }
      std::fflush(stdout);
    }
  }
  int64_t bad = 0;
  if (!roles.trainer) {
    std::string first;
    for (size_t b = 0; b < layout.size(); ++b) {
      bad += wsync_demo::countMismatches(tensors, layout[b], WSYNC_DTYPE_FLOAT32, buffers[b].data(),
                                         version, first.empty() ? &first : nullptr);
    }
    if (bad > 0) {
      std::fprintf(stderr, "[baseline] rollout %d: %" PRId64 " wrong elements; first: %s\n",
                   roles.role_rank, bad, first.c_str());
    }
  }
  MPI_Allreduce(&bad, mismatches, 1, MPI_INT64_T, MPI_SUM, comms.bench);
  return seconds;
}

int run(int argc, char** argv) {
  cxxopts::Options options(
      "wsync-sync-bench",
      "Host-memory weight sync: wsync against gather-to-rank-0 + broadcast.\n"
      "  mpirun -np 4 wsync-sync-bench --bytes 1073741824 --layout differ\n"
      "The first half of the world ranks are trainers, the rest rollout ranks.");
  options.add_options()("bytes",
                        "model size in bytes of float32 (the demo policy scaled to about this)",
                        cxxopts::value<int64_t>()->default_value("1073741824"))(
      "layout",
      "rollout layout: match (all broadcast groups) | differ (all one-sided writes) | mixed",
      cxxopts::value<std::string>()->default_value("differ"))(
      "dtype", "rollout dtype: float32 | bfloat16 | float16 (trainers hold float32)",
      cxxopts::value<std::string>()->default_value("float32"))(
      "trainers", "trainer ranks (the first ones of the world); 0 = half the world",
      cxxopts::value<int>()->default_value("0"))("replicas",
                                                 "rollout replicas; TP = rollout ranks / replicas",
                                                 cxxopts::value<int>()->default_value("1"))(
      "iters", "timed versions", cxxopts::value<int>()->default_value("5"))(
      "warmup", "untimed versions first", cxxopts::value<int>()->default_value("1"))(
      "baseline-iters", "timed baseline versions (-1: --iters)",
      cxxopts::value<int>()->default_value("-1"))("no-baseline", "skip the baseline")(
      "no-reader", "no lease reader thread on the rollout ranks")(
      "reader-sleep-us", "sleep between two leases of the reader thread",
      cxxopts::value<int>()->default_value("50"))(
      "timeout-ms", "wsync timeout", cxxopts::value<int>()->default_value("120000"))("h,help",
                                                                                     "this help");
  const auto args = options.parse(argc, argv);
  Roles roles;
  MPI_Comm_rank(MPI_COMM_WORLD, &roles.world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &roles.world_size);
  if (args.count("help")) {
    if (roles.world_rank == 0) std::printf("%s\n", options.help().c_str());
    return 0;
  }
  Options opt;
  opt.bytes = args["bytes"].as<int64_t>();
  opt.layout_name = args["layout"].as<std::string>();
  opt.dtype_name = args["dtype"].as<std::string>();
  opt.trainers = args["trainers"].as<int>();
  opt.replicas = args["replicas"].as<int>();
  opt.iters = args["iters"].as<int>();
  opt.warmup = args["warmup"].as<int>();
  opt.baseline_iters = args["baseline-iters"].as<int>();
  opt.baseline = args.count("no-baseline") == 0;
  opt.reader = args.count("no-reader") == 0;
  opt.reader_sleep_us = args["reader-sleep-us"].as<int>();
  opt.timeout_ms = args["timeout-ms"].as<int>();
  auto usage = [&](const std::string& why) {
    if (roles.world_rank == 0) std::fprintf(stderr, "wsync-sync-bench: %s\n", why.c_str());
    return 2;
  };
  if (!wsync_demo::parseRolloutLayout(opt.layout_name, &opt.layout))
    return usage("bad --layout " + opt.layout_name);
  if (!wsync_demo::parseDtype(opt.dtype_name, &opt.dtype))
    return usage("bad --dtype " + opt.dtype_name);
  if (opt.bytes <= 0 || opt.iters < 1 || opt.warmup < 0 || opt.reader_sleep_us < 0 ||
      opt.timeout_ms <= 0) {
    return usage(
        "--bytes and --iters must be positive, --warmup and --reader-sleep-us non-negative");
  }
  roles.trainers = opt.trainers > 0 ? opt.trainers : roles.world_size / 2;
  roles.rollouts = roles.world_size - roles.trainers;
  if (roles.trainers < 1 || roles.rollouts < 1) {
    return usage("needs at least one trainer and one rollout rank (world of " +
                 std::to_string(roles.world_size) + ", --trainers " + std::to_string(opt.trainers) +
                 ")");
  }
  if (opt.replicas < 1 || roles.rollouts % opt.replicas != 0) {
    return usage(std::to_string(roles.rollouts) + " rollout ranks cannot form " +
                 std::to_string(opt.replicas) + " equal replicas");
  }
  roles.trainer = roles.world_rank < roles.trainers;
  roles.role_rank = roles.trainer ? roles.world_rank : roles.world_rank - roles.trainers;
  roles.tp = roles.rollouts / opt.replicas;
  roles.replica = roles.trainer ? 0 : roles.role_rank / roles.tp;
  roles.tp_rank = roles.trainer ? 0 : roles.role_rank % roles.tp;

  // The benchmark's own communicators, made before wsync starts (every rank takes part).
  Comms comms;
  MPI_Comm_dup(MPI_COMM_WORLD, &comms.bench);
  MPI_Comm_split(MPI_COMM_WORLD, roles.trainer ? 0 : MPI_UNDEFINED, roles.world_rank,
                 &comms.trainer);
  MPI_Comm_split(MPI_COMM_WORLD, (roles.world_rank == 0 || !roles.trainer) ? 0 : MPI_UNDEFINED,
                 roles.world_rank, &comms.bcast);

  const std::string load_start = loadAverage();
  const auto tensors = wsync_demo::policyTensors(wsync_demo::policyShapeForBytes(opt.bytes));
  const int64_t model_bytes = wsync_demo::totalElements(tensors) * 4;
  std::vector<BufferSpec> trainer_layout;
  std::vector<std::vector<float>> trainer_data;  // zero-filled, so every page is touched
  if (roles.trainer) {
    trainer_layout = wsync_demo::trainerLayout(tensors, roles.trainers, roles.role_rank);
    for (const BufferSpec& b : trainer_layout) {
      trainer_data.emplace_back(static_cast<size_t>(std::max<int64_t>(1, b.num_elements)), 0.0f);
    }
  }

  const WsyncResult w = runWsync(opt, roles, comms, tensors, trainer_layout, trainer_data);
  const uint64_t verified_version = static_cast<uint64_t>(opt.warmup + opt.iters + 1);

  std::vector<double> baseline_seconds;
  int64_t baseline_mismatches = 0;
  if (opt.baseline) {
    baseline_seconds = runBaseline(opt, roles, comms, tensors, trainer_data, verified_version,
                                   &baseline_mismatches);
    if (roles.world_rank == 0) {
      std::printf("[baseline] verified on every rollout rank: %s (%" PRId64 " wrong elements)\n",
                  baseline_mismatches == 0 ? "ok" : "FAILED", baseline_mismatches);
    }
  }

  if (roles.world_rank == 0) {
    const double ws = median(w.seconds);
    const double wgbps = static_cast<double>(w.bytes_delivered) / ws / 1e9;
    const double bs = median(baseline_seconds);
    std::string baseline_json = "null";
    std::string speedup_json = "null";
    if (opt.baseline) {
      char b[64];
      std::snprintf(b, sizeof(b), "%.6f", bs);
      baseline_json = b;
      std::snprintf(b, sizeof(b), "%.3f", bs / ws);
      speedup_json = b;
    }
    std::printf(
        "[bench] wsync %.4f s (%.2f GB/s, %.2f x memcpy %.2f GB/s); baseline %s s (%s x slower); "
        "acquire "
        "p99 %.1f us over %" PRId64 " leases\n",
        ws, wgbps, wgbps / w.memcpy_gbps, w.memcpy_gbps, baseline_json.c_str(),
        speedup_json.c_str(), w.acquire_p99, w.acquire_samples);
    std::printf(
        "{\"bytes\": %" PRId64 ", \"bytes_delivered\": %" PRIu64
        ", \"layout\": \"%s\", \"dtype\": \"%s\", \"trainers\": %d, \"rollouts\": %d, "
        "\"replicas\": %d, \"tp\": %d, "
        "\"tensors\": %zu, \"broadcast_groups\": %" PRId64 ", \"write_ops\": %" PRId64
        ", \"iters\": %d, \"warmup\": %d, \"wsync_seconds\": %.6f, \"wsync_seconds_min\": %.6f, "
        "\"wsync_seconds_max\": %.6f, \"wsync_gbps\": %.3f, \"memcpy_gbps\": %.3f, "
        "\"ratio_to_memcpy\": %.3f, "
        "\"memcpy_before_gbps\": %.3f, \"memcpy_after_gbps\": %.3f, "
        "\"baseline_seconds\": %s, \"speedup_vs_baseline\": %s, \"acquire_us_p50\": %.2f, "
        "\"acquire_us_p99\": %.2f, "
        "\"acquire_us_max\": %.2f, \"acquire_samples\": %" PRId64 ", \"acquire_failures\": %" PRId64
        ", \"verified\": %s, \"baseline_verified\": %s, \"loadavg_start\": \"%s\", "
        "\"loadavg_end\": \"%s\"}\n",
        model_bytes, w.bytes_delivered, opt.layout_name.c_str(), opt.dtype_name.c_str(),
        roles.trainers, roles.rollouts, w.num_replicas, roles.tp, tensors.size(),
        w.broadcast_groups, w.write_ops, opt.iters, opt.warmup, ws,
        *std::min_element(w.seconds.begin(), w.seconds.end()),
        *std::max_element(w.seconds.begin(), w.seconds.end()), wgbps, w.memcpy_gbps,
        wgbps / w.memcpy_gbps, w.memcpy_before_gbps, w.memcpy_after_gbps, baseline_json.c_str(),
        speedup_json.c_str(), w.acquire_p50, w.acquire_p99, w.acquire_max, w.acquire_samples,
        w.acquire_failures, w.mismatches == 0 ? "true" : "false",
        opt.baseline ? (baseline_mismatches == 0 ? "true" : "false") : "null", load_start.c_str(),
        loadAverage().c_str());
    std::fflush(stdout);
  }
  return (w.mismatches == 0 && baseline_mismatches == 0) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    std::fprintf(stderr, "wsync-sync-bench: MPI does not provide MPI_THREAD_MULTIPLE\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  int rc = 1;
  try {
    rc = run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wsync-sync-bench: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  // Usage errors (2) are seen by every rank alike; a failed verification (1) is known to every
  // rank through the reductions, so all ranks leave together.
  MPI_Finalize();
  return rc;
}
