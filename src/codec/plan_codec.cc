#include "codec/plan_codec.h"

#include <string>
#include <utility>

namespace wsync {

using codec_detail::Decoder;
using codec_detail::packNibbles;
using codec_detail::putBox;
using codec_detail::putDimsU;
using codec_detail::putU;

namespace {

// Payload of both records (field order):
//   Plan:     tensors, groups, writes, stats
//   RankPlan: role u8, rank varu, tensors, groups, writes, peers, stats
//   tensor:   name str, shape dimsU
//   group:    tensor varu, box, replica vari, num_elements varu, u8 (src_dtype << 4 | dst_dtype),
//             src span, dst spans (count, then spans)
//   span:     rank varu, buffer varu, offset varu
//   write:    flags u8, [u8 dtypes], [tensor], [src_rank], [src_buffer], [dst_rank],
//             [dst_buffer], src_offset, dst_offset, count[0], [count[1], src_stride[0] vari,
//             dst_stride[0] vari], [count[2], src_stride[1] vari, dst_stride[1] vari]
//             A field in brackets is present unless its flag says "same as the previous write" (or
//             for the region dims: absent means count 1 and strides 0).
//   stats:    trainer_ranks, rollout_ranks, replicas, bytes_total, broadcast_bytes, write_bytes
//             varu, bytes_per_sender (count, then varu each)
enum WriteFlags : uint8_t {
  kRows = 1 << 0,
  kPlanes = 1 << 1,
  kSameTensor = 1 << 2,
  kSameSrcRank = 1 << 3,
  kSameSrcBuffer = 1 << 4,
  kSameDstRank = 1 << 5,
  kSameDstBuffer = 1 << 6,
  kSameDTypes = 1 << 7,
};
constexpr uint8_t kSameMask =
    kSameTensor | kSameSrcRank | kSameSrcBuffer | kSameDstRank | kSameDstBuffer | kSameDTypes;

// Smallest encodings, used to bound counts read off the wire.
constexpr size_t kMinTensorBytes = 2;
constexpr size_t kMinSpanBytes = 3;
constexpr size_t kMinGroupBytes = 6 + kMinSpanBytes;
constexpr size_t kMinWriteBytes = 4;

void putTensors(ByteWriter& w, const std::vector<PlanTensor>& tensors) {
  w.varu(tensors.size());
  for (const PlanTensor& t : tensors) {
    w.str(t.name);
    putDimsU(w, t.shape);
  }
}

void putSpan(ByteWriter& w, const BufferSpan& s) {
  putU(w, s.rank);
  putU(w, s.buffer);
  putU(w, s.offset);
}

void putGroups(ByteWriter& w, const std::vector<BroadcastGroup>& groups) {
  w.varu(groups.size());
  for (const BroadcastGroup& g : groups) {
    putU(w, g.tensor);
    putBox(w, g.box);
    w.vari(g.replica);
    putU(w, g.num_elements);
    w.u8(packNibbles(static_cast<uint8_t>(g.src_dtype), static_cast<uint8_t>(g.dst_dtype)));
    putSpan(w, g.src);
    w.varu(g.dst.size());
    for (const BufferSpan& s : g.dst)
      putSpan(w, s);
  }
}

void putWrites(ByteWriter& w, const std::vector<WriteOp>& writes,
               const std::vector<RegionShape>& shapes) {
  w.varu(writes.size());
  const WriteOp* prev = nullptr;
  for (const WriteOp& op : writes) {
    const Region r = regionOf(op, shapes);
    uint8_t flags = 0;
    if (r.count[1] != 1 || r.src_stride[0] != 0 || r.dst_stride[0] != 0) flags |= kRows;
    if (r.count[2] != 1 || r.src_stride[1] != 0 || r.dst_stride[1] != 0) flags |= kPlanes;
    if (prev != nullptr) {
      if (op.tensor == prev->tensor) flags |= kSameTensor;
      if (op.src_rank == prev->src_rank) flags |= kSameSrcRank;
      if (op.src_buffer == prev->src_buffer) flags |= kSameSrcBuffer;
      if (op.dst_rank == prev->dst_rank) flags |= kSameDstRank;
      if (op.dst_buffer == prev->dst_buffer) flags |= kSameDstBuffer;
      if (op.src_dtype == prev->src_dtype && op.dst_dtype == prev->dst_dtype) flags |= kSameDTypes;
    }
    w.u8(flags);
    if (!(flags & kSameDTypes)) {
      w.u8(packNibbles(static_cast<uint8_t>(op.src_dtype), static_cast<uint8_t>(op.dst_dtype)));
    }
    if (!(flags & kSameTensor)) putU(w, op.tensor);
    if (!(flags & kSameSrcRank)) putU(w, op.src_rank);
    if (!(flags & kSameSrcBuffer)) putU(w, op.src_buffer);
    if (!(flags & kSameDstRank)) putU(w, op.dst_rank);
    if (!(flags & kSameDstBuffer)) putU(w, op.dst_buffer);
    putU(w, r.src_offset);
    putU(w, r.dst_offset);
    putU(w, r.count[0]);
    for (int d = 1; d <= 2; ++d) {
      if (flags & (d == 1 ? kRows : kPlanes)) {
        putU(w, r.count[d]);
        w.vari(r.src_stride[d - 1]);
        w.vari(r.dst_stride[d - 1]);
      }
    }
    prev = &op;
  }
}

void putStats(ByteWriter& w, const PlanStats& s) {
  putU(w, s.trainer_ranks);
  putU(w, s.rollout_ranks);
  putU(w, s.replicas);
  putU(w, s.bytes_total);
  putU(w, s.broadcast_bytes);
  putU(w, s.write_bytes);
  w.varu(s.bytes_per_sender.size());
  for (int64_t b : s.bytes_per_sender)
    putU(w, b);
}

bool decodeTensors(Decoder& d, std::vector<PlanTensor>& tensors) {
  size_t n = 0;
  if (!d.count(n, kMinTensorBytes, "tensors.size")) return false;
  tensors.resize(n);
  Decoder::Scope scope(d, "tensors");
  for (size_t i = 0; i < n; ++i) {
    scope.at(i);
    if (!d.str(tensors[i].name, codec_detail::kMaxNameBytes, "name") ||
        !d.dims(tensors[i].shape, true, "shape")) {
      return false;
    }
  }
  return true;
}

bool decodeSpan(Decoder& d, BufferSpan& s) {
  return d.nonNeg32(s.rank, "rank") && d.nonNeg32(s.buffer, "buffer") &&
         d.nonNeg64(s.offset, "offset");
}

// `name` quoted for a message: non-printable bytes escaped, long names shortened.
std::string quoted(const std::string& name) {
  constexpr size_t kMaxShown = 120;
  std::string q = "'";
  for (size_t i = 0; i < name.size() && i < kMaxShown; ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      q += static_cast<char>(c);
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      q += "\\x";
      q += kHex[c >> 4];
      q += kHex[c & 0xf];
    }
  }
  return q + (name.size() > kMaxShown ? "'..." : "'");
}

// The number of elements of `box`, or -1 when it overflows int64.
int64_t checkedVolume(const Box& box) {
  int64_t v = 1;
  for (int i = 0; i < box.rank(); ++i) {
    if (__builtin_mul_overflow(v, box.extent[i], &v)) return -1;
  }
  return v;
}

bool decodeGroup(Decoder& d, const std::vector<PlanTensor>& tensors, BroadcastGroup& g) {
  if (!d.index(g.tensor, tensors.size(), "tensors", "tensor")) return false;
  const size_t box_at = d.offset();
  if (!d.box(g.box, "box")) return false;
  const PlanTensor& t = tensors[static_cast<size_t>(g.tensor)];
  if (!g.box.fitsIn(t.shape)) {
    return d.invalid("box", box_at,
                     "box " + g.box.toString() + " does not fit tensor " + quoted(t.name) +
                         " of shape " + t.shape.toString());
  }
  const size_t num_at = d.offset();
  if (!d.signed32(g.replica, -1, "replica") || !d.nonNeg64(g.num_elements, "num_elements")) {
    return false;
  }
  if (g.num_elements != checkedVolume(g.box)) {
    return d.invalid("num_elements", num_at,
                     std::to_string(g.num_elements) + " elements for box " + g.box.toString() +
                         " of tensor " + quoted(t.name));
  }
  if (!d.dtypePair(g.src_dtype, g.dst_dtype, "dtypes")) return false;
  {
    Decoder::Scope scope(d, "src");
    if (!decodeSpan(d, g.src)) return false;
  }
  size_t n = 0;
  if (!d.count(n, kMinSpanBytes, "dst.size")) return false;
  g.dst.resize(n);
  Decoder::Scope scope(d, "dst");
  for (size_t i = 0; i < n; ++i) {
    scope.at(i);
    const size_t at = d.offset();
    if (!decodeSpan(d, g.dst[i])) return false;
    if (i > 0 && g.dst[i].rank <= g.dst[i - 1].rank) {
      return d.invalid("rank", at,
                       "rank " + std::to_string(g.dst[i].rank) + " after rank " +
                           std::to_string(g.dst[i - 1].rank) +
                           " (destinations must be sorted by rank, each at most once)");
    }
  }
  return true;
}

bool decodeGroups(Decoder& d, const std::vector<PlanTensor>& tensors,
                  std::vector<BroadcastGroup>& groups) {
  size_t n = 0;
  if (!d.count(n, kMinGroupBytes, "groups.size")) return false;
  groups.resize(n);
  Decoder::Scope scope(d, "groups");
  for (size_t i = 0; i < n; ++i) {
    scope.at(i);
    if (!decodeGroup(d, tensors, groups[i])) return false;
  }
  return true;
}

bool decodeWrite(Decoder& d, size_t num_tensors, const WriteOp* prev, WriteOp& op,
                 RegionShapeIndex& shapes) {
  const size_t flags_at = d.offset();
  uint8_t flags = 0;
  if (!d.u8(flags, "flags")) return false;
  if (prev == nullptr && (flags & kSameMask) != 0) {
    return d.invalid("flags", flags_at, "the first write cannot refer to a previous one");
  }
  if (flags & kSameDTypes) {
    op.src_dtype = prev->src_dtype;
    op.dst_dtype = prev->dst_dtype;
  } else if (!d.dtypePair(op.src_dtype, op.dst_dtype, "dtypes")) {
    return false;
  }
  if (flags & kSameTensor) {
    op.tensor = prev->tensor;
  } else if (!d.index(op.tensor, num_tensors, "tensors", "tensor")) {
    return false;
  }
  if (!((flags & kSameSrcRank) ? (op.src_rank = prev->src_rank, true)
                               : d.nonNeg32(op.src_rank, "src_rank")) ||
      !((flags & kSameSrcBuffer) ? (op.src_buffer = prev->src_buffer, true)
                                 : d.nonNeg32(op.src_buffer, "src_buffer")) ||
      !((flags & kSameDstRank) ? (op.dst_rank = prev->dst_rank, true)
                               : d.nonNeg32(op.dst_rank, "dst_rank")) ||
      !((flags & kSameDstBuffer) ? (op.dst_buffer = prev->dst_buffer, true)
                                 : d.nonNeg32(op.dst_buffer, "dst_buffer"))) {
    return false;
  }
  Region r;
  if (!d.nonNeg64(r.src_offset, "region.src_offset") ||
      !d.nonNeg64(r.dst_offset, "region.dst_offset") ||
      !d.nonNeg64(r.count[0], "region.count[0]")) {
    return false;
  }
  static constexpr const char* kFields[3][3] = {
      {},
      {"region.count[1]", "region.src_stride[0]", "region.dst_stride[0]"},
      {"region.count[2]", "region.src_stride[1]", "region.dst_stride[1]"}};
  const size_t outer_at = d.offset();
  for (int dim = 1; dim <= 2; ++dim) {
    if (!(flags & (dim == 1 ? kRows : kPlanes))) continue;
    if (!d.nonNeg64(r.count[dim], kFields[dim][0]) ||
        !d.vari(r.src_stride[dim - 1], kFields[dim][1]) ||
        !d.vari(r.dst_stride[dim - 1], kFields[dim][2])) {
      return false;
    }
  }
  int64_t total = 0;
  if ((flags & (kRows | kPlanes)) && (__builtin_mul_overflow(r.count[0], r.count[1], &total) ||
                                      __builtin_mul_overflow(total, r.count[2], &total))) {
    return d.invalid("region.count", outer_at, "element count overflows int64");
  }
  shapes.setRegion(op, r);
  return true;
}

bool decodeWrites(Decoder& d, size_t num_tensors, std::vector<WriteOp>& writes,
                  std::vector<RegionShape>& shapes) {
  size_t n = 0;
  if (!d.count(n, kMinWriteBytes, "writes.size")) return false;
  writes.resize(n);
  RegionShapeIndex shape_index(shapes);
  Decoder::Scope scope(d, "writes");
  const WriteOp* prev = nullptr;
  for (size_t i = 0; i < n; ++i) {
    scope.at(i);
    if (!decodeWrite(d, num_tensors, prev, writes[i], shape_index)) return false;
    prev = &writes[i];
  }
  return true;
}

bool decodeStats(Decoder& d, PlanStats& s) {
  Decoder::Scope scope(d, "stats");
  size_t n = 0;
  if (!d.nonNeg32(s.trainer_ranks, "trainer_ranks") ||
      !d.nonNeg32(s.rollout_ranks, "rollout_ranks") || !d.nonNeg32(s.replicas, "replicas") ||
      !d.nonNeg64(s.bytes_total, "bytes_total") ||
      !d.nonNeg64(s.broadcast_bytes, "broadcast_bytes") ||
      !d.nonNeg64(s.write_bytes, "write_bytes") || !d.count(n, 1, "bytes_per_sender.size")) {
    return false;
  }
  s.bytes_per_sender.resize(n);
  Decoder::Scope list(d, "bytes_per_sender");
  for (size_t i = 0; i < n; ++i) {
    list.at(i);
    if (!d.nonNeg64(s.bytes_per_sender[i], "value")) return false;
  }
  return true;
}

// The tensor table, the broadcast groups and the writes (with their shapes): the part a Plan and a
// RankPlan both carry, in this order.
template <typename P>
void putTables(ByteWriter& w, const P& plan) {
  putTensors(w, plan.tensors);
  putGroups(w, plan.groups);
  putWrites(w, plan.writes, plan.shapes);
}

template <typename P>
bool decodeTables(Decoder& d, P& plan) {
  return decodeTensors(d, plan.tensors) && decodeGroups(d, plan.tensors, plan.groups) &&
         decodeWrites(d, plan.tensors.size(), plan.writes, plan.shapes);
}

}  // namespace

std::vector<uint8_t> encodePlan(const Plan& plan) {
  return codec_detail::encodeRecord(codec_detail::kPlanRecord, [&](ByteWriter& w) {
    putTables(w, plan);
    putStats(w, plan.stats);
  });
}

Result<Plan> decodePlan(const uint8_t* data, size_t size) {
  return codec_detail::decodeRecord<Plan>(
      codec_detail::kPlanRecord, data, size,
      [](Decoder& d, Plan& plan) { return decodeTables(d, plan) && decodeStats(d, plan.stats); });
}

std::vector<uint8_t> encodeRankPlan(const RankPlan& plan) {
  return codec_detail::encodeRecord(codec_detail::kRankPlanRecord, [&](ByteWriter& w) {
    w.u8(static_cast<uint8_t>(plan.role));
    putU(w, plan.rank);
    putTables(w, plan);
    w.varu(plan.peers.size());
    for (int32_t p : plan.peers)
      putU(w, p);
    putStats(w, plan.stats);
  });
}

Result<RankPlan> decodeRankPlan(const uint8_t* data, size_t size) {
  return codec_detail::decodeRecord<RankPlan>(
      codec_detail::kRankPlanRecord, data, size, [](Decoder& d, RankPlan& plan) {
        size_t n = 0;
        if (!d.role(plan.role, "role") || !d.nonNeg32(plan.rank, "rank") ||
            !decodeTables(d, plan) || !d.count(n, 1, "peers.size")) {
          return false;
        }
        plan.peers.resize(n);
        {
          Decoder::Scope scope(d, "peers");
          for (size_t i = 0; i < n; ++i) {
            scope.at(i);
            if (!d.nonNeg32(plan.peers[i], "rank")) return false;
          }
        }
        return decodeStats(d, plan.stats);
      });
}

}  // namespace wsync
