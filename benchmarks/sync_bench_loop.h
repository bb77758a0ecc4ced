// wsync-sync-bench: the sync loop, one for host and device memory (the MemoryKind decides what
// differs). Phases, on every rank:
//   register, commit (phase marks "register", "commit"); the kind's limit before the timed
//   versions; --warmup versions ("warmup"), then --iters timed ones ("timed") while a reader
//   thread on every rollout rank acquires and releases leases and records how long wsync_acquire
//   takes; the kind's limit after them; with --copy-flip, wsync_copy_flip into live buffers, one
//   rollout rank at a time ("copy_flip"); one version of known values (trainers write
//   wsync_demo::expectedValue), checked element by element on every rollout rank in its slot
//   (and its live buffers after a copy flip) ("verify"); the context destroyed ("teardown").
// A version: trainers write it (not timed), every rank passes a barrier, trainers publish on the
// kind's stream and wait for "delivered", rollouts wait until it is readable on their replica.
#pragma once

#include <cstdint>
#include <vector>

#include "models/demo_policy.h"
#include "sync_bench_args.h"
#include "sync_bench_common.h"
#include "sync_bench_memory.h"

namespace wsync_bench {

struct SyncResult {
  PlanSummary plan;
  std::vector<double> seconds;  // world rank 0: each timed version (VersionTiming says whose)
  // World rank 0, pooled over the rollout ranks and sorted: wsync_acquire latencies (microseconds,
  // recorded while versions stream in), the seconds of each timed copy flip.
  std::vector<double> acquire_us;
  int64_t acquire_failures = 0;
  std::vector<double> copy_flip_seconds;
  // World rank 0, the slowest trainer's medians over the timed versions: seconds until
  // wsync_publish_on_stream returned, and (snapshot) until the training stream was free again.
  double publish_block_s = 0;
  double publish_stream_s = 0;
  uint64_t verified_version = 0;
  int64_t mismatches = 0;  // every rank: wrong elements over all rollout ranks
};

// The whole loop (collective); returns with the context destroyed and the kind's buffers
// released. Every failure of wsync aborts the job.
SyncResult runSync(const Options& opt, const Roles& roles, const Comms& comms,
                   const std::vector<wsync_demo::TensorSpec>& tensors, MemoryKind& memory,
                   PhaseClock& phases);

}  // namespace wsync_bench
