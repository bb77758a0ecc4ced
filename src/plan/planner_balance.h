// Sender balancing (private to src/plan, planner_internal.h). Part of makePlan's contract
// (planner.h): single-holder transfers are charged first, then every choice (a group's sender, a
// write intersection's holder) in decreasing bytes (ties: generation order) goes to the
// least-loaded holder (ties: lowest rank). Bytes are counted in the source dtype.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "plan/planner_internal.h"
#include "plan/planner_sources.h"

namespace wsync::plan_internal {

// A sender alternative for a balancing choice; the candidates of one choice are a list, whose
// first entry holds its length.
struct Cand {
  int32_t rank;
  int32_t buffer;
  int64_t offset;
  DType dtype;
  int32_t list_size;  // on a list's first entry: the candidates in the list
};

// A balancing choice: `elements` to send from one of the candidates of the list at cand_begin.
// Its sort key is elements * the size of that list's first candidate's dtype. target >= 0: write
// choice number `target`; target < 0: group -(target + 1). 16 bytes: Kimi-K2 has 1.75M.
struct Item {
  int64_t elements;
  int32_t cand_begin;
  int32_t target;
};

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
  void freeMemory() { release(bytes_); }

 private:
  ScratchVector<uint8_t> bytes_;
  size_t width_ = 4;
};

// The load of every trainer rank, the choices still open, and (after choose) the choices made.
class SenderBalancer {
 public:
  explicit SenderBalancer(int32_t num_trainers) : load_(static_cast<size_t>(num_trainers), 0) {}

  // Adds the holders of a source (row-major ones only when `row_major_only`) as candidates;
  // returns the index of the first.
  int32_t addCands(const Holder* holders, int32_t count, bool row_major_only) {
    const int32_t begin = static_cast<int32_t>(cands_.size());
    for (int32_t h = 0; h < count; ++h) {
      const Holder& holder = holders[h];
      if (row_major_only && !holder.row_major) continue;
      cands_.push_back({holder.rank, holder.buffer, holder.piece->local_offset, holder.dtype, 0});
    }
    if (cands_.size() > static_cast<size_t>(begin)) {
      cands_[static_cast<size_t>(begin)].list_size = static_cast<int32_t>(cands_.size()) - begin;
    }
    return begin;
  }
  const Cand& cand(int32_t c) const { return cands_[static_cast<size_t>(c)]; }

  // A transfer with one possible sender: charged now.
  void charge(int32_t rank, int64_t bytes) { load_[static_cast<size_t>(rank)] += bytes; }

  // A choice of group `group`'s sender among the candidates listed at `cand_begin`.
  void addGroupChoice(int64_t elements, int32_t cand_begin, int32_t group) {
    items_.push_back({elements, cand_begin, -(group + 1)});
  }
  // The next write choice (numbered in the order they are added) among the candidates listed at
  // `cand_begin`.
  void addWriteChoice(int64_t elements, int32_t cand_begin) {
    items_.push_back({elements, cand_begin, num_write_choices_++});
    max_write_holders_ = std::max(max_write_holders_, cand(cand_begin).list_size);
  }

  // Makes every choice: sets the groups' senders, and writeChoice(i) for every write choice.
  // Frees the items and candidates.
  void choose(std::vector<BroadcastGroup>& groups);

  // The index of the chosen holder among its source's holders, for write choice `i`.
  int32_t writeChoice(size_t i) const { return write_choice_.get(i); }
  void freeChoices() { write_choice_.freeMemory(); }

  // Bytes per trainer rank (what it sends in its own dtype); the balancer is done after.
  std::vector<int64_t> takeLoads() { return std::move(load_); }

 private:
  ScratchVector<uint32_t> itemOrder() const;
  // The sort key of `item`: its bytes in the dtype of its first candidate.
  int64_t bytesOf(const Item& item) const {
    return item.elements * bytes_of_(cand(item.cand_begin).dtype);
  }

  DTypeBytes bytes_of_;
  std::vector<int64_t> load_;  // bytes per trainer rank
  MappedArray<Cand> cands_;
  MappedArray<Item> items_;
  ChoiceList write_choice_;  // per write choice, in generation order
  int32_t num_write_choices_ = 0;
  int32_t max_write_holders_ = 1;  // the most holders of a source with write choices
};

}  // namespace wsync::plan_internal
