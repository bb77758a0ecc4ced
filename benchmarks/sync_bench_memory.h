// wsync-sync-bench: the memory kinds. The sync loop (sync_bench_loop.h) is the same for host and
// device memory; a MemoryKind says how this rank's buffers are allocated, filled and checked,
// which physical limit wsync is measured against (memcpy on the host, device copies on the
// device), and how a version is timed.
//
// Host: trainers hold float32 host buffers (zero-filled, so every page is touched), rollouts
// --dtype slots that wsync allocates; the limit is a memcpy of the delivered bytes on rank 0 just
// before and just after the timed versions; each element is checked on the host.
// Device (every rank on --cuda-device; trainers and rollouts hold --dtype): buffers in one device
// allocation per rank, filled and checked by kernels (bench_device.h); the limits are measured
// before the context exists (sync_bench_limits.h); trainers publish on a "training stream".
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "bench_device.h"
#include "models/demo_policy.h"
#include "sync_bench_args.h"
#include "sync_bench_common.h"
#include "sync_bench_limits.h"
#include "sync_bench_model.h"

namespace wsync_bench {

constexpr int kNoDevice = 77;  // exit status without a usable GPU (ctest's skip code)

// How a version is timed.
struct VersionTiming {
  // Versions start after a busy MPI_Barrier (device: a version takes milliseconds, and a sleeping
  // barrier's 100 us polls would skew the trainers' starts by as much) or a sleepingBarrier (host:
  // a busy one takes the cores from wsync's threads).
  bool busy_barrier = false;
  // A version's seconds: the slowest rank's, from the shared barrier to delivered (trainers) or
  // readable (rollouts) (device: a staged rollout lands bytes after "delivered"); or trainer rank
  // 0's, publish -> delivered (host).
  bool slowest_rank = false;
};

// The plan after commit: the plan info of world rank 0; groups and writes summed over the trainers.
struct PlanSummary {
  uint64_t bytes_per_version = 0;
  int num_replicas = 0;
  int64_t broadcast_groups = 0;
  int64_t write_ops = 0;
  double commit_seconds = 0;
};

// One timed version as world rank 0 saw it, for its progress line.
struct TimedVersion {
  int iteration = 0;  // 1-based
  uint64_t version = 0;
  uint64_t bytes = 0;
  double seconds = 0;
  double publish_blocked_s = 0;  // how long wsync_publish_on_stream took to return
  double stream_held_s = 0;      // snapshot: publish until the training stream was free again
};

class MemoryKind {
 public:
  virtual ~MemoryKind() = default;
  virtual wsync_memory_kind_t wsyncKind() const = 0;
  virtual VersionTiming timing() const = 0;
  // Sets the context configuration's fields of this kind.
  virtual void configure(wsync_config_t* cfg) const = 0;
  // This rank's buffers, in the dtype registered, and the memory registered for them: the
  // trainers' parameters; the rollouts' live buffers (device, --copy-flip) or none (slots only).
  virtual const std::vector<wsync_demo::BufferSpec>& layout() const = 0;
  virtual wsync_dtype_t dtype() const = 0;
  virtual const std::vector<void*>& registered() const = 0;
  // The stream trainers publish on (the "training stream"); nullptr for host memory.
  virtual wsync_cuda_stream_t stream() const = 0;
  virtual void synchronizeStream() = 0;
  // Trainers: writes `version` into the parameters before it is published (not timed): with
  // `checkable` every element's wsync_demo::expectedValue, else any bytes.
  virtual void fillVersion(uint64_t version, bool checkable) = 0;
  // Rollouts: the elements of `data` (one pointer per layout() buffer) that differ from
  // expectedValue(version); the first one is described on stderr, naming `where`.
  virtual int64_t countWrong(const std::vector<void*>& data, uint64_t version,
                             const char* where) = 0;
  // Around the timed versions (collective): measures what this kind measures there and, before,
  // prints the plan line on world rank 0.
  virtual void beforeTimedVersions(const PlanSummary& plan) = 0;
  virtual void afterTimedVersions() = 0;
  // Progress lines on world rank 0.
  virtual void printWarmup(int iteration, double seconds) const = 0;
  virtual void printTimedVersion(const TimedVersion& v) const = 0;
  // How the verification line says where elements were checked ("" or " on the device").
  virtual const char* checkedWhere() const = 0;
  // Frees this kind's buffers (after the context is destroyed).
  virtual void release() = 0;
};

class HostMemory final : public MemoryKind {
 public:
  HostMemory(const Options& opt, const Roles& roles, const Comms& comms,
             const std::vector<wsync_demo::TensorSpec>& tensors);
  wsync_memory_kind_t wsyncKind() const override { return WSYNC_MEMORY_HOST; }
  VersionTiming timing() const override { return VersionTiming{}; }
  void configure(wsync_config_t*) const override {}
  const std::vector<wsync_demo::BufferSpec>& layout() const override { return layout_; }
  wsync_dtype_t dtype() const override;
  const std::vector<void*>& registered() const override { return registered_; }
  wsync_cuda_stream_t stream() const override { return nullptr; }
  void synchronizeStream() override {}
  void fillVersion(uint64_t version, bool checkable) override;
  int64_t countWrong(const std::vector<void*>& data, uint64_t version, const char* where) override;
  void beforeTimedVersions(const PlanSummary& plan) override;
  void afterTimedVersions() override;
  void printWarmup(int iteration, double seconds) const override;
  void printTimedVersion(const TimedVersion& v) const override;
  const char* checkedWhere() const override { return ""; }
  void release() override {}

  // Trainers: the parameters (float32), one vector per layout() buffer; kept for the baseline.
  const std::vector<std::vector<float>>& trainerData() const { return trainer_data_; }
  const HostLimits& limits() const { return limits_; }

 private:
  const Options& opt_;
  const Roles& roles_;
  const Comms& comms_;
  const std::vector<wsync_demo::TensorSpec>& tensors_;
  std::vector<wsync_demo::BufferSpec> layout_;
  std::vector<std::vector<float>> trainer_data_;
  std::vector<void*> registered_;
  uint64_t bytes_per_version_ = 0;
  HostLimits limits_;
};

class DeviceMemoryKind final : public MemoryKind {
 public:
  // Collective: whether every rank has CUDA device --cuda-device; world rank 0 says why not.
  static bool everyRankHasDevice(const Options& opt, const Roles& roles, MPI_Comm comm);
  // Collective: selects the device, checks the pattern kernels (world rank 0), allocates and
  // zeroes this rank's buffers (phase "setup"), measures the limits (phase "reference").
  DeviceMemoryKind(const Options& opt, const Roles& roles, const Comms& comms,
                   const std::vector<wsync_demo::TensorSpec>& tensors, PhaseClock& phases);
  wsync_memory_kind_t wsyncKind() const override { return WSYNC_MEMORY_DEVICE; }
  VersionTiming timing() const override { return VersionTiming{true, true}; }
  void configure(wsync_config_t* cfg) const override;
  const std::vector<wsync_demo::BufferSpec>& layout() const override { return layout_; }
  wsync_dtype_t dtype() const override { return opt_.dtype; }
  const std::vector<void*>& registered() const override { return registered_; }
  wsync_cuda_stream_t stream() const override { return stream_->handle(); }
  void synchronizeStream() override;
  void fillVersion(uint64_t version, bool checkable) override;
  int64_t countWrong(const std::vector<void*>& data, uint64_t version, const char* where) override;
  void beforeTimedVersions(const PlanSummary& plan) override;
  void afterTimedVersions() override {}
  void printWarmup(int iteration, double seconds) const override;
  void printTimedVersion(const TimedVersion& v) const override;
  const char* checkedWhere() const override { return " on the device"; }
  void release() override { arena_.reset(); }

  const DeviceLimits& limits() const { return limits_; }
  const LayoutSizes& sizes() const { return sizes_; }

 private:
  void allocateBuffers();

  const Options& opt_;
  const Roles& roles_;
  const std::vector<wsync_demo::TensorSpec>& tensors_;
  std::unique_ptr<DeviceStream> stream_;
  std::vector<wsync_demo::BufferSpec> layout_;
  // Trainers: the parameters; rollouts with --copy-flip: the engine's live buffers.
  std::unique_ptr<DeviceMemory> arena_;
  std::vector<void*> registered_;  // each buffer's start in the arena (256-byte aligned)
  std::vector<PatternPiece> trainer_pieces_;
  LayoutSizes sizes_;
  DeviceLimits limits_;
};

}  // namespace wsync_bench
