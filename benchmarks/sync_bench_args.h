// wsync-sync-bench: its flags (cxxopts), where this process sits in the job, and the benchmark's
// own MPI communicators.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>

#include "models/demo_policy.h"
#include "wsync/wsync.h"

namespace wsync_bench {

// The flags, read and checked (see addFlags in sync_bench_args.cc for each one's meaning).
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
  wsync_dtype_t dtype = WSYNC_DTYPE_FLOAT32;  // the rollouts' (device: the trainers' too)
  int trainers = 0;                           // 0: half the world
  int replicas = 1;
  int slots = 2;  // the rollouts' version slots per rank (config.num_slots)
  int iters = 5;
  int warmup = 1;
  int baseline_iters = -1;  // -1: --iters
  int reader_sleep_us = 50;
  int timeout_ms = 120000;
  bool baseline = true;
  bool reader = true;
  // --checksums (host memory): after the wsync phase, the same phase again with config.checksums
  // = 1, and the ratio of the two medians. `checksums`: the phase being run checksums.
  bool checksums_ab = false;
  bool checksums = false;
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
  Comms() = default;
  Comms(const Comms&) = delete;
  Comms& operator=(const Comms&) = delete;
  ~Comms();
};

// Reads the flags into `opt` and the roles they give this process into `roles` (world rank and
// size from MPI_COMM_WORLD). Returns -1 to go on, else the exit status: 0 after --help, 2 after a
// usage error (the message printed on world rank 0). Throws what cxxopts throws for malformed
// flags.
int parseArguments(int argc, char** argv, Options* opt, Roles* roles);

// The benchmark's communicators (collective over MPI_COMM_WORLD: call before wsync starts).
void makeComms(const Roles& roles, Comms* comms);

}  // namespace wsync_bench
