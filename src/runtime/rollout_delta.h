// A rollout rank's delta versions (docs/delta.md): its landing area for patches (host memory,
// whatever the slots' memory) and, per sending trainer, its part and its write ops; at Verify of
// a version whose Go gave this replica a base, the patched regions rebuilt from the slot holding
// the base version (device slots: each patch checked on the host, copied to the device and
// applied there, kernels/delta_kernels.h). The receiver thread owns it (registration: the
// creating thread); no sockets of its own.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "plan/plan.h"
#include "runtime/device_ops.h"
#include "store/slot_store.h"
#include "transport/write_transport.h"

namespace wsync {
namespace delta {
struct PairArea;
}  // namespace delta

struct RolloutDeltaState {
  struct FromTrainer {
    uint64_t part_offset = 0;  // into the landing area
    uint64_t part_bytes = 0;   // 0: the trainer writes this rank nothing by write ops
    std::vector<size_t> ops;   // plan write indices, plan order
  };
  // Device slots: where patches are applied (sized at planParts for the largest patch a
  // trainer may send, the largest op's apply scratch and its largest strided region).
  struct Device {
    bool on = false;
    int device = 0;
    DeviceStream stream;
    DeviceBuffer patch, scratch, packed;
  };
  std::unique_ptr<ExposedMemory> landing;  // none: this rank takes no patches
  // Device slots: the landing area page-locked for the patches' copies to the device (declared
  // after `landing`, so released before it). Not pinned where CUDA refuses: the copies still run.
  HostRegistration landing_pinned;
  std::vector<FromTrainer> trainers;  // by trainer rank
  uint64_t base = 0;                  // the last Go's base for this rank's replica
  std::vector<uint8_t> scratch;       // a strided region, packed (host slots)
  Device device;
};

class RolloutDelta {
 public:
  // Per trainer whose patches could not be applied, why.
  using PatchFailures = std::vector<std::pair<int32_t, std::string>>;

  // Registration: when `enabled` (the job has delta versions and the slots' backend crosses
  // nodes: CUDA IPC copies as fast as a patch applies), a host-memory landing area from
  // `transport` sized for `slot_bytes` and `trainers` at `max_share_ppm`; its descriptor goes into
  // `descriptor` (left empty otherwise). Slots in `memory` (device: CUDA device `device`).
  Status exposeLanding(bool enabled, WriteTransport& transport, MemoryKind memory, int device,
                       uint64_t slot_bytes, int32_t trainers, uint32_t max_share_ppm,
                       std::vector<uint8_t>* descriptor);
  // After the plan (rollout view `plan`): each trainer's part of the area, as the coordinator
  // computed it for the trainers (delta_landing.h), and its ops in plan order; device slots: the
  // device memory the applies use.
  Status planParts(const RankPlan& plan, int32_t trainers, uint32_t max_share_ppm);
  // Go: the base version this replica's patches are against (0: dense, re-sends included).
  void setBase(uint64_t base) { state_.base = base; }
  // Verify of `version`: per write op of `plan`, whether a trainer sent it as a patch (empty when
  // none did), read from the landing area's well-formed parts. Those ops' bytes come from the
  // base slot (apply), not from the slot's landing area.
  std::vector<bool> patchedOps(const RankPlan& plan, uint64_t version) const;
  // Verify of `version` in `slot`: rebuilds its patched ops from the slot holding the base
  // version. Returns, per trainer whose patches could not be applied (a malformed area, no slot
  // holding the base), why; their bytes then fail verification as well.
  // Device slots: complete when this returns (bounded by `timeout`).
  PatchFailures apply(const RankPlan& plan, const std::vector<uint64_t>& buffer_byte_offsets,
                      uint64_t version, int32_t slot, const SlotStore& store,
                      const std::vector<std::unique_ptr<ExposedMemory>>& slots,
                      std::chrono::milliseconds timeout);

 private:
  Status allocateDevice(const RankPlan& plan, uint64_t largest_part);
  // The area trainer `trainer` wrote into its part for `version` (delta_landing.h readPairArea).
  Result<delta::PairArea> areaOf(size_t trainer, uint64_t version) const;
  // Rebuilds op `op`'s region (at byte `at` of the slots) of `out` from `base` with `patch`.
  Status applyOne(const RankPlan& plan, const WriteOp& op, size_t at, const uint8_t* patch,
                  size_t patch_bytes, const uint8_t* base, uint8_t* out);
  Status applyOneOnDevice(const RankPlan& plan, const WriteOp& op, size_t at, const uint8_t* patch,
                          size_t patch_bytes, const uint8_t* base, uint8_t* out);

  RolloutDeltaState state_;
};

}  // namespace wsync
