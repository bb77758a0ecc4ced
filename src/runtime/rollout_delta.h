// A rollout rank's delta versions (docs/delta.md): its landing area for patches and, per sending
// trainer, its part and its write ops. The receiver thread owns it (RolloutContext::applyDeltas,
// src/runtime/rollout_delta.cc).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "transport/write_transport.h"

namespace wsync {

struct RolloutDeltaState {
  struct FromTrainer {
    uint64_t part_offset = 0;  // into the landing area
    uint64_t part_bytes = 0;   // 0: the trainer writes this rank nothing by write ops
    std::vector<size_t> ops;   // plan write indices, plan order
  };
  std::unique_ptr<ExposedMemory> landing;  // none: this rank takes no patches
  std::vector<FromTrainer> trainers;       // by trainer rank
  uint64_t base = 0;                       // the last Go's base for this rank's replica
  std::vector<uint8_t> scratch;            // a strided region, packed
};

}  // namespace wsync
