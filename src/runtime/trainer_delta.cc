#include "runtime/trainer_delta.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>

#include "delta/delta_landing.h"
#include "delta/delta_patch.h"
#include "runtime/device_delta_ops.h"
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

// `r` without its offsets and with its destination side packed: a same-dtype copy of it gathers
// the source side into a packed buffer.
Region packedRegion(const Region& r) {
  Region packed = r;
  packed.src_offset = packed.dst_offset = 0;
  packed.dst_stride[0] = r.count[0];
  packed.dst_stride[1] = r.count[0] * r.count[1];
  return packed;
}

// Write op `i`'s bytes for this version as they land (destination dtype), packed: its converted
// staging `staged` (host memory converts it now; device memory converted it before the send), its
// source run, or its strided source gathered (device memory: enqueued on the state's stream).
Result<const uint8_t*> deltaBytesOf(const RankPlan& plan, TrainerDeltaState& state, size_t i,
                                    const DeltaSendSources& from) {
  const WriteOp& op = plan.writes[i];
  if (op.converts()) {
    uint8_t* staged = from.staged(i);
    if (!state.device.on) {
      WSYNC_RETURN_IF_ERROR(from.sources.convertHost(plan, op, staged));
      state.ops[i].converted = true;
    }
    return staged;
  }
  const Region r = plan.region(op);
  const size_t esz = dtypeSize(op.src_dtype);
  const uint8_t* src = from.sources.of(op.src_buffer) + static_cast<size_t>(r.src_offset) * esz;
  if (sourceContiguous(r)) return src;
  if (state.device.on) {
    WSYNC_RETURN_IF_ERROR(convertRegionAsync(src, op.src_dtype, state.device.gather.data(),
                                             op.src_dtype, packedRegion(r), 1.0F,
                                             state.device.stream.get()));
    return state.device.gather.data();
  }
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

// One op's encoded patch in host memory; data is null when the patch is not to be sent.
struct HostPatch {
  const uint8_t* data = nullptr;
  uint64_t bytes = 0;
};

// The patch of `next` against the kept bytes of op `s`, the kept bytes becoming `next` (only the
// changed elements are written), on the host or on the device. A device patch comes back to the
// host only when `sendable(its bytes)`: a larger one goes dense, so its bytes are never read.
template <typename Sendable>
Result<HostPatch> encodeKeptPatch(const delta::PatchShape& shape, TrainerDeltaState& state,
                                  const TrainerDeltaState::Op& s, const uint8_t* next,
                                  const Sendable& sendable, const DeltaSendSources& from) {
  if (!state.device.on) {
    WSYNC_RETURN_IF_ERROR(
        delta::encodePatchAndAdvance(shape, state.kept.data() + s.kept_offset, next, &state.patch));
    const uint64_t bytes = state.patch.size();
    return HostPatch{sendable(bytes) ? state.patch.data() : nullptr, bytes};
  }
  TrainerDeltaState::Device& d = state.device;
  WSYNC_ASSIGN_OR_RETURN(const size_t bytes,
                         encodePatchAndAdvanceDevice(
                             shape, d.kept.data() + s.kept_offset, next, d.patch.data(),
                             d.patch.size(), d.scratch.data(), d.scratch.size(), d.stream.get()));
  if (!sendable(bytes)) return HostPatch{nullptr, bytes};
  if (bytes > d.patch_host.size()) {  // sendable patches fit a pair's part, which sized it
    return internalError("a delta patch of " + std::to_string(bytes) +
                         " bytes, larger than the host buffer of " +
                         std::to_string(d.patch_host.size()));
  }
  WSYNC_RETURN_IF_ERROR(copyAsync(d.patch_host.data(), d.patch.data(), bytes, d.stream.get()));
  WSYNC_RETURN_IF_ERROR(streamSync(d.stream.get(), from.timeout));
  return HostPatch{d.patch_host.data(), bytes};
}

// The kept bytes of op `s` become `next` (`bytes` bytes) without a patch.
Status keepDense(TrainerDeltaState& state, const TrainerDeltaState::Op& s, const uint8_t* next,
                 size_t bytes) {
  if (!state.device.on) {
    std::memcpy(state.kept.data() + s.kept_offset, next, bytes);
    return Status::ok();
  }
  return copyAsync(state.device.kept.data() + s.kept_offset, next, bytes,
                   state.device.stream.get());
}

// A device trainer's encode memory for the delta ops of `plan` (state.ops set up).
Status allocateDeviceDelta(const RankPlan& plan, size_t kept_bytes, TrainerDeltaState& state) {
  TrainerDeltaState::Device& d = state.device;
  WSYNC_RETURN_IF_ERROR(setDevice(d.device));
  size_t patch = 0, scratch = 0, gather = 0;
  for (size_t i = 0; i < plan.writes.size(); ++i) {
    if (state.ops[i].pair < 0) continue;
    const WriteOp& op = plan.writes[i];
    const int64_t n = plan.numElements(op);
    if (n == 0) continue;
    const delta::PatchShape shape = delta::shapeFor(n, static_cast<int>(dtypeSize(op.dst_dtype)));
    patch = std::max(patch, static_cast<size_t>(delta::maxPatchBytes(shape)));
    WSYNC_ASSIGN_OR_RETURN(const size_t encode_scratch, deviceEncodeScratchBytes(shape));
    scratch = std::max(scratch, encode_scratch);
    if (!op.converts() && !sourceContiguous(plan.region(op)))
      gather = std::max(gather, static_cast<size_t>(n) * dtypeSize(op.src_dtype));
  }
  WSYNC_ASSIGN_OR_RETURN(d.stream, DeviceStream::create(d.device));
  WSYNC_ASSIGN_OR_RETURN(d.kept, DeviceBuffer::allocate(kept_bytes, d.device));
  WSYNC_ASSIGN_OR_RETURN(d.patch, DeviceBuffer::allocate(patch, d.device));
  // Only a patch that fits a pair's part is read back (encodeKeptPatch).
  uint64_t largest_part = 0;
  for (const TrainerDeltaState::Pair& pair : state.pairs)
    largest_part = std::max(largest_part, pair.capacity);
  WSYNC_ASSIGN_OR_RETURN(d.patch_host, PinnedHostBuffer::allocate(std::min<size_t>(
                                           patch, static_cast<size_t>(largest_part))));
  WSYNC_ASSIGN_OR_RETURN(d.scratch, DeviceBuffer::allocate(scratch, d.device));
  WSYNC_ASSIGN_OR_RETURN(d.gather, DeviceBuffer::allocate(gather, d.device));
  return Status::ok();
}

}  // namespace

Status setUpDelta(const RankPlan& plan, const std::vector<PeerInfo>& peers, bool enabled,
                  uint32_t max_share_ppm, MemoryKind memory, int device, TrainerDeltaState& state) {
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
    kept = (kept + 15) / 16 * 16;  // each op's bytes aligned for the element-wise kernels
    state.ops[i].kept_offset = kept;
    ops.push_back(i);
    kept += static_cast<size_t>(plan.numElements(op)) * dtypeSize(op.dst_dtype);
  }
  if (memory == MemoryKind::kDevice) {
    state.device.on = true;
    state.device.device = device;
    return allocateDeviceDelta(plan, kept, state).withContext("delta versions on the device");
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
                        const DeltaSendSources& from, const TrainerMembership& membership,
                        int32_t trainer_rank, uint64_t* wire_bytes) {
  for (TrainerDeltaState::Op& s : state.ops) {
    s.patched = false;
    s.converted = false;
  }
  bool device_work = false;  // device copies into the kept bytes still in flight
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
      WSYNC_ASSIGN_OR_RETURN(const uint8_t* next, deltaBytesOf(plan, state, i, from));
      if (base != 0 && s.kept_version == base) {
        // The kept bytes become this version's as the patch is encoded, whether it is sent or not.
        const auto sendable = [&](uint64_t patch_bytes) {
          return static_cast<double>(patch_bytes) <= state.max_share * static_cast<double>(bytes) &&
                 writer.fits(patch_bytes);
        };
        WSYNC_ASSIGN_OR_RETURN(const HostPatch patch,
                               encodeKeptPatch(delta::shapeFor(n, static_cast<int>(dsz)), state, s,
                                               next, sendable, from));
        if (patch.data != nullptr) {
          writer.add(s.ordinal, patch.data, patch.bytes);
          patch_end += patch.bytes;
          s.patched = true;
        }
      } else {
        WSYNC_RETURN_IF_ERROR(keepDense(state, s, next, bytes));
        device_work = state.device.on;
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
  // The kept copies read the sources, which the caller may change once the publish completed.
  if (device_work) WSYNC_RETURN_IF_ERROR(streamSync(state.device.stream.get(), from.timeout));
  return Status::ok();
}

Result<bool> corruptOnePatch(const GoMsg& go, TrainerDeltaState& state) {
  for (TrainerDeltaState::Pair& pair : state.pairs) {
    if (pair.last_patch_end <= delta::kPairHeaderBytes) continue;
    const uint64_t at = pair.last_patch_end - 1;
    uint8_t& byte = state.staging[pair.staging_offset + at];
    byte = static_cast<uint8_t>(~byte);  // the staging is rewritten by the next send
    WSYNC_RETURN_IF_ERROR(pair.transport->write3d(pair.landing, pair.landing_offset + at, 1, 1,
                                                  &byte, 1, 1, 1, 1, 1));
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
