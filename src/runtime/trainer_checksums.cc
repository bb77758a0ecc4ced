#include "runtime/trainer_checksums.h"

#include <utility>

namespace wsync {
namespace {

uint64_t addressOf(const void* p) {
  return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p));
}

}  // namespace

ChecksumSpan TrainerChecksums::sentSpan(const RankPlan& plan, const WriteOp& op,
                                        const uint8_t* source, const uint8_t* staged) {
  const Region r = plan.region(op);
  ChecksumSpan s = landingSpan(r, op.dst_buffer, op.dst_dtype, static_cast<uint32_t>(op.dst_rank));
  if (op.converts()) {
    s.src = addressOf(staged);  // packed: landingSpan's pitches
  } else {
    const size_t ssz = dtypeSize(op.src_dtype);
    s.src = addressOf(source) + static_cast<uint64_t>(r.src_offset) * ssz;
    s.src_pitch = static_cast<uint64_t>(r.src_stride[0]) * ssz;
    s.src_plane_pitch = static_cast<uint64_t>(r.src_stride[1]) * ssz;
  }
  return s;
}

void TrainerChecksums::addWrites(const RankPlan& plan, const SourceOf& source,
                                 const StagingOf& staging) {
  for (size_t i = 0; i < plan.writes.size(); ++i) {
    const WriteOp& op = plan.writes[i];
    collected_.push_back(
        sentSpan(plan, op, source(op.src_buffer), op.converts() ? staging(i) : nullptr));
  }
}

void TrainerChecksums::addGroups(const RankPlan& plan, const SourceOf& source,
                                 const StagingOf& staging) {
  for (size_t i = 0; i < plan.groups.size(); ++i) {
    const BroadcastGroup& g = plan.groups[i];
    const uint8_t* data =
        g.src_dtype != g.dst_dtype
            ? staging(i)
            : source(g.src.buffer) + static_cast<size_t>(g.src.offset) * dtypeSize(g.src_dtype);
    for (const BufferSpan& d : g.dst) {
      ChecksumSpan s = groupLandingSpan(g, d, static_cast<uint32_t>(d.rank));
      s.src = addressOf(data);
      collected_.push_back(s);
    }
  }
}

Status TrainerChecksums::build(size_t extensions, MemoryKind memory, int device) {
  std::vector<ChecksumSpan> spans = std::move(collected_);
  collected_.clear();
  WSYNC_ASSIGN_OR_RETURN(checksums_, VersionChecksums::create(std::move(spans), memory, device));
  covered_extensions_ = extensions;
  return Status::ok();
}

Result<std::vector<RankChecksum>> TrainerChecksums::sums(
    const std::function<bool(int32_t rollout)>& takes, CudaStreamHandle after,
    std::chrono::milliseconds timeout) {
  std::vector<uint8_t> active(checksums_.numOutputs(), 0);
  for (uint32_t r = 0; r < active.size(); ++r)
    active[r] = checksums_.outputsWithSpans()[r] != 0 && takes(static_cast<int32_t>(r));
  WSYNC_ASSIGN_OR_RETURN(std::vector<uint64_t> sums,
                         checksums_.compute(nullptr, active, after, timeout));
  std::vector<RankChecksum> out;
  for (uint32_t r = 0; r < active.size(); ++r) {
    if (active[r] != 0) out.push_back({static_cast<int32_t>(r), sums[r]});
  }
  return out;
}

}  // namespace wsync
