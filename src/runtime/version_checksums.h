// Per-version checksums of one rank's share of the plan (docs/checksums.md): the spans of what a
// trainer sends, summed per destination rollout rank, or of what a rollout rank received, summed
// per sending trainer. Host memory is summed on the CPU (checksum/checksum.h); device memory by one
// kernel launch on the checksums' own stream (kernels/checksum_kernels.h), the spans uploaded once.
// Used by one thread at a time (the publisher or the receiver thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "checksum/checksum.h"
#include "common/status.h"
#include "layout/registration.h"
#include "plan/plan.h"
#include "runtime/device_ops.h"

namespace wsync {

// Where the bytes of `region`'s destination side land (a write op's, or one broadcast span's with
// region.count[0] = its elements), as a span adding to `output`: dst_buffer, dst_offset and the
// destination pitches in bytes of `dst_dtype`. The source side is packed (src 0, pitches of a
// packed region): callers set it.
ChecksumSpan landingSpan(const Region& region, int32_t dst_buffer, DType dst_dtype,
                         uint32_t output);
// landingSpan of broadcast group `g`'s elements, one contiguous run at receiver span `dst`.
ChecksumSpan groupLandingSpan(const BroadcastGroup& g, const BufferSpan& dst, uint32_t output);

class VersionChecksums {
 public:
  VersionChecksums() = default;  // no spans: every sum is 0
  // `spans` read `memory` (device: CUDA device `device`); each span's output < num_outputs.
  static Result<VersionChecksums> create(std::vector<ChecksumSpan> spans, uint32_t num_outputs,
                                         MemoryKind memory, int device);
  // As above with num_outputs one past the highest output a span adds to (0 without spans).
  static Result<VersionChecksums> create(std::vector<ChecksumSpan> spans, MemoryKind memory,
                                         int device);
  VersionChecksums(VersionChecksums&&) noexcept = default;
  VersionChecksums& operator=(VersionChecksums&&) noexcept = default;

  uint32_t numOutputs() const { return num_outputs_; }
  // Outputs that some span adds to (the others are always 0).
  const std::vector<uint8_t>& outputsWithSpans() const { return has_spans_; }

  // The sums per output of the spans whose output is active (active.size() == numOutputs();
  // inactive outputs are 0), reading base + span.src (base null: span.src is an address). Device
  // memory: the kernel runs after the work enqueued on `after` so far (null: the legacy default
  // stream); TIMEOUT when it has not finished within `timeout`.
  Result<std::vector<uint64_t>> compute(const uint8_t* base, const std::vector<uint8_t>& active,
                                        CudaStreamHandle after, std::chrono::milliseconds timeout);

 private:
  Result<std::vector<uint64_t>> computeOnDevice(const uint8_t* base, CudaStreamHandle after,
                                                std::chrono::milliseconds timeout);

  HostChecksumPlan host_;            // host memory
  std::vector<ChecksumSpan> spans_;  // device memory
  uint32_t num_outputs_ = 0;
  std::vector<uint8_t> has_spans_;
  MemoryKind memory_ = MemoryKind::kHost;
  // Device memory: the spans, the active flags and the sums on the device, and the stream.
  int device_ = -1;
  uint64_t total_tiles_ = 0;
  std::vector<uint8_t> active_;  // host copy of the flags being uploaded
  DeviceBuffer device_spans_;
  DeviceBuffer device_active_;
  DeviceBuffer device_sums_;
  DeviceStream stream_;
};

}  // namespace wsync
