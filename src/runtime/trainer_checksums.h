// What one trainer sends, summed per rollout rank (docs/checksums.md): the spans of its plan's
// writes and broadcasts, and of joined replicas' writes, read where the transports read them (a
// converting op's packed staging, else its source region); after each send, the sums of the ranks
// whose replica took it, for SentChecksums. The publisher thread owns it; no sockets.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "checksum/checksum.h"
#include "common/status.h"
#include "plan/plan.h"
#include "protocol/protocol.h"
#include "runtime/device_ops.h"
#include "runtime/version_checksums.h"

namespace wsync {

class TrainerChecksums {
 public:
  // The first byte of trainer buffer `buffer` as sent (the buffer itself, its snapshot, or its
  // quantized source).
  using SourceOf = std::function<const uint8_t*(int32_t buffer)>;
  // The packed conversion staging of write op (or broadcast group) `index` of a plan.
  using StagingOf = std::function<const uint8_t*(size_t index)>;

  // The span of write op `op` of `plan` as sent: from `staged` (its packed conversion staging)
  // when it converts, else from its region of the buffer that starts at `source`.
  static ChecksumSpan sentSpan(const RankPlan& plan, const WriteOp& op, const uint8_t* source,
                               const uint8_t* staged);

  // Collects the spans of the next build(): every write op of `plan` (converting ones from
  // `staging`), then every broadcast group's span per receiver (converting groups from
  // `staging`, indexed by group).
  void addWrites(const RankPlan& plan, const SourceOf& source, const StagingOf& staging);
  void addGroups(const RankPlan& plan, const SourceOf& source, const StagingOf& staging);
  // The spans collected since the last build replace the ones summed so far; they cover the
  // plan and its first `extensions` joined replicas. `memory`: where they are (device: CUDA
  // device `device`).
  Status build(size_t extensions, MemoryKind memory, int device);
  // How many joined replicas' extensions the last build covers.
  size_t coveredExtensions() const { return covered_extensions_; }

  // The sum of what this trainer sent each rollout rank r with takes(r) and some span, in rank
  // order. Device memory: after the work enqueued on `after` so far, within `timeout`.
  Result<std::vector<RankChecksum>> sums(const std::function<bool(int32_t rollout)>& takes,
                                         CudaStreamHandle after, std::chrono::milliseconds timeout);

 private:
  std::vector<ChecksumSpan> collected_;
  VersionChecksums checksums_;
  size_t covered_extensions_ = 0;
};

}  // namespace wsync
