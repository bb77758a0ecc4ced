// TrainerContext's delta versions (runtime/trainer_delta.h, docs/delta.md): setting up the kept
// bytes and the pairs' landing parts at commit, and per send the patches of the ops whose replica
// holds the version this trainer kept, written into the ranks' landing areas. Publisher thread.
#include <cstdio>
#include <cstring>

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

// Commit (applyPlan, before the transports exist): a pair per peer with a landing part, each op to
// such a peer keeps its bytes; the staging holds every pair's area.
Status TrainerContext::setupDelta(const std::vector<PeerInfo>& peers) {
  delta_ = TrainerDeltaState{};
  if (!job_.welcome.delta || onDevice()) return Status::ok();  // device trainers: dense
  delta_.max_share = delta::shareFromPpm(job_.welcome.delta_max_share_ppm);
  std::vector<int32_t> pair_of_rollout(static_cast<size_t>(numRollouts()), -1);
  for (const PeerInfo& p : peers) {
    if (p.delta_landing_bytes == 0 || p.rank < 0 || p.rank >= numRollouts()) continue;
    TrainerDeltaState::Pair pair;
    pair.rollout = p.rank;
    pair.landing_offset = p.delta_landing_offset;
    pair.capacity = p.delta_landing_bytes;
    pair.staging_offset = delta_.staging.size();
    delta_.staging.resize(delta_.staging.size() + pair.capacity);
    pair_of_rollout[static_cast<size_t>(p.rank)] = static_cast<int32_t>(delta_.pairs.size());
    delta_.pairs.push_back(std::move(pair));
  }
  if (delta_.pairs.empty()) return Status::ok();
  delta_.ops.resize(plan_.writes.size());
  size_t kept = 0;
  for (size_t i = 0; i < plan_.writes.size(); ++i) {
    const WriteOp& op = plan_.writes[i];
    const int32_t pair = pair_of_rollout[static_cast<size_t>(op.dst_rank)];
    if (pair < 0) continue;
    auto& ops = delta_.pairs[static_cast<size_t>(pair)].ops;
    delta_.ops[i].pair = pair;
    delta_.ops[i].ordinal = static_cast<uint32_t>(ops.size());
    delta_.ops[i].kept_offset = kept;
    ops.push_back(i);
    kept += static_cast<size_t>(plan_.numElements(op)) * dtypeSize(op.dst_dtype);
  }
  delta_.kept.resize(kept);
  return Status::ok();
}

// Commit (connectPeer): the landing area of `p`, when this trainer has a part of it.
Status TrainerContext::attachDeltaLanding(const PeerInfo& p, WriteTransport& transport) {
  for (TrainerDeltaState::Pair& pair : delta_.pairs) {
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
// staging (converting it now, host memory), its source run, or its strided source gathered.
Result<const uint8_t*> TrainerContext::deltaBytesOf(size_t i) {
  const WriteOp& op = plan_.writes[i];
  if (op.converts()) {
    uint8_t* staged = stagingAt(write_staging_offsets_[i]);
    WSYNC_RETURN_IF_ERROR(convertHostStaging(plan_, op, staged));
    delta_.ops[i].converted = true;
    return staged;
  }
  const Region r = plan_.region(op);
  const size_t esz = dtypeSize(op.src_dtype);
  const uint8_t* src = sourceOf(op.src_buffer) + static_cast<size_t>(r.src_offset) * esz;
  if (sourceContiguous(r)) return src;
  const size_t row_bytes = static_cast<size_t>(r.count[0]) * esz;
  delta_.scratch.resize(static_cast<size_t>(plan_.numElements(op)) * esz);
  for (int64_t row = 0; row < r.count[1] * r.count[2]; ++row) {
    const int64_t plane = row / r.count[1];
    const int64_t at = plane * r.src_stride[1] + (row % r.count[1]) * r.src_stride[0];
    std::memcpy(delta_.scratch.data() + static_cast<size_t>(row) * row_bytes,
                src + static_cast<size_t>(at) * esz, row_bytes);
  }
  return delta_.scratch.data();
}

// One send of `go` (before its dense writes): for every pair whose replica takes the Go, the ops
// whose kept bytes are of the replica's base version become patches in the pair's area, written
// into the rank's landing part; every op's kept bytes become this version's.
Status TrainerContext::sendDeltas(const GoMsg& go) {
  delta_.wire_bytes = 0;
  delta_.full_bytes = 0;
  for (TrainerDeltaState::Op& s : delta_.ops) {
    s.patched = false;
    s.converted = false;
  }
  for (TrainerDeltaState::Pair& pair : delta_.pairs) {
    pair.last_patch_end = 0;
    if (slotFor(go, pair.rollout) < 0) continue;
    const uint64_t base = go.baseOf(replica_of_rollout_[static_cast<size_t>(pair.rollout)]);
    uint8_t* area = delta_.staging.data() + pair.staging_offset;
    delta::PairAreaWriter writer(area, pair.capacity, static_cast<uint32_t>(rank()), go.version);
    uint64_t patch_end = delta::kPairHeaderBytes;
    for (size_t i : pair.ops) {
      const WriteOp& op = plan_.writes[i];
      TrainerDeltaState::Op& s = delta_.ops[i];
      const int64_t n = plan_.numElements(op);
      const size_t dsz = dtypeSize(op.dst_dtype);
      const size_t bytes = static_cast<size_t>(n) * dsz;
      if (bytes == 0) continue;
      WSYNC_ASSIGN_OR_RETURN(const uint8_t* next, deltaBytesOf(i));
      uint8_t* kept = delta_.kept.data() + s.kept_offset;
      if (base != 0 && s.kept_version == base) {
        // The kept bytes become this version's as the patch is encoded (only changed elements
        // are written), whether the patch is sent or not.
        WSYNC_RETURN_IF_ERROR(delta::encodePatchAndAdvance(
            delta::shapeFor(n, static_cast<int>(dsz)), kept, next, &delta_.patch));
        const uint64_t patch_bytes = delta_.patch.size();
        if (static_cast<double>(patch_bytes) <= delta_.max_share * static_cast<double>(bytes) &&
            writer.fits(patch_bytes)) {
          writer.add(s.ordinal, delta_.patch.data(), patch_bytes);
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
