// rankView: one rank's part of a finished plan (contract in planner.h).
#include <algorithm>
#include <utility>
#include <vector>

#include "plan/planner.h"
#include "plan/planner_internal.h"

namespace wsync {
namespace {

// The groups trainer `rank` sends and its writes (one range of the plan's, which are sorted by
// src_rank); appends the rollout ranks it sends to to *peers.
void addTrainerPart(const Plan& plan, int32_t rank, RankPlan& view, std::vector<int32_t>* peers) {
  for (const BroadcastGroup& g : plan.groups) {
    if (g.src.rank != rank) continue;
    view.groups.push_back(g);
    for (const BufferSpan& d : g.dst)
      peers->push_back(d.rank);
  }
  const auto first = std::partition_point(plan.writes.begin(), plan.writes.end(),
                                          [rank](const WriteOp& w) { return w.src_rank < rank; });
  const auto last = std::partition_point(first, plan.writes.end(),
                                         [rank](const WriteOp& w) { return w.src_rank == rank; });
  view.writes.assign(first, last);
  for (const WriteOp& w : view.writes) {
    if (peers->empty() || peers->back() != w.dst_rank) peers->push_back(w.dst_rank);
  }
}

// The groups rollout `rank` receives and the writes into it; appends the trainer ranks it
// receives from to *peers.
void addRolloutPart(const Plan& plan, int32_t rank, RankPlan& view, std::vector<int32_t>* peers) {
  for (const BroadcastGroup& g : plan.groups) {
    const auto it = std::lower_bound(g.dst.begin(), g.dst.end(), rank,
                                     [](const BufferSpan& s, int32_t r) { return s.rank < r; });
    if (it == g.dst.end() || it->rank != rank) continue;
    view.groups.push_back(g);
    peers->push_back(g.src.rank);
  }
  // Writes are sorted by (src_rank, dst_rank): find this rank's run in each source's block.
  auto block = plan.writes.begin();
  while (block != plan.writes.end()) {
    const int32_t src = block->src_rank;
    const auto block_end = std::partition_point(
        block, plan.writes.end(), [src](const WriteOp& w) { return w.src_rank == src; });
    const auto first = std::partition_point(block, block_end,
                                            [rank](const WriteOp& w) { return w.dst_rank < rank; });
    const auto last = std::partition_point(first, block_end,
                                           [rank](const WriteOp& w) { return w.dst_rank == rank; });
    if (first != last) {
      view.writes.insert(view.writes.end(), first, last);
      peers->push_back(src);
    }
    block = block_end;
  }
}

// The view's own tensor table (the referenced tensors, in plan order), its groups and writes
// pointed at it.
void localizeTensors(const Plan& plan, RankPlan& view) {
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
}

}  // namespace

RankPlan rankView(const Plan& plan, Role role, int32_t rank) {
  RankPlan view;
  view.role = role;
  view.rank = rank;
  view.stats = plan.stats;
  std::vector<int32_t> peers;
  if (role == Role::kTrainer) {
    addTrainerPart(plan, rank, view, &peers);
  } else {
    addRolloutPart(plan, rank, view, &peers);
  }
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  view.peers = std::move(peers);
  localizeTensors(plan, view);
  plan_internal::renumberShapes(view.writes, plan.shapes, view.shapes);
  return view;
}

}  // namespace wsync
