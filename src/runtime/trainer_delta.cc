// TrainerContext's delta versions (runtime/trainer_delta.h, docs/delta.md): setting up the kept
// bytes and the pairs' landing parts at commit, and per send the patches of the ops whose replica
// holds the version this trainer kept, written into the ranks' landing areas. Publisher thread.
#include <cstdio>
#include <cstring>
#include <map>

#include "delta/delta_landing.h"
#include "delta/delta_patch.h"
#include "runtime/host_convert.h"
#include "runtime/trainer_context.h"

namespace wsync {
namespace {

// The source side of `r` is one contiguous run of its elements.
bool sourceContiguous(const Region& r) {
  const bool rows_packed = r.count[1] == 1 || r.src_stride[0] == r.count[0];
  const bool planes_packed = r.count[2] == 1 || r.src_stride[1] == r.count[0] * r.count[1];
  return rows_packed && planes_packed;
}

}  // namespace

// Commit (applyPlan, before the transports exist; a joined replica's extension, before its peers
// are connected): a pair per peer with a landing part, each op of `plan` to such a peer keeps its
// bytes; the staging holds every pair's area. The send counters stay as they are.
Status TrainerContext::setupDelta(const RankPlan& plan, const std::vector<PeerInfo>& peers,
                                  TrainerDeltaState& state) const {
  const uint64_t wire = state.wire_bytes, full = state.full_bytes;
  state = TrainerDeltaState{};
  state.wire_bytes = wire;
  state.full_bytes = full;
  if (!job_.welcome.delta || onDevice()) return Status::ok();  // device trainers: dense
  state.max_share = delta::shareFromPpm(job_.welcome.delta_max_share_ppm);
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

// Commit (connectPeer): the landing area of `p`, when `state` has a part of it.
Status TrainerContext::attachDeltaLanding(const PeerInfo& p, WriteTransport& transport,
                                          TrainerDeltaState& state) {
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

// Write op `i`'s bytes for this version as they land (destination dtype), packed: its converted
// staging `staged` (converting it now, host memory), its source run, or its strided source
// gathered.
Result<const uint8_t*> TrainerContext::deltaBytesOf(const RankPlan& plan, TrainerDeltaState& state,
                                                    size_t i, uint8_t* staged) {
  const WriteOp& op = plan.writes[i];
  if (op.converts()) {
    WSYNC_RETURN_IF_ERROR(convertHostStaging(plan, op, staged));
    state.ops[i].converted = true;
    return staged;
  }
  const Region r = plan.region(op);
  const size_t esz = dtypeSize(op.src_dtype);
  const uint8_t* src = sourceOf(op.src_buffer) + static_cast<size_t>(r.src_offset) * esz;
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

Status TrainerContext::sendDeltas(const GoMsg& go) {
  WSYNC_RETURN_IF_ERROR(sendPartDeltas(
      go, plan_, delta_, [this](size_t i) { return stagingAt(write_staging_offsets_[i]); }));
  for (const auto& part : extensions_) {
    if (!part->active) continue;
    ExtensionPart* p = part.get();
    WSYNC_RETURN_IF_ERROR(sendPartDeltas(
        go, p->plan, p->delta, [p](size_t i) { return p->stagingAt(p->staging_offsets[i]); }));
  }
  return Status::ok();
}

// One send of `go` (before its dense writes): for every pair of `state` whose replica takes the
// Go, the ops whose kept bytes are of the replica's base version become patches in the pair's
// area, written into the rank's landing part; every op's kept bytes become this version's. The
// areas' bytes count as this send's wire bytes (delta_).
Status TrainerContext::sendPartDeltas(const GoMsg& go, const RankPlan& plan,
                                      TrainerDeltaState& state, const StagingOf& staged) {
  for (TrainerDeltaState::Op& s : state.ops) {
    s.patched = false;
    s.converted = false;
  }
  for (TrainerDeltaState::Pair& pair : state.pairs) {
    pair.last_patch_end = 0;
    if (slotFor(go, pair.rollout) < 0) continue;
    const uint64_t base = go.baseOf(replica_of_rollout_[static_cast<size_t>(pair.rollout)]);
    uint8_t* area = state.staging.data() + pair.staging_offset;
    delta::PairAreaWriter writer(area, pair.capacity, static_cast<uint32_t>(rank()), go.version);
    uint64_t patch_end = delta::kPairHeaderBytes;
    for (size_t i : pair.ops) {
      const WriteOp& op = plan.writes[i];
      TrainerDeltaState::Op& s = state.ops[i];
      const int64_t n = plan.numElements(op);
      const size_t dsz = dtypeSize(op.dst_dtype);
      const size_t bytes = static_cast<size_t>(n) * dsz;
      if (bytes == 0) continue;
      WSYNC_ASSIGN_OR_RETURN(const uint8_t* next,
                             deltaBytesOf(plan, state, i, op.converts() ? staged(i) : nullptr));
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
    delta_.wire_bytes += area_bytes;
  }
  return Status::ok();
}

// WSYNC_DEBUG_CORRUPT_EVERY with delta versions: flips the last byte of the last patch trainer 0
// sent in this send (a changed element's value: the patch still decodes, the checksum catches the
// wrong element). False when it sent no patch.
Result<bool> TrainerContext::corruptOnePatch(const GoMsg& go) {
  for (const TrainerDeltaState::Pair& pair : delta_.pairs) {
    if (pair.last_patch_end <= delta::kPairHeaderBytes) continue;
    const uint64_t at = pair.last_patch_end - 1;
    corrupt_byte_[0] = delta_.staging[pair.staging_offset + at] ^ 0xFF;
    WSYNC_RETURN_IF_ERROR(pair.transport->write3d(pair.landing, pair.landing_offset + at, 1, 1,
                                                  corrupt_byte_.data(), 1, 1, 1, 1, 1));
    std::fprintf(stderr,
                 "[wsync trainer 0] debug: version %llu: corrupted byte %llu of the delta patches "
                 "for rollout %d\n",
                 static_cast<unsigned long long>(go.version), static_cast<unsigned long long>(at),
                 pair.rollout);
    WSYNC_RETURN_IF_ERROR(flushWrites());
    return true;
  }
  return false;
}

}  // namespace wsync
