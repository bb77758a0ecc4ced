// Phase 1 of makePlan: validation and tensor unification (planner_internal.h).
#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "plan/planner_internal.h"

namespace wsync::plan_internal {
namespace {

// The global ids of the declarations of every rank of one role.
struct IdMap {
  ScratchVector<int32_t> ids;   // rank r's at [begin[r], begin[r + 1])
  ScratchVector<size_t> begin;  // per rank, and the end
  int32_t* of(size_t rank) { return ids.data() + begin[rank]; }
  const int32_t* of(size_t rank) const { return ids.data() + begin[rank]; }
};

// Checks that regs[i] is rank i of `role` (a rollout with a replica >= 0) with fewer than
// kMaxBuffersPerRank buffers.
Status checkRankList(const std::vector<Registration>& regs, Role role) {
  for (size_t i = 0; i < regs.size(); ++i) {
    const Registration& r = regs[i];
    const int32_t rank = static_cast<int32_t>(i);
    if (r.role != role || r.rank != rank) {
      return invalidArgument("makePlan: " + std::string(roleName(role)) + "s[" + std::to_string(i) +
                             "] is " + who(r.role, r.rank) + ", must be " + who(role, rank));
    }
    if (role == Role::kRollout && r.replica < 0) {
      return invalidArgument("makePlan: " + who(role, rank) + " has replica " +
                             std::to_string(r.replica) + ", must be >= 0");
    }
    if (static_cast<int64_t>(r.buffers.size()) >= kMaxBuffersPerRank) {
      return invalidArgument("makePlan: " + who(role, rank) + " has " +
                             std::to_string(r.buffers.size()) + " buffers, more than " +
                             std::to_string(kMaxBuffersPerRank - 1));
    }
  }
  return Status::ok();
}

// Validates the input and fills an UnifiedInput (see unify()).
class Unifier {
 public:
  Unifier(const std::vector<Registration>& trainers, const std::vector<Registration>& rollouts,
          UnifiedInput& out)
      : trainers_(trainers), rollouts_(rollouts), out_(out) {}

  Status run() {
    WSYNC_RETURN_IF_ERROR(checkRanks());
    WSYNC_RETURN_IF_ERROR(unifyTensors());
    WSYNC_RETURN_IF_ERROR(checkTrainerPieces());
    WSYNC_RETURN_IF_ERROR(bucketRolloutPieces());
    bucketTrainerPieces();
    return Status::ok();
  }

 private:
  Status checkRanks();
  Status unifyTensors();
  Status declareAll(const std::vector<Registration>& regs, IdMap& map);
  Status declare(const Registration& reg, int32_t* map, const Registration* prev,
                 const int32_t* prev_map);
  Status addDeclaration(const Registration& reg, const TensorDecl& decl, int32_t* id);
  Status checkPiece(const Registration& reg, const int32_t* map, size_t b, size_t p,
                    int32_t* global) const;
  Status checkTrainerPieces();
  Status countRolloutPieces(ScratchVector<int64_t>& count);
  Status bucketRolloutPieces();
  void bucketTrainerPieces();
  Status dtypeError(int32_t id, const Registration& reg, const LocalBuffer& buf) const;

  // Open addressing over (hash, id); names compare against out_.tensors.
  struct Slot {
    uint64_t hash = 0;
    int32_t id = -1;
  };

  int32_t findName(std::string_view name, uint64_t hash) const {
    for (size_t i = hash & slot_mask_;; i = (i + 1) & slot_mask_) {
      const Slot& s = slots_[i];
      if (s.id < 0) return -1;
      if (s.hash == hash && out_.tensors[static_cast<size_t>(s.id)].name == name) return s.id;
    }
  }

  void insertSlot(uint64_t hash, int32_t id) {
    size_t i = hash & slot_mask_;
    while (slots_[i].id >= 0)
      i = (i + 1) & slot_mask_;
    slots_[i] = {hash, id};
  }

  void growSlots(size_t capacity) {
    ScratchVector<Slot> old = std::move(slots_);
    slots_.assign(capacity, Slot{});
    slot_mask_ = capacity - 1;
    for (const Slot& s : old) {
      if (s.id >= 0) insertSlot(s.hash, s.id);
    }
  }

  const std::vector<Registration>& trainers_;
  const std::vector<Registration>& rollouts_;
  UnifiedInput& out_;

  ScratchVector<Slot> slots_;  // the name index (freed after unification)
  size_t slot_mask_ = 0;
  IdMap trainer_map_;  // local tensor index -> global id, per rank
  IdMap rollout_map_;
  ScratchVector<PieceRef> scan_refs_;  // non-empty trainer pieces in scan order (until bucketing)
  ScratchVector<int32_t> scan_ids_;    // their global ids
};

Status Unifier::checkRanks() {
  if (trainers_.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()) ||
      rollouts_.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return invalidArgument("makePlan: too many ranks");
  }
  out_.num_trainers = static_cast<int32_t>(trainers_.size());
  out_.num_rollouts = static_cast<int32_t>(rollouts_.size());
  WSYNC_RETURN_IF_ERROR(checkRankList(trainers_, Role::kTrainer));
  return checkRankList(rollouts_, Role::kRollout);
}

Status Unifier::unifyTensors() {
  size_t most = 16;
  for (const Registration& r : trainers_)
    most = std::max(most, r.tensors.size());
  for (const Registration& r : rollouts_)
    most = std::max(most, r.tensors.size());
  size_t capacity = 64;
  while (capacity < 4 * most)
    capacity *= 2;
  slots_.assign(capacity, Slot{});
  slot_mask_ = capacity - 1;
  out_.tensors.reserve(most * 2);
  WSYNC_RETURN_IF_ERROR(declareAll(trainers_, trainer_map_));
  WSYNC_RETURN_IF_ERROR(declareAll(rollouts_, rollout_map_));
  release(slots_);
  return Status::ok();
}

// Declares every rank's tensors, in rank order. The `prev` of a rank is the latest earlier rank
// with the same signature (count and a few names: data-parallel replicas of a rank declare the
// same list), else the previous rank.
Status Unifier::declareAll(const std::vector<Registration>& regs, IdMap& map) {
  map.begin.assign(regs.size() + 1, 0);
  for (size_t i = 0; i < regs.size(); ++i)
    map.begin[i + 1] = map.begin[i] + regs[i].tensors.size();
  map.ids.assign(map.begin.back(), -1);
  auto signature = [](const Registration& r) {
    const size_t n = r.tensors.size();
    uint64_t h = n;
    if (n > 0) {
      for (const size_t k : {n / 3, n / 2, (2 * n) / 3, n - 1}) {
        h = (h * 0x9e3779b97f4a7c15ull) ^ std::hash<std::string_view>{}(r.tensors[k].name);
      }
    }
    return h;
  };
  std::unordered_map<uint64_t, size_t> latest;  // signature -> latest rank with it
  for (size_t i = 0; i < regs.size(); ++i) {
    const auto [it, inserted] = latest.try_emplace(signature(regs[i]), i);
    size_t prev = i;  // none
    if (!inserted) {
      prev = it->second;
      it->second = i;
    } else if (i > 0) {
      prev = i - 1;
    }
    WSYNC_RETURN_IF_ERROR(declare(regs[i], map.of(i), prev < i ? &regs[prev] : nullptr,
                                  prev < i ? map.of(prev) : nullptr));
  }
  return Status::ok();
}

// Maps reg's declarations to global ids (map[i] for reg.tensors[i]). `prev` (an earlier rank of
// the same role, or null) often declares the same names in the same order: a declaration equal
// to prev's at the same position reuses its id without hashing.
Status Unifier::declare(const Registration& reg, int32_t* map, const Registration* prev,
                        const int32_t* prev_map) {
  constexpr size_t kAhead = 8;  // names live in separate heap blocks: fetch them early
  for (size_t i = 0; i < reg.tensors.size(); ++i) {
    if (i + kAhead < reg.tensors.size()) {
      __builtin_prefetch(reg.tensors[i + kAhead].name.data());
      if (prev != nullptr && i + kAhead < prev->tensors.size()) {
        __builtin_prefetch(prev->tensors[i + kAhead].name.data());
      }
    }
    const TensorDecl& decl = reg.tensors[i];
    if (prev != nullptr && i < prev->tensors.size()) {
      const TensorDecl& same = prev->tensors[i];
      if (same.name == decl.name && same.shape == decl.shape) {
        map[i] = prev_map[i];
        continue;
      }
    }
    WSYNC_RETURN_IF_ERROR(addDeclaration(reg, decl, &map[i]));
  }
  return Status::ok();
}

// Checks `decl` of `reg` and sets *id to its tensor's global id, adding the tensor when new.
Status Unifier::addDeclaration(const Registration& reg, const TensorDecl& decl, int32_t* id) {
  if (decl.shape.rank > kMaxRank) {
    return invalidArgument(who(reg.role, reg.rank) + " declares tensor " + quoted(decl.name) +
                           " with rank " + std::to_string(decl.shape.rank) + " (at most " +
                           std::to_string(kMaxRank) + ")");
  }
  int64_t volume = 1;
  for (int d = 0; d < decl.shape.rank; ++d) {
    if (decl.shape[d] < 0 || __builtin_mul_overflow(volume, decl.shape[d], &volume)) {
      return invalidArgument(who(reg.role, reg.rank) + " declares tensor " + quoted(decl.name) +
                             " with invalid shape " + decl.shape.toString());
    }
  }
  const uint64_t hash = std::hash<std::string_view>{}(decl.name);
  *id = findName(decl.name, hash);
  if (*id < 0) {
    if ((out_.tensors.size() + 1) * 2 > slots_.size()) growSlots(slots_.size() * 2);
    *id = static_cast<int32_t>(out_.tensors.size());
    TensorInfo info;
    info.name = decl.name;
    info.shape = &decl.shape;
    info.first_role = reg.role;
    info.first_rank = reg.rank;
    out_.tensors.push_back(info);
    insertSlot(hash, *id);
    return Status::ok();
  }
  const TensorInfo& info = out_.tensors[static_cast<size_t>(*id)];
  if (*info.shape != decl.shape) {
    return mismatch("tensor " + quoted(decl.name) + " has shape " + info.shape->toString() +
                    " on " + who(info.first_role, info.first_rank) + " but " +
                    decl.shape.toString() + " on " + who(reg.role, reg.rank));
  }
  return Status::ok();
}

// Checks one piece; sets *global to its tensor's id.
Status Unifier::checkPiece(const Registration& reg, const int32_t* map, size_t b, size_t p,
                           int32_t* global) const {
  const LocalBuffer& buf = reg.buffers[b];
  const Piece& piece = buf.pieces[p];
  auto where = [&]() {
    std::string s =
        who(reg.role, reg.rank) + " buffer " + quoted(buf.name) + " piece " + std::to_string(p);
    if (piece.tensor >= 0 && static_cast<size_t>(piece.tensor) < reg.tensors.size()) {
      s += " (tensor " + quoted(reg.tensors[static_cast<size_t>(piece.tensor)].name) + ")";
    }
    return s;
  };
  if (!validDType(static_cast<int>(buf.dtype))) {
    return invalidArgument(where() + ": invalid dtype " +
                           std::to_string(static_cast<int>(buf.dtype)));
  }
  if (piece.tensor < 0 || static_cast<size_t>(piece.tensor) >= reg.tensors.size()) {
    return invalidArgument(where() + ": tensor index " + std::to_string(piece.tensor) +
                           " is not declared (" + std::to_string(reg.tensors.size()) + " tensors)");
  }
  const int32_t id = map[static_cast<size_t>(piece.tensor)];
  const Dims& shape = *out_.tensors[static_cast<size_t>(id)].shape;
  const int r = shape.rank;
  if (piece.box.offset.rank != r || piece.box.extent.rank != r || piece.local_strides.rank != r) {
    return invalidArgument(
        where() + ": box offset/extent/strides have ranks " +
        std::to_string(piece.box.offset.rank) + "/" + std::to_string(piece.box.extent.rank) + "/" +
        std::to_string(piece.local_strides.rank) + ", the tensor's is " + std::to_string(r));
  }
  if (!piece.box.fitsIn(shape)) {
    return invalidArgument(where() + ": box " + piece.box.toString() + " is outside shape " +
                           shape.toString());
  }
  *global = id;
  if (piece.box.empty()) return Status::ok();
  if (r > 0 && piece.local_strides[r - 1] != 1) {
    return invalidArgument(where() + ": innermost local stride is " +
                           std::to_string(piece.local_strides[r - 1]) + ", must be 1");
  }
  int64_t last = piece.local_offset;
  bool overflow = piece.local_offset < 0;
  for (int d = 0; d < r && !overflow; ++d) {
    int64_t step = 0;
    if (piece.local_strides[d] < 0) {
      return invalidArgument(where() + ": negative local stride in " +
                             piece.local_strides.toString());
    }
    overflow = __builtin_mul_overflow(piece.box.extent[d] - 1, piece.local_strides[d], &step) ||
               __builtin_add_overflow(last, step, &last);
  }
  if (overflow || last >= buf.num_elements) {
    return invalidArgument(where() + ": elements [" + std::to_string(piece.local_offset) + ", " +
                           (overflow ? std::string("overflow") : std::to_string(last)) + "] (box " +
                           piece.box.toString() + ", strides " + piece.local_strides.toString() +
                           ") are outside the buffer's " + std::to_string(buf.num_elements) +
                           " elements");
  }
  return Status::ok();
}

// Validates every trainer piece, in scan order (rank, buffer, piece), and lists the non-empty
// ones (scan_refs_, scan_ids_) with the dtypes each tensor is held in.
Status Unifier::checkTrainerPieces() {
  size_t buffers = 0;
  for (const Registration& reg : trainers_)
    buffers += reg.buffers.size();
  scan_refs_.reserve(buffers);  // usually one piece per buffer
  scan_ids_.reserve(buffers);
  for (size_t t = 0; t < trainers_.size(); ++t) {
    const Registration& reg = trainers_[t];
    for (size_t b = 0; b < reg.buffers.size(); ++b) {
      const LocalBuffer& buf = reg.buffers[b];
      for (size_t p = 0; p < buf.pieces.size(); ++p) {
        int32_t id = -1;
        WSYNC_RETURN_IF_ERROR(checkPiece(reg, trainer_map_.of(t), b, p, &id));
        if (buf.pieces[p].box.empty()) continue;
        out_.tensors[static_cast<size_t>(id)].trainer_dtypes |= dtypeBit(buf.dtype);
        scan_refs_.push_back(makeRef(buf.pieces[p], static_cast<int32_t>(t), b, buf.dtype));
        scan_ids_.push_back(id);
      }
    }
  }
  return Status::ok();
}

// Buckets the listed trainer pieces of the wanted tensors by processing index (the passes read
// trainer_refs in order), each tensor's sorted by box, ties in scan order. After
// bucketRolloutPieces.
void Unifier::bucketTrainerPieces() {
  ScratchVector<int64_t>& begin = out_.trainer_begin;
  begin.assign(out_.numWanted() + 1, 0);
  for (const int32_t id : scan_ids_) {
    const int32_t proc = out_.tensors[static_cast<size_t>(id)].proc;
    if (proc >= 0) ++begin[static_cast<size_t>(proc) + 1];
  }
  for (size_t proc = 0; proc < out_.numWanted(); ++proc)
    begin[proc + 1] += begin[proc];
  ScratchVector<PieceRef>& refs = out_.trainer_refs;
  refs.resize(static_cast<size_t>(begin.back()));
  {
    ScratchVector<int64_t> next(begin.begin(), begin.end() - 1);
    for (size_t i = 0; i < scan_refs_.size(); ++i) {
      const int32_t proc = out_.tensors[static_cast<size_t>(scan_ids_[i])].proc;
      if (proc < 0) continue;  // no rollout wants the tensor
      refs[static_cast<size_t>(next[static_cast<size_t>(proc)]++)] = scan_refs_[i];
    }
  }
  release(scan_refs_);
  release(scan_ids_);
  auto byBox = [](const PieceRef& a, const PieceRef& b) {
    return boxLess(a.piece->box, b.piece->box);
  };
  for (size_t proc = 0; proc < out_.numWanted(); ++proc) {
    PieceRef* first = refs.data() + begin[proc];
    PieceRef* last = refs.data() + begin[proc + 1];
    if (!std::is_sorted(first, last, byBox)) std::stable_sort(first, last, byBox);
  }
}

// The error for rollout buffer `buf` of `reg`, whose dtype some trainer piece of tensor `id`
// cannot convert into: names the first such piece in scan order.
Status Unifier::dtypeError(int32_t id, const Registration& reg, const LocalBuffer& buf) const {
  const TensorInfo& info = out_.tensors[static_cast<size_t>(id)];
  for (size_t t = 0; t < trainers_.size(); ++t) {
    for (const LocalBuffer& src : trainers_[t].buffers) {
      if (canConvert(src.dtype, buf.dtype)) continue;
      for (const Piece& piece : src.pieces) {
        if (piece.box.empty() || trainer_map_.of(t)[static_cast<size_t>(piece.tensor)] != id) {
          continue;
        }
        return mismatch("tensor " + quoted(info.name) + ": trainer " + std::to_string(t) +
                        " holds it as " + dtypeName(src.dtype) + " (buffer " + quoted(src.name) +
                        "), which cannot convert to " + dtypeName(buf.dtype) + " wanted by " +
                        who(reg.role, reg.rank) + " (buffer " + quoted(buf.name) + ")");
      }
    }
  }
  return internalError("dtype check failed for tensor " + quoted(info.name));
}

// Validates every rollout piece; numbers the wanted tensors in order of first want (proc) and
// counts their non-empty pieces (count[proc + 1], count[0] == 0).
Status Unifier::countRolloutPieces(ScratchVector<int64_t>& count) {
  uint16_t convertible_from[kNumDTypes] = {};
  for (int to = 0; to < kNumDTypes; ++to) {
    for (int from = 0; from < kNumDTypes; ++from) {
      if (canConvert(static_cast<DType>(from), static_cast<DType>(to))) {
        convertible_from[to] |= dtypeBit(static_cast<DType>(from));
      }
    }
  }
  count.assign(1, 0);
  for (size_t j = 0; j < rollouts_.size(); ++j) {
    const Registration& reg = rollouts_[j];
    for (size_t b = 0; b < reg.buffers.size(); ++b) {
      const LocalBuffer& buf = reg.buffers[b];
      for (size_t p = 0; p < buf.pieces.size(); ++p) {
        int32_t id = -1;
        WSYNC_RETURN_IF_ERROR(checkPiece(reg, rollout_map_.of(j), b, p, &id));
        if (buf.pieces[p].box.empty()) continue;
        TensorInfo& info = out_.tensors[static_cast<size_t>(id)];
        if (info.first_role != Role::kTrainer) {
          return mismatch(who(reg.role, reg.rank) + " wants tensor " + quoted(info.name) +
                          " (buffer " + quoted(buf.name) + "), which no trainer declares");
        }
        if (info.trainer_dtypes & ~convertible_from[static_cast<int>(buf.dtype)]) {
          return dtypeError(id, reg, buf);
        }
        if (info.proc < 0) {
          info.proc = static_cast<int32_t>(out_.proc_tensor.size());
          out_.proc_tensor.push_back(id);
          count.push_back(0);
        }
        ++count[static_cast<size_t>(info.proc) + 1];
      }
    }
  }
  return Status::ok();
}

// Buckets the non-empty rollout pieces by processing index, each tensor's in scan order.
Status Unifier::bucketRolloutPieces() {
  ScratchVector<int64_t> count;
  WSYNC_RETURN_IF_ERROR(countRolloutPieces(count));
  for (size_t i = 1; i < count.size(); ++i)
    count[i] += count[i - 1];
  out_.rollout_refs.resize(static_cast<size_t>(count.back()));
  out_.rollout_begin = count;
  for (size_t j = 0; j < rollouts_.size(); ++j) {
    const Registration& reg = rollouts_[j];
    for (size_t b = 0; b < reg.buffers.size(); ++b) {
      const LocalBuffer& buf = reg.buffers[b];
      for (const Piece& piece : buf.pieces) {
        if (piece.box.empty()) continue;
        const int32_t id = rollout_map_.of(j)[static_cast<size_t>(piece.tensor)];
        const size_t proc = static_cast<size_t>(out_.tensors[static_cast<size_t>(id)].proc);
        out_.rollout_refs[static_cast<size_t>(count[proc]++)] =
            makeRef(piece, static_cast<int32_t>(j), b, buf.dtype);
      }
    }
  }
  return Status::ok();
}

}  // namespace

Status unify(const std::vector<Registration>& trainers, const std::vector<Registration>& rollouts,
             UnifiedInput* out) {
  Unifier unifier(trainers, rollouts, *out);
  return unifier.run();
}

}  // namespace wsync::plan_internal
