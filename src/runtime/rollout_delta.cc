// RolloutContext's delta versions (runtime/rollout_delta.h, docs/delta.md): the landing area it
// exposes at registration, the trainers' parts of it after the plan, and at Verify the patches
// applied against the base version's slot. Receiver thread (registration: the creating thread).
#include <cstring>
#include <string>

#include "delta/delta_landing.h"
#include "delta/delta_patch.h"
#include "runtime/rollout_context.h"

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

// Registration: host-memory slots written over UCX take patches when the job has delta versions
// (device slots stay dense: CUDA IPC copies as fast as a patch applies; the staged path is not
// built yet).
Status RolloutContext::exposeDeltaLanding(uint64_t slot_bytes, RegisterMsg& msg) {
  if (!job_.welcome.delta || memoryKind() != MemoryKind::kHost) return Status::ok();
  const uint64_t bytes =
      delta::landingAreaBytes(slot_bytes, numTrainers(), job_.welcome.delta_max_share_ppm);
  WSYNC_ASSIGN_OR_RETURN(delta_.landing, transport_->allocateExposed(bytes));
  std::memset(delta_.landing->data(), 0, delta_.landing->size());
  msg.delta_landing = delta_.landing->descriptor();
  return Status::ok();
}

// After the plan: each trainer's part of the area, as the coordinator computed it for the
// trainers (delta_landing.h), and its ops in plan order.
void RolloutContext::planDeltaParts() {
  if (!delta_.landing) return;
  const auto trainers = static_cast<size_t>(numTrainers());
  std::vector<uint64_t> dense(trainers, 0);
  delta_.trainers.assign(trainers, {});
  for (size_t i = 0; i < plan_.writes.size(); ++i) {
    const WriteOp& op = plan_.writes[i];
    if (op.src_rank < 0 || static_cast<size_t>(op.src_rank) >= trainers) continue;
    dense[static_cast<size_t>(op.src_rank)] +=
        static_cast<uint64_t>(plan_.numElements(op)) * dtypeSize(op.dst_dtype);
    delta_.trainers[static_cast<size_t>(op.src_rank)].ops.push_back(i);
  }
  const std::vector<delta::LandingPart> parts =
      delta::landingParts(dense, job_.welcome.delta_max_share_ppm);
  for (size_t t = 0; t < trainers; ++t) {
    delta_.trainers[t].part_offset = parts[t].offset;
    delta_.trainers[t].part_bytes = parts[t].bytes;
    if (parts[t].offset + parts[t].bytes > delta_.landing->size())
      delta_.trainers[t].part_bytes = 0;
  }
}

// Verify of a version whose Go gave this replica a base: rebuilds the patched ops of `slot` from
// the slot holding the base version. Returns, per trainer whose patches could not be applied (a
// malformed area, no slot holding the base), why; their bytes then fail verification as well.
std::vector<std::pair<int32_t, std::string>> RolloutContext::applyDeltas(uint64_t version,
                                                                         int32_t slot) {
  std::vector<std::pair<int32_t, std::string>> failed;
  if (!delta_.landing || delta_.base == 0) return failed;
  int32_t base_slot = -1;
  for (int32_t s = 0; s < store_->numSlots(); ++s) {
    const std::optional<SlotInfo> info = store_->slotInfo(s);
    if (s != slot && info && info->state == SlotState::kReady && info->version == delta_.base)
      base_slot = s;
  }
  const auto* landing = static_cast<const uint8_t*>(delta_.landing->data());
  uint8_t* out_slot = static_cast<uint8_t*>(slots_[static_cast<size_t>(slot)]->data());
  for (size_t t = 0; t < delta_.trainers.size(); ++t) {
    const RolloutDeltaState::FromTrainer& from = delta_.trainers[t];
    if (from.part_bytes == 0) continue;
    Result<delta::PairArea> area =
        delta::readPairArea(landing + from.part_offset, from.part_bytes, static_cast<uint32_t>(t),
                            version, from.ops.size());
    if (!area.isOk()) {
      failed.emplace_back(static_cast<int32_t>(t), area.status().message());
      continue;
    }
    if (area->entries.empty()) continue;  // every op from t came dense
    if (base_slot < 0) {
      failed.emplace_back(static_cast<int32_t>(t),
                          "no ready slot holds base version " + std::to_string(delta_.base));
      continue;
    }
    const uint8_t* base =
        static_cast<const uint8_t*>(slots_[static_cast<size_t>(base_slot)]->data());
    for (size_t e = 0; e < area->entries.size(); ++e) {
      const WriteOp& op = plan_.writes[from.ops[area->entries[e].op]];
      const Region r = plan_.region(op);
      const size_t esz = dtypeSize(op.dst_dtype);
      const size_t at = buffer_byte_offsets_[static_cast<size_t>(op.dst_buffer)] +
                        static_cast<size_t>(r.dst_offset) * esz;
      const delta::PatchShape shape = delta::shapeFor(plan_.numElements(op), static_cast<int>(esz));
      Status s;
      if (destinationContiguous(r)) {
        s = delta::applyPatch(shape, area->patches[e], area->entries[e].patch_bytes, base + at,
                              out_slot + at);
      } else {
        delta_.scratch.resize(static_cast<size_t>(shape.num_elements) * esz);
        copyRows(r, esz, const_cast<uint8_t*>(base) + at, delta_.scratch.data(), true);
        s = delta::applyPatch(shape, area->patches[e], area->entries[e].patch_bytes,
                              delta_.scratch.data(), delta_.scratch.data());
        if (s.isOk()) copyRows(r, esz, out_slot + at, delta_.scratch.data(), false);
      }
      if (!s.isOk()) {
        failed.emplace_back(static_cast<int32_t>(t),
                            "the patch of tensor '" +
                                plan_.tensors[static_cast<size_t>(op.tensor)].name +
                                "': " + s.message());
        break;
      }
    }
  }
  return failed;
}

}  // namespace wsync
