// Where a trainer converts (and packs) what it sends in another dtype: one range per converting
// write op and, for the plan itself, per converting broadcast group, in the memory of its buffers
// (host or device). Its memory is a write source (registered with the transports). Sized once;
// the publisher thread writes it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"
#include "plan/plan.h"
#include "runtime/device_ops.h"

namespace wsync {

class ConversionStaging {
 public:
  ConversionStaging() = default;  // nothing converts
  // A range per converting write of `plan` and, `with_groups`, per converting group, in `memory`
  // (device: CUDA device `device`). UNSUPPORTED naming the tensor for a pair of dtypes that
  // memory cannot convert.
  static Result<ConversionStaging> create(const RankPlan& plan, bool with_groups, MemoryKind memory,
                                          int device);

  // The range of write op `i` (group `i`) of the plan; meaningful where it converts.
  uint8_t* write(size_t i) const { return base() + write_offsets_[i]; }
  uint8_t* group(size_t i) const { return base() + group_offsets_[i]; }
  // All of it (null when empty), for registration.
  uint8_t* data() const { return bytes() == 0 ? nullptr : base(); }
  size_t bytes() const { return device_.data() != nullptr ? device_.size() : host_.size(); }

 private:
  uint8_t* base() const {
    return device_.data() != nullptr ? device_.data() : const_cast<uint8_t*>(host_.data());
  }

  std::vector<size_t> write_offsets_;  // per write op: bytes into the staging
  std::vector<size_t> group_offsets_;  // per group (with_groups)
  std::vector<uint8_t> host_;
  DeviceBuffer device_;
};

}  // namespace wsync
