#include "runtime/rollout_checksums.h"

#include <algorithm>
#include <map>
#include <set>

namespace wsync {

// Every region this rank receives, relative to a slot's start, each adding to its trainer's sum.
Status RolloutChecksums::build() {
  const RankPlan& plan = *plan_;
  const std::vector<uint64_t>& offsets = *buffer_byte_offsets_;
  std::vector<ChecksumSpan> spans;
  for (const WriteOp& op : plan.writes) {
    ChecksumSpan s = landingSpan(plan.region(op), op.dst_buffer, op.dst_dtype,
                                 static_cast<uint32_t>(op.src_rank));
    s.src = offsets[static_cast<size_t>(op.dst_buffer)] + s.dst_offset;
    s.src_pitch = s.dst_pitch;
    s.src_plane_pitch = s.dst_plane_pitch;
    spans.push_back(s);
  }
  for (const BroadcastGroup& g : plan.groups) {
    for (const BufferSpan& d : g.dst) {
      if (d.rank != rank_) continue;
      ChecksumSpan s = groupLandingSpan(g, d, static_cast<uint32_t>(g.src.rank));
      s.src = offsets[static_cast<size_t>(d.buffer)] + s.dst_offset;
      spans.push_back(s);
    }
  }
  WSYNC_ASSIGN_OR_RETURN(checksums_, VersionChecksums::create(std::move(spans), memory_, device_));
  built_ = true;
  return Status::ok();
}

std::string RolloutChecksums::tensorsFrom(int32_t trainer) const {
  std::set<int32_t> tensors;
  for (const WriteOp& op : plan_->writes) {
    if (op.src_rank == trainer) tensors.insert(op.tensor);
  }
  for (const BroadcastGroup& g : plan_->groups) {
    if (g.src.rank == trainer) tensors.insert(g.tensor);
  }
  std::string names;
  size_t listed = 0;
  for (int32_t t : tensors) {
    if (listed == 4) {
      names += " and " + std::to_string(tensors.size() - listed) + " more";
      break;
    }
    names += (listed++ == 0 ? "'" : ", '") + plan_->tensors[static_cast<size_t>(t)].name + "'";
  }
  return names;
}

Result<std::optional<ChecksumFailedMsg>> RolloutChecksums::verify(
    const VerifyMsg& verify, const uint8_t* slot, const PatchFailures& patch_failures,
    const std::string& what, CudaStreamHandle after, std::chrono::milliseconds timeout) {
  if (!built_) WSYNC_RETURN_IF_ERROR(build());
  const std::vector<uint8_t> all(checksums_.numOutputs(), 1);
  WSYNC_ASSIGN_OR_RETURN(std::vector<uint64_t> sums, checksums_.compute(slot, all, after, timeout));
  std::map<int32_t, uint64_t> expected;
  for (const RankChecksum& c : verify.sums)
    expected[c.rank] = c.sum;
  ChecksumFailedMsg failed{verify.version, {}, what + ":"};
  const int32_t trainers = std::max<int32_t>(static_cast<int32_t>(sums.size()),
                                             verify.sums.empty() ? 0 : verify.sums.back().rank + 1);
  for (int32_t t = 0; t < trainers; ++t) {
    const uint64_t got = static_cast<size_t>(t) < sums.size() ? sums[static_cast<size_t>(t)] : 0;
    const auto it = expected.find(t);
    const uint64_t want = it == expected.end() ? 0 : it->second;
    std::string patch_failure;
    for (const auto& [trainer, why] : patch_failures)
      if (trainer == t) patch_failure = why;
    if (got == want && patch_failure.empty()) continue;
    failed.trainers.push_back(t);
    failed.detail += " the bytes from trainer " + std::to_string(t) + " (" + tensorsFrom(t) + ") " +
                     (patch_failure.empty() ? "do not match their checksum;"
                                            : "could not be patched: " + patch_failure + ";");
  }
  if (failed.trainers.empty()) return std::optional<ChecksumFailedMsg>();
  failed.detail.pop_back();
  return std::optional<ChecksumFailedMsg>(std::move(failed));
}

}  // namespace wsync
