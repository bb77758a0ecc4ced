#include "runtime/rollout_delta.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "delta/delta_landing.h"
#include "delta/delta_patch.h"
#include "runtime/device_delta_ops.h"

namespace wsync {
namespace {

// The destination side of `r` is one contiguous run of its elements.
bool destinationContiguous(const Region& r) {
  const bool rows_packed = r.count[1] == 1 || r.dst_stride[0] == r.count[0];
  const bool planes_packed = r.count[2] == 1 || r.dst_stride[1] == r.count[0] * r.count[1];
  return rows_packed && planes_packed;
}

// Copies the rows of `r`'s destination side between `slot_at` (the region's first byte in a slot)
// and `packed`: gather when `to_packed`, else scatter.
void copyRows(const Region& r, size_t esz, uint8_t* slot_at, uint8_t* packed, bool to_packed) {
  const size_t row_bytes = static_cast<size_t>(r.count[0]) * esz;
  for (int64_t row = 0; row < r.count[1] * r.count[2]; ++row) {
    const int64_t plane = row / r.count[1];
    const int64_t at = plane * r.dst_stride[1] + (row % r.count[1]) * r.dst_stride[0];
    uint8_t* in_slot = slot_at + static_cast<size_t>(at) * esz;
    uint8_t* in_packed = packed + static_cast<size_t>(row) * row_bytes;
    if (to_packed) {
      std::memcpy(in_packed, in_slot, row_bytes);
    } else {
      std::memcpy(in_slot, in_packed, row_bytes);
    }
  }
}

}  // namespace

Status RolloutDelta::exposeLanding(bool enabled, WriteTransport& transport, MemoryKind memory,
                                   int device, uint64_t slot_bytes, int32_t trainers,
                                   uint32_t max_share_ppm, std::vector<uint8_t>* descriptor) {
  if (!enabled) return Status::ok();
  const uint64_t bytes = delta::landingAreaBytes(slot_bytes, trainers, max_share_ppm);
  WSYNC_ASSIGN_OR_RETURN(state_.landing, transport.allocateExposedHost(bytes));
  std::memset(state_.landing->data(), 0, state_.landing->size());
  *descriptor = state_.landing->descriptor();
  state_.device.on = memory == MemoryKind::kDevice;
  state_.device.device = device;
  if (state_.device.on) {
    Result<HostRegistration> pinned =
        HostRegistration::pin(state_.landing->data(), state_.landing->size());
    if (pinned.isOk()) state_.landing_pinned = std::move(*pinned);
  }
  return Status::ok();
}

Status RolloutDelta::planParts(const RankPlan& plan, int32_t num_trainers, uint32_t max_share_ppm) {
  if (!state_.landing) return Status::ok();
  const auto trainers = static_cast<size_t>(num_trainers);
  std::vector<uint64_t> dense(trainers, 0);
  state_.trainers.assign(trainers, {});
  for (size_t i = 0; i < plan.writes.size(); ++i) {
    const WriteOp& op = plan.writes[i];
    if (op.src_rank < 0 || static_cast<size_t>(op.src_rank) >= trainers) continue;
    dense[static_cast<size_t>(op.src_rank)] +=
        static_cast<uint64_t>(plan.numElements(op)) * dtypeSize(op.dst_dtype);
    state_.trainers[static_cast<size_t>(op.src_rank)].ops.push_back(i);
  }
  const std::vector<delta::LandingPart> parts = delta::landingParts(dense, max_share_ppm);
  uint64_t largest_part = 0;
  for (size_t t = 0; t < trainers; ++t) {
    state_.trainers[t].part_offset = parts[t].offset;
    state_.trainers[t].part_bytes = parts[t].bytes;
    if (parts[t].offset + parts[t].bytes > state_.landing->size())
      state_.trainers[t].part_bytes = 0;
    largest_part = std::max(largest_part, state_.trainers[t].part_bytes);
  }
  if (!state_.device.on) return Status::ok();
  return allocateDevice(plan, largest_part).withContext("delta versions on the device");
}

// Device slots: the largest patch fits the largest part; the scratch and the packed region serve
// the largest op (strided ones only for `packed`).
Status RolloutDelta::allocateDevice(const RankPlan& plan, uint64_t largest_part) {
  RolloutDeltaState::Device& d = state_.device;
  WSYNC_RETURN_IF_ERROR(setDevice(d.device));
  size_t scratch = 0, packed = 0;
  for (const RolloutDeltaState::FromTrainer& from : state_.trainers) {
    for (size_t i : from.ops) {
      const WriteOp& op = plan.writes[i];
      const int64_t n = plan.numElements(op);
      if (n == 0 || from.part_bytes == 0) continue;
      const size_t esz = dtypeSize(op.dst_dtype);
      WSYNC_ASSIGN_OR_RETURN(const size_t s,
                             deviceApplyScratchBytes(delta::shapeFor(n, static_cast<int>(esz))));
      scratch = std::max(scratch, s);
      if (!destinationContiguous(plan.region(op)))
        packed = std::max(packed, static_cast<size_t>(n) * esz);
    }
  }
  WSYNC_ASSIGN_OR_RETURN(d.stream, DeviceStream::create(d.device));
  WSYNC_ASSIGN_OR_RETURN(d.patch, DeviceBuffer::allocate(largest_part, d.device));
  WSYNC_ASSIGN_OR_RETURN(d.scratch, DeviceBuffer::allocate(scratch, d.device));
  WSYNC_ASSIGN_OR_RETURN(d.packed, DeviceBuffer::allocate(packed, d.device));
  return Status::ok();
}

Result<delta::PairArea> RolloutDelta::areaOf(size_t trainer, uint64_t version) const {
  const RolloutDeltaState::FromTrainer& from = state_.trainers[trainer];
  const auto* landing = static_cast<const uint8_t*>(state_.landing->data());
  return delta::readPairArea(landing + from.part_offset, from.part_bytes,
                             static_cast<uint32_t>(trainer), version, from.ops.size());
}

std::vector<bool> RolloutDelta::patchedOps(const RankPlan& plan, uint64_t version) const {
  std::vector<bool> patched;
  if (!state_.landing || state_.base == 0) return patched;
  for (size_t t = 0; t < state_.trainers.size(); ++t) {
    const RolloutDeltaState::FromTrainer& from = state_.trainers[t];
    if (from.part_bytes == 0) continue;
    Result<delta::PairArea> area = areaOf(t, version);
    if (!area.isOk()) continue;  // apply names it; its bytes fail verification either way
    for (const delta::PairEntry& e : area->entries) {
      patched.resize(plan.writes.size(), false);
      patched[from.ops[e.op]] = true;
    }
  }
  return patched;
}

Status RolloutDelta::applyOne(const RankPlan& plan, const WriteOp& op, size_t at,
                              const uint8_t* patch, size_t patch_bytes, const uint8_t* base,
                              uint8_t* out) {
  const Region r = plan.region(op);
  const size_t esz = dtypeSize(op.dst_dtype);
  const delta::PatchShape shape = delta::shapeFor(plan.numElements(op), static_cast<int>(esz));
  if (destinationContiguous(r))
    return delta::applyPatch(shape, patch, patch_bytes, base + at, out + at);
  state_.scratch.resize(static_cast<size_t>(shape.num_elements) * esz);
  copyRows(r, esz, const_cast<uint8_t*>(base) + at, state_.scratch.data(), true);
  WSYNC_RETURN_IF_ERROR(
      delta::applyPatch(shape, patch, patch_bytes, state_.scratch.data(), state_.scratch.data()));
  copyRows(r, esz, out + at, state_.scratch.data(), false);
  return Status::ok();
}

// Checks the patch on the host (the device trusts it), copies it to the device and applies it
// there, enqueued on the state's stream.
Status RolloutDelta::applyOneOnDevice(const RankPlan& plan, const WriteOp& op, size_t at,
                                      const uint8_t* patch, size_t patch_bytes, const uint8_t* base,
                                      uint8_t* out) {
  RolloutDeltaState::Device& d = state_.device;
  const Region r = plan.region(op);
  const DType dtype = op.dst_dtype;
  const size_t esz = dtypeSize(dtype);
  const delta::PatchShape shape = delta::shapeFor(plan.numElements(op), static_cast<int>(esz));
  WSYNC_RETURN_IF_ERROR(delta::validatePatch(shape, patch, patch_bytes));
  if (patch_bytes > d.patch.size()) {
    return protocolError("a patch of " + std::to_string(patch_bytes) +
                         " bytes, larger than the trainer's landing part (" +
                         std::to_string(d.patch.size()) + " bytes)");
  }
  CudaStreamHandle stream = d.stream.get();
  WSYNC_RETURN_IF_ERROR(copyAsync(d.patch.data(), patch, patch_bytes, stream));
  if (destinationContiguous(r)) {
    return applyPatchDeviceAsync(shape, d.patch.data(), patch_bytes, base + at, out + at,
                                 d.scratch.data(), d.scratch.size(), stream);
  }
  // A strided region: gathered from the base slot, patched in place, scattered into `out`.
  Region gather = r;
  gather.src_offset = gather.dst_offset = 0;
  gather.src_stride[0] = r.dst_stride[0];
  gather.src_stride[1] = r.dst_stride[1];
  gather.dst_stride[0] = r.count[0];
  gather.dst_stride[1] = r.count[0] * r.count[1];
  Region scatter = gather;
  std::swap(scatter.src_stride, scatter.dst_stride);
  WSYNC_RETURN_IF_ERROR(
      convertRegionAsync(base + at, dtype, d.packed.data(), dtype, gather, 1.0F, stream));
  WSYNC_RETURN_IF_ERROR(applyPatchDeviceAsync(shape, d.patch.data(), patch_bytes, d.packed.data(),
                                              d.packed.data(), d.scratch.data(), d.scratch.size(),
                                              stream));
  return convertRegionAsync(d.packed.data(), dtype, out + at, dtype, scatter, 1.0F, stream);
}

RolloutDelta::PatchFailures RolloutDelta::apply(
    const RankPlan& plan, const std::vector<uint64_t>& buffer_byte_offsets, uint64_t version,
    int32_t slot, const SlotStore& store, const std::vector<std::unique_ptr<ExposedMemory>>& slots,
    std::chrono::milliseconds timeout) {
  PatchFailures failed;
  if (!state_.landing || state_.base == 0) return failed;
  int32_t base_slot = -1;
  for (int32_t s = 0; s < store.numSlots(); ++s) {
    const std::optional<SlotInfo> info = store.slotInfo(s);
    if (s != slot && info && info->state == SlotState::kReady && info->version == state_.base)
      base_slot = s;
  }
  if (state_.device.on) {
    const Status s = setDevice(state_.device.device);
    if (!s.isOk()) {
      for (size_t t = 0; t < state_.trainers.size(); ++t)
        if (state_.trainers[t].part_bytes > 0)
          failed.emplace_back(static_cast<int32_t>(t), s.message());
      return failed;
    }
  }
  uint8_t* out_slot = static_cast<uint8_t*>(slots[static_cast<size_t>(slot)]->data());
  std::vector<int32_t> on_device;  // trainers whose patches were enqueued on the device
  for (size_t t = 0; t < state_.trainers.size(); ++t) {
    const RolloutDeltaState::FromTrainer& from = state_.trainers[t];
    if (from.part_bytes == 0) continue;
    Result<delta::PairArea> area = areaOf(t, version);
    if (!area.isOk()) {
      failed.emplace_back(static_cast<int32_t>(t), area.status().message());
      continue;
    }
    if (area->entries.empty()) continue;  // every op from t came dense
    if (base_slot < 0) {
      failed.emplace_back(static_cast<int32_t>(t),
                          "no ready slot holds base version " + std::to_string(state_.base));
      continue;
    }
    const uint8_t* base =
        static_cast<const uint8_t*>(slots[static_cast<size_t>(base_slot)]->data());
    for (size_t e = 0; e < area->entries.size(); ++e) {
      const WriteOp& op = plan.writes[from.ops[area->entries[e].op]];
      const size_t at = buffer_byte_offsets[static_cast<size_t>(op.dst_buffer)] +
                        static_cast<size_t>(op.dst_offset) * dtypeSize(op.dst_dtype);
      const uint8_t* patch = area->patches[e];
      const size_t patch_bytes = area->entries[e].patch_bytes;
      const Status s = state_.device.on
                           ? applyOneOnDevice(plan, op, at, patch, patch_bytes, base, out_slot)
                           : applyOne(plan, op, at, patch, patch_bytes, base, out_slot);
      if (!s.isOk()) {
        failed.emplace_back(static_cast<int32_t>(t),
                            "the patch of tensor '" +
                                plan.tensors[static_cast<size_t>(op.tensor)].name +
                                "': " + s.message());
        break;
      }
      if (state_.device.on && (on_device.empty() || on_device.back() != static_cast<int32_t>(t))) {
        on_device.push_back(static_cast<int32_t>(t));
      }
    }
  }
  if (!on_device.empty()) {
    const Status s = streamSync(state_.device.stream.get(), timeout);
    for (int32_t t : on_device) {
      const bool named = std::any_of(failed.begin(), failed.end(),
                                     [t](const auto& failure) { return failure.first == t; });
      if (!s.isOk() && !named)
        failed.emplace_back(t, "applying its patches on the device: " + s.message());
    }
  }
  return failed;
}

}  // namespace wsync
