// wsync-sync-bench: what wsync is measured against. The physical limits: a memcpy of the delivered
// bytes in one process (host memory); device-to-device copies of the delivered bytes, of one slot
// and of one trainer's parameters, pinned host <-> device copies, and the trainers copying their
// shares at once (device memory). The baseline (host memory): the same layouts in plain float32
// buffers, each tensor gathered to trainer rank 0 and broadcast to every rollout rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "bench_device.h"
#include "models/demo_policy.h"
#include "sync_bench_args.h"
#include "sync_bench_model.h"

namespace wsync_bench {

// ---- host memory ----

// GB/s (1e9 bytes per second) of copying `total` bytes in one process with memcpy, best of
// `repeats`; buffers of at most 512 MiB, copied repeatedly to make up `total`.
double memcpyGbps(uint64_t total, int repeats);

struct HostLimits {
  double before_gbps = 0;  // memcpy, best of 3 just before the timed versions
  double after_gbps = 0;   // best of 3 just after them (the machine's load changes)
  double best() const { return before_gbps > after_gbps ? before_gbps : after_gbps; }
};

// The baseline's timed versions (seconds, on world rank 0) and wrong elements (every rank).
struct BaselineResult {
  std::vector<double> seconds;
  int64_t mismatches = 0;
};

// Runs --warmup + --baseline-iters versions of the baseline (collective). Trainers' buffers
// (float32, their Shard(0) layout) hold `version`, which every rollout checks afterwards.
BaselineResult runBaseline(const Options& opt, const Roles& roles, const Comms& comms,
                           const std::vector<wsync_demo::TensorSpec>& tensors,
                           const std::vector<std::vector<float>>& trainer_data, uint64_t version);

// ---- device memory ----

constexpr int kReferenceRepeats = 3;                       // device references: best of this many
constexpr size_t kPinnedReferenceBytes = size_t{1} << 30;  // pinned host <-> device reference

struct DeviceLimits {
  // World rank 0 (cudaMemcpy D2D in one process, best of kReferenceRepeats), seconds:
  double copy_delivered_s = 0;  // LayoutSizes::delivered
  double copy_slot_s = 0;       // LayoutSizes::slot_bytes
  double copy_params_s = 0;     // LayoutSizes::params_bytes
  double pinned_h2d_s = 0;      // kPinnedReferenceBytes each way
  double pinned_d2h_s = 0;
  size_t used_max = 0;      // bytes of device memory in use, the most seen
  size_t device_total = 0;  // bytes of device memory
  // Every rank: the slowest trainer's seconds to copy the delivered bytes, all trainers at once.
  double copy_concurrent_s = 0;
};

// On world rank 0 while every other rank waits: the one-process copies and the memory in use.
void measureDeviceCopies(const LayoutSizes& sizes, const DeviceStream& stream, int world_rank,
                         DeviceLimits* out);

// Collective: the delivered bytes copied by every trainer process at once, an equal share each,
// from its own parameters (`params`, LayoutSizes::mine bytes; repeated when the share is larger)
// on the GPU they share: what the trainers' copies can reach together when their processes
// time-slice one device. The slowest trainer's time, best of kReferenceRepeats rounds.
void measureConcurrentCopy(const LayoutSizes& sizes, const Roles& roles, MPI_Comm comm,
                           const DeviceMemory* params, DeviceLimits* out);

// Updates out->used_max with the device memory in use now; returns those bytes.
size_t noteDeviceMemoryUse(int world_rank, DeviceLimits* out);

}  // namespace wsync_bench
