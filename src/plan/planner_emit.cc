#include "plan/planner_emit.h"

#include <algorithm>
#include <unordered_map>
#include <utility>

namespace wsync::plan_internal {
namespace {

bool isFloat8(DType t) {
  return t == DType::kFloat8E4M3 || t == DType::kFloat8E5M2;
}

// One dim of a region being built, innermost first.
struct RunDim {
  int64_t count;
  int64_t src_stride;
  int64_t dst_stride;
};

// Calls emit(src_offset, dst_offset, shape) for the regions that move `box` (inside both pieces)
// from `src` to `dst`: dims merge while contiguous on both sides; more than 3 dims left -> one
// region per index of the outer ones, in row-major order.
template <typename F>
void forEachRegion(const Box& box, const Piece& src, const Piece& dst, F&& emit) {
  const int r = box.rank();
  int64_t src_offset = src.local_offset;
  int64_t dst_offset = dst.local_offset;
  for (int d = 0; d < r; ++d) {
    src_offset += (box.offset[d] - src.box.offset[d]) * src.local_strides[d];
    dst_offset += (box.offset[d] - dst.box.offset[d]) * dst.local_strides[d];
  }
  RunDim dims[kMaxRank];
  int n = 1;
  dims[0] = {r > 0 ? box.extent[r - 1] : 1, 1, 1};
  for (int d = r - 2; d >= 0; --d) {
    const int64_t e = box.extent[d];
    if (e == 1) continue;
    RunDim& top = dims[n - 1];
    if (src.local_strides[d] == top.src_stride * top.count &&
        dst.local_strides[d] == top.dst_stride * top.count) {
      top.count *= e;
    } else {
      dims[n++] = {e, src.local_strides[d], dst.local_strides[d]};
    }
  }
  RegionShape shape;
  shape.count[0] = dims[0].count;
  for (int k = 1; k < 3 && k < n; ++k) {
    shape.count[k] = dims[k].count;
    shape.src_stride[k - 1] = dims[k].src_stride;
    shape.dst_stride[k - 1] = dims[k].dst_stride;
  }
  if (n <= 3) {
    emit(src_offset, dst_offset, shape);
    return;
  }
  int64_t index[kMaxRank] = {};
  for (;;) {
    int64_t s = src_offset;
    int64_t t = dst_offset;
    for (int k = 3; k < n; ++k) {
      s += index[k] * dims[k].src_stride;
      t += index[k] * dims[k].dst_stride;
    }
    emit(s, t, shape);
    int k = 3;
    while (k < n && ++index[k] == dims[k].count) {
      index[k] = 0;
      ++k;
    }
    if (k == n) return;
  }
}

// True when `b` continues `a` (same endpoints, 1-D, contiguous on both sides); then `a` absorbs it.
bool tryMerge(WriteOp& a, const WriteOp& b) {
  if (a.src_rank != b.src_rank || a.src_buffer != b.src_buffer || a.dst_rank != b.dst_rank ||
      a.dst_buffer != b.dst_buffer || a.src_dtype != b.src_dtype || a.dst_dtype != b.dst_dtype) {
    return false;
  }
  if (a.tensor != b.tensor && (isFloat8(a.src_dtype) || isFloat8(a.dst_dtype))) return false;
  if (!a.oneD() || !b.oneD()) return false;
  if (a.src_offset + a.run != b.src_offset || a.dst_offset + a.run != b.dst_offset) return false;
  a.run += b.run;
  return true;
}

}  // namespace

void renumberShapes(std::vector<WriteOp>& writes, const std::vector<RegionShape>& from,
                    std::vector<RegionShape>& to) {
  to.clear();
  if (from.empty()) return;
  std::unordered_map<int64_t, int64_t> renumbered;
  int64_t last_from = -1;
  int64_t last_to = -1;
  for (WriteOp& w : writes) {
    if (w.oneD()) continue;
    if (w.shapeIndex() != last_from) {
      last_from = w.shapeIndex();
      const auto [it, inserted] = renumbered.emplace(last_from, static_cast<int64_t>(to.size()));
      if (inserted) to.push_back(from[static_cast<size_t>(last_from)]);
      last_to = it->second;
    }
    w.run = -1 - last_to;
  }
}

PlanEmitter::PlanEmitter(const std::vector<Registration>& rollouts, const PlannerOptions& options,
                         const UnifiedInput& input)
    : rollouts_(rollouts), options_(options), input_(input), balancer_(input.num_trainers) {}

// ---- pass A: groups, coverage, fixed loads, choices, op counts of fixed pieces ----------------

Status PlanEmitter::groupAndCount() {
  const size_t num_trainers = static_cast<size_t>(input_.num_trainers);
  piece_mode_.assign(input_.rollout_refs.size(), 0);
  last_.assign(num_trainers, LastOp{});
  pair_count_.assign(num_trainers * static_cast<size_t>(input_.num_rollouts), 0);
  if (options_.allow_broadcast) plan_.groups.reserve(input_.rollout_refs.size());  // one each
  for (size_t proc = 0; proc < input_.numWanted(); ++proc) {
    const int32_t id = input_.proc_tensor[proc];
    buildSources(proc, /*for_groups=*/options_.allow_broadcast);
    for (int64_t k = input_.rollout_begin[proc]; k < input_.rollout_begin[proc + 1]; ++k) {
      prefetchRollout(k + kLookahead);
      WSYNC_RETURN_IF_ERROR(analyzePiece(id, k));
    }
  }
  return Status::ok();
}

// Rollout piece k (of tensor `id`) joins a group, or has its ops counted while looking for
// choices; a piece with choices has its counts taken back and is counted again in pass B.
Status PlanEmitter::analyzePiece(int32_t id, int64_t k) {
  const PieceRef& ref = input_.rollout_refs[static_cast<size_t>(k)];
  const Piece& piece = *ref.piece;
  if (joinGroup(id, ref)) {
    piece_mode_[static_cast<size_t>(k)] = kGroupMode;
    return Status::ok();
  }
  bool flexible = false;
  int64_t covered = 0;
  ++piece_stamp_;
  counted_.clear();
  sources_.forEachIntersection(piece.box, [&](int32_t r, const Box& box) {
    const int64_t volume = box.volume();
    covered += volume;
    Source& s = sources_.sourceOf(r);
    const Holder& first = sources_.holder(s.holder_begin);
    if (s.holder_count > 1) {
      flexible = true;
      if (s.write_cands < 0) {
        s.write_cands = balancer_.addCands(sources_.holdersOf(s), s.holder_count, false);
      }
      balancer_.addWriteChoice(volume, s.write_cands);
      return;
    }
    balancer_.charge(first.rank, volume * bytes_of_(first.dtype));
    if (!flexible) addOps<false, /*kRecord=*/true>(id, box, first, ref);
  });
  if (covered != piece.box.volume()) {
    return sources_.coverageError(input_.tensors[static_cast<size_t>(id)].name,
                                  rollouts_[static_cast<size_t>(ref.rank)], ref);
  }
  if (flexible) {
    for (const size_t pair : counted_)
      --pair_count_[pair];
  }
  piece_mode_[static_cast<size_t>(k)] = flexible ? kFlexWriteMode : kWriteMode;
  return Status::ok();
}

// Tries to put the piece in a broadcast group; false -> it goes by writes.
bool PlanEmitter::joinGroup(int32_t id, const PieceRef& ref) {
  const Piece& piece = *ref.piece;
  if (!options_.allow_broadcast || !rowMajorContiguous(piece)) return false;
  const int32_t s = sources_.find(piece.box);
  if (s < 0) return false;
  Source& source = sources_.source(s);
  if (source.row_major_count == 0) return false;
  const int32_t replica = rollouts_[static_cast<size_t>(ref.rank)].replica;
  const DType dst_dtype = ref.dtype();
  int32_t g = source.group_head;
  for (; g >= 0; g = group_next_[static_cast<size_t>(g)]) {
    const BroadcastGroup& group = plan_.groups[static_cast<size_t>(g)];
    if (group.replica == replica && group.dst_dtype == dst_dtype) break;
  }
  if (g < 0) {
    newGroup(id, ref, source);
    return true;
  }
  BroadcastGroup& group = plan_.groups[static_cast<size_t>(g)];
  if (group.dst.back().rank == ref.rank) return false;  // this rank is in it already
  group.dst.push_back({ref.rank, ref.buffer(), piece.local_offset});
  return true;
}

// A new group of `source`'s box for `ref`, its sender fixed or left to the balancer.
void PlanEmitter::newGroup(int32_t id, const PieceRef& ref, Source& source) {
  const Piece& piece = *ref.piece;
  const int32_t g = static_cast<int32_t>(plan_.groups.size());
  BroadcastGroup group;
  group.tensor = id;
  group.box = piece.box;
  group.replica = rollouts_[static_cast<size_t>(ref.rank)].replica;
  group.num_elements = piece.box.volume();
  group.dst_dtype = ref.dtype();
  group.dst.push_back({ref.rank, ref.buffer(), piece.local_offset});
  if (source.bcast_cands < 0) {
    source.bcast_cands = balancer_.addCands(sources_.holdersOf(source), source.holder_count,
                                            /*row_major_only=*/true);
  }
  const Cand& first = balancer_.cand(source.bcast_cands);
  const int64_t bytes = group.num_elements * bytes_of_(first.dtype);
  if (source.row_major_count == 1) {
    group.src = {first.rank, first.buffer, first.offset};
    group.src_dtype = first.dtype;
    balancer_.charge(first.rank, bytes);
  } else {
    balancer_.addGroupChoice(group.num_elements, source.bcast_cands, g);
  }
  plan_.groups.push_back(std::move(group));
  group_next_.push_back(source.group_head);
  source.group_head = g;
}

// The ops moving `box` from holder h into rollout piece `dst`: counted per (src, dst) rank pair
// (kStore false; kRecord: also noted in counted_, pass A) or stored at the pair's next slot of
// plan_.writes (kStore true). Increment piece_stamp_ before each piece's first intersection.
template <bool kStore, bool kRecord>
void PlanEmitter::addOps(int32_t id, const Box& box, const Holder& h, const PieceRef& dst) {
  LastOp& last = last_[static_cast<size_t>(h.rank)];
  forEachRegion(
      box, *h.piece, *dst.piece,
      [&](int64_t src_offset, int64_t dst_offset, const RegionShape& shape) {
        const bool one_d = shape.count[1] == 1 && shape.count[2] == 1;
        if (last.stamp == piece_stamp_ && last.src_buffer == h.buffer && one_d && last.one_d &&
            last.src_end == src_offset && last.dst_end == dst_offset) {
          last.src_end += shape.count[0];
          last.dst_end += shape.count[0];
          if constexpr (kStore) last.op->run += shape.count[0];
          return;
        }
        int64_t& pair =
            pair_count_[static_cast<size_t>(h.rank) * static_cast<size_t>(input_.num_rollouts) +
                        static_cast<size_t>(dst.rank)];
        if constexpr (kRecord) counted_.push_back(static_cast<size_t>(&pair - pair_count_.data()));
        if constexpr (kStore) {
          WriteOp* slot = plan_.writes.data() + pair;
          // The pair's next slot is written a few hundred ops later: fetch it now
          // (writes to ~trainers x rollouts streams otherwise stall on every line).
          const uintptr_t next = reinterpret_cast<uintptr_t>(slot + 1);
          __builtin_prefetch(reinterpret_cast<const void*>(next), 1);
          __builtin_prefetch(reinterpret_cast<const void*>(next + 64), 1);
          WriteOp& w = *slot;
          w.tensor = id;
          w.src_rank = h.rank;
          w.src_buffer = h.buffer;
          w.dst_rank = dst.rank;
          w.dst_buffer = dst.buffer();
          w.src_dtype = h.dtype;
          w.dst_dtype = dst.dtype();
          w.src_offset = src_offset;
          w.dst_offset = dst_offset;
          w.run = one_d ? shape.count[0] : -1 - shape_index_->index(shape);
          last.op = &w;
        }
        ++pair;
        last.stamp = piece_stamp_;
        last.src_buffer = h.buffer;
        last.one_d = one_d;
        last.src_end = src_offset + shape.count[0];
        last.dst_end = dst_offset + shape.count[0];
      });
}

void PlanEmitter::chooseSenders() {
  release(group_next_);
  balancer_.choose(plan_.groups);
}

// ---- passes B and C: the ops of write pieces, with the choices made ---------------------------

// Counts (kStore false) or stores the ops of rollout piece `ref` of the tensor being processed,
// taking flexible choices from the balancer's write choice *cursor on.
template <bool kStore>
void PlanEmitter::pieceOps(int32_t id, const PieceRef& ref, size_t* cursor) {
  ++piece_stamp_;
  sources_.forEachIntersection(ref.piece->box, [&](int32_t r, const Box& box) {
    const Source& s = sources_.sourceOf(r);
    int32_t h = s.holder_begin;
    if (s.holder_count > 1) h += balancer_.writeChoice((*cursor)++);
    addOps<kStore>(id, box, sources_.holder(h), ref);
  });
}

// The ops of the pieces whose mode is `first_mode` or above, in the order of pass A.
template <bool kStore>
void PlanEmitter::writePass(PieceMode first_mode) {
  size_t cursor = 0;
  for (size_t proc = 0; proc < input_.numWanted(); ++proc) {
    const int64_t begin = input_.rollout_begin[proc];
    const int64_t end = input_.rollout_begin[proc + 1];
    bool any = false;
    for (int64_t k = begin; k < end && !any; ++k)
      any = piece_mode_[static_cast<size_t>(k)] >= first_mode;
    if (!any) continue;
    const int32_t id = input_.proc_tensor[proc];
    buildSources(proc, /*for_groups=*/false);
    for (int64_t k = begin; k < end; ++k) {
      if (piece_mode_[static_cast<size_t>(k)] < first_mode) continue;
      prefetchRollout(k + kLookahead);
      pieceOps<kStore>(id, input_.rollout_refs[static_cast<size_t>(k)], &cursor);
    }
  }
}

void PlanEmitter::countFlexible() {
  writePass<false>(kFlexWriteMode);
}

// Turns the pair counts into slot cursors and allocates the writes at their final count.
void PlanEmitter::allocateWrites() {
  int64_t total = 0;
  for (int64_t& c : pair_count_) {
    const int64_t n = c;
    c = total;  // now the next free slot of the pair
    total += n;
  }
  plan_.writes.reserve(static_cast<size_t>(total));  // allocated, not yet touched
  populateForWrite(plan_.writes.data(), static_cast<size_t>(total) * sizeof(WriteOp));
  plan_.writes.resize(static_cast<size_t>(total));
}

void PlanEmitter::emitWrites() {
  allocateWrites();
  RegionShapeIndex shape_index(plan_.shapes);
  shape_index_ = &shape_index;
  writePass<true>(kWriteMode);
  shape_index_ = nullptr;
}

void PlanEmitter::freeScratch() {
  release(piece_mode_);
  balancer_.freeChoices();
  sources_.freeMemory();
  release(last_);
  release(counted_);
}

void PlanEmitter::finishWrites() {
  std::vector<WriteOp>& writes = plan_.writes;
  auto less = [](const WriteOp& a, const WriteOp& b) {
    if (a.dst_buffer != b.dst_buffer) return a.dst_buffer < b.dst_buffer;
    return a.dst_offset < b.dst_offset;
  };
  size_t begin = 0;
  size_t out = 0;
  int64_t bytes = 0;
  for (const int64_t pair_end : pair_count_) {
    const size_t end = static_cast<size_t>(pair_end);
    auto first = writes.begin() + static_cast<ptrdiff_t>(begin);
    auto last = writes.begin() + static_cast<ptrdiff_t>(end);
    if (end - begin > 1 && !std::is_sorted(first, last, less)) std::sort(first, last, less);
    const size_t range_out = out;
    for (size_t i = begin; i < end; ++i) {
      const WriteOp& w = writes[i];
      bytes += (w.oneD() ? w.run : plan_.numElements(w)) * bytes_of_(w.dst_dtype);
      if (out > range_out && tryMerge(writes[out - 1], writes[i])) continue;
      if (out != i) writes[out] = writes[i];
      ++out;
    }
    begin = end;
  }
  release(pair_count_);
  writes.resize(out);
  if (!plan_.shapes.empty()) {
    std::vector<RegionShape> emitted = std::move(plan_.shapes);
    renumberShapes(writes, emitted, plan_.shapes);
  }
  if (writes.capacity() - writes.size() > writes.size() / 8) writes.shrink_to_fit();
  plan_.stats.write_bytes = bytes;
}

Plan PlanEmitter::takePlan(std::vector<int64_t>* loads) {
  *loads = balancer_.takeLoads();
  return std::move(plan_);
}

}  // namespace wsync::plan_internal
