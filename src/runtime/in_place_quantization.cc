#include "runtime/in_place_quantization.h"

#include <string>

namespace wsync {

std::optional<InPlaceRows> placeInPlace(const Region& region, const Box& box) {
  if (box.rank() < 1) return std::nullopt;
  const int64_t volume = box.volume();
  const int64_t width = box.extent[box.rank() - 1];
  const int64_t n0 = region.count[0];
  const int64_t n1 = region.count[1];
  const int64_t n2 = region.count[2];
  if (width <= 0 || region.src_offset != 0 || region.numElements() != volume) return std::nullopt;
  // the whole buffer, in order: the source side is contiguous
  if ((n1 > 1 && region.src_stride[0] != n0) || (n2 > 1 && region.src_stride[1] != n0 * n1))
    return std::nullopt;
  int64_t pitch = width;
  if (n0 == width) {  // a region row per box row: rows at the region's row (or plane) pitch
    if (n1 > 1) pitch = region.dst_stride[0];
    if (n2 > 1) {
      if (n1 == 1) {
        pitch = region.dst_stride[1];
      } else if (region.dst_stride[1] != n1 * pitch) {
        return std::nullopt;
      }
    }
  } else if (n0 % width == 0) {  // several box rows per region row: contiguous on both sides
    if ((n1 > 1 && region.dst_stride[0] != n0) || (n2 > 1 && region.dst_stride[1] != n0 * n1))
      return std::nullopt;
  } else {
    return std::nullopt;
  }
  if (pitch < width) return std::nullopt;
  return InPlaceRows{region.dst_offset, pitch};
}

Result<InPlaceQuantization> planInPlaceQuantization(const GoMsg& go, const RankPlan& plan,
                                                    const TrainerMembership& membership,
                                                    const TrainerQuantizer& quantizer,
                                                    TrainerPeers& peers) {
  InPlaceQuantization q;
  if (quantizer.empty()) return q;
  const int32_t first = quantizer.firstBuffer();
  const size_t num_sources = quantizer.numSources();
  // per quantized buffer (values and scales alternate from `first`): the writes reading it
  constexpr int64_t kNone = -1;
  constexpr int64_t kMany = -2;
  std::vector<int64_t> reader(2 * num_sources, kNone);
  const auto quantized = [&](int32_t buffer) -> int64_t* {
    const int64_t i = static_cast<int64_t>(buffer) - first;
    if (i < 0 || static_cast<size_t>(i) >= reader.size()) return nullptr;
    return &reader[static_cast<size_t>(i)];
  };
  const auto read = [&](int32_t buffer, int64_t op) {
    if (int64_t* r = quantized(buffer)) *r = *r == kNone ? op : kMany;
  };
  for (size_t i = 0; i < plan.writes.size(); ++i) {
    const WriteOp& op = plan.writes[i];
    if (membership.slotFor(go, op.dst_rank) >= 0) read(op.src_buffer, static_cast<int64_t>(i));
  }
  for (const BroadcastGroup& g : plan.groups) {
    if (membership.replicaTakes(go, g)) read(g.src.buffer, kMany);
  }
  for (const auto& part : membership.extensions()) {
    if (!part->active) continue;
    for (const WriteOp& op : part->plan.writes) {
      if (membership.slotFor(go, op.dst_rank) >= 0) read(op.src_buffer, kMany);
    }
  }

  q.targets.resize(num_sources);
  q.written.assign(plan.writes.size(), 0);
  for (size_t s = 0; s < num_sources; ++s) {
    const int64_t* r = quantized(quantizer.valuesBuffer(s));
    if (r == nullptr || *r < 0) continue;
    const auto i = static_cast<size_t>(*r);
    const WriteOp& op = plan.writes[i];
    if (op.converts() || op.dst_dtype != DType::kFloat8E4M3) continue;
    const Box& box = quantizer.sourceBox(s);
    const std::optional<InPlaceRows> rows = placeInPlace(plan.region(op), box);
    if (!rows) continue;
    const int64_t width = box.extent[box.rank() - 1];
    const int64_t span = (box.volume() / width - 1) * rows->pitch + width;  // bytes: 1 per value
    WSYNC_ASSIGN_OR_RETURN(
        uint8_t * dst,
        peers.remoteAddress(op.dst_rank, membership.slotFor(go, op.dst_rank), op.dst_buffer,
                            static_cast<uint64_t>(rows->offset), static_cast<uint64_t>(span)));
    if (dst == nullptr) continue;  // the transport maps nothing: the write copies the values
    q.targets[s] = {dst, rows->pitch};
    q.written[i] = 1;
    ++q.sources;
  }
  return q;
}

}  // namespace wsync
