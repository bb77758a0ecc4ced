// wsync-sync-bench: the weight-sync benchmark of wsync. Host memory (--memory host, the default):
// wsync against the baseline open RL frameworks use today (gather every tensor to trainer rank 0,
// broadcast it to every rollout rank). Device memory (--memory device): wsync on one GPU against a
// plain device-to-device copy of the same bytes.
//
// One SPMD binary: the first --trainers world ranks (default: half) are trainers, the rest rollout
// ranks (world rank 0 is a trainer and hosts wsync's coordinator). The model is the demo policy
// (trainer_integration/demo_policy.h) with the real Llama-3-8B names and shapes (--model
// llama3-8b) or scaled to about --bytes. Trainers hold it FSDP-like (Shard(0) over the trainers);
// rollouts form --replicas replicas of TP = rollouts / replicas in the --layout asked for (match:
// the trainers' boxes; differ: every tensor split along its last dim; mixed: vLLM-like, fused qkv,
// column- and row-parallel). Host memory moves matching boxes by broadcast groups and the others by
// one-sided writes; on one GPU everything goes by CUDA IPC one-sided writes (NCCL needs 2 GPUs).
//
// Host memory, phases, all in one run:
//   1. wsync: register, commit; memcpy reference on rank 0 (before and after the timed versions);
//      --warmup, then --iters timed versions (publish -> delivered, on trainer rank 0) while a
//      reader thread on every rollout rank acquires and releases leases and records how long
//      wsync_acquire takes; then one version filled with known values is verified bit for bit
//      on every rollout rank.
//   2. baseline: the same layouts in plain float32 host buffers; per version, for each tensor in
//      order, MPI_Gatherv of the trainers' Shard(0) pieces to trainer rank 0, MPI_Bcast of the full
//      tensor from trainer rank 0 to every rollout rank, and each rollout copies out its shard.
//      Timed the same way (sleeping barrier, then until a final barrier), and verified.
// Device memory (every rank on --cuda-device; trainers and rollouts hold --dtype, default
// bfloat16), phases: setup (allocate and fill on the device), device copy references on rank 0
// (cudaMemcpy D2D of the bytes delivered per version, of one rollout slot, of one trainer's
// parameters), context + registration, commit, warmup, timed versions (publish_on_stream ->
// delivered on trainer rank 0; the time publish blocks its caller; wsync_acquire latencies on the
// rollouts while versions stream in), --copy-flip (wsync_copy_flip into live buffers, one rollout
// rank at a time), verification (a version whose every element is a hash of tensor, element and
// version, written and counted by kernels on the device), teardown. No baseline.
// Output on rank 0: human lines, then, as the last line, one JSON object.
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cxxopts.hpp>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench_device.h"
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
  std::string model = "generic";  // "generic" (scaled to --bytes) or "llama3-8b"
  bool device = false;            // --memory device
  int cuda_device = 0;
  bool snapshot = false;   // device: trainers publish in snapshot mode
  bool copy_flip = false;  // device: rollouts register live buffers and time wsync_copy_flip
  std::string device_transport = "cuda_ipc";  // device: the rollouts' slots (cuda_ipc | staged)
  int flip_iters = 5;  // timed copy flips per rollout rank (after one untimed)
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

// Every rank's `samples`, concatenated in rank order on rank 0 of `comm` (collective).
std::vector<double> gatherSamples(const std::vector<double>& samples, MPI_Comm comm) {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  int n = static_cast<int>(samples.size());
  std::vector<int> counts(static_cast<size_t>(size)), displs(static_cast<size_t>(size));
  MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm);
  std::vector<double> all;
  if (rank == 0) {
    int total = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
      displs[i] = total;
      total += counts[i];
    }
    all.resize(static_cast<size_t>(std::max(total, 1)));
  }
  MPI_Gatherv(samples.data(), n, MPI_DOUBLE, all.data(), counts.data(), displs.data(), MPI_DOUBLE,
              0, comm);
  if (rank == 0) all.resize(static_cast<size_t>(displs.back() + counts.back()));
  return all;
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
        "tensors, %" PRIu64 " bytes delivered per version; %" PRId64 " broadcast groups, %" PRId64
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
    const auto t0 = Clock::now();
    if (reader && record) reader->setRecording(true);
    uint64_t newest = 0;
    wsync_newest_version(ctx, &newest);  // NOT_READY before the first version leaves it 0
    while (newest < v) {
      const wsync_status_t st = wsync_wait_version(ctx, newest, -1, &newest);
      if (st != WSYNC_SUCCESS) die(ctx, roles, "wsync_wait_version", st);
    }
    const double readable = secondsSince(t0);
    if (reader) reader->setRecording(false);
    return readable;
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
  std::vector<double> all = gatherSamples(samples, comms.bench);
  MPI_Reduce(&failures, &out.acquire_failures, 1, MPI_INT64_T, MPI_SUM, 0, comms.bench);
  if (roles.world_rank == 0) {
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

// ---- device memory ---------------------------------------------------------------------------

constexpr int kNoDevice = 77;            // exit status without a usable GPU (ctest's skip code)
constexpr size_t kArenaAlignment = 256;  // bytes; every buffer starts aligned in its arena
constexpr int kReferenceRepeats = 3;     // device copy references: best of this many
constexpr size_t kPinnedReferenceBytes = size_t{1} << 30;  // pinned host <-> device reference

[[noreturn]] void dieDevice(const Roles& roles, const std::string& what) {
  std::fprintf(stderr, "[world rank %d] %s\n", roles.world_rank, what.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

// The buffers of one layout carved out of one device allocation (256-byte aligned).
struct DeviceArena {
  std::unique_ptr<wsync_bench::DeviceMemory> memory;
  std::vector<size_t> offsets;  // bytes, per buffer
  void* at(size_t buffer) const { return memory->data() + offsets[buffer]; }
};

// Bytes of the buffers of `layout` themselves (no alignment gaps).
uint64_t layoutBytes(const std::vector<BufferSpec>& layout, size_t element_bytes) {
  uint64_t bytes = 0;
  for (const BufferSpec& b : layout)
    bytes += static_cast<uint64_t>(b.num_elements) * element_bytes;
  return bytes;
}

DeviceArena allocateArena(const std::vector<BufferSpec>& layout, size_t element_bytes,
                          const std::string& what, const Roles& roles) {
  DeviceArena a;
  size_t total = 0;
  for (const BufferSpec& b : layout) {
    a.offsets.push_back(total);
    const size_t bytes = static_cast<size_t>(b.num_elements) * element_bytes;
    total += (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
  }
  std::string error;
  a.memory = wsync_bench::DeviceMemory::allocate(total, what, &error);
  if (!a.memory) dieDevice(roles, error);
  return a;
}

// The device kernels' view of every piece of `layout`, buffer b at data[b]; buffer_of[i] is the
// buffer of piece i. Tensors of rank 1 and 2 only (all of the demo policy's).
std::vector<wsync_bench::PatternPiece> patternPieces(const std::vector<TensorSpec>& tensors,
                                                     const std::vector<BufferSpec>& layout,
                                                     const std::vector<void*>& data,
                                                     std::vector<size_t>* buffer_of,
                                                     const Roles& roles) {
  std::vector<wsync_bench::PatternPiece> out;
  buffer_of->clear();
  for (size_t b = 0; b < layout.size(); ++b) {
    for (const PieceSpec& p : layout[b].pieces) {
      const TensorSpec& t = tensors[static_cast<size_t>(p.tensor)];
      wsync_bench::PatternPiece q;
      q.data = data[b];
      q.tensor = p.tensor;
      q.local_offset = p.local_offset;
      if (t.shape.size() == 1 && p.strides[0] == 1) {
        q.rows = 1;
        q.cols = p.extent[0];
        q.local_row_stride = q.cols;
        q.flat_base = p.offset[0];
        q.global_row_stride = t.shape[0];
      } else if (t.shape.size() == 2 && p.strides[1] == 1) {
        q.rows = p.extent[0];
        q.cols = p.extent[1];
        q.local_row_stride = p.strides[0];
        q.flat_base = p.offset[0] * t.shape[1] + p.offset[1];
        q.global_row_stride = t.shape[1];
      } else {
        dieDevice(roles, "tensor '" + t.name + "' (buffer '" + layout[b].name + "') has rank " +
                             std::to_string(t.shape.size()) +
                             " or a strided innermost dim: the device check handles row-major "
                             "boxes of rank 1 and 2");
      }
      out.push_back(q);
      buffer_of->push_back(b);
    }
  }
  return out;
}

// Checks the pattern kernels against wsync_demo::expectedValue and the mismatch counter against
// one corrupted element, on a box [2:5, 300:1300] of a [10, 1500] tensor (index 5), in `dtype`.
void selfTestPattern(wsync_dtype_t dtype, const wsync_bench::DeviceStream& stream,
                     const Roles& roles) {
  std::vector<TensorSpec> tensors(6, TensorSpec{"unused", {1}});
  tensors[5] = TensorSpec{"self_test", {10, 1500}};
  BufferSpec buffer;
  buffer.name = "self_test";
  buffer.num_elements = 3000;
  buffer.pieces.push_back(PieceSpec{5, {2, 300}, {3, 1000}, 0, {1000, 1}});
  const size_t esz = wsync_demo::dtypeBytes(dtype);
  constexpr uint64_t kVersion = 7;
  constexpr int64_t kCorrupted = 1234;
  std::string error;
  auto memory = wsync_bench::DeviceMemory::allocate(3000 * esz, "the pattern self-test", &error);
  if (!memory) dieDevice(roles, error);
  std::vector<size_t> buffer_of;
  const auto pieces = patternPieces(tensors, {buffer}, {memory->data()}, &buffer_of, roles);
  std::vector<uint8_t> host(3000 * esz);
  int64_t device_bad = -1;
  wsync_bench::Mismatch first;
  if (!wsync_bench::fillExpected(pieces, dtype, kVersion, stream, &error) ||
      !stream.synchronize(&error) ||
      !wsync_bench::copyToHost(host.data(), memory->data(), host.size(), &error) ||
      !wsync_bench::countMismatches(pieces, dtype, kVersion, stream, &device_bad, nullptr,
                                    &error)) {
    dieDevice(roles, "pattern self-test: " + error);
  }
  std::string host_first;
  const int64_t host_bad =
      wsync_demo::countMismatches(tensors, buffer, dtype, host.data(), kVersion, &host_first);
  if (host_bad != 0 || device_bad != 0) {
    dieDevice(roles, "pattern self-test: the fill kernel disagrees with expectedValue in " +
                         std::to_string(host_bad) + " elements (first: " + host_first +
                         "), the count kernel finds " + std::to_string(device_bad));
  }
  if (!stream.memsetAsync(memory->data() + kCorrupted * esz, 0x7f, esz, &error) ||
      !wsync_bench::countMismatches(pieces, dtype, kVersion, stream, &device_bad, &first, &error)) {
    dieDevice(roles, "pattern self-test: " + error);
  }
  if (device_bad != 1 || first.element != kCorrupted) {
    dieDevice(roles,
              "pattern self-test: one corrupted element (1234), but the count kernel "
              "finds " +
                  std::to_string(device_bad) + " (first at " + std::to_string(first.element) + ")");
  }
}

std::string jsonNumber(bool valid, double value, int decimals) {
  if (!valid || !std::isfinite(value)) return "null";
  char b[64];
  std::snprintf(b, sizeof(b), "%.*f", decimals, value);
  return b;
}

std::string jsonBool(bool valid, bool value) {
  return valid ? (value ? "true" : "false") : "null";
}

// Device memory: the whole run (see the top of this file). Returns the exit status: 0, 1 (wrong
// elements), kNoDevice (no usable GPU: nothing measured, every rank returns it).
int runDevice(const Options& opt, const Roles& roles, const Comms& comms,
              const std::vector<TensorSpec>& tensors, Clock::time_point process_start) {
  const bool root = roles.world_rank == 0;
  std::string why;
  const int devices = wsync_bench::deviceCount(&why);
  int usable = devices > opt.cuda_device ? 1 : 0;
  if (devices > 0 && !usable) {
    why = std::to_string(devices) + " CUDA device(s), so no device " +
          std::to_string(opt.cuda_device);
  }
  int all_usable = 0;
  MPI_Allreduce(&usable, &all_usable, 1, MPI_INT, MPI_MIN, comms.bench);
  if (!all_usable) {
    if (root) {
      std::fprintf(stderr,
                   "wsync-sync-bench: --memory device needs CUDA device %d on every rank: %s; "
                   "nothing measured (exit %d)\n",
                   opt.cuda_device, usable ? "another rank has none" : why.c_str(), kNoDevice);
    }
    return kNoDevice;
  }

  // Phase times on rank 0, each ended by a sleeping barrier.
  std::vector<std::pair<std::string, double>> phases;
  auto last_mark = Clock::now();
  if (root)
    phases.push_back({"start", std::chrono::duration<double>(last_mark - process_start).count()});
  auto mark = [&](const char* name) {
    sleepingBarrier(comms.bench);
    if (root) phases.push_back({name, secondsSince(last_mark)});
    last_mark = Clock::now();
  };

  // ---- setup: device buffers, filled on the device ----
  std::string error;
  if (!wsync_bench::setDevice(opt.cuda_device, &error)) dieDevice(roles, error);
  const auto stream = wsync_bench::DeviceStream::create(&error);  // the "training stream"
  if (!stream) dieDevice(roles, error);
  if (root) selfTestPattern(opt.dtype, *stream, roles);
  const size_t esz = wsync_demo::dtypeBytes(opt.dtype);
  const std::vector<BufferSpec> layout =
      roles.trainer ? wsync_demo::trainerLayout(tensors, roles.trainers, roles.role_rank)
                    : wsync_demo::rolloutLayout(tensors, opt.layout, roles.tp, roles.tp_rank);
  const uint64_t my_bytes = layoutBytes(layout, esz);
  // Trainers: the parameters. Rollouts with --copy-flip: the engine's live buffers.
  DeviceArena arena;
  std::vector<void*> arena_data;
  if (roles.trainer || opt.copy_flip) {
    arena =
        allocateArena(layout, esz, roles.trainer ? "trainer parameters" : "live buffers", roles);
    for (size_t b = 0; b < layout.size(); ++b)
      arena_data.push_back(arena.at(b));
    if (!stream->memsetAsync(arena.memory->data(), 0, arena.memory->size(), &error) ||
        !stream->synchronize(&error)) {
      dieDevice(roles, error);
    }
  }
  std::vector<size_t> trainer_piece_buffer;
  const auto trainer_pieces =
      roles.trainer ? patternPieces(tensors, layout, arena_data, &trainer_piece_buffer, roles)
                    : std::vector<wsync_bench::PatternPiece>{};
  // Sizes every rank needs: the largest trainer's parameters, the largest rollout slot, and the
  // bytes delivered to all rollouts per version.
  uint64_t mine[3] = {roles.trainer ? my_bytes : 0, roles.trainer ? 0 : my_bytes,
                      roles.trainer ? 0 : my_bytes};
  uint64_t maxes[2] = {0, 0};
  uint64_t delivered = 0;
  MPI_Allreduce(mine, maxes, 2, MPI_UINT64_T, MPI_MAX, comms.bench);
  MPI_Allreduce(&mine[2], &delivered, 1, MPI_UINT64_T, MPI_SUM, comms.bench);
  const uint64_t params_bytes = maxes[0];
  const uint64_t slot_bytes = maxes[1];
  mark("setup");

  // ---- device copy references, on rank 0 while every other rank sleeps in the barrier ----
  double copy_delivered_s = 0, copy_slot_s = 0, copy_params_s = 0;
  double pinned_h2d_s = 0, pinned_d2h_s = 0;  // kPinnedReferenceBytes each way
  size_t used_max = 0, device_total = 0;
  if (root) {
    const size_t ref = static_cast<size_t>(std::max(params_bytes, slot_bytes));
    auto src = wsync_bench::DeviceMemory::allocate(ref, "the copy reference source", &error);
    auto dst = src ? wsync_bench::DeviceMemory::allocate(ref, "the copy reference target", &error)
                   : nullptr;
    size_t free_bytes = 0;
    if (!dst || !stream->memsetAsync(src->data(), 1, ref, &error) ||
        !stream->memsetAsync(dst->data(), 2, ref, &error) || !stream->synchronize(&error) ||
        !wsync_bench::timeDeviceCopy(dst->data(), src->data(), ref, delivered, kReferenceRepeats,
                                     &copy_delivered_s, &error) ||
        !wsync_bench::timeDeviceCopy(dst->data(), src->data(), ref, slot_bytes, kReferenceRepeats,
                                     &copy_slot_s, &error) ||
        !wsync_bench::timeDeviceCopy(dst->data(), src->data(), ref, params_bytes, kReferenceRepeats,
                                     &copy_params_s, &error) ||
        !wsync_bench::deviceMemoryInfo(&free_bytes, &device_total, &error)) {
      dieDevice(roles, "device copy reference: " + error);
    }
    if (!wsync_bench::timePinnedCopies(kPinnedReferenceBytes, kReferenceRepeats, &pinned_h2d_s,
                                       &pinned_d2h_s, &error)) {
      dieDevice(roles, "pinned host copy reference: " + error);
    }
    used_max = device_total - free_bytes;
    std::printf("[bench] device copy (cudaMemcpy D2D, one process, best of %d): %" PRIu64
                " bytes delivered per version in %.6f s = %.1f GB/s; one slot (%" PRIu64
                " bytes) %.6f s; one trainer's parameters (%" PRIu64 " bytes) %.6f s\n",
                kReferenceRepeats, delivered, copy_delivered_s,
                static_cast<double>(delivered) / copy_delivered_s / 1e9, slot_bytes, copy_slot_s,
                params_bytes, copy_params_s);
    std::printf(
        "[bench] pinned host copies (%zu bytes, best of %d): host to device %.1f GB/s, "
        "device to host %.1f GB/s\n",
        kPinnedReferenceBytes, kReferenceRepeats,
        static_cast<double>(kPinnedReferenceBytes) / pinned_h2d_s / 1e9,
        static_cast<double>(kPinnedReferenceBytes) / pinned_d2h_s / 1e9);
    std::fflush(stdout);
  }
  // ---- the delivered bytes copied by every trainer process at once, an equal share each, from
  // its own parameters (repeated when the share is larger) on the GPU they share: what the
  // trainers' copies can reach together when their processes time-slice one device. The slowest
  // trainer's time, best of kReferenceRepeats rounds ----
  double copy_concurrent_s = 0;
  {
    const uint64_t share = delivered / static_cast<uint64_t>(roles.trainers);
    std::unique_ptr<wsync_bench::DeviceMemory> target;
    if (roles.trainer) {
      target = wsync_bench::DeviceMemory::allocate(my_bytes, "the concurrent copy target", &error);
      if (!target) dieDevice(roles, "concurrent device copy reference: " + error);
    }
    auto copyShare = [&]() {
      for (uint64_t done = 0; done < share;) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(my_bytes, share - done));
        if (!wsync_bench::copyOnDevice(target->data(), arena.memory->data(), n, &error)) {
          dieDevice(roles, "concurrent device copy reference: " + error);
        }
        done += n;
      }
    };
    double best = std::numeric_limits<double>::infinity();
    for (int round = 0; round <= kReferenceRepeats; ++round) {  // round 0 is not timed
      MPI_Barrier(comms.bench);
      const auto t0 = Clock::now();
      if (roles.trainer) copyShare();
      const double mine_s = roles.trainer ? secondsSince(t0) : 0.0;
      double slowest = 0;
      MPI_Allreduce(&mine_s, &slowest, 1, MPI_DOUBLE, MPI_MAX, comms.bench);
      if (round > 0) best = std::min(best, slowest);
    }
    copy_concurrent_s = best;
    if (root) {
      std::printf(
          "[bench] device copy of the delivered bytes by all %d trainer processes at once "
          "(cudaMemcpy D2D, an equal share each, best of %d): %.6f s = %.1f GB/s\n",
          roles.trainers, kReferenceRepeats, copy_concurrent_s,
          static_cast<double>(delivered) / copy_concurrent_s / 1e9);
      std::fflush(stdout);
    }
  }
  mark("reference");

  // ---- context and registration ----
  wsync_config_t cfg = WSYNC_CONFIG_INITIALIZER;
  cfg.role = roles.trainer ? WSYNC_ROLE_TRAINER : WSYNC_ROLE_ROLLOUT;
  cfg.replica = roles.trainer ? -1 : roles.replica;
  cfg.num_slots = 2;
  cfg.timeout_ms = opt.timeout_ms;
  cfg.snapshot = roles.trainer && opt.snapshot ? 1 : 0;
  cfg.cuda_device = opt.cuda_device;
  wsync_context_t ctx = nullptr;
  wsync_status_t s = wsync_context_create(&cfg, &ctx);
  if (s != WSYNC_SUCCESS) die(nullptr, roles, "wsync_context_create", s);
  int rank = -1, num_trainers = 0, num_rollouts = 0;
  wsync_context_info(ctx, &rank, &num_trainers, &num_rollouts);
  if (rank != roles.role_rank || num_trainers != roles.trainers || num_rollouts != roles.rollouts) {
    dieDevice(roles, "wsync sees role rank " + std::to_string(rank) + " of " +
                         std::to_string(num_trainers) + " trainers, " +
                         std::to_string(num_rollouts) + " rollouts; expected " +
                         std::to_string(roles.role_rank) + " of " + std::to_string(roles.trainers) +
                         ", " + std::to_string(roles.rollouts));
  }
  std::vector<int> indices;
  s = wsync_demo::registerBuffers(ctx, tensors, layout, opt.dtype, arena_data, &indices,
                                  WSYNC_MEMORY_DEVICE);
  if (s != WSYNC_SUCCESS) die(ctx, roles, "wsync_register_buffer", s);
  mark("register");
  const auto commit_t0 = Clock::now();
  s = wsync_commit(ctx);
  if (s != WSYNC_SUCCESS) die(ctx, roles, "wsync_commit", s);
  const double commit_s = secondsSince(commit_t0);
  wsync_plan_info_t plan{};
  wsync_plan_info(ctx, &plan);
  int64_t plan_mine[2] = {roles.trainer ? plan.broadcast_groups : 0,
                          roles.trainer ? plan.write_ops : 0};
  int64_t plan_sums[2] = {0, 0};
  MPI_Reduce(plan_mine, plan_sums, 2, MPI_INT64_T, MPI_SUM, 0, comms.bench);
  mark("commit");
  if (root) {
    size_t free_bytes = 0;
    if (!wsync_bench::deviceMemoryInfo(&free_bytes, &device_total, &error)) dieDevice(roles, error);
    used_max = std::max(used_max, device_total - free_bytes);
    std::printf(
        "[bench] device %d: %d trainers -> %d rollout ranks (%d replicas of TP %d), layout %s, "
        "dtype %s, model %s: %zu tensors, %" PRIu64 " bytes delivered per version; %" PRId64
        " broadcast groups, %" PRId64
        " writes; snapshot %s, copy flip %s; commit %.3f s; device "
        "memory in use %.2f of %.2f GB\n",
        opt.cuda_device, roles.trainers, roles.rollouts, plan.num_replicas, roles.tp,
        opt.layout_name.c_str(), opt.dtype_name.c_str(), opt.model.c_str(), tensors.size(),
        plan.bytes_per_version, plan_sums[0], plan_sums[1], opt.snapshot ? "on" : "off",
        opt.copy_flip ? "on" : "off", commit_s,
        static_cast<double>(device_total - free_bytes) / 1e9,
        static_cast<double>(device_total) / 1e9);
    if (plan.bytes_per_version != delivered) {
      std::printf("[bench] note: the plan delivers %" PRIu64
                  " bytes per version, the layouts add up to %" PRIu64 "\n",
                  plan.bytes_per_version, delivered);
    }
    std::fflush(stdout);
  }

  // ---- versions ----
  std::unique_ptr<LeaseReader> reader;
  if (!roles.trainer && opt.reader)
    reader = std::make_unique<LeaseReader>(ctx, opt.reader_sleep_us);
  std::vector<double> block_seconds, stream_seconds;  // trainers
  // Per timed version, the slowest rank's seconds from the shared barrier to: trainers, their
  // publish request completing (delivered); rollouts, the version being readable. (A staged
  // rollout moves landed bytes to the device after the trainers are told "delivered".)
  std::vector<double> wsync_seconds;
  // One version: trainers write it (a byte pattern, or with `checkable` the hashed values) on the
  // training stream, not timed; then publish_on_stream -> delivered, timed. Rollouts wait until it
  // is ready on their replica (with the reader's samples recorded meanwhile when `record`).
  auto syncVersion = [&](uint64_t v, bool record, bool checkable) -> double {
    if (roles.trainer) {
      const bool filled =
          checkable ? wsync_bench::fillExpected(trainer_pieces, opt.dtype, v, *stream, &error)
                    : stream->memsetAsync(arena.memory->data(), static_cast<int>(v & 0xff),
                                          arena.memory->size(), &error);
      if (!filled || !stream->synchronize(&error)) dieDevice(roles, "filling version: " + error);
    }
    // A busy barrier: a version takes milliseconds, and a sleeping barrier's 100 us polls would
    // skew the trainers' starts by as much.
    MPI_Barrier(comms.bench);
    if (roles.trainer) {
      const auto t0 = Clock::now();
      wsync_request_t request = nullptr;
      wsync_status_t st = wsync_publish_on_stream(ctx, v, stream->handle(), &request);
      if (st != WSYNC_SUCCESS) die(ctx, roles, "wsync_publish_on_stream", st);
      const double blocked = secondsSince(t0);
      // Snapshot: how long the training stream is held by the copy into staging.
      if (opt.snapshot && !stream->synchronize(&error)) dieDevice(roles, error);
      const double held = secondsSince(t0);
      st = wsync_request_wait(request, -1);
      wsync_request_free(request);
      if (st != WSYNC_SUCCESS) die(ctx, roles, "wsync_request_wait", st);
      const double total = secondsSince(t0);
      if (record) {
        block_seconds.push_back(blocked);
        if (opt.snapshot) stream_seconds.push_back(held);
      }
      return total;
    }
    const auto t0 = Clock::now();
    if (reader && record) reader->setRecording(true);
    uint64_t newest = 0;
    wsync_newest_version(ctx, &newest);  // NOT_READY before the first version leaves it 0
    while (newest < v) {
      const wsync_status_t st = wsync_wait_version(ctx, newest, -1, &newest);
      if (st != WSYNC_SUCCESS) die(ctx, roles, "wsync_wait_version", st);
    }
    const double readable = secondsSince(t0);
    if (reader) reader->setRecording(false);
    return readable;
  };

  uint64_t version = 0;
  for (int i = 0; i < opt.warmup; ++i) {
    const double sec = syncVersion(++version, false, false);
    if (root) {
      std::printf("[wsync] warmup %d: %.6f s\n", i + 1, sec);
      std::fflush(stdout);
    }
  }
  mark("warmup");
  for (int i = 0; i < opt.iters; ++i) {
    const double mine = syncVersion(++version, true, false);
    double sec = 0;
    MPI_Allreduce(&mine, &sec, 1, MPI_DOUBLE, MPI_MAX, comms.bench);
    wsync_seconds.push_back(sec);
    if (root) {
      const double gbps = static_cast<double>(plan.bytes_per_version) / sec / 1e9;
      const std::string held =
          opt.snapshot
              ? ", training stream held " + std::to_string(stream_seconds.back() * 1e3) + " ms"
              : "";
      std::printf("[wsync] iteration %d (version %" PRIu64 "): %" PRIu64
                  " bytes in %.6f s, %.1f GB/s, %.3f x device copy; publish blocked %.1f us%s\n",
                  i + 1, version, plan.bytes_per_version, sec, gbps,
                  gbps * copy_delivered_s / static_cast<double>(delivered) * 1e9,
                  block_seconds.back() * 1e6, held.c_str());
      std::fflush(stdout);
    }
  }
  std::vector<double> acquire_us;
  int64_t acquire_failures = 0;
  if (reader) {
    reader->stop();
    acquire_us = reader->samples();
    acquire_failures = reader->failures();
    reader.reset();
  }
  mark("timed");

  // ---- copy flip: one rollout rank at a time, so each has the device to itself ----
  std::vector<double> flip_seconds;
  if (opt.copy_flip) {
    for (int r = 0; r < roles.rollouts; ++r) {
      sleepingBarrier(comms.bench);
      if (roles.trainer || roles.role_rank != r) continue;
      for (int i = 0; i <= opt.flip_iters; ++i) {  // the first one is not timed
        const auto t0 = Clock::now();
        uint64_t flipped = 0;
        s = wsync_copy_flip(ctx, WSYNC_VERSION_NEWEST, stream->handle(), &flipped);
        if (s != WSYNC_SUCCESS) die(ctx, roles, "wsync_copy_flip", s);
        if (i > 0) flip_seconds.push_back(secondsSince(t0));
      }
    }
    mark("copy_flip");
  }

  // ---- verification: one version of hashed values, counted on the device ----
  ++version;
  syncVersion(version, false, true);
  int64_t bad = 0;
  if (!roles.trainer) {
    auto check = [&](const std::vector<void*>& data, const char* where) {
      std::vector<size_t> buffer_of;
      const auto pieces = patternPieces(tensors, layout, data, &buffer_of, roles);
      int64_t n = 0;
      wsync_bench::Mismatch first;
      if (!wsync_bench::countMismatches(pieces, opt.dtype, version, *stream, &n, &first, &error)) {
        dieDevice(roles, std::string("verification of ") + where + ": " + error);
      }
      if (n > 0) {
        const auto& p = pieces[first.piece];
        const int64_t r = first.element / std::max<int64_t>(p.cols, 1);
        const int64_t c = first.element % std::max<int64_t>(p.cols, 1);
        std::fprintf(
            stderr,
            "[wsync] rollout %d, %s: %" PRId64 " elements of version %" PRIu64
            " are wrong; first: buffer '%s' tensor '%s' element %" PRId64 ": got %g, want %g\n",
            roles.role_rank, where, n, version, layout[buffer_of[first.piece]].name.c_str(),
            tensors[static_cast<size_t>(p.tensor)].name.c_str(),
            p.flat_base + r * p.global_row_stride + c, first.got, first.want);
      }
      bad += n;
    };
    wsync_lease_t lease = nullptr;
    s = wsync_acquire(ctx, version, &lease);
    if (s != WSYNC_SUCCESS) die(ctx, roles, "wsync_acquire of the verified version", s);
    std::vector<void*> slot(layout.size(), nullptr);
    for (size_t b = 0; b < layout.size(); ++b)
      wsync_lease_buffer(lease, indices[b], &slot[b]);
    check(slot, "slot");
    wsync_lease_release(lease);
    if (opt.copy_flip) {
      uint64_t flipped = 0;
      s = wsync_copy_flip(ctx, version, stream->handle(), &flipped);
      if (s != WSYNC_SUCCESS) die(ctx, roles, "wsync_copy_flip of the verified version", s);
      check(arena_data, "live buffers after copy flip");
    }
  }
  int64_t mismatches = 0;
  MPI_Allreduce(&bad, &mismatches, 1, MPI_INT64_T, MPI_SUM, comms.bench);
  mark("verify");
  if (root) {
    std::printf("[wsync] version %" PRIu64
                " verified on the device on every rollout rank%s: %s (%" PRId64
                " wrong elements)\n",
                version, opt.copy_flip ? " (slot and live buffers)" : "",
                mismatches == 0 ? "ok" : "FAILED", mismatches);
    std::fflush(stdout);
  }

  // ---- statistics, pooled on rank 0 ----
  std::vector<double> all_acquire = gatherSamples(acquire_us, comms.bench);
  std::vector<double> all_flips = gatherSamples(flip_seconds, comms.bench);
  int64_t all_acquire_failures = 0;
  MPI_Reduce(&acquire_failures, &all_acquire_failures, 1, MPI_INT64_T, MPI_SUM, 0, comms.bench);
  // The slowest trainer's medians.
  double publish_mine[2] = {median(block_seconds), median(stream_seconds)};
  double publish_max[2] = {0, 0};
  MPI_Reduce(publish_mine, publish_max, 2, MPI_DOUBLE, MPI_MAX, 0, comms.bench);

  // ---- teardown ----
  s = wsync_context_destroy(ctx);
  if (s != WSYNC_SUCCESS) die(nullptr, roles, "wsync_context_destroy", s);
  arena.memory.reset();
  mark("teardown");
  if (!root) return mismatches == 0 ? 0 : 1;

  std::sort(all_acquire.begin(), all_acquire.end());
  std::sort(all_flips.begin(), all_flips.end());
  const double ws = median(wsync_seconds);
  const double wgbps = static_cast<double>(plan.bytes_per_version) / ws / 1e9;
  const double copy_gbps = static_cast<double>(delivered) / copy_delivered_s / 1e9;
  const double ratio = wgbps / copy_gbps;
  const double concurrent_gbps = static_cast<double>(delivered) / copy_concurrent_s / 1e9;
  const double h2d_gbps = static_cast<double>(kPinnedReferenceBytes) / pinned_h2d_s / 1e9;
  const double d2h_gbps = static_cast<double>(kPinnedReferenceBytes) / pinned_d2h_s / 1e9;
  // Staged transfers cross PCIe twice (device to host, host to device), in both directions at
  // once at best: the slower direction bounds them.
  const double pinned_gbps = std::min(h2d_gbps, d2h_gbps);
  const double ratio_target = opt.layout == wsync_demo::RolloutLayout::kMatch ? 0.85 : 0.7;
  const double flip_p99 = quantile(all_acquire, 0.99);
  const bool have_flips = !all_flips.empty();
  const double copy_flip_s = median(all_flips);
  const double total_s = std::chrono::duration<double>(Clock::now() - process_start).count();
  std::string phase_line, phase_json;
  for (const auto& [name, sec] : phases) {
    char b[96];
    std::snprintf(b, sizeof(b), "%s%s %.3f s", phase_line.empty() ? "" : ", ", name.c_str(), sec);
    phase_line += b;
    std::snprintf(b, sizeof(b), "%s\"%s\": %.4f", phase_json.empty() ? "" : ", ", name.c_str(),
                  sec);
    phase_json += b;
  }
  std::printf("[phases] %s; total %.3f s\n", phase_line.c_str(), total_s);
  std::printf(
      "[bench] wsync %.6f s (%.1f GB/s, %.3f x device copy %.1f GB/s, target %.2f; %.3f x the "
      "trainers' concurrent copy %.1f GB/s); flip p99 %.1f "
      "us over %zu leases; copy flip %s s (device copy of the slot %.6f s); publish blocked %s s, "
      "training stream held %s s (device copy of the parameters %.6f s)\n",
      ws, wgbps, ratio, copy_gbps, ratio_target, wgbps / concurrent_gbps, concurrent_gbps, flip_p99,
      all_acquire.size(), jsonNumber(have_flips, copy_flip_s, 6).c_str(), copy_slot_s,
      jsonNumber(true, publish_max[0], 6).c_str(),
      jsonNumber(opt.snapshot, publish_max[1], 6).c_str(), copy_params_s);
  const int64_t parameters = wsync_demo::totalElements(tensors);
  std::printf(
      "{\"memory\": \"device\", \"model\": \"%s\", \"parameters\": %" PRId64 ", \"bytes\": %" PRId64
      ", \"bytes_delivered\": %" PRIu64
      ", \"layout\": \"%s\", \"dtype\": \"%s\", \"trainers\": %d, \"rollouts\": %d, "
      "\"replicas\": %d, \"tp\": %d, \"tensors\": %zu, \"broadcast_groups\": %" PRId64
      ", \"write_ops\": %" PRId64
      ", \"cuda_device\": %d, \"snapshot\": %s, \"copy_flip\": %s, \"iters\": %d, \"warmup\": %d, "
      "\"wsync_seconds\": %.6f, \"wsync_seconds_min\": %.6f, \"wsync_seconds_max\": %.6f, "
      "\"wsync_gbps\": %.3f, \"device_copy_gbps\": %.3f, \"ratio_to_device_copy\": %.4f, "
      "\"device_copy_concurrent_gbps\": %.3f, \"ratio_to_concurrent_copy\": %.4f, "
      "\"device_transport\": \"%s\", \"pinned_h2d_gbps\": %.2f, \"pinned_d2h_gbps\": %.2f, "
      "\"ratio_to_pinned\": %.4f, "
      "\"ratio_target\": %.2f, \"flip_us_p50\": %.2f, \"flip_us_p99\": %.2f, \"flip_us_max\": "
      "%.2f, \"flip_samples\": %zu, \"flip_failures\": %" PRId64
      ", \"copy_flip_seconds\": %s, \"copy_flip_seconds_max\": %s, \"copy_flip_samples\": %zu, "
      "\"slot_bytes\": %" PRIu64
      ", \"device_copy_seconds_slot\": %.6f, \"copy_flip_to_device_copy\": %s, "
      "\"publish_block_seconds\": %s, \"publish_stream_seconds\": %s, \"params_bytes\": %" PRIu64
      ", \"device_copy_seconds_params\": %.6f, \"publish_block_to_device_copy\": %s, "
      "\"targets_met\": {\"ratio_to_device_copy\": %s, \"flip_us_p99\": %s, \"copy_flip\": %s, "
      "\"publish_block\": %s}, \"commit_seconds\": %.4f, \"phase_seconds\": {%s}, "
      "\"total_seconds\": %.3f, \"device_memory_used_max_bytes\": %zu, \"device_memory_bytes\": "
      "%zu, \"verified\": %s, \"mismatches\": %" PRId64 ", \"loadavg_end\": \"%s\"}\n",
      opt.model.c_str(), parameters, parameters * static_cast<int64_t>(esz), plan.bytes_per_version,
      opt.layout_name.c_str(), opt.dtype_name.c_str(), roles.trainers, roles.rollouts,
      plan.num_replicas, roles.tp, tensors.size(), plan_sums[0], plan_sums[1], opt.cuda_device,
      opt.snapshot ? "true" : "false", opt.copy_flip ? "true" : "false", opt.iters, opt.warmup, ws,
      *std::min_element(wsync_seconds.begin(), wsync_seconds.end()),
      *std::max_element(wsync_seconds.begin(), wsync_seconds.end()), wgbps, copy_gbps, ratio,
      concurrent_gbps, wgbps / concurrent_gbps, opt.device_transport.c_str(), h2d_gbps, d2h_gbps,
      wgbps / pinned_gbps, ratio_target, quantile(all_acquire, 0.5), flip_p99,
      all_acquire.empty() ? 0.0 : all_acquire.back(), all_acquire.size(), all_acquire_failures,
      jsonNumber(have_flips, copy_flip_s, 6).c_str(),
      jsonNumber(have_flips, have_flips ? all_flips.back() : 0, 6).c_str(), all_flips.size(),
      slot_bytes, copy_slot_s, jsonNumber(have_flips, copy_flip_s / copy_slot_s, 3).c_str(),
      jsonNumber(true, publish_max[0], 6).c_str(),
      jsonNumber(opt.snapshot, publish_max[1], 6).c_str(), params_bytes, copy_params_s,
      jsonNumber(opt.snapshot, publish_max[0] / copy_params_s, 4).c_str(),
      jsonBool(true, ratio >= ratio_target).c_str(),
      jsonBool(!all_acquire.empty(), flip_p99 <= 50).c_str(),
      jsonBool(have_flips, copy_flip_s <= 1.2 * copy_slot_s).c_str(),
      jsonBool(opt.snapshot, publish_max[0] <= 1.2 * copy_params_s).c_str(), commit_s,
      phase_json.c_str(), total_s, used_max, device_total, mismatches == 0 ? "true" : "false",
      mismatches, loadAverage().c_str());
  std::fflush(stdout);
  return mismatches == 0 ? 0 : 1;
}

int run(int argc, char** argv, Clock::time_point process_start) {
  cxxopts::Options options(
      "wsync-sync-bench",
      "Weight sync: wsync against gather-to-rank-0 + broadcast (host memory), or against a plain\n"
      "device-to-device copy (device memory, every rank on one GPU).\n"
      "  mpirun -np 4 wsync-sync-bench --bytes 1073741824 --layout differ\n"
      "  mpirun -np 4 wsync-sync-bench --memory device --model llama3-8b --layout mixed\n"
      "The first half of the world ranks are trainers, the rest rollout ranks.");
  options.add_options()("memory", "host | device (device: every rank on --cuda-device)",
                        cxxopts::value<std::string>()->default_value("host"))(
      "model", "generic (the demo policy scaled to --bytes) | llama3-8b (real names and shapes)",
      cxxopts::value<std::string>()->default_value("generic"))(
      "bytes",
      "generic model: size in bytes of the trainers' dtype (host: float32; the demo policy scaled "
      "to about this)",
      cxxopts::value<int64_t>()->default_value("1073741824"))(
      "layout",
      "rollout layout: match (the trainers' boxes) | differ (every tensor split along its last "
      "dim) | mixed (vLLM-like)",
      cxxopts::value<std::string>()->default_value("differ"))(
      "dtype",
      "float32 | bfloat16 | float16; host: the rollouts' (trainers hold float32; default "
      "float32); device: trainers' and rollouts' (default bfloat16)",
      cxxopts::value<std::string>()->default_value(""))(
      "cuda-device", "device memory: the CUDA device of every rank",
      cxxopts::value<int>()->default_value("0"))(
      "snapshot", "device memory: trainers publish in snapshot mode (time publish blocks)")(
      "copy-flip", "device memory: rollouts register live buffers and time wsync_copy_flip")(
      "device-transport",
      "device memory: the rollouts' slots: cuda_ipc (within a node) | staged (the cross-node "
      "path through pinned host memory) | ucx_cuda (UCX device puts when UCX handles CUDA)",
      cxxopts::value<std::string>()->default_value("cuda_ipc"))(
      "flip-iters", "timed copy flips per rollout rank (after one untimed)",
      cxxopts::value<int>()->default_value("5"))(
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
  const std::string memory = args["memory"].as<std::string>();
  opt.device = memory == "device";
  opt.model = args["model"].as<std::string>();
  opt.cuda_device = args["cuda-device"].as<int>();
  opt.snapshot = args.count("snapshot") > 0;
  opt.copy_flip = args.count("copy-flip") > 0;
  opt.device_transport = args["device-transport"].as<std::string>();
  // Read by the rollouts' contexts (transport_registry.h: WSYNC_DEVICE_TRANSPORT).
  setenv("WSYNC_DEVICE_TRANSPORT", opt.device_transport.c_str(), 1);
  opt.flip_iters = args["flip-iters"].as<int>();
  opt.bytes = args["bytes"].as<int64_t>();
  opt.layout_name = args["layout"].as<std::string>();
  opt.dtype_name = args["dtype"].as<std::string>();
  if (opt.dtype_name.empty()) opt.dtype_name = opt.device ? "bfloat16" : "float32";
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
  if (memory != "host" && memory != "device") return usage("bad --memory " + memory);
  if (opt.model != "generic" && opt.model != "llama3-8b") return usage("bad --model " + opt.model);
  if (opt.model != "generic" && args.count("bytes") > 0)
    return usage("--bytes sizes the generic model; --model " + opt.model + " has its own size");
  if (!opt.device && (opt.snapshot || opt.copy_flip || args.count("cuda-device") > 0))
    return usage("--snapshot, --copy-flip and --cuda-device need --memory device");
  if (opt.cuda_device < 0 || opt.flip_iters < 1)
    return usage("--cuda-device must be non-negative and --flip-iters positive");
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
  // --bytes counts the trainers' dtype; policyShapeForBytes counts float32.
  const int64_t f32_bytes =
      opt.device ? opt.bytes / static_cast<int64_t>(wsync_demo::dtypeBytes(opt.dtype)) * 4
                 : opt.bytes;
  const auto tensors = wsync_demo::policyTensors(opt.model == "llama3-8b"
                                                     ? wsync_demo::llama3_8b()
                                                     : wsync_demo::policyShapeForBytes(f32_bytes));
  if (opt.device) return runDevice(opt, roles, comms, tensors, process_start);
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
        "{\"memory\": \"host\", \"model\": \"%s\", \"bytes\": %" PRId64
        ", \"bytes_delivered\": %" PRIu64
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
        opt.model.c_str(), model_bytes, w.bytes_delivered, opt.layout_name.c_str(),
        opt.dtype_name.c_str(), roles.trainers, roles.rollouts, w.num_replicas, roles.tp,
        tensors.size(), w.broadcast_groups, w.write_ops, opt.iters, opt.warmup, ws,
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
  const auto process_start = Clock::now();
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    std::fprintf(stderr, "wsync-sync-bench: MPI does not provide MPI_THREAD_MULTIPLE\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  int rc = 1;
  try {
    rc = run(argc, argv, process_start);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wsync-sync-bench: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  // Usage errors (2) and "no GPU" (77) are seen by every rank alike; a failed verification (1)
  // is known to every rank through the reductions, so all ranks leave together.
  MPI_Finalize();
  return rc;
}
