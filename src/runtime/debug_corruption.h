// WSYNC_DEBUG_CORRUPT_EVERY = N (docs/checksums.md): on trainer 0, in the first send of every N-th
// version, one byte that reaches a rollout's slot is overwritten with its complement after the
// writes were flushed, so that the checksums (computed from the source) disagree with the slot and
// the version is re-sent. The flipped byte is written from memory of its own, allocated before the
// transports exist (a write source like the others). Publisher thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"
#include "runtime/device_ops.h"

namespace wsync {

class DebugCorruption {
 public:
  DebugCorruption() = default;  // off
  // On when `every` > 0 and this is trainer 0; the byte's memory in `memory` (device: `device`).
  static Result<DebugCorruption> create(int every, int32_t trainer_rank, MemoryKind memory,
                                        int device);

  // Whether send `attempt` (0: the first, re-sends after) of `version` corrupts a byte.
  bool due(uint64_t version, int attempt) const {
    return every_ > 0 && attempt == 0 && version % static_cast<uint64_t>(every_) == 0;
  }
  // The memory the byte is written from (null when off), for registration.
  const uint8_t* data() const { return device_.data() != nullptr ? device_.data() : host(); }
  size_t bytes() const { return device_.data() != nullptr ? device_.size() : host_.size(); }
  // Makes the byte to write the complement of `*sent` (memory of this trainer's kind; device: read
  // and written on `stream` within `timeout`) and returns where it is.
  Result<const uint8_t*> flip(const uint8_t* sent, CudaStreamHandle stream,
                              std::chrono::milliseconds timeout);

 private:
  const uint8_t* host() const { return host_.empty() ? nullptr : host_.data(); }

  int every_ = 0;
  std::vector<uint8_t> host_;
  DeviceBuffer device_;
};

}  // namespace wsync
