#include "plan/planner.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <new>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <sys/mman.h>

namespace wsync {
namespace {

// ---- small helpers ---------------------------------------------------------------------------

constexpr int kBufferBits = 24;  // PieceRef packs the buffer index and the dtype in 32 bits
constexpr int64_t kMaxBuffersPerRank = int64_t{1} << kBufferBits;

std::string who(Role role, int32_t rank) {
  return std::string(roleName(role)) + " " + std::to_string(rank);
}

std::string quoted(std::string_view s) {
  std::string q;
  q.reserve(s.size() + 2);
  q += '\'';
  q += s;
  q += '\'';
  return q;
}

bool isFloat8(DType t) {
  return t == DType::kFloat8E4M3 || t == DType::kFloat8E5M2;
}

uint16_t dtypeBit(DType t) {
  return static_cast<uint16_t>(1u << static_cast<unsigned>(t));
}

std::string offsetString(const Box& b) {
  return b.offset.toString();
}

// True when the piece's elements are one run, row-major over its box (the stride of a dim of
// extent 1 does not matter).
bool rowMajorContiguous(const Piece& p) {
  int64_t expect = 1;
  for (int d = p.box.rank() - 1; d >= 0; --d) {
    if (p.box.extent[d] != 1 && p.local_strides[d] != expect) return false;
    expect *= p.box.extent[d];
  }
  return true;
}

inline bool dimsEqual(const Dims& a, const Dims& b) {
  if (a.rank != b.rank) return false;
  for (int d = 0; d < a.rank; ++d) {
    if (a[d] != b[d]) return false;
  }
  return true;
}

inline bool boxEmpty(const Box& b) {
  for (int d = 0; d < b.rank(); ++d) {
    if (b.extent[d] <= 0) return true;
  }
  return false;
}

inline int64_t volumeOf(const Box& b) {
  int64_t v = 1;
  for (int d = 0; d < b.rank(); ++d)
    v *= b.extent[d];
  return v;
}

// Lexicographic order on (offset, extent): <0, 0 or >0.
inline int boxCompare(const Box& a, const Box& b) {
  const int r = a.rank();
  for (int d = 0; d < r; ++d) {
    if (a.offset[d] != b.offset[d]) return a.offset[d] < b.offset[d] ? -1 : 1;
  }
  for (int d = 0; d < r; ++d) {
    if (a.extent[d] != b.extent[d]) return a.extent[d] < b.extent[d] ? -1 : 1;
  }
  return 0;
}

inline bool boxLess(const Box& a, const Box& b) {
  return boxCompare(a, b) < 0;
}

// The intersection of two boxes of equal rank into `out`; false (out unspecified) when empty.
inline bool intersectInto(const Box& a, const Box& b, Box& out) {
  const int r = a.rank();
  out.offset.rank = static_cast<uint8_t>(r);
  out.extent.rank = static_cast<uint8_t>(r);
  for (int d = 0; d < r; ++d) {
    const int64_t lo = std::max(a.offset[d], b.offset[d]);
    const int64_t hi = std::min(a.offset[d] + a.extent[d], b.offset[d] + b.extent[d]);
    if (lo >= hi) return false;
    out.offset[d] = lo;
    out.extent[d] = hi - lo;
  }
  return true;
}

bool offsetLess(const Box& a, const Box& b) {
  for (int d = 0; d < a.rank(); ++d) {
    if (a.offset[d] != b.offset[d]) return a.offset[d] < b.offset[d];
  }
  return false;
}

// Appends a \ b (as at most 2 * rank disjoint boxes) to `out`.
void subtractBox(const Box& a, const Box& b, std::vector<Box>& out) {
  Box rest = a;
  for (int d = 0; d < a.rank(); ++d) {
    const int64_t lo = std::max(rest.offset[d], b.offset[d]);
    const int64_t hi = std::min(rest.end(d), b.end(d));
    if (lo >= hi) {
      out.push_back(rest);
      return;
    }
    if (rest.offset[d] < lo) {
      Box part = rest;
      part.extent[d] = lo - rest.offset[d];
      out.push_back(part);
    }
    if (hi < rest.end(d)) {
      Box part = rest;
      part.offset[d] = hi;
      part.extent[d] = rest.end(d) - hi;
      out.push_back(part);
    }
    rest.offset[d] = lo;
    rest.extent[d] = hi - lo;
  }
  // What is left of `rest` lies inside b.
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

// Points the strided writes at a new table `to` holding the entries of `from` they use, in the
// order of first use (so equal plans have equal tables, and a codec round trip is exact).
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

// Asks the kernel to back [data, data + bytes) with transparent huge pages before it is first
// touched: first-touching the plan's writes (hundreds of MB for large MoE models) otherwise takes
// one page fault per 4 KiB. Best effort (ignored where THP is off); Linux only.
void adviseHugePages(void* data, size_t bytes) {
#ifdef MADV_HUGEPAGE
  constexpr uintptr_t kHugePage = uintptr_t{2} << 20;
  if (bytes < 2 * kHugePage) return;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(kHugePage - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)data;
  (void)bytes;
#endif
}

// Allocator of the planner's large working arrays. Blocks of kMapBytes and more are mapped and
// unmapped directly, so that what the planner frees is returned to the system at once: the C heap
// keeps freed blocks below its adaptive mmap threshold (up to 32 MiB) resident, and the planner's
// peak memory is its working arrays plus the plan. Each block starts with a header saying how it
// was obtained.
template <typename T>
struct ScratchAllocator {
  using value_type = T;
  static constexpr size_t kHeader = 64;  // keeps the alignment of every type the planner stores
  static constexpr size_t kMapBytes = size_t{1} << 20;
  static_assert(alignof(T) <= kHeader);

  ScratchAllocator() = default;
  template <typename U>
  ScratchAllocator(const ScratchAllocator<U>&) {}  // NOLINT(google-explicit-constructor)

  T* allocate(size_t n) {
    const size_t bytes = kHeader + n * sizeof(T);
    void* block = nullptr;
    uint64_t mapped = 0;
    if (bytes >= kMapBytes) {
      block = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (block == MAP_FAILED) {
        block = nullptr;
      } else {
        mapped = 1;
      }
    }
    if (block == nullptr) block = ::operator new(bytes);  // throws std::bad_alloc on failure
    *static_cast<uint64_t*>(block) = mapped;
    return reinterpret_cast<T*>(static_cast<char*>(block) + kHeader);
  }
  void deallocate(T* p, size_t n) {
    void* block = reinterpret_cast<char*>(p) - kHeader;
    if (*static_cast<uint64_t*>(block) != 0) {
      munmap(block, kHeader + n * sizeof(T));
    } else {
      ::operator delete(block);
    }
  }
  template <typename U>
  bool operator==(const ScratchAllocator<U>&) const {
    return true;
  }
};

template <typename T>
using ScratchVector = std::vector<T, ScratchAllocator<T>>;

// Frees a vector's storage (`v = {}` would only clear it: it assigns an empty initializer list).
template <typename V>
void release(V& v) {
  V().swap(v);
}

// The balancing choices of the write pieces, in generation order: each the index of the chosen
// holder among its source's holders, in as few bytes as the largest holder count needs.
class ChoiceList {
 public:
  void assign(size_t n, int32_t max_holders) {
    width_ = max_holders <= (1 << 8) ? 1 : max_holders <= (1 << 16) ? 2 : 4;
    bytes_.assign(n * width_, 0);
  }
  void set(size_t i, int32_t choice) {
    const auto v = static_cast<uint32_t>(choice);
    for (size_t b = 0; b < width_; ++b)
      bytes_[i * width_ + b] = static_cast<uint8_t>(v >> (8 * b));
  }
  int32_t get(size_t i) const {
    uint32_t v = 0;
    for (size_t b = 0; b < width_; ++b)
      v |= static_cast<uint32_t>(bytes_[i * width_ + b]) << (8 * b);
    return static_cast<int32_t>(v);
  }
  void release() { ScratchVector<uint8_t>().swap(bytes_); }

 private:
  ScratchVector<uint8_t> bytes_;
  size_t width_ = 4;
};

// The global ids of the declarations of every rank of one role.
struct IdMap {
  ScratchVector<int32_t> ids;   // rank r's at [begin[r], begin[r + 1])
  ScratchVector<size_t> begin;  // per rank, and the end
  int32_t* of(size_t rank) { return ids.data() + begin[rank]; }
  const int32_t* of(size_t rank) const { return ids.data() + begin[rank]; }
  void release() {
    ScratchVector<int32_t>().swap(ids);
    ScratchVector<size_t>().swap(begin);
  }
};

// ---- planner state ---------------------------------------------------------------------------

// A piece of some rank: the piece, the rank, and its buffer index and dtype packed.
struct PieceRef {
  const Piece* piece;
  int32_t rank;
  uint32_t buffer_dtype;  // buffer << 8 | dtype
  int32_t buffer() const { return static_cast<int32_t>(buffer_dtype >> 8); }
  DType dtype() const { return static_cast<DType>(buffer_dtype & 0xff); }
};

struct TensorInfo {
  std::string_view name;  // both point into a registration (which outlives the planner)
  const Dims* shape = nullptr;
  Role first_role = Role::kTrainer;  // who declared it first (for mismatch messages)
  int32_t first_rank = 0;            // trainers are declared first: first_role == kTrainer iff some
                                     // trainer declares the tensor
  uint16_t trainer_dtypes = 0;       // one bit per DType some trainer holds a piece of it in
  int32_t proc = -1;                 // processing index, -1 when no rollout wants any of it
};

// A trainer piece of the tensor being processed.
struct Holder {
  const Piece* piece;
  int32_t rank;
  int32_t buffer;
  DType dtype;
  bool row_major;
};

// Identical trainer boxes of the tensor being processed (holders_[holder_begin, +holder_count)).
struct Source {
  int32_t holder_begin = 0;
  int32_t holder_count = 0;
  int32_t row_major_count = 0;  // holders laid out row-major over the box (broadcast senders)
  int32_t group_head = -1;      // first group of this box (pass A), chained by group_next_
  int32_t write_cands = -1;     // cands_ index of its holders (pass A, on first use)
  int32_t bcast_cands = -1;     // cands_ index of its row-major holders (pass A, on first use)
};

// A disjoint part of a source box (the whole box unless another source box owns some of it).
struct Resolved {
  const Box* box;  // a holder's piece box, or an entry of PlanBuilder::fragment_pool_
  int32_t source;
};

// A sender alternative for a balancing choice.
struct Cand {
  int32_t rank;
  int32_t buffer;
  int64_t offset;
  DType dtype;
};

// A balancing choice: `elements` to send from one of cands_[cand_begin, +cand_count).
// target >= 0: write_choice_[target]; target < 0: group -(target + 1).
struct Item {
  int64_t bytes;  // elements * size of the first candidate's dtype (sort key)
  int64_t elements;
  int32_t cand_begin;
  int32_t cand_count;
  int32_t target;
};

enum PieceMode : uint8_t { kGroupMode = 1, kWriteMode = 2, kFlexWriteMode = 3 };

// What a trainer rank last sent to the rollout piece being processed: ops of one piece from one
// rank merge when 1-D and contiguous on both sides (same dst, so only the source side varies).
struct LastOp {
  uint64_t stamp = 0;  // the piece's stamp; stale -> no merge
  int32_t src_buffer = -1;
  bool one_d = false;
  int64_t src_end = 0;
  int64_t dst_end = 0;
  WriteOp* op = nullptr;  // the stored op (emit pass only)
};

class PlanBuilder {
 public:
  PlanBuilder(const std::vector<Registration>& trainers, const std::vector<Registration>& rollouts,
              const PlannerOptions& options)
      : trainers_(trainers), rollouts_(rollouts), options_(options) {
    for (int t = 0; t < kNumDTypes; ++t)
      dtype_bytes_[t] = static_cast<int64_t>(dtypeSize(static_cast<DType>(t)));
  }

  Result<Plan> build() {
    WSYNC_RETURN_IF_ERROR(checkRanks());
    WSYNC_RETURN_IF_ERROR(unifyTensors());
    WSYNC_RETURN_IF_ERROR(checkTrainerPieces());
    WSYNC_RETURN_IF_ERROR(bucketRolloutPieces());
    bucketTrainerPieces();
    trainer_map_.release();
    rollout_map_.release();
    WSYNC_RETURN_IF_ERROR(analyze());
    chooseSenders();
    countFlexible();
    emitWrites();
    releaseScratch();
    finishWrites();
    finishPlan();
    return std::move(plan_);
  }

 private:
  // ---- validation and unification -----------------------------------------------------------

  Status checkRanks() {
    if (trainers_.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()) ||
        rollouts_.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
      return invalidArgument("makePlan: too many ranks");
    }
    num_trainers_ = static_cast<int32_t>(trainers_.size());
    num_rollouts_ = static_cast<int32_t>(rollouts_.size());
    for (int32_t i = 0; i < num_trainers_; ++i) {
      const Registration& r = trainers_[static_cast<size_t>(i)];
      if (r.role != Role::kTrainer || r.rank != i) {
        return invalidArgument("makePlan: trainers[" + std::to_string(i) + "] is " +
                               who(r.role, r.rank) + ", must be trainer " + std::to_string(i));
      }
      if (static_cast<int64_t>(r.buffers.size()) >= kMaxBuffersPerRank) {
        return invalidArgument("makePlan: trainer " + std::to_string(i) + " has " +
                               std::to_string(r.buffers.size()) + " buffers, more than " +
                               std::to_string(kMaxBuffersPerRank - 1));
      }
    }
    for (int32_t j = 0; j < num_rollouts_; ++j) {
      const Registration& r = rollouts_[static_cast<size_t>(j)];
      if (r.role != Role::kRollout || r.rank != j) {
        return invalidArgument("makePlan: rollouts[" + std::to_string(j) + "] is " +
                               who(r.role, r.rank) + ", must be rollout " + std::to_string(j));
      }
      if (r.replica < 0) {
        return invalidArgument("makePlan: rollout " + std::to_string(j) + " has replica " +
                               std::to_string(r.replica) + ", must be >= 0");
      }
      if (static_cast<int64_t>(r.buffers.size()) >= kMaxBuffersPerRank) {
        return invalidArgument("makePlan: rollout " + std::to_string(j) + " has " +
                               std::to_string(r.buffers.size()) + " buffers, more than " +
                               std::to_string(kMaxBuffersPerRank - 1));
      }
    }
    return Status::ok();
  }

  // Open addressing over (hash, id); names compare against tensors_.
  struct Slot {
    uint64_t hash = 0;
    int32_t id = -1;
  };

  int32_t findName(std::string_view name, uint64_t hash) const {
    for (size_t i = hash & slot_mask_;; i = (i + 1) & slot_mask_) {
      const Slot& s = slots_[i];
      if (s.id < 0) return -1;
      if (s.hash == hash && tensors_[static_cast<size_t>(s.id)].name == name) return s.id;
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

  // Maps reg's declarations to global ids (map[i] for reg.tensors[i]). `prev` (an earlier rank of
  // the same role, or null) often declares the same names in the same order: a declaration equal
  // to prev's at the same position reuses its id without hashing.
  Status declare(const Registration& reg, int32_t* map, const Registration* prev,
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
        if (same.name == decl.name && dimsEqual(same.shape, decl.shape)) {
          map[i] = prev_map[i];
          continue;
        }
      }
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
      int32_t id = findName(decl.name, hash);
      if (id < 0) {
        if ((tensors_.size() + 1) * 2 > slots_.size()) growSlots(slots_.size() * 2);
        id = static_cast<int32_t>(tensors_.size());
        TensorInfo info;
        info.name = decl.name;
        info.shape = &decl.shape;
        info.first_role = reg.role;
        info.first_rank = reg.rank;
        tensors_.push_back(info);
        insertSlot(hash, id);
      } else {
        const TensorInfo& info = tensors_[static_cast<size_t>(id)];
        if (!dimsEqual(*info.shape, decl.shape)) {
          return mismatch("tensor " + quoted(decl.name) + " has shape " + info.shape->toString() +
                          " on " + who(info.first_role, info.first_rank) + " but " +
                          decl.shape.toString() + " on " + who(reg.role, reg.rank));
        }
      }
      map[i] = id;
    }
    return Status::ok();
  }

  Status unifyTensors() {
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
    tensors_.reserve(most * 2);
    WSYNC_RETURN_IF_ERROR(declareAll(trainers_, trainer_map_));
    WSYNC_RETURN_IF_ERROR(declareAll(rollouts_, rollout_map_));
    release(slots_);
    return Status::ok();
  }

  // Declares every rank's tensors, in rank order. The `prev` of a rank is the latest earlier rank
  // with the same signature (count and a few names: data-parallel replicas of a rank declare the
  // same list), else the previous rank.
  Status declareAll(const std::vector<Registration>& regs, IdMap& map) {
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

  // Checks one piece; sets *global to its tensor's id.
  Status checkPiece(const Registration& reg, const int32_t* map, size_t b, size_t p,
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
                             " is not declared (" + std::to_string(reg.tensors.size()) +
                             " tensors)");
    }
    const int32_t id = map[static_cast<size_t>(piece.tensor)];
    const Dims& shape = *tensors_[static_cast<size_t>(id)].shape;
    const int r = shape.rank;
    if (piece.box.offset.rank != r || piece.box.extent.rank != r || piece.local_strides.rank != r) {
      return invalidArgument(where() + ": box offset/extent/strides have ranks " +
                             std::to_string(piece.box.offset.rank) + "/" +
                             std::to_string(piece.box.extent.rank) + "/" +
                             std::to_string(piece.local_strides.rank) + ", the tensor's is " +
                             std::to_string(r));
    }
    if (!piece.box.fitsIn(shape)) {
      return invalidArgument(where() + ": box " + piece.box.toString() + " is outside shape " +
                             shape.toString());
    }
    *global = id;
    if (boxEmpty(piece.box)) return Status::ok();
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
                             (overflow ? std::string("overflow") : std::to_string(last)) +
                             "] (box " + piece.box.toString() + ", strides " +
                             piece.local_strides.toString() + ") are outside the buffer's " +
                             std::to_string(buf.num_elements) + " elements");
    }
    return Status::ok();
  }

  static PieceRef makeRef(const Piece& piece, int32_t rank, size_t buffer, DType dtype) {
    return {&piece, rank, static_cast<uint32_t>(buffer << 8) | static_cast<uint32_t>(dtype)};
  }

  // Validates every trainer piece, in scan order (rank, buffer, piece), and lists the non-empty
  // ones (scan_refs_, scan_ids_) with the dtypes each tensor is held in.
  Status checkTrainerPieces() {
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
          if (boxEmpty(buf.pieces[p].box)) continue;
          tensors_[static_cast<size_t>(id)].trainer_dtypes |= dtypeBit(buf.dtype);
          scan_refs_.push_back(makeRef(buf.pieces[p], static_cast<int32_t>(t), b, buf.dtype));
          scan_ids_.push_back(id);
        }
      }
    }
    return Status::ok();
  }

  // Buckets the listed trainer pieces of the wanted tensors by processing index (the passes read
  // trainer_refs_ in order), each tensor's sorted by box, ties in scan order. After
  // bucketRolloutPieces.
  void bucketTrainerPieces() {
    trainer_begin_.assign(proc_tensor_.size() + 1, 0);
    for (const int32_t id : scan_ids_) {
      const int32_t proc = tensors_[static_cast<size_t>(id)].proc;
      if (proc >= 0) ++trainer_begin_[static_cast<size_t>(proc) + 1];
    }
    for (size_t proc = 0; proc < proc_tensor_.size(); ++proc)
      trainer_begin_[proc + 1] += trainer_begin_[proc];
    trainer_refs_.resize(static_cast<size_t>(trainer_begin_.back()));
    {
      ScratchVector<int64_t> next(trainer_begin_.begin(), trainer_begin_.end() - 1);
      for (size_t i = 0; i < scan_refs_.size(); ++i) {
        const int32_t proc = tensors_[static_cast<size_t>(scan_ids_[i])].proc;
        if (proc < 0) continue;  // no rollout wants the tensor
        trainer_refs_[static_cast<size_t>(next[static_cast<size_t>(proc)]++)] = scan_refs_[i];
      }
    }
    release(scan_refs_);
    release(scan_ids_);
    auto byBox = [](const PieceRef& a, const PieceRef& b) {
      return boxLess(a.piece->box, b.piece->box);
    };
    for (size_t proc = 0; proc < proc_tensor_.size(); ++proc) {
      PieceRef* first = trainer_refs_.data() + trainer_begin_[proc];
      PieceRef* last = trainer_refs_.data() + trainer_begin_[proc + 1];
      if (!std::is_sorted(first, last, byBox)) std::stable_sort(first, last, byBox);
    }
  }

  // The error for rollout buffer `buf` of `reg`, whose dtype some trainer piece of tensor `id`
  // cannot convert into: names the first such piece in scan order.
  Status dtypeError(int32_t id, const Registration& reg, const LocalBuffer& buf) const {
    const TensorInfo& info = tensors_[static_cast<size_t>(id)];
    for (size_t t = 0; t < trainers_.size(); ++t) {
      for (const LocalBuffer& src : trainers_[t].buffers) {
        if (canConvert(src.dtype, buf.dtype)) continue;
        for (const Piece& piece : src.pieces) {
          if (boxEmpty(piece.box) || trainer_map_.of(t)[static_cast<size_t>(piece.tensor)] != id) {
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

  Status bucketRolloutPieces() {
    uint16_t convertible_from[kNumDTypes] = {};
    for (int to = 0; to < kNumDTypes; ++to) {
      for (int from = 0; from < kNumDTypes; ++from) {
        if (canConvert(static_cast<DType>(from), static_cast<DType>(to))) {
          convertible_from[to] |= dtypeBit(static_cast<DType>(from));
        }
      }
    }
    ScratchVector<int64_t> count(1, 0);
    for (size_t j = 0; j < rollouts_.size(); ++j) {
      const Registration& reg = rollouts_[j];
      for (size_t b = 0; b < reg.buffers.size(); ++b) {
        const LocalBuffer& buf = reg.buffers[b];
        for (size_t p = 0; p < buf.pieces.size(); ++p) {
          int32_t id = -1;
          WSYNC_RETURN_IF_ERROR(checkPiece(reg, rollout_map_.of(j), b, p, &id));
          if (boxEmpty(buf.pieces[p].box)) continue;
          TensorInfo& info = tensors_[static_cast<size_t>(id)];
          if (info.first_role != Role::kTrainer) {
            return mismatch(who(reg.role, reg.rank) + " wants tensor " + quoted(info.name) +
                            " (buffer " + quoted(buf.name) + "), which no trainer declares");
          }
          if (info.trainer_dtypes & ~convertible_from[static_cast<int>(buf.dtype)]) {
            return dtypeError(id, reg, buf);
          }
          if (info.proc < 0) {
            info.proc = static_cast<int32_t>(proc_tensor_.size());
            proc_tensor_.push_back(id);
            count.push_back(0);
          }
          ++count[static_cast<size_t>(info.proc) + 1];
        }
      }
    }
    for (size_t i = 1; i < count.size(); ++i)
      count[i] += count[i - 1];
    rollout_refs_.resize(static_cast<size_t>(count.back()));
    rollout_begin_ = count;
    for (size_t j = 0; j < rollouts_.size(); ++j) {
      const Registration& reg = rollouts_[j];
      for (size_t b = 0; b < reg.buffers.size(); ++b) {
        const LocalBuffer& buf = reg.buffers[b];
        for (const Piece& piece : buf.pieces) {
          if (boxEmpty(piece.box)) continue;
          const int32_t id = rollout_map_.of(j)[static_cast<size_t>(piece.tensor)];
          const size_t proc = static_cast<size_t>(tensors_[static_cast<size_t>(id)].proc);
          rollout_refs_[static_cast<size_t>(count[proc]++)] =
              makeRef(piece, static_cast<int32_t>(j), b, buf.dtype);
        }
      }
    }
    piece_mode_.assign(rollout_refs_.size(), 0);
    return Status::ok();
  }

  // ---- per-tensor sources ---------------------------------------------------------------------

  // Builds holders_, sources_ (sorted by box) and resolved_ (disjoint, sorted by offset) for the
  // tensor of processing index `proc`; the holders' row_major flags only when `for_groups`.
  void buildSources(size_t proc, bool for_groups) {
    holders_.clear();
    sources_.clear();
    resolved_.clear();
    const int32_t id = proc_tensor_[proc];
    const int64_t begin = trainer_begin_[proc];
    const int64_t end = trainer_begin_[proc + 1];
    const int32_t n = static_cast<int32_t>(end - begin);
    if (n == 0) return;
    // Sorted by box, ties in scan order (bucketTrainerPieces): a source's first holder is the
    // first in scan order.
    const PieceRef* refs = trainer_refs_.data() + begin;
    for (int32_t k = 0; k < n; ++k) {
      const PieceRef& ref = refs[k];
      if (k + 4 < n) __builtin_prefetch(&refs[k + 4].piece->box);
      const bool row_major = for_groups && rowMajorContiguous(*ref.piece);
      if (k == 0 || boxCompare(ref.piece->box, holders_.back().piece->box) != 0) {
        Source s;
        s.holder_begin = k;
        sources_.push_back(s);
      }
      Source& s = sources_.back();
      ++s.holder_count;
      s.row_major_count += row_major ? 1 : 0;
      holders_.push_back({ref.piece, ref.rank, ref.buffer(), ref.dtype(), row_major});
    }
    const int32_t num_sources = static_cast<int32_t>(sources_.size());
    auto boxOf = [this](int32_t s) -> const Box& {
      return holders_[static_cast<size_t>(sources_[static_cast<size_t>(s)].holder_begin)]
          .piece->box;
    };
    // Overlaps: sources are sorted by offset along dim 0, so only boxes starting before one's
    // end along dim 0 can overlap it.
    conflicts_.clear();
    if (tensors_[static_cast<size_t>(id)].shape->rank > 0) {
      for (int32_t a = 0; a < num_sources; ++a) {
        const Box& x = boxOf(a);
        for (int32_t b = a + 1; b < num_sources && boxOf(b).offset[0] < x.end(0); ++b) {
          if (!overlaps(x, boxOf(b))) continue;
          const bool a_wins = earlier(a, b);
          conflicts_.push_back(a_wins ? std::pair{b, a} : std::pair{a, b});  // (loser, winner)
        }
      }
    }
    if (conflicts_.empty()) {
      for (int32_t s = 0; s < num_sources; ++s)
        resolved_.push_back({&boxOf(s), s});
    } else {
      std::sort(conflicts_.begin(), conflicts_.end(),
                [this](const std::pair<int32_t, int32_t>& x, const std::pair<int32_t, int32_t>& y) {
                  if (x.first != y.first) return x.first < y.first;
                  return earlier(x.second, y.second);
                });
      size_t c = 0;
      fragment_pool_.clear();
      fragment_source_.clear();
      for (int32_t s = 0; s < num_sources; ++s) {
        fragments_.assign(1, boxOf(s));
        for (; c < conflicts_.size() && conflicts_[c].first == s; ++c) {
          const Box& winner = boxOf(conflicts_[c].second);
          scratch_.clear();
          for (const Box& f : fragments_) {
            if (overlaps(f, winner)) {
              subtractBox(f, winner, scratch_);
            } else {
              scratch_.push_back(f);
            }
          }
          fragments_.swap(scratch_);
        }
        for (const Box& f : fragments_) {
          fragment_pool_.push_back(f);
          fragment_source_.push_back(s);
        }
      }
      for (size_t f = 0; f < fragment_pool_.size(); ++f) {
        resolved_.push_back({&fragment_pool_[f], fragment_source_[f]});
      }
      std::sort(resolved_.begin(), resolved_.end(),
                [](const Resolved& x, const Resolved& y) { return offsetLess(*x.box, *y.box); });
    }
    prefix_end0_.resize(resolved_.size());
    int64_t most = std::numeric_limits<int64_t>::min();
    for (size_t k = 0; k < resolved_.size(); ++k) {
      if (resolved_[k].box->rank() > 0) most = std::max(most, resolved_[k].box->end(0));
      prefix_end0_[k] = most;
    }
  }

  // True when source a's first holder comes before source b's in scan order (rank, buffer, piece):
  // a owns what they both hold.
  bool earlier(int32_t a, int32_t b) const {
    const Holder& x = holders_[static_cast<size_t>(sources_[static_cast<size_t>(a)].holder_begin)];
    const Holder& y = holders_[static_cast<size_t>(sources_[static_cast<size_t>(b)].holder_begin)];
    if (x.rank != y.rank) return x.rank < y.rank;
    if (x.buffer != y.buffer) return x.buffer < y.buffer;
    return std::less<const Piece*>()(x.piece, y.piece);  // one buffer's pieces are one array
  }

  // The index in sources_ of the source box equal to `box`, or -1.
  int32_t findSource(const Box& box) const {
    auto it = std::lower_bound(
        sources_.begin(), sources_.end(), box, [this](const Source& s, const Box& b) {
          return boxLess(holders_[static_cast<size_t>(s.holder_begin)].piece->box, b);
        });
    if (it == sources_.end() || holders_[static_cast<size_t>(it->holder_begin)].piece->box != box) {
      return -1;
    }
    return static_cast<int32_t>(it - sources_.begin());
  }

  // Calls f(resolved index, intersection) for every resolved box meeting `box`, in offset order.
  template <typename F>
  void forEachIntersection(const Box& box, F&& f) const {
    size_t lo = 0;
    size_t hi = resolved_.size();
    if (box.rank() > 0) {
      const int64_t begin0 = box.offset[0];
      const int64_t end0 = box.end(0);
      lo = static_cast<size_t>(std::upper_bound(prefix_end0_.begin(), prefix_end0_.end(), begin0) -
                               prefix_end0_.begin());
      hi = static_cast<size_t>(
          std::lower_bound(resolved_.begin(), resolved_.end(), end0,
                           [](const Resolved& r, int64_t v) { return r.box->offset[0] < v; }) -
          resolved_.begin());
    }
    Box i;
    for (size_t k = lo; k < hi; ++k) {
      if (intersectInto(box, *resolved_[k].box, i)) f(static_cast<int32_t>(k), i);
    }
  }

  Status coverageError(int32_t id, const PieceRef& ref) {
    const Registration& reg = rollouts_[static_cast<size_t>(ref.rank)];
    const LocalBuffer& buf = reg.buffers[static_cast<size_t>(ref.buffer())];
    const Box& want = ref.piece->box;
    fragments_.assign(1, want);
    for (const Resolved& r : resolved_) {
      scratch_.clear();
      for (const Box& f : fragments_) {
        if (overlaps(f, *r.box)) {
          subtractBox(f, *r.box, scratch_);
        } else {
          scratch_.push_back(f);
        }
      }
      fragments_.swap(scratch_);
    }
    std::string missing = "part of it";
    if (!fragments_.empty()) {
      missing = fragments_.front().toString() + " (first element " +
                offsetString(fragments_.front()) + ")";
    }
    return mismatch(who(Role::kRollout, ref.rank) + " wants " + want.toString() + " of tensor " +
                    quoted(tensors_[static_cast<size_t>(id)].name) + " (buffer " +
                    quoted(buf.name) + "), but no trainer holds " + missing);
  }

  // ---- pass A: groups, coverage, fixed loads, choices, op counts of fixed pieces -------------

  int32_t addCands(const Source& s, bool row_major_only) {
    const int32_t begin = static_cast<int32_t>(cands_.size());
    for (int32_t h = s.holder_begin; h < s.holder_begin + s.holder_count; ++h) {
      const Holder& holder = holders_[static_cast<size_t>(h)];
      if (row_major_only && !holder.row_major) continue;
      cands_.push_back({holder.rank, holder.buffer, holder.piece->local_offset, holder.dtype});
    }
    return begin;
  }

  // The ops moving `box` from holder h into rollout piece `dst`: counted per (src, dst) rank pair
  // (kStore false; kRecord: also noted in counted_, pass A) or stored at the pair's next slot of
  // plan_.writes (kStore true). Call beginPiece() before each piece's first intersection.
  template <bool kStore, bool kRecord = false>
  void addOps(int32_t id, const Box& box, const Holder& h, const PieceRef& dst) {
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
              pair_count_[static_cast<size_t>(h.rank) * static_cast<size_t>(num_rollouts_) +
                          static_cast<size_t>(dst.rank)];
          if constexpr (kRecord)
            counted_.push_back(static_cast<size_t>(&pair - pair_count_.data()));
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

  void beginPiece() { ++piece_stamp_; }

  // The rollout pieces are scattered over the registrations: the passes fetch the one they will
  // reach kLookahead pieces later (its box and strides).
  static constexpr int64_t kLookahead = 3;
  void prefetchRollout(int64_t k) const {
    if (k >= static_cast<int64_t>(rollout_refs_.size())) return;
    const char* p = reinterpret_cast<const char*>(rollout_refs_[static_cast<size_t>(k)].piece);
    for (size_t line = 0; line < sizeof(Piece); line += 64)
      __builtin_prefetch(p + line);
  }

  // Tries to put the piece in a broadcast group; false -> it goes by writes.
  bool joinGroup(int32_t id, const PieceRef& ref) {
    const Piece& piece = *ref.piece;
    if (!options_.allow_broadcast || !rowMajorContiguous(piece)) return false;
    const int32_t s = findSource(piece.box);
    if (s < 0) return false;
    Source& source = sources_[static_cast<size_t>(s)];
    if (source.row_major_count == 0) return false;
    const int32_t replica = rollouts_[static_cast<size_t>(ref.rank)].replica;
    const DType dst_dtype = ref.dtype();
    const BufferSpan span{ref.rank, ref.buffer(), piece.local_offset};
    int32_t g = source.group_head;
    for (; g >= 0; g = group_next_[static_cast<size_t>(g)]) {
      const BroadcastGroup& group = plan_.groups[static_cast<size_t>(g)];
      if (group.replica == replica && group.dst_dtype == dst_dtype) break;
    }
    if (g >= 0) {
      BroadcastGroup& group = plan_.groups[static_cast<size_t>(g)];
      if (group.dst.back().rank == ref.rank) return false;  // this rank is in it already
      group.dst.push_back(span);
      return true;
    }
    g = static_cast<int32_t>(plan_.groups.size());
    BroadcastGroup group;
    group.tensor = id;
    group.box = piece.box;
    group.replica = replica;
    group.num_elements = piece.box.volume();
    group.dst_dtype = dst_dtype;
    group.dst.push_back(span);
    if (source.bcast_cands < 0) source.bcast_cands = addCands(source, /*row_major_only=*/true);
    const Cand& first = cands_[static_cast<size_t>(source.bcast_cands)];
    if (source.row_major_count == 1) {
      group.src = {first.rank, first.buffer, first.offset};
      group.src_dtype = first.dtype;
      load_[static_cast<size_t>(first.rank)] += group.num_elements * bytesOf(first.dtype);
    } else {
      items_.push_back({group.num_elements * bytesOf(first.dtype), group.num_elements,
                        source.bcast_cands, source.row_major_count, -(g + 1)});
    }
    plan_.groups.push_back(std::move(group));
    group_next_.push_back(source.group_head);
    source.group_head = g;
    return true;
  }

  Status analyze() {
    load_.assign(static_cast<size_t>(num_trainers_), 0);
    last_.assign(static_cast<size_t>(num_trainers_), LastOp{});
    pair_count_.assign(static_cast<size_t>(num_trainers_) * static_cast<size_t>(num_rollouts_), 0);
    if (options_.allow_broadcast) plan_.groups.reserve(rollout_refs_.size());  // at most one each
    for (size_t proc = 0; proc < proc_tensor_.size(); ++proc) {
      const int32_t id = proc_tensor_[proc];
      buildSources(proc, /*for_groups=*/options_.allow_broadcast);
      for (int64_t k = rollout_begin_[proc]; k < rollout_begin_[proc + 1]; ++k) {
        prefetchRollout(k + kLookahead);
        const PieceRef& ref = rollout_refs_[static_cast<size_t>(k)];
        const Piece& piece = *ref.piece;
        if (joinGroup(id, ref)) {
          piece_mode_[static_cast<size_t>(k)] = kGroupMode;
          continue;
        }
        // Counts the piece's ops while looking for choices; a piece with choices has its
        // counts taken back and is counted again once its senders are chosen.
        bool flexible = false;
        int64_t covered = 0;
        beginPiece();
        counted_.clear();
        forEachIntersection(piece.box, [&](int32_t r, const Box& box) {
          const int64_t volume = volumeOf(box);
          covered += volume;
          Source& s = sources_[static_cast<size_t>(resolved_[static_cast<size_t>(r)].source)];
          if (s.holder_count > 1) {
            flexible = true;
            if (s.write_cands < 0) s.write_cands = addCands(s, /*row_major_only=*/false);
            const Holder& first = holders_[static_cast<size_t>(s.holder_begin)];
            items_.push_back({volume * bytesOf(first.dtype), volume, s.write_cands, s.holder_count,
                              num_write_choices_++});
            max_write_holders_ = std::max(max_write_holders_, s.holder_count);
            return;
          }
          const Holder& h = holders_[static_cast<size_t>(s.holder_begin)];
          load_[static_cast<size_t>(h.rank)] += volume * bytesOf(h.dtype);
          if (!flexible) addOps<false, /*kRecord=*/true>(id, box, h, ref);
        });
        if (covered != volumeOf(piece.box)) return coverageError(id, ref);
        if (flexible) {
          for (const size_t pair : counted_)
            --pair_count_[pair];
        }
        piece_mode_[static_cast<size_t>(k)] = flexible ? kFlexWriteMode : kWriteMode;
      }
    }
    return Status::ok();
  }

  // ---- balancing ------------------------------------------------------------------------------

  // The order of items_ by decreasing bytes, ties in generation order. Items usually come in a
  // few distinct sizes: a counting sort over them; a comparison sort when there are many.
  ScratchVector<uint32_t> itemOrder() const {
    const size_t n = items_.size();
    ScratchVector<uint32_t> order(n);
    constexpr size_t kMaxDistinct = 4096;
    // Each item's size class in first-seen order (runs of equal sizes skip the hash lookup).
    std::unordered_map<int64_t, uint32_t> seen;  // bytes -> class (iteration order unused)
    std::vector<int64_t> sizes;
    ScratchVector<uint32_t> item_class(n);
    for (size_t i = 0; i < n && sizes.size() <= kMaxDistinct; ++i) {
      const int64_t bytes = items_[i].bytes;
      if (i > 0 && bytes == items_[i - 1].bytes) {
        item_class[i] = item_class[i - 1];
        continue;
      }
      const auto [it, inserted] = seen.emplace(bytes, static_cast<uint32_t>(sizes.size()));
      if (inserted) sizes.push_back(bytes);
      item_class[i] = it->second;
    }
    if (sizes.size() > kMaxDistinct) {
      for (size_t i = 0; i < n; ++i)
        order[i] = static_cast<uint32_t>(i);
      std::sort(order.begin(), order.end(), [this](uint32_t a, uint32_t b) {
        const int64_t x = items_[a].bytes;
        const int64_t y = items_[b].bytes;
        return x != y ? x > y : a < b;
      });
      return order;
    }
    // Classes by decreasing size, then a stable counting sort of the items by class.
    std::vector<uint32_t> by_size(sizes.size());
    for (size_t k = 0; k < by_size.size(); ++k)
      by_size[k] = static_cast<uint32_t>(k);
    std::sort(by_size.begin(), by_size.end(),
              [&sizes](uint32_t a, uint32_t b) { return sizes[a] > sizes[b]; });
    std::vector<uint32_t> rank_of(sizes.size());
    for (size_t k = 0; k < by_size.size(); ++k)
      rank_of[by_size[k]] = static_cast<uint32_t>(k);
    std::vector<size_t> start(sizes.size() + 1, 0);
    for (size_t i = 0; i < n; ++i)
      ++start[rank_of[item_class[i]] + 1];
    for (size_t k = 1; k < start.size(); ++k)
      start[k] += start[k - 1];
    for (size_t i = 0; i < n; ++i)
      order[start[rank_of[item_class[i]]]++] = static_cast<uint32_t>(i);
    return order;
  }

  void chooseSenders() {
    const ScratchVector<uint32_t> order = itemOrder();
    write_choice_.assign(static_cast<size_t>(num_write_choices_), max_write_holders_);
    for (const uint32_t index : order) {
      const Item& item = items_[index];
      int32_t best = item.cand_begin;
      for (int32_t c = item.cand_begin + 1; c < item.cand_begin + item.cand_count; ++c) {
        const Cand& x = cands_[static_cast<size_t>(c)];
        const Cand& y = cands_[static_cast<size_t>(best)];
        const int64_t lx = load_[static_cast<size_t>(x.rank)];
        const int64_t ly = load_[static_cast<size_t>(y.rank)];
        if (lx < ly || (lx == ly && x.rank < y.rank)) best = c;
      }
      const Cand& chosen = cands_[static_cast<size_t>(best)];
      load_[static_cast<size_t>(chosen.rank)] += item.elements * bytesOf(chosen.dtype);
      if (item.target >= 0) {
        write_choice_.set(static_cast<size_t>(item.target), best - item.cand_begin);
      } else {
        BroadcastGroup& group = plan_.groups[static_cast<size_t>(-(item.target + 1))];
        group.src = {chosen.rank, chosen.buffer, chosen.offset};
        group.src_dtype = chosen.dtype;
      }
    }
    release(items_);
    release(cands_);
    release(group_next_);
  }

  // ---- passes B and C: the ops of write pieces, with the choices made -------------------------

  // Counts (kStore false) or stores the ops of rollout piece `ref` of the tensor being processed,
  // taking flexible choices from write_choice_[*cursor...].
  template <bool kStore>
  void pieceOps(int32_t id, const PieceRef& ref, size_t* cursor) {
    beginPiece();
    forEachIntersection(ref.piece->box, [&](int32_t r, const Box& box) {
      const Source& s = sources_[static_cast<size_t>(resolved_[static_cast<size_t>(r)].source)];
      int32_t h = s.holder_begin;
      if (s.holder_count > 1) h += write_choice_.get((*cursor)++);
      addOps<kStore>(id, box, holders_[static_cast<size_t>(h)], ref);
    });
  }

  // Pass B: op counts of the pieces with choices.
  void countFlexible() {
    size_t cursor = 0;
    for (size_t proc = 0; proc < proc_tensor_.size(); ++proc) {
      const int64_t begin = rollout_begin_[proc];
      const int64_t end = rollout_begin_[proc + 1];
      bool any = false;
      for (int64_t k = begin; k < end && !any; ++k) {
        any = piece_mode_[static_cast<size_t>(k)] == kFlexWriteMode;
      }
      if (!any) continue;
      const int32_t id = proc_tensor_[proc];
      buildSources(proc, /*for_groups=*/false);
      for (int64_t k = begin; k < end; ++k) {
        if (piece_mode_[static_cast<size_t>(k)] != kFlexWriteMode) continue;
        prefetchRollout(k + kLookahead);
        pieceOps<false>(id, rollout_refs_[static_cast<size_t>(k)], &cursor);
      }
    }
  }

  // Pass C: every op into its (src_rank, dst_rank) slot range of plan_.writes.
  void emitWrites() {
    int64_t total = 0;
    for (int64_t& c : pair_count_) {
      const int64_t n = c;
      c = total;  // now the next free slot of the pair
      total += n;
    }
    plan_.writes.reserve(static_cast<size_t>(total));  // allocated, not yet touched
    adviseHugePages(plan_.writes.data(), static_cast<size_t>(total) * sizeof(WriteOp));
    plan_.writes.resize(static_cast<size_t>(total));
    RegionShapeIndex shape_index(plan_.shapes);
    shape_index_ = &shape_index;
    size_t cursor = 0;
    for (size_t proc = 0; proc < proc_tensor_.size(); ++proc) {
      const int64_t begin = rollout_begin_[proc];
      const int64_t end = rollout_begin_[proc + 1];
      bool any = false;
      for (int64_t k = begin; k < end && !any; ++k) {
        any = piece_mode_[static_cast<size_t>(k)] >= kWriteMode;
      }
      if (!any) continue;
      const int32_t id = proc_tensor_[proc];
      buildSources(proc, /*for_groups=*/false);
      for (int64_t k = begin; k < end; ++k) {
        if (piece_mode_[static_cast<size_t>(k)] < kWriteMode) continue;
        prefetchRollout(k + kLookahead);
        pieceOps<true>(id, rollout_refs_[static_cast<size_t>(k)], &cursor);
      }
    }
    shape_index_ = nullptr;
  }

  // Frees what the passes needed, before the plan's remaining parts are allocated.
  void releaseScratch() {
    release(trainer_begin_);
    release(trainer_refs_);
    release(rollout_begin_);
    release(rollout_refs_);
    release(piece_mode_);
    write_choice_.release();
    release(holders_);
    release(sources_);
    release(resolved_);
    release(fragment_pool_);
    release(fragment_source_);
    release(prefix_end0_);
    release(conflicts_);
    release(fragments_);
    release(scratch_);
    release(last_);
    release(counted_);
  }

  // Sorts each (src_rank, dst_rank) range by (dst_buffer, dst_offset) where needed, merges ops
  // that became adjacent, and counts write bytes.
  void finishWrites() {
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
        bytes += (w.oneD() ? w.run : plan_.numElements(w)) * bytesOf(w.dst_dtype);
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

  void finishPlan() {
    if (plan_.groups.capacity() - plan_.groups.size() > plan_.groups.size() / 8) {
      plan_.groups.shrink_to_fit();
    }
    plan_.tensors.reserve(tensors_.size());
    for (const TensorInfo& t : tensors_)
      plan_.tensors.push_back({std::string(t.name), *t.shape});
    PlanStats& stats = plan_.stats;
    stats.trainer_ranks = num_trainers_;
    stats.rollout_ranks = num_rollouts_;
    std::vector<int32_t> replicas;
    replicas.reserve(rollouts_.size());
    for (const Registration& r : rollouts_)
      replicas.push_back(r.replica);
    std::sort(replicas.begin(), replicas.end());
    stats.replicas =
        static_cast<int32_t>(std::unique(replicas.begin(), replicas.end()) - replicas.begin());
    for (const BroadcastGroup& g : plan_.groups) {
      stats.broadcast_bytes +=
          g.num_elements * bytesOf(g.dst_dtype) * static_cast<int64_t>(g.dst.size());
    }
    stats.bytes_total = stats.broadcast_bytes + stats.write_bytes;
    stats.bytes_per_sender = std::move(load_);
  }

  const std::vector<Registration>& trainers_;
  const std::vector<Registration>& rollouts_;
  const PlannerOptions options_;
  int64_t dtype_bytes_[kNumDTypes] = {};  // dtypeSize of each (valid) DType

  int64_t bytesOf(DType t) const { return dtype_bytes_[static_cast<size_t>(t)]; }
  int32_t num_trainers_ = 0;
  int32_t num_rollouts_ = 0;

  // Unified tensors and the name index (freed after unification).
  ScratchVector<TensorInfo> tensors_;
  ScratchVector<Slot> slots_;
  size_t slot_mask_ = 0;
  IdMap trainer_map_;  // local tensor index -> global id, per rank
  IdMap rollout_map_;

  // Non-empty pieces of the wanted tensors, bucketed by processing index (each in scan order).
  ScratchVector<PieceRef> scan_refs_;     // trainer pieces in scan order (until bucketing)
  ScratchVector<int32_t> scan_ids_;       // their global ids
  ScratchVector<int64_t> trainer_begin_;  // per processing index
  ScratchVector<PieceRef> trainer_refs_;
  ScratchVector<int32_t> proc_tensor_;  // processing index -> global id
  ScratchVector<int64_t> rollout_begin_;
  ScratchVector<PieceRef> rollout_refs_;
  ScratchVector<uint8_t> piece_mode_;  // PieceMode per rollout_refs_ entry

  // Scratch of the tensor being processed.
  std::vector<Holder> holders_;
  std::vector<Source> sources_;
  std::vector<Resolved> resolved_;
  std::vector<Box> fragment_pool_;  // resolved parts of source boxes that lost an overlap
  std::vector<int32_t> fragment_source_;
  std::vector<int64_t> prefix_end0_;
  std::vector<std::pair<int32_t, int32_t>> conflicts_;
  std::vector<Box> fragments_;
  std::vector<Box> scratch_;

  // Balancing.
  std::vector<int64_t> load_;  // bytes per trainer rank
  ScratchVector<Cand> cands_;
  ScratchVector<Item> items_;
  ChoiceList write_choice_;  // per flexible write intersection, in generation order
  int32_t num_write_choices_ = 0;
  int32_t max_write_holders_ = 1;      // the most holders of a source with write choices
  ScratchVector<int32_t> group_next_;  // per group: the next group of the same source box

  // Ops.
  std::vector<LastOp> last_;       // per trainer rank
  ScratchVector<size_t> counted_;  // pair_count_ entries counted for the current piece (pass A)
  uint64_t piece_stamp_ = 0;
  ScratchVector<int64_t> pair_count_;        // per (src_rank, dst_rank): op count, then slot cursor
  RegionShapeIndex* shape_index_ = nullptr;  // plan_.shapes' index (emit pass only)

  Plan plan_;
};

}  // namespace

Result<Plan> makePlan(const std::vector<Registration>& trainers,
                      const std::vector<Registration>& rollouts, const PlannerOptions& options) {
  PlanBuilder builder(trainers, rollouts, options);
  return builder.build();
}

RankPlan rankView(const Plan& plan, Role role, int32_t rank) {
  RankPlan view;
  view.role = role;
  view.rank = rank;
  view.stats = plan.stats;
  std::vector<int32_t> peers;
  if (role == Role::kTrainer) {
    for (const BroadcastGroup& g : plan.groups) {
      if (g.src.rank != rank) continue;
      view.groups.push_back(g);
      for (const BufferSpan& d : g.dst)
        peers.push_back(d.rank);
    }
    const auto first = std::partition_point(plan.writes.begin(), plan.writes.end(),
                                            [rank](const WriteOp& w) { return w.src_rank < rank; });
    const auto last = std::partition_point(first, plan.writes.end(),
                                           [rank](const WriteOp& w) { return w.src_rank == rank; });
    view.writes.assign(first, last);
    for (const WriteOp& w : view.writes) {
      if (peers.empty() || peers.back() != w.dst_rank) peers.push_back(w.dst_rank);
    }
  } else {
    for (const BroadcastGroup& g : plan.groups) {
      const auto it = std::lower_bound(g.dst.begin(), g.dst.end(), rank,
                                       [](const BufferSpan& s, int32_t r) { return s.rank < r; });
      if (it == g.dst.end() || it->rank != rank) continue;
      view.groups.push_back(g);
      peers.push_back(g.src.rank);
    }
    // Writes are sorted by (src_rank, dst_rank): find this rank's run in each source's block.
    auto block = plan.writes.begin();
    while (block != plan.writes.end()) {
      const int32_t src = block->src_rank;
      const auto block_end = std::partition_point(
          block, plan.writes.end(), [src](const WriteOp& w) { return w.src_rank == src; });
      const auto first = std::partition_point(
          block, block_end, [rank](const WriteOp& w) { return w.dst_rank < rank; });
      const auto last = std::partition_point(
          first, block_end, [rank](const WriteOp& w) { return w.dst_rank == rank; });
      if (first != last) {
        view.writes.insert(view.writes.end(), first, last);
        peers.push_back(src);
      }
      block = block_end;
    }
  }
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  view.peers = std::move(peers);

  // Local tensor table: the referenced tensors, in plan order.
  std::vector<int32_t> used;
  used.reserve(view.groups.size() + view.writes.size() / 4 + 1);
  for (const BroadcastGroup& g : view.groups)
    used.push_back(g.tensor);
  for (const WriteOp& w : view.writes) {
    if (used.empty() || used.back() != w.tensor) used.push_back(w.tensor);
  }
  std::sort(used.begin(), used.end());
  used.erase(std::unique(used.begin(), used.end()), used.end());
  view.tensors.reserve(used.size());
  for (const int32_t t : used)
    view.tensors.push_back(plan.tensors[static_cast<size_t>(t)]);
  auto local = [&used](int32_t t) {
    return static_cast<int32_t>(std::lower_bound(used.begin(), used.end(), t) - used.begin());
  };
  for (BroadcastGroup& g : view.groups)
    g.tensor = local(g.tensor);
  int32_t last_global = -1;
  int32_t last_local = -1;
  for (WriteOp& w : view.writes) {
    if (w.tensor != last_global) {
      last_global = w.tensor;
      last_local = local(w.tensor);
    }
    w.tensor = last_local;
  }
  renumberShapes(view.writes, plan.shapes, view.shapes);
  return view;
}

}  // namespace wsync
