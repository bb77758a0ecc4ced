// Delta versions against full versions (issue 22, docs/delta.md), under mpirun -np 2 (world rank
// 0: the trainer, world rank 1: a one-rank rollout replica); host memory over UCX, or (CUDA
// builds, --memory device) device memory on both sides over --transport (default staged; on one
// GPU: the trainer diffs and the rollout applies on it, the patches go through host memory):
//
//   mpirun -np 2 build/benchmarks/wsync-delta-bench --elements 16777216 --versions 10
//   mpirun -np 2 build/benchmarks/wsync-delta-bench --memory device --transport staged
//
// One bf16 tensor of `elements` elements; per version, `share` of its elements (drawn at random)
// change by one bf16 step. For each share (--shares, default the measured ones in
// benchmarks/README.md "Changed elements per step") the same versions run twice, in two jobs one
// after the other: dense (config.delta = 0) and delta (config.delta = 1). One line per version:
// mode, share, version, bytes of the writes on the wire and dense (wsync_version_stats), and the
// publish-to-delivered time; then per share the means over versions 2.. (version 1 is always
// full). The rollout checks every element of the last version of each job.
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#ifdef WSYNC_BENCH_CUDA
#include <cuda_runtime_api.h>
#endif

#include "wsync/wsync.h"

namespace {

struct Args {
  int64_t elements = 16 << 20;
  int versions = 10;
  std::vector<double> shares = {0.003, 0.01, 0.028, 0.067};
  bool device = false;  // --memory device
  wsync_device_transport_t transport = WSYNC_DEVICE_TRANSPORT_STAGED;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--elements") a.elements = std::atoll(argv[i + 1]);
    if (k == "--versions") a.versions = std::atoi(argv[i + 1]);
    if (k == "--memory") a.device = std::string(argv[i + 1]) == "device";
    if (k == "--transport") {
      const std::string t = argv[i + 1];
      a.transport = t == "cuda_ipc"   ? WSYNC_DEVICE_TRANSPORT_CUDA_IPC
                    : t == "ucx_cuda" ? WSYNC_DEVICE_TRANSPORT_UCX_CUDA
                                      : WSYNC_DEVICE_TRANSPORT_STAGED;
    }
    if (k == "--shares") {
      a.shares.clear();
      std::stringstream s(argv[i + 1]);
      for (std::string x; std::getline(s, x, ',');)
        a.shares.push_back(std::atof(x.c_str()));
    }
  }
  return a;
}

void check(wsync_status_t s, wsync_context_t ctx, const char* what) {
  if (s == WSYNC_SUCCESS) return;
  std::fprintf(stderr, "delta-bench: %s: %s\n", what, wsync_last_error(ctx));
  MPI_Abort(MPI_COMM_WORLD, 1);
}

// The bf16 bits of every element at `version`: version 0 is i % 251 (as bf16 of small numbers);
// each later version bumps about `share` of them, drawn by a per-version generator.
void advance(std::vector<uint16_t>& w, uint64_t version, double share) {
  uint64_t x = 0x9e3779b97f4a7c15ull * (version + 1);
  const auto changes = static_cast<int64_t>(share * static_cast<double>(w.size()));
  for (int64_t k = 0; k < changes; ++k) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    w[x % w.size()] += 1;
  }
}

std::vector<uint16_t> initial(int64_t n) {
  std::vector<uint16_t> w(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    w[static_cast<size_t>(i)] = static_cast<uint16_t>(0x3f80 + i % 251);  // 1.0 .. in bf16
  return w;
}

struct Mean {
  double ms = 0, wire = 0, full = 0;
  int n = 0;
};

Mean runJob(const Args& a, double share, bool delta) {
  const bool trainer = [] {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r == 0;
  }();
  wsync_config_t cfg = WSYNC_CONFIG_INITIALIZER;
  cfg.role = trainer ? WSYNC_ROLE_TRAINER : WSYNC_ROLE_ROLLOUT;
  cfg.replica = 0;
  cfg.delta = delta ? 1 : 0;
  cfg.checksums = 1;  // the same verification in both modes
  cfg.cuda_device = a.device ? 0 : -1;
  cfg.device_transport = a.transport;
  wsync_context_t ctx = nullptr;
  check(wsync_context_create(&cfg, &ctx), nullptr, "create");
  std::vector<uint16_t> w = initial(a.elements);
  const size_t bytes = w.size() * sizeof(uint16_t);
  void* device_w = nullptr;  // --memory device: the trainer's tensor on the GPU
#ifdef WSYNC_BENCH_CUDA
  if (a.device && trainer) {
    if (cudaMalloc(&device_w, bytes) != cudaSuccess) {
      std::fprintf(stderr, "delta-bench: cudaMalloc of %zu bytes failed\n", bytes);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
#endif
  // Copies the trainer's values where it registered them (host: they are there).
  const auto upload = [&] {
#ifdef WSYNC_BENCH_CUDA
    if (device_w != nullptr) cudaMemcpy(device_w, w.data(), bytes, cudaMemcpyHostToDevice);
#endif
  };
  upload();
  // The trainer registers its tensor as two pieces (halves), the rollout as one: the layouts
  // differ, so the version goes by one-sided writes (the path delta versions apply to), not by a
  // broadcast group.
  const int64_t half = a.elements / 2;
  const int64_t offsets[2] = {0, half}, extents[2] = {half, a.elements - half};
  wsync_piece_t pieces[2] = {WSYNC_PIECE_INITIALIZER, WSYNC_PIECE_INITIALIZER};
  const int num_pieces = trainer ? 2 : 1;
  for (int i = 0; i < num_pieces; ++i) {
    pieces[i].tensor = "w";
    pieces[i].ndim = 1;
    pieces[i].global_shape = &a.elements;
    if (trainer) {
      pieces[i].box_offset = &offsets[i];
      pieces[i].box_extent = &extents[i];
      pieces[i].local_offset = offsets[i];
    }
  }
  check(wsync_register_buffer(ctx, "w", WSYNC_DTYPE_BFLOAT16,
                              a.device ? WSYNC_MEMORY_DEVICE : WSYNC_MEMORY_HOST,
                              trainer ? (a.device ? device_w : w.data()) : nullptr, a.elements,
                              num_pieces, pieces, nullptr),
        ctx, "register");
  check(wsync_commit(ctx), ctx, "commit");
  Mean mean;
  for (uint64_t v = 1; v <= static_cast<uint64_t>(a.versions); ++v) {
    advance(w, v, share);  // the rollout tracks the pattern to check the last version
    if (!trainer) continue;
    upload();
    const auto t0 = std::chrono::steady_clock::now();
    wsync_request_t req = nullptr;
    check(wsync_publish(ctx, v, &req), ctx, "publish");
    check(wsync_request_wait(req, -1), ctx, "wait");
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    wsync_request_free(req);
    wsync_version_stats_t s = WSYNC_VERSION_STATS_INITIALIZER;
    check(wsync_version_stats(ctx, &s), ctx, "stats");
    std::printf("%-5s share %.4f version %2llu: wire %11llu of %11llu bytes (%6.2f %%), %8.3f ms\n",
                delta ? "delta" : "dense", share, static_cast<unsigned long long>(v),
                static_cast<unsigned long long>(s.wire_bytes),
                static_cast<unsigned long long>(s.full_bytes),
                s.full_bytes
                    ? 100.0 * static_cast<double>(s.wire_bytes) / static_cast<double>(s.full_bytes)
                    : 0.0,
                ms);
    if (v >= 2) {
      mean.ms += ms;
      mean.wire += static_cast<double>(s.wire_bytes);
      mean.full += static_cast<double>(s.full_bytes);
      ++mean.n;
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (!trainer) {
    uint64_t newest = 0;
    check(wsync_wait_version(ctx, static_cast<uint64_t>(a.versions) - 1, -1, &newest), ctx,
          "wait_version");
    wsync_lease_t lease = nullptr;
    check(wsync_acquire(ctx, WSYNC_VERSION_NEWEST, &lease), ctx, "acquire");
    void* data = nullptr;
    check(wsync_lease_buffer(lease, 0, &data), ctx, "lease_buffer");
    std::vector<uint16_t> got(w.size());
#ifdef WSYNC_BENCH_CUDA
    if (a.device) cudaMemcpy(got.data(), data, bytes, cudaMemcpyDeviceToHost);
#endif
    if (!a.device) std::memcpy(got.data(), data, bytes);
    if (newest != static_cast<uint64_t>(a.versions) || got != w) {
      std::fprintf(stderr, "delta-bench: the rollout's version %llu differs from the trainer's\n",
                   static_cast<unsigned long long>(newest));
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    wsync_lease_release(lease);
  }
  check(wsync_context_destroy(ctx), nullptr, "destroy");
#ifdef WSYNC_BENCH_CUDA
  if (device_w != nullptr) cudaFree(device_w);
#endif
  return mean;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  const Args a = parse(argc, argv);
#ifndef WSYNC_BENCH_CUDA
  if (a.device) {
    std::fprintf(stderr, "delta-bench: --memory device needs a CUDA build\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
#else
  if (a.device) cudaSetDevice(0);
#endif
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::vector<std::pair<Mean, Mean>> results;
  for (double share : a.shares) {
    const Mean dense = runJob(a, share, false);
    const Mean delta = runJob(a, share, true);
    results.emplace_back(dense, delta);
  }
  if (rank == 0) {
    std::printf("\n%lld bf16 elements (%.1f MB), versions 2..%d, %s:\n",
                static_cast<long long>(a.elements), static_cast<double>(a.elements) * 2 / 1e6,
                a.versions,
                a.device ? "device memory (one GPU), WSYNC_DEVICE_TRANSPORT as --transport"
                         : "host memory over UCX");
    std::printf("| changed | dense ms/version | delta ms/version | delta wire / full bytes |\n");
    std::printf("| --- | --- | --- | --- |\n");
    for (size_t i = 0; i < results.size(); ++i) {
      const auto& [dense, delta] = results[i];
      std::printf("| %.1f %% | %.2f | %.2f | %.2f %% |\n", 100 * a.shares[i], dense.ms / dense.n,
                  delta.ms / delta.n, 100 * delta.wire / delta.full);
    }
  }
  MPI_Finalize();
  return 0;
}
