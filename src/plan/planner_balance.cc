#include "plan/planner_balance.h"

#include <algorithm>
#include <unordered_map>

namespace wsync::plan_internal {
namespace {

// A stable counting sort of items by size class, largest class first: the order of `n` items
// whose classes are item_class[i] (indices into `sizes`, the distinct byte counts).
ScratchVector<uint32_t> orderByClass(const std::vector<int64_t>& sizes,
                                     const ScratchVector<uint32_t>& item_class, size_t n) {
  ScratchVector<uint32_t> order(n);
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

}  // namespace

// The order of items_ by decreasing bytes, ties in generation order. Items usually come in a few
// distinct sizes: a counting sort over them; a comparison sort when there are many.
ScratchVector<uint32_t> SenderBalancer::itemOrder() const {
  const size_t n = items_.size();
  constexpr size_t kMaxDistinct = 4096;
  // Each item's size class in first-seen order (runs of equal sizes skip the hash lookup).
  std::unordered_map<int64_t, uint32_t> seen;  // bytes -> class (iteration order unused)
  std::vector<int64_t> sizes;
  ScratchVector<uint32_t> item_class(n);
  for (size_t i = 0; i < n && sizes.size() <= kMaxDistinct; ++i) {
    const int64_t bytes = bytesOf(items_[i]);
    if (i > 0 && bytes == bytesOf(items_[i - 1])) {
      item_class[i] = item_class[i - 1];
      continue;
    }
    const auto [it, inserted] = seen.emplace(bytes, static_cast<uint32_t>(sizes.size()));
    if (inserted) sizes.push_back(bytes);
    item_class[i] = it->second;
  }
  if (sizes.size() <= kMaxDistinct) return orderByClass(sizes, item_class, n);
  ScratchVector<uint32_t> order(n);
  for (size_t i = 0; i < n; ++i)
    order[i] = static_cast<uint32_t>(i);
  std::sort(order.begin(), order.end(), [this](uint32_t a, uint32_t b) {
    const int64_t x = bytesOf(items_[a]);
    const int64_t y = bytesOf(items_[b]);
    return x != y ? x > y : a < b;
  });
  return order;
}

void SenderBalancer::choose(std::vector<BroadcastGroup>& groups) {
  const ScratchVector<uint32_t> order = itemOrder();
  write_choice_.assign(static_cast<size_t>(num_write_choices_), max_write_holders_);
  for (const uint32_t index : order) {
    const Item& item = items_[index];
    int32_t best = item.cand_begin;
    const int32_t cand_end = item.cand_begin + cand(item.cand_begin).list_size;
    for (int32_t c = item.cand_begin + 1; c < cand_end; ++c) {
      const Cand& x = cands_[static_cast<size_t>(c)];
      const Cand& y = cands_[static_cast<size_t>(best)];
      const int64_t lx = load_[static_cast<size_t>(x.rank)];
      const int64_t ly = load_[static_cast<size_t>(y.rank)];
      if (lx < ly || (lx == ly && x.rank < y.rank)) best = c;
    }
    const Cand& chosen = cands_[static_cast<size_t>(best)];
    load_[static_cast<size_t>(chosen.rank)] += item.elements * bytes_of_(chosen.dtype);
    if (item.target >= 0) {
      write_choice_.set(static_cast<size_t>(item.target), best - item.cand_begin);
    } else {
      BroadcastGroup& group = groups[static_cast<size_t>(-(item.target + 1))];
      group.src = {chosen.rank, chosen.buffer, chosen.offset};
      group.src_dtype = chosen.dtype;
    }
  }
  items_.freeMemory();
  cands_.freeMemory();
}

}  // namespace wsync::plan_internal
