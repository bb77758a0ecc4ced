// A rollout rank's checksum verification (docs/checksums.md): at Verify(v, slot) it sums the
// bytes each trainer delivered into the slot (its plan view's write regions and broadcast spans,
// keyed by sending trainer as the trainers key them) and compares them with the trainers' sums.
// The outcome is Verified, or ChecksumFailed naming the trainers whose bytes differ (or whose delta
// patches could not be applied) and their tensors, which makes the coordinator re-send the version.
// The receiver thread owns it; no sockets.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "plan/plan.h"
#include "protocol/protocol.h"
#include "runtime/device_ops.h"
#include "runtime/version_checksums.h"

namespace wsync {

class RolloutChecksums {
 public:
  // `plan`: rollout rank `rank`'s plan view; `buffer_byte_offsets`: where each buffer starts in a
  // slot; `memory`: the slots' (device: CUDA device `device`). Both outlive this object.
  RolloutChecksums(const RankPlan& plan, const std::vector<uint64_t>& buffer_byte_offsets,
                   int32_t rank, MemoryKind memory, int device)
      : plan_(&plan),
        buffer_byte_offsets_(&buffer_byte_offsets),
        rank_(rank),
        memory_(memory),
        device_(device) {}

  // Per trainer whose patches could not be applied, why (rollout_delta.h).
  using PatchFailures = std::vector<std::pair<int32_t, std::string>>;

  // Sums `slot` (the slot's first byte; device memory: after the work enqueued on `after`, within
  // `timeout`) against `verify`'s sums. nullopt: every trainer's bytes match (Verified); else the
  // ChecksumFailed to send, its detail starting with `what` (the rank and version). The spans are
  // built at the first call.
  Result<std::optional<ChecksumFailedMsg>> verify(const VerifyMsg& verify, const uint8_t* slot,
                                                  const PatchFailures& patch_failures,
                                                  const std::string& what, CudaStreamHandle after,
                                                  std::chrono::milliseconds timeout);

  // The tensors trainer `trainer` delivers to this rank, for messages: up to 4 names, then a count.
  std::string tensorsFrom(int32_t trainer) const;

 private:
  Status build();

  const RankPlan* plan_;
  const std::vector<uint64_t>* buffer_byte_offsets_;
  int32_t rank_;
  MemoryKind memory_;
  int device_;
  VersionChecksums checksums_;
  bool built_ = false;
};

}  // namespace wsync
