#include "runtime/rollout_delta.h"

#include <cstring>
#include <string>

#include "delta/delta_landing.h"
#include "delta/delta_patch.h"

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

// (The staged path for device slots is not built yet.)
Status RolloutDelta::exposeLanding(bool enabled, WriteTransport& transport, uint64_t slot_bytes,
                                   int32_t trainers, uint32_t max_share_ppm,
                                   std::vector<uint8_t>* descriptor) {
  if (!enabled) return Status::ok();
  const uint64_t bytes = delta::landingAreaBytes(slot_bytes, trainers, max_share_ppm);
  WSYNC_ASSIGN_OR_RETURN(state_.landing, transport.allocateExposed(bytes));
  std::memset(state_.landing->data(), 0, state_.landing->size());
  *descriptor = state_.landing->descriptor();
  return Status::ok();
}

void RolloutDelta::planParts(const RankPlan& plan, int32_t num_trainers, uint32_t max_share_ppm) {
  if (!state_.landing) return;
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
  for (size_t t = 0; t < trainers; ++t) {
    state_.trainers[t].part_offset = parts[t].offset;
    state_.trainers[t].part_bytes = parts[t].bytes;
    if (parts[t].offset + parts[t].bytes > state_.landing->size())
      state_.trainers[t].part_bytes = 0;
  }
}

RolloutDelta::PatchFailures RolloutDelta::apply(
    const RankPlan& plan, const std::vector<uint64_t>& buffer_byte_offsets, uint64_t version,
    int32_t slot, const SlotStore& store,
    const std::vector<std::unique_ptr<ExposedMemory>>& slots) {
  PatchFailures failed;
  if (!state_.landing || state_.base == 0) return failed;
  int32_t base_slot = -1;
  for (int32_t s = 0; s < store.numSlots(); ++s) {
    const std::optional<SlotInfo> info = store.slotInfo(s);
    if (s != slot && info && info->state == SlotState::kReady && info->version == state_.base)
      base_slot = s;
  }
  const auto* landing = static_cast<const uint8_t*>(state_.landing->data());
  uint8_t* out_slot = static_cast<uint8_t*>(slots[static_cast<size_t>(slot)]->data());
  for (size_t t = 0; t < state_.trainers.size(); ++t) {
    const RolloutDeltaState::FromTrainer& from = state_.trainers[t];
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
                          "no ready slot holds base version " + std::to_string(state_.base));
      continue;
    }
    const uint8_t* base =
        static_cast<const uint8_t*>(slots[static_cast<size_t>(base_slot)]->data());
    for (size_t e = 0; e < area->entries.size(); ++e) {
      const WriteOp& op = plan.writes[from.ops[area->entries[e].op]];
      const Region r = plan.region(op);
      const size_t esz = dtypeSize(op.dst_dtype);
      const size_t at = buffer_byte_offsets[static_cast<size_t>(op.dst_buffer)] +
                        static_cast<size_t>(r.dst_offset) * esz;
      const delta::PatchShape shape = delta::shapeFor(plan.numElements(op), static_cast<int>(esz));
      Status s;
      if (destinationContiguous(r)) {
        s = delta::applyPatch(shape, area->patches[e], area->entries[e].patch_bytes, base + at,
                              out_slot + at);
      } else {
        state_.scratch.resize(static_cast<size_t>(shape.num_elements) * esz);
        copyRows(r, esz, const_cast<uint8_t*>(base) + at, state_.scratch.data(), true);
        s = delta::applyPatch(shape, area->patches[e], area->entries[e].patch_bytes,
                              state_.scratch.data(), state_.scratch.data());
        if (s.isOk()) copyRows(r, esz, out_slot + at, state_.scratch.data(), false);
      }
      if (!s.isOk()) {
        failed.emplace_back(static_cast<int32_t>(t),
                            "the patch of tensor '" +
                                plan.tensors[static_cast<size_t>(op.tensor)].name +
                                "': " + s.message());
        break;
      }
    }
  }
  return failed;
}

}  // namespace wsync
