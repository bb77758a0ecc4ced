// Seeded property tests of the planner over the layouts real trainers and engines use (built with
// src/layout/builders.h) and over random overlapping boxes with padded layouts. Every case: the
// plan succeeds, the reference executor verifies every wanted element bit for bit (written exactly
// once, nothing else written), planning again gives an identical plan, and the plan's structural
// invariants hold (write order, group receivers, stats, rank views).
//
// The base seed is printed; WSYNC_TEST_SEED=<n> replays another one. A failing case reports its
// scenario, index and description.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "layout/builders.h"
#include "layout/registration.h"
#include "plan/plan.h"
#include "plan/planner.h"
#include "support/reference_executor.h"

namespace wsync {
namespace {

// ---- randomness ------------------------------------------------------------------------------

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t baseSeed() {
  static const uint64_t seed = [] {
    uint64_t s = 20261201;
    if (const char* env = std::getenv("WSYNC_TEST_SEED"); env != nullptr && *env != '\0') {
      s = std::strtoull(env, nullptr, 0);
    }
    std::printf("[ seed     ] WSYNC_TEST_SEED=%llu\n", static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

// A small portable generator (the standard distributions differ between libraries).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() { return mix64(state_++); }
  // Uniform in [lo, hi].
  int64_t uniform(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
  }
  int uniformInt(int lo, int hi) { return static_cast<int>(uniform(lo, hi)); }
  bool chance(int percent) { return uniform(0, 99) < percent; }
  template <typename T>
  const T& pick(const std::vector<T>& v) {
    return v[static_cast<size_t>(uniform(0, static_cast<int64_t>(v.size()) - 1))];
  }

 private:
  uint64_t state_;
};

// ---- case plumbing ---------------------------------------------------------------------------

struct Case {
  std::vector<Registration> trainers;
  std::vector<Registration> rollouts;
  PlannerOptions options;
  std::string description;
  bool expect_no_writes = false;  // every rollout piece has an identical row-major trainer box
  bool fully_replicated = false;  // every trainer holds every tensor whole
};

#define BUILD(expr)                                                        \
  do {                                                                     \
    const auto build_result_ = (expr);                                     \
    if (!build_result_.isOk()) {                                           \
      ADD_FAILURE() << #expr << ": " << build_result_.status().toString(); \
      return false;                                                        \
    }                                                                      \
  } while (0)

std::vector<Registration> makeRanks(Role role, int n, int per_replica = 1) {
  std::vector<Registration> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    v[static_cast<size_t>(i)].role = role;
    v[static_cast<size_t>(i)].rank = i;
    if (role == Role::kRollout) v[static_cast<size_t>(i)].replica = i / per_replica;
  }
  return v;
}

Dims randomShape(Rng& rng, int min_rank = 1, int max_rank = 4) {
  static const int64_t kMaxExtent[] = {0, 24, 10, 6, 4};
  const int rank = rng.uniformInt(min_rank, max_rank);
  Dims d = Dims::zeros(rank);
  for (int i = 0; i < rank; ++i)
    d[i] = rng.uniform(1, kMaxExtent[rank]);
  return d;
}

struct DTypePair {
  DType trainer;
  DType rollout;
};

DTypePair randomDTypes(Rng& rng) {
  static const std::vector<DTypePair> kPairs = {
      {DType::kFloat32, DType::kBFloat16},  {DType::kFloat32, DType::kBFloat16},
      {DType::kFloat32, DType::kFloat16},   {DType::kFloat32, DType::kFloat32},
      {DType::kBFloat16, DType::kBFloat16}, {DType::kBFloat16, DType::kFloat32},
      {DType::kFloat16, DType::kBFloat16},  {DType::kInt32, DType::kInt32},
      {DType::kInt64, DType::kInt64},       {DType::kUInt8, DType::kUInt8},
      {DType::kBool, DType::kBool},         {DType::kInt16, DType::kInt16},
      {DType::kInt8, DType::kInt8}};
  return rng.pick(kPairs);
}

std::string describeDTypes(const DTypePair& d) {
  return std::string(dtypeName(d.trainer)) + "->" + dtypeName(d.rollout);
}

SplitRule randomRule(Rng& rng) {
  return rng.chance(50) ? SplitRule::kBalanced : SplitRule::kTorchChunk;
}

// Sorted random cut points splitting [0, total) into `parts` ranges (some may be empty).
std::vector<int64_t> randomCuts(Rng& rng, int64_t total, int parts) {
  std::vector<int64_t> cuts{0, total};
  for (int i = 1; i < parts; ++i)
    cuts.push_back(rng.uniform(0, total));
  std::sort(cuts.begin(), cuts.end());
  return cuts;
}

// Random TP/DTensor splits of `tensors` for `replicas` x `tp` rollout ranks (same dim and rule per
// tensor on every rank).
bool addRolloutSplits(Rng& rng, Case& c, const std::vector<FlatMember>& tensors, DType dtype,
                      int replicas, int tp) {
  c.rollouts = makeRanks(Role::kRollout, replicas * tp, tp);
  for (const FlatMember& t : tensors) {
    const int dim = rng.uniformInt(0, t.shape.rank - 1);
    const SplitRule rule = randomRule(rng);
    for (int r = 0; r < replicas * tp; ++r) {
      BUILD(addSplit(c.rollouts[static_cast<size_t>(r)], t.tensor, t.shape, dtype, dim, tp, r % tp,
                     rule));
    }
  }
  c.description += " -> rollout TP" + std::to_string(tp) + " x " + std::to_string(replicas);
  return true;
}

std::vector<FlatMember> randomTensors(Rng& rng, int max_count, int min_rank = 1) {
  std::vector<FlatMember> v;
  const int n = rng.uniformInt(1, max_count);
  for (int i = 0; i < n; ++i) {
    v.push_back({"model.layers." + std::to_string(i) + ".w", randomShape(rng, min_rank)});
  }
  return v;
}

// ---- scenarios -------------------------------------------------------------------------------

// FSDP flat ranges (per tensor, or one flat parameter over all tensors) -> TP splits.
bool fsdpFlatToTp(Rng& rng, Case& c) {
  const DTypePair dt = randomDTypes(rng);
  const std::vector<FlatMember> tensors = randomTensors(rng, 3);
  const int fsdp = rng.uniformInt(1, 6);
  const int dp = rng.uniformInt(1, 2);
  const bool flat_param = rng.chance(50);
  c.trainers = makeRanks(Role::kTrainer, fsdp * dp);
  int64_t total = 0;
  for (const FlatMember& m : tensors)
    total += m.shape.product();
  const std::vector<int64_t> cuts = randomCuts(rng, total, fsdp);
  for (int d = 0; d < dp; ++d) {
    for (int f = 0; f < fsdp; ++f) {
      Registration& reg = c.trainers[static_cast<size_t>(d * fsdp + f)];
      if (flat_param) {
        BUILD(addFlatParameter(reg, "flat_param", tensors, dt.trainer, cuts[static_cast<size_t>(f)],
                               cuts[static_cast<size_t>(f) + 1]));
        continue;
      }
      for (const FlatMember& m : tensors) {
        const int64_t n = m.shape.product();
        const int64_t chunk = (n + fsdp - 1) / fsdp;
        BUILD(addFlatRange(reg, m.tensor, m.shape, dt.trainer, std::min(n, f * chunk),
                           std::min(n, (f + 1) * chunk)));
      }
    }
  }
  c.description = describeDTypes(dt) + " trainer FSDP" + std::to_string(fsdp) + " x DP" +
                  std::to_string(dp) + (flat_param ? " flat param" : " flat ranges");
  return addRolloutSplits(rng, c, tensors, dt.rollout, rng.uniformInt(1, 4), rng.uniformInt(1, 4));
}

// TP along one dim (with DP copies) -> TP along the same or another dim; equal splits broadcast.
bool tpToTp(Rng& rng, Case& c) {
  const DTypePair dt = randomDTypes(rng);
  const std::vector<FlatMember> tensors = randomTensors(rng, 3);
  static const std::vector<int> kTp = {1, 2, 4};
  const int tp_a = rng.pick(kTp);
  const int dp = rng.uniformInt(1, 3);
  const int tp_b = rng.chance(40) ? tp_a : rng.pick(kTp);
  const int replicas = rng.uniformInt(1, 4);
  c.trainers = makeRanks(Role::kTrainer, tp_a * dp);
  c.rollouts = makeRanks(Role::kRollout, tp_b * replicas, tp_b);
  bool all_same = tp_a == tp_b;
  for (const FlatMember& t : tensors) {
    const int dim_a = rng.uniformInt(0, t.shape.rank - 1);
    const int dim_b = rng.chance(60) ? dim_a : rng.uniformInt(0, t.shape.rank - 1);
    all_same = all_same && dim_a == dim_b;
    for (int r = 0; r < tp_a * dp; ++r) {
      BUILD(addSplit(c.trainers[static_cast<size_t>(r)], t.tensor, t.shape, dt.trainer, dim_a, tp_a,
                     r % tp_a));
    }
    for (int r = 0; r < tp_b * replicas; ++r) {
      BUILD(addSplit(c.rollouts[static_cast<size_t>(r)], t.tensor, t.shape, dt.rollout, dim_b, tp_b,
                     r % tp_b));
    }
  }
  c.expect_no_writes = all_same && c.options.allow_broadcast;
  c.description = describeDTypes(dt) + " trainer TP" + std::to_string(tp_a) + " x DP" +
                  std::to_string(dp) + " -> rollout TP" + std::to_string(tp_b) + " x " +
                  std::to_string(replicas) + (all_same ? " (same splits)" : "");
  return true;
}

// DTensor Shard(0) (torch.chunk) -> a column split (the last dim).
bool shard0ToColumns(Rng& rng, Case& c) {
  const DTypePair dt = randomDTypes(rng);
  const std::vector<FlatMember> tensors = randomTensors(rng, 3, /*min_rank=*/2);
  const int fsdp = rng.uniformInt(1, 6);
  const int dp = rng.uniformInt(1, 2);
  const int tp = rng.uniformInt(1, 4);
  const int replicas = rng.uniformInt(1, 3);
  c.trainers = makeRanks(Role::kTrainer, fsdp * dp);
  c.rollouts = makeRanks(Role::kRollout, tp * replicas, tp);
  for (const FlatMember& t : tensors) {
    for (int r = 0; r < fsdp * dp; ++r) {
      BUILD(addSplit(c.trainers[static_cast<size_t>(r)], t.tensor, t.shape, dt.trainer, 0, fsdp,
                     r % fsdp, SplitRule::kTorchChunk));
    }
    for (int r = 0; r < tp * replicas; ++r) {
      BUILD(addSplit(c.rollouts[static_cast<size_t>(r)], t.tensor, t.shape, dt.rollout,
                     t.shape.rank - 1, tp, r % tp, SplitRule::kBalanced));
    }
  }
  c.description = describeDTypes(dt) + " trainer Shard(0) x" + std::to_string(fsdp) + " x DP" +
                  std::to_string(dp) + " -> rollout columns TP" + std::to_string(tp) + " x " +
                  std::to_string(replicas);
  return true;
}

// Experts: trainer EP (separate tensors, optionally Shard(0) over an FSDP group) -> rollout EP with
// stacked expert buffers.
bool experts(Rng& rng, Case& c) {
  const DTypePair dt = randomDTypes(rng);
  const int num_experts = rng.uniformInt(2, 32);
  const int ep_a = rng.uniformInt(1, std::min(8, num_experts));
  const int fsdp = rng.uniformInt(1, 3);
  const int dp = rng.uniformInt(1, 2);
  static const std::vector<int> kEpB = {1, 2, 4, 8, 16, 32};
  const int ep_b = rng.pick(kEpB);
  const int replicas = rng.uniformInt(1, 3);
  const Dims w1 = randomShape(rng, 1, 3);
  Dims w2 = w1;
  std::reverse(w2.v.begin(), w2.v.begin() + w2.rank);
  const std::vector<FlatMember> kinds = {{"model.layers.1.mlp.experts.{}.w1", w1},
                                         {"model.layers.1.mlp.experts.{}.w2", w2}};
  c.trainers = makeRanks(Role::kTrainer, ep_a * fsdp * dp);
  for (int d = 0; d < dp; ++d) {
    for (int e = 0; e < ep_a; ++e) {
      for (int f = 0; f < fsdp; ++f) {
        Registration& reg = c.trainers[static_cast<size_t>((d * ep_a + e) * fsdp + f)];
        for (const FlatMember& kind : kinds) {
          if (fsdp == 1) {
            BUILD(
                addSeparateExperts(reg, kind.tensor, kind.shape, num_experts, dt.trainer, ep_a, e));
            continue;
          }
          const Result<IndexRange> local = splitRange(num_experts, ep_a, e, SplitRule::kBalanced);
          BUILD(local);
          for (int64_t x = local->begin; x < local->begin + local->size; ++x) {
            BUILD(addSplit(reg, expertName(kind.tensor, static_cast<int>(x)), kind.shape,
                           dt.trainer, 0, fsdp, f, SplitRule::kTorchChunk));
          }
        }
      }
    }
  }
  c.rollouts = makeRanks(Role::kRollout, ep_b * replicas, ep_b);
  for (int r = 0; r < ep_b * replicas; ++r) {
    for (const FlatMember& kind : kinds) {
      const std::string stack = kind.tensor.substr(kind.tensor.size() - 2);
      BUILD(addStackedExperts(c.rollouts[static_cast<size_t>(r)], stack, kind.tensor, kind.shape,
                              num_experts, dt.rollout, ep_b, r % ep_b));
    }
  }
  c.description = describeDTypes(dt) + " " + std::to_string(num_experts) + " experts " +
                  w1.toString() + ": trainer EP" + std::to_string(ep_a) + " x FSDP" +
                  std::to_string(fsdp) + " x DP" + std::to_string(dp) + " -> rollout EP" +
                  std::to_string(ep_b) + " stacked x " + std::to_string(replicas);
  return true;
}

// Attention with GQA: trainer q/k/v (TP split, one flat parameter, or replicated) -> fused qkv.
bool qkv(Rng& rng, Case& c) {
  const DTypePair dt = randomDTypes(rng);
  static const std::vector<int> kKv = {1, 2, 4};
  const int kv = rng.pick(kKv);
  const int heads = kv * rng.uniformInt(1, 3);
  const int head_dim = rng.uniformInt(1, 4);
  const int hidden = rng.uniformInt(1, 8);
  std::vector<int> tps;
  for (const int t : {1, 2, 3, 4, 6, 8, 12}) {
    if (heads % t == 0 && (t <= kv ? kv % t == 0 : t % kv == 0)) tps.push_back(t);
  }
  const int tp = rng.pick(tps);
  const int replicas = rng.uniformInt(1, 3);
  const std::vector<FlatMember> parts = {
      {"attn.q_proj.weight", {int64_t{heads} * head_dim, hidden}},
      {"attn.k_proj.weight", {int64_t{kv} * head_dim, hidden}},
      {"attn.v_proj.weight", {int64_t{kv} * head_dim, hidden}}};
  const int layout = rng.uniformInt(0, 2);
  const int n = layout == 2 ? rng.uniformInt(1, 3) : rng.uniformInt(1, 5);
  c.trainers = makeRanks(Role::kTrainer, n);
  int64_t total = 0;
  for (const FlatMember& p : parts)
    total += p.shape.product();
  const std::vector<int64_t> cuts = randomCuts(rng, total, n);
  for (int r = 0; r < n; ++r) {
    Registration& reg = c.trainers[static_cast<size_t>(r)];
    if (layout == 1) {
      BUILD(addFlatParameter(reg, "flat_param", parts, dt.trainer, cuts[static_cast<size_t>(r)],
                             cuts[static_cast<size_t>(r) + 1]));
      continue;
    }
    for (const FlatMember& p : parts) {
      if (layout == 0) {
        BUILD(addSplit(reg, p.tensor, p.shape, dt.trainer, 0, n, r, SplitRule::kBalanced));
      } else {
        BUILD(addReplicated(reg, p.tensor, p.shape, dt.trainer));
      }
    }
  }
  c.rollouts = makeRanks(Role::kRollout, tp * replicas, tp);
  for (int r = 0; r < tp * replicas; ++r) {
    BUILD(addQkv(c.rollouts[static_cast<size_t>(r)], "attn.qkv_proj.weight", parts[0].tensor,
                 parts[1].tensor, parts[2].tensor, heads, kv, head_dim, hidden, dt.rollout, tp,
                 r % tp));
  }
  static const char* kLayouts[] = {"TP split", "flat param", "replicated"};
  c.description = describeDTypes(dt) + " qkv heads " + std::to_string(heads) + "/" +
                  std::to_string(kv) + " x " + std::to_string(head_dim) + ", hidden " +
                  std::to_string(hidden) + ": trainer " + kLayouts[layout] + " x" +
                  std::to_string(n) + " -> rollout TP" + std::to_string(tp) + " x " +
                  std::to_string(replicas);
  return true;
}

// gate and up (TP split along either dim, flat ranges, or a flat parameter) -> fused gate_up.
bool gateUp(Rng& rng, Case& c) {
  const DTypePair dt = randomDTypes(rng);
  const int tp = rng.uniformInt(1, 4);
  const int64_t intermediate = tp * rng.uniformInt(1, 4);
  const int64_t hidden = rng.uniformInt(1, 8);
  const int replicas = rng.uniformInt(1, 3);
  const std::vector<FlatMember> parts = {{"mlp.gate_proj.weight", {intermediate, hidden}},
                                         {"mlp.up_proj.weight", {intermediate, hidden}}};
  const int layout = rng.uniformInt(0, 2);
  const int n = rng.uniformInt(1, 4);
  const int dim = rng.uniformInt(0, 1);
  c.trainers = makeRanks(Role::kTrainer, n);
  const std::vector<int64_t> cuts = randomCuts(rng, 2 * intermediate * hidden, n);
  for (int r = 0; r < n; ++r) {
    Registration& reg = c.trainers[static_cast<size_t>(r)];
    if (layout == 2) {
      BUILD(addFlatParameter(reg, "flat_param", parts, dt.trainer, cuts[static_cast<size_t>(r)],
                             cuts[static_cast<size_t>(r) + 1]));
      continue;
    }
    for (const FlatMember& p : parts) {
      if (layout == 0) {
        BUILD(addSplit(reg, p.tensor, p.shape, dt.trainer, dim, n, r, SplitRule::kBalanced));
      } else {
        const int64_t numel = p.shape.product();
        const int64_t chunk = (numel + n - 1) / n;
        BUILD(addFlatRange(reg, p.tensor, p.shape, dt.trainer, std::min(numel, r * chunk),
                           std::min(numel, (r + 1) * chunk)));
      }
    }
  }
  c.rollouts = makeRanks(Role::kRollout, tp * replicas, tp);
  for (int r = 0; r < tp * replicas; ++r) {
    BUILD(addGateUp(c.rollouts[static_cast<size_t>(r)], "mlp.gate_up_proj.weight", parts[0].tensor,
                    parts[1].tensor, intermediate, hidden, dt.rollout, tp, r % tp));
  }
  static const char* kLayouts[] = {"TP split", "flat ranges", "flat param"};
  c.description = describeDTypes(dt) + " gate_up [" + std::to_string(intermediate) + ", " +
                  std::to_string(hidden) + "]: trainer " + kLayouts[layout] + " x" +
                  std::to_string(n) + " -> rollout TP" + std::to_string(tp) + " x " +
                  std::to_string(replicas);
  return true;
}

// Pure data parallelism: every trainer holds every tensor whole; the senders must be balanced.
bool replicatedTrainers(Rng& rng, Case& c) {
  const DTypePair dt = randomDTypes(rng);
  const std::vector<FlatMember> tensors = randomTensors(rng, 6);
  const int n = rng.uniformInt(2, 8);
  c.trainers = makeRanks(Role::kTrainer, n);
  for (Registration& reg : c.trainers) {
    for (const FlatMember& t : tensors)
      BUILD(addReplicated(reg, t.tensor, t.shape, dt.trainer));
  }
  c.fully_replicated = true;
  c.description = describeDTypes(dt) + " " + std::to_string(tensors.size()) +
                  " tensors replicated on " + std::to_string(n) + " trainers";
  return addRolloutSplits(rng, c, tensors, dt.rollout, rng.uniformInt(1, 4), rng.uniformInt(1, 4));
}

// Appends one piece of `box` (padded layout, random offset) to buffer `buf` of `reg`, growing it.
void appendPaddedPiece(Rng& rng, Registration& reg, LocalBuffer& buf, int32_t tensor,
                       const Box& box) {
  Piece p;
  p.tensor = tensor;
  p.box = box;
  p.local_strides = Dims::zeros(box.rank());
  int64_t stride = 1;
  for (int d = box.rank() - 1; d >= 0; --d) {
    p.local_strides[d] = stride;
    const int64_t pad = rng.chance(30) ? rng.uniform(1, 2) : 0;
    stride *= box.extent[d] + pad;
  }
  p.local_offset = buf.num_elements + (rng.chance(30) ? rng.uniform(1, 3) : 0);
  int64_t last = p.local_offset;
  for (int d = 0; d < box.rank(); ++d)
    last += (box.extent[d] - 1) * p.local_strides[d];
  buf.num_elements = last + 1 + (rng.chance(20) ? 2 : 0);
  buf.pieces.push_back(p);
  (void)reg;
}

// The cells of a random grid over `shape` (0-2 cuts per dim).
std::vector<Box> randomGrid(Rng& rng, const Dims& shape) {
  std::vector<std::vector<int64_t>> cuts(static_cast<size_t>(shape.rank));
  for (int d = 0; d < shape.rank; ++d) {
    std::set<int64_t> c{0, shape[d]};
    const int k = rng.uniformInt(0, 2);
    for (int i = 0; i < k; ++i)
      c.insert(rng.uniform(0, shape[d]));
    cuts[static_cast<size_t>(d)].assign(c.begin(), c.end());
  }
  std::vector<Box> cells{Box{Dims::zeros(shape.rank), Dims::zeros(shape.rank)}};
  for (int d = 0; d < shape.rank; ++d) {
    std::vector<Box> next;
    const auto& c = cuts[static_cast<size_t>(d)];
    for (const Box& b : cells) {
      for (size_t i = 0; i + 1 < c.size(); ++i) {
        Box x = b;
        x.offset[d] = c[i];
        x.extent[d] = c[i + 1] - c[i];
        next.push_back(x);
      }
    }
    cells.swap(next);
  }
  return cells;
}

// Random boxes: trainers hold a random grid (cells on 1-2 ranks) plus random overlapping boxes,
// rollouts another grid; padded strides and gaps on both sides; several pieces per buffer.
bool randomBoxes(Rng& rng, Case& c) {
  const DTypePair dt = randomDTypes(rng);
  const int n = rng.uniformInt(1, 5);
  const int per_replica = rng.uniformInt(1, 3);
  const int replicas = rng.uniformInt(1, 3);
  c.trainers = makeRanks(Role::kTrainer, n);
  c.rollouts = makeRanks(Role::kRollout, per_replica * replicas, per_replica);
  const int num_tensors = rng.uniformInt(1, 2);
  // Buffers: "b0", "b1" per rank; a piece goes to a random one.
  auto bufferOf = [&](Registration& reg, DType dtype) -> LocalBuffer& {
    if (reg.buffers.empty() || rng.chance(40)) {
      LocalBuffer b;
      b.name = "b" + std::to_string(reg.buffers.size());
      b.dtype = dtype;
      reg.buffers.push_back(b);
    }
    return reg
        .buffers[static_cast<size_t>(rng.uniform(0, static_cast<int64_t>(reg.buffers.size()) - 1))];
  };
  for (int t = 0; t < num_tensors; ++t) {
    const std::string name = "t" + std::to_string(t);
    const Dims shape = randomShape(rng);
    for (const Box& cell : randomGrid(rng, shape)) {
      const int copies = rng.chance(30) ? 2 : 1;
      for (int k = 0; k < copies; ++k) {
        Registration& reg = c.trainers[static_cast<size_t>(rng.uniform(0, n - 1))];
        const int32_t id = reg.declareTensor(name, shape);
        appendPaddedPiece(rng, reg, bufferOf(reg, dt.trainer), id, cell);
      }
    }
    const int extra = rng.uniformInt(0, 2);
    for (int k = 0; k < extra; ++k) {
      Box b = Box::whole(shape);
      for (int d = 0; d < shape.rank; ++d) {
        b.offset[d] = rng.uniform(0, shape[d] - 1);
        b.extent[d] = rng.uniform(1, shape[d] - b.offset[d]);
      }
      Registration& reg = c.trainers[static_cast<size_t>(rng.uniform(0, n - 1))];
      const int32_t id = reg.declareTensor(name, shape);
      appendPaddedPiece(rng, reg, bufferOf(reg, dt.trainer), id, b);
    }
    for (int r = 0; r < replicas; ++r) {
      for (const Box& cell : randomGrid(rng, shape)) {
        Registration& reg =
            c.rollouts[static_cast<size_t>(r * per_replica + rng.uniform(0, per_replica - 1))];
        const int32_t id = reg.declareTensor(name, shape);
        appendPaddedPiece(rng, reg, bufferOf(reg, dt.rollout), id, cell);
      }
    }
  }
  c.description = describeDTypes(dt) + " random boxes: " + std::to_string(n) + " trainers -> " +
                  std::to_string(per_replica) + " x " + std::to_string(replicas) + " rollouts";
  return true;
}

// ---- checks ----------------------------------------------------------------------------------

void checkInvariants(const Case& c, const Plan& plan) {
  // Writes sorted by (src_rank, dst_rank, dst_buffer, dst_offset), each non-empty.
  for (size_t i = 0; i < plan.writes.size(); ++i) {
    const WriteOp& w = plan.writes[i];
    ASSERT_GT(plan.numElements(w), 0) << "writes[" << i << "]";
    if (i == 0) continue;
    const WriteOp& p = plan.writes[i - 1];
    const auto key = [](const WriteOp& x) {
      return std::make_tuple(x.src_rank, x.dst_rank, x.dst_buffer, x.dst_offset);
    };
    ASSERT_LT(key(p), key(w)) << "writes[" << i << "] out of order";
  }
  // Groups: receivers sorted, distinct, of the group's replica; boxes consistent.
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const BroadcastGroup& group = plan.groups[g];
    ASSERT_FALSE(c.options.allow_broadcast == false) << "group without allow_broadcast";
    ASSERT_EQ(group.num_elements, group.box.volume()) << "groups[" << g << "]";
    ASSERT_FALSE(group.dst.empty());
    for (size_t k = 0; k < group.dst.size(); ++k) {
      const int32_t r = group.dst[k].rank;
      ASSERT_EQ(c.rollouts[static_cast<size_t>(r)].replica, group.replica);
      if (k > 0) ASSERT_LT(group.dst[k - 1].rank, r);
    }
  }
  if (c.expect_no_writes) EXPECT_TRUE(plan.writes.empty()) << plan.writes.size() << " writes";

  // Stats.
  int64_t wanted_bytes = 0;
  for (const Registration& r : c.rollouts) {
    for (const LocalBuffer& b : r.buffers) {
      for (const Piece& p : b.pieces) {
        wanted_bytes += p.box.volume() * static_cast<int64_t>(dtypeSize(b.dtype));
      }
    }
  }
  const PlanStats& s = plan.stats;
  EXPECT_EQ(s.bytes_total, wanted_bytes);
  EXPECT_EQ(s.bytes_total, s.broadcast_bytes + s.write_bytes);
  EXPECT_EQ(s.trainer_ranks, static_cast<int32_t>(c.trainers.size()));
  EXPECT_EQ(s.rollout_ranks, static_cast<int32_t>(c.rollouts.size()));
  std::set<int32_t> replicas;
  for (const Registration& r : c.rollouts)
    replicas.insert(r.replica);
  EXPECT_EQ(s.replicas, static_cast<int32_t>(replicas.size()));
  std::vector<int64_t> sent(c.trainers.size(), 0);
  for (const BroadcastGroup& g : plan.groups) {
    sent[static_cast<size_t>(g.src.rank)] +=
        g.num_elements * static_cast<int64_t>(dtypeSize(g.src_dtype));
  }
  for (const WriteOp& w : plan.writes) {
    sent[static_cast<size_t>(w.src_rank)] +=
        plan.numElements(w) * static_cast<int64_t>(dtypeSize(w.src_dtype));
  }
  EXPECT_EQ(s.bytes_per_sender, sent);
  if (c.fully_replicated && !sent.empty()) {
    // Greedy least-loaded assignment: no two senders differ by more than the largest transfer.
    int64_t largest = 0;
    for (const Registration& r : c.rollouts) {
      for (const LocalBuffer& b : r.buffers) {
        for (const Piece& p : b.pieces) {
          largest = std::max(
              largest,
              p.box.volume() * static_cast<int64_t>(dtypeSize(c.trainers[0].buffers[0].dtype)));
        }
      }
    }
    const auto [lo, hi] = std::minmax_element(sent.begin(), sent.end());
    EXPECT_LE(*hi - *lo, largest) << "senders unbalanced";
  }

  // Rank views: every write in exactly one view per role (with the same region), groups where
  // the rank takes part, tensor indices mapping to the same names.
  size_t trainer_writes = 0;
  for (int32_t t = 0; t < static_cast<int32_t>(c.trainers.size()); ++t) {
    const RankPlan v = rankView(plan, Role::kTrainer, t);
    const size_t first = trainer_writes;  // a trainer's writes are one range of plan.writes
    trainer_writes += v.writes.size();
    ASSERT_LE(trainer_writes, plan.writes.size());
    for (size_t i = 0; i < v.writes.size(); ++i) {
      const WriteOp& w = v.writes[i];
      ASSERT_EQ(w.src_rank, t);
      ASSERT_LT(static_cast<size_t>(w.tensor), v.tensors.size());
      ASSERT_EQ(v.region(w), plan.region(plan.writes[first + i]))
          << "trainer " << t << " write " << i;
    }
    for (const BroadcastGroup& g : v.groups)
      ASSERT_EQ(g.src.rank, t);
  }
  size_t rollout_writes = 0;
  for (int32_t r = 0; r < static_cast<int32_t>(c.rollouts.size()); ++r) {
    const RankPlan v = rankView(plan, Role::kRollout, r);
    rollout_writes += v.writes.size();
    std::vector<const WriteOp*> expected;
    for (const WriteOp& w : plan.writes) {
      if (w.dst_rank == r) expected.push_back(&w);
    }
    ASSERT_EQ(v.writes.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      ASSERT_EQ(v.tensors[static_cast<size_t>(v.writes[i].tensor)].name,
                plan.tensors[static_cast<size_t>(expected[i]->tensor)].name);
      ASSERT_EQ(v.region(v.writes[i]), plan.region(*expected[i]));
    }
    size_t groups = 0;
    for (const BroadcastGroup& g : plan.groups) {
      for (const BufferSpan& d : g.dst)
        groups += d.rank == r ? 1 : 0;
    }
    ASSERT_EQ(v.groups.size(), groups);
  }
  EXPECT_EQ(trainer_writes, plan.writes.size());
  EXPECT_EQ(rollout_writes, plan.writes.size());
}

using Scenario = bool (*)(Rng&, Case&);

// Runs `cases` random cases of `scenario`, alternating allow_broadcast.
void runScenario(const char* name, Scenario scenario, int cases) {
  uint64_t name_hash = 0;
  for (const char* p = name; *p != '\0'; ++p)
    name_hash = name_hash * 131 + static_cast<uint8_t>(*p);
  size_t writes = 0;
  size_t groups = 0;
  for (int i = 0; i < cases; ++i) {
    Rng rng(mix64(baseSeed() ^ mix64(name_hash)) + static_cast<uint64_t>(i) * 0x1000193);
    Case c;
    c.options.allow_broadcast = rng.chance(70);
    if (!scenario(rng, c)) {
      ADD_FAILURE() << name << " case " << i << " could not be built";
      return;
    }
    SCOPED_TRACE(std::string(name) + " case " + std::to_string(i) + " (" + c.description +
                 (c.options.allow_broadcast ? ", broadcast" : ", writes only") + ")");
    Result<Plan> plan = makePlan(c.trainers, c.rollouts, c.options);
    ASSERT_TRUE(plan.isOk()) << plan.status().toString();
    const Status verified = executeAndVerify(c.trainers, c.rollouts, *plan);
    ASSERT_TRUE(verified.isOk()) << verified.toString();
    Result<Plan> again = makePlan(c.trainers, c.rollouts, c.options);
    ASSERT_TRUE(again.isOk()) << again.status().toString();
    const Status same = comparePlans(*plan, *again);
    ASSERT_TRUE(same.isOk()) << same.toString();
    checkInvariants(c, *plan);
    if (::testing::Test::HasFailure()) return;
    writes += plan->writes.size();
    groups += plan->groups.size();
  }
  std::printf("[ cases    ] %s: %d cases, %zu writes, %zu groups\n", name, cases, writes, groups);
}

TEST(PlanProperty, FsdpFlatToTp) {
  runScenario("fsdp_flat_to_tp", fsdpFlatToTp, 6000);
}
TEST(PlanProperty, TpToTp) {
  runScenario("tp_to_tp", tpToTp, 5000);
}
TEST(PlanProperty, Shard0ToColumns) {
  runScenario("shard0_to_columns", shard0ToColumns, 4000);
}
TEST(PlanProperty, Experts) {
  runScenario("experts", experts, 3000);
}
TEST(PlanProperty, QkvWithGqa) {
  runScenario("qkv", qkv, 4000);
}
TEST(PlanProperty, GateUp) {
  runScenario("gate_up", gateUp, 3000);
}
TEST(PlanProperty, ReplicatedTrainersAreBalanced) {
  runScenario("replicated", replicatedTrainers, 3000);
}
TEST(PlanProperty, RandomOverlappingBoxes) {
  runScenario("random_boxes", randomBoxes, 12000);
}

}  // namespace
}  // namespace wsync
