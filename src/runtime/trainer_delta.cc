#include "runtime/trainer_delta.h"

#include <cstdio>
#include <cstring>
#include <map>

#include "delta/delta_landing.h"
#include "delta/delta_patch.h"
#include "runtime/debug_corruption.h"
#include "runtime/trainer_membership.h"
#include "runtime/trainer_sources.h"

namespace wsync {
namespace {

// The source side of `r` is one contiguous run of its elements.
bool sourceContiguous(const Region& r) {
  const bool rows_packed = r.count[1] == 1 || r.src_stride[0] == r.count[0];
  const bool planes_packed = r.count[2] == 1 || r.src_stride[1] == r.count[0] * r.count[1];
  return rows_packed && planes_packed;
}

// Write op `i`'s bytes for this version as they land (destination dtype), packed: its converted
// staging `staged` (converting it now, host memory), its source run, or its strided source
// gathered.
Result<const uint8_t*> deltaBytesOf(const RankPlan& plan, TrainerDeltaState& state, size_t i,
                                    uint8_t* staged, const TrainerSources& sources) {
  const WriteOp& op = plan.writes[i];
  if (op.converts()) {
    WSYNC_RETURN_IF_ERROR(sources.convertHost(plan, op, staged));
    state.ops[i].converted = true;
    return staged;
  }
  const Region r = plan.region(op);
  const size_t esz = dtypeSize(op.src_dtype);
  const uint8_t* src = sources.of(op.src_buffer) + static_cast<size_t>(r.src_offset) * esz;
  if (sourceContiguous(r)) return src;
  const size_t row_bytes = static_cast<size_t>(r.count[0]) * esz;
  state.scratch.resize(static_cast<size_t>(plan.numElements(op)) * esz);
  for (int64_t row = 0; row < r.count[1] * r.count[2]; ++row) {
    const int64_t plane = row / r.count[1];
    const int64_t at = plane * r.src_stride[1] + (row % r.count[1]) * r.src_stride[0];
    std::memcpy(state.scratch.data() + static_cast<size_t>(row) * row_bytes,
                src + static_cast<size_t>(at) * esz, row_bytes);
  }
  return state.scratch.data();
}

}  // namespace

Status setUpDelta(const RankPlan& plan, const std::vector<PeerInfo>& peers, bool enabled,
                  uint32_t max_share_ppm, TrainerDeltaState& state) {
  const uint64_t wire = state.wire_bytes, full = state.full_bytes;
  state = TrainerDeltaState{};
  state.wire_bytes = wire;
  state.full_bytes = full;
  if (!enabled) return Status::ok();
  state.max_share = delta::shareFromPpm(max_share_ppm);
  std::map<int32_t, int32_t> pair_of_rollout;
  for (const PeerInfo& p : peers) {
    if (p.delta_landing_bytes == 0 || p.rank < 0) continue;
    TrainerDeltaState::Pair pair;
    pair.rollout = p.rank;
    pair.landing_offset = p.delta_landing_offset;
    pair.capacity = p.delta_landing_bytes;
    pair.staging_offset = state.staging.size();
    state.staging.resize(state.staging.size() + pair.capacity);
    pair_of_rollout[p.rank] = static_cast<int32_t>(state.pairs.size());
    state.pairs.push_back(std::move(pair));
  }
  if (state.pairs.empty()) return Status::ok();
  state.ops.resize(plan.writes.size());
  size_t kept = 0;
  for (size_t i = 0; i < plan.writes.size(); ++i) {
    const WriteOp& op = plan.writes[i];
    const auto found = pair_of_rollout.find(op.dst_rank);
    if (found == pair_of_rollout.end()) continue;
    const int32_t pair = found->second;
    auto& ops = state.pairs[static_cast<size_t>(pair)].ops;
    state.ops[i].pair = pair;
    state.ops[i].ordinal = static_cast<uint32_t>(ops.size());
    state.ops[i].kept_offset = kept;
    ops.push_back(i);
    kept += static_cast<size_t>(plan.numElements(op)) * dtypeSize(op.dst_dtype);
  }
  state.kept.resize(kept);
  return Status::ok();
}

Status attachDeltaLanding(const PeerInfo& p, WriteTransport& transport, TrainerDeltaState& state) {
  for (TrainerDeltaState::Pair& pair : state.pairs) {
    if (pair.rollout != p.rank) continue;
    WSYNC_ASSIGN_OR_RETURN(pair.landing, transport.attach(p.rank, p.delta_landing));
    WSYNC_ASSIGN_OR_RETURN(const uint64_t size, transport.attachedSize(pair.landing));
    if (pair.landing_offset + pair.capacity > size) {
      return protocolError("rollout " + std::to_string(p.rank) + ": delta landing part [" +
                           std::to_string(pair.landing_offset) + ", +" +
                           std::to_string(pair.capacity) + ") outside its area of " +
                           std::to_string(size) + " bytes");
    }
    pair.transport = &transport;
  }
  return Status::ok();
}

Status sendDeltaPatches(const GoMsg& go, const RankPlan& plan, TrainerDeltaState& state,
                        const DeltaStagingOf& staged, const TrainerMembership& membership,
                        const TrainerSources& sources, int32_t trainer_rank, uint64_t* wire_bytes) {
  for (TrainerDeltaState::Op& s : state.ops) {
    s.patched = false;
    s.converted = false;
  }
  for (TrainerDeltaState::Pair& pair : state.pairs) {
    pair.last_patch_end = 0;
    if (membership.slotFor(go, pair.rollout) < 0) continue;
    const uint64_t base = go.baseOf(membership.replicaOf(pair.rollout));
    uint8_t* area = state.staging.data() + pair.staging_offset;
    delta::PairAreaWriter writer(area, pair.capacity, static_cast<uint32_t>(trainer_rank),
                                 go.version);
    uint64_t patch_end = delta::kPairHeaderBytes;
    for (size_t i : pair.ops) {
      const WriteOp& op = plan.writes[i];
      TrainerDeltaState::Op& s = state.ops[i];
      const int64_t n = plan.numElements(op);
      const size_t dsz = dtypeSize(op.dst_dtype);
      const size_t bytes = static_cast<size_t>(n) * dsz;
      if (bytes == 0) continue;
      WSYNC_ASSIGN_OR_RETURN(
          const uint8_t* next,
          deltaBytesOf(plan, state, i, op.converts() ? staged(i) : nullptr, sources));
      uint8_t* kept = state.kept.data() + s.kept_offset;
      if (base != 0 && s.kept_version == base) {
        // The kept bytes become this version's as the patch is encoded (only changed elements
        // are written), whether the patch is sent or not.
        WSYNC_RETURN_IF_ERROR(delta::encodePatchAndAdvance(
            delta::shapeFor(n, static_cast<int>(dsz)), kept, next, &state.patch));
        const uint64_t patch_bytes = state.patch.size();
        if (static_cast<double>(patch_bytes) <= state.max_share * static_cast<double>(bytes) &&
            writer.fits(patch_bytes)) {
          writer.add(s.ordinal, state.patch.data(), patch_bytes);
          patch_end += patch_bytes;
          s.patched = true;
        }
      } else {
        std::memcpy(kept, next, bytes);
      }
      s.kept_version = go.version;
    }
    if (writer.entries() == 0) continue;  // every op dense: the rank finds no area for go.version
    const uint64_t area_bytes = writer.finish();
    pair.last_patch_end = patch_end;
    WSYNC_RETURN_IF_ERROR(pair.transport->write3d(pair.landing, pair.landing_offset, area_bytes,
                                                  area_bytes, area, area_bytes, area_bytes,
                                                  area_bytes, 1, 1));
    *wire_bytes += area_bytes;
  }
  return Status::ok();
}

Result<bool> corruptOnePatch(const GoMsg& go, TrainerDeltaState& state,
                             DebugCorruption& corruption) {
  for (const TrainerDeltaState::Pair& pair : state.pairs) {
    if (pair.last_patch_end <= delta::kPairHeaderBytes) continue;
    const uint64_t at = pair.last_patch_end - 1;
    WSYNC_ASSIGN_OR_RETURN(const uint8_t* flipped,
                           corruption.flip(&state.staging[pair.staging_offset + at], nullptr,
                                           std::chrono::milliseconds(0)));
    WSYNC_RETURN_IF_ERROR(pair.transport->write3d(pair.landing, pair.landing_offset + at, 1, 1,
                                                  flipped, 1, 1, 1, 1, 1));
    std::fprintf(stderr,
                 "[wsync trainer 0] debug: version %llu: corrupted byte %llu of the delta patches "
                 "for rollout %d\n",
                 static_cast<unsigned long long>(go.version), static_cast<unsigned long long>(at),
                 pair.rollout);
    return true;
  }
  return false;
}

}  // namespace wsync
