// Model layouts: the Registrations that real trainers (FSDP2 / TP / PP / EP) and inference engines
// (vLLM-style TP with fused qkv / gate_up, EP with stacked experts, DP attention) would send to the
// coordinator for a zoo model (src/models/model_zoo.h). Built with the layout builders
// (src/layout/builders.h). Used by the planner benchmark, the sync benchmark and the demo.
// Thread-safety: pure functions; distinct calls may run on distinct threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "common/status.h"
#include "layout/dtype.h"
#include "layout/registration.h"
#include "model_zoo.h"

namespace wsync {

// The trainer's parallelism. Trainer rank = ((stage * ep + ep_rank) * fsdp + fsdp_rank) * tp +
// tp_rank. PP stage s holds a contiguous block of layers (earlier stages take the remainder), the
// embedding on stage 0 and the final norm + lm_head on the last stage.
//  - Routed expert e of a layer lives on EP group kBalanced(e over ep); each of its tensors is
//    Shard(0) over the group's fsdp ranks (kTorchChunk), whole when fsdp == 1 (addSeparateExperts);
//    experts are not TP-split (expert TP = 1) and are replicated over the tp ranks.
//  - Dense tensors: TP split first (Megatron: column-parallel q/k/v/gate/up/q_b/kv_b/embed/lm_head
//    along dim 0, row-parallel o/down along dim 1, norms/router/q_a/kv_a replicated, kEven), then
//    FSDP2 Shard(0) of the TP-local block (kTorchChunk) over the dense shard group: the stage's
//    ep*fsdp ranks, or (dense_replicated_over_ep) its fsdp ranks with one copy per EP group.
//  - flat: FSDP1 flat ranges (addFlatRange, torch.chunk of the flattened tensor) instead of
//    Shard(0); needs tp == 1.
struct TrainerLayout {
  int fsdp = 1;
  int tp = 1;
  int pp = 1;
  int ep = 1;
  bool dense_replicated_over_ep = false;
  bool flat = false;
  DType dtype = DType::kBFloat16;
  MemoryKind memory = MemoryKind::kHost;
  int ranks() const { return fsdp * tp * pp * ep; }
};

// The rollout engine's parallelism: `replicas` engine instances of max(tp, ep) ranks each
// (the larger must be a multiple of the smaller). Within a replica, rank i has tp_rank = i % tp and
// ep_rank = i % ep. Dense tensors follow vLLM TP (qkv_proj via addQkv, gate_up_proj via addGateUp,
// fused_qkv_a_proj for MLA, o/down row-parallel along dim 1, embed/lm_head vocab-parallel along
// dim 0, norms/router/q_norm/k_norm replicated); with tp == 1 every rank holds every dense tensor
// (DP attention). Routed experts: three stacks per layer (w1 = gate, w3 = up, w2 = down) holding
// this EP rank's kBalanced block of experts (addStackedExperts).
struct RolloutLayout {
  int tp = 1;
  int ep = 1;
  int replicas = 1;
  DType dtype = DType::kBFloat16;
  MemoryKind memory = MemoryKind::kHost;
  int ranksPerReplica() const { return tp > ep ? tp : ep; }
  int ranks() const { return ranksPerReplica() * replicas; }
};

struct ModelLayouts {
  TrainerLayout trainer;
  RolloutLayout rollout;
};

// The default layouts of a zoo model (by config.name): llama3-8b FSDP8 -> TP2 x 4;
// qwen3-30b-a3b EP8 (dense Shard(0) over the 8) -> TP4/EP4 x 2; kimi-k2 FSDP16 x PP2 x EP8 (dense
// replicated over EP) -> EP32 x 4 (DP attention). Other names: 1 trainer, 1 rollout rank.
ModelLayouts defaultLayouts(const ModelConfig& config);
// "trainer FSDP16 x PP2 x EP8 [dense over fsdp] bfloat16 -> rollout TP1 x EP32 x 4 replicas ..."
std::string describeLayouts(const ModelLayouts& layouts);
// Checks the layouts against the model: positive sizes, pp <= layers, ep <= experts for MoE,
// rollout tp/ep nesting, --flat with tp == 1. INVALID_ARGUMENT naming the numbers otherwise.
Status checkLayouts(const ModelSpec& model, const ModelLayouts& layouts);

// One rank's registration (rank in [0, layout.ranks())). The returned Registration holds no
// name-index cache (so a vector of them costs only its tensors and buffers).
Result<Registration> buildTrainerRegistration(const ModelSpec& model, const TrainerLayout& layout,
                                              int32_t rank);
Result<Registration> buildRolloutRegistration(const ModelSpec& model, const RolloutLayout& layout,
                                              int32_t rank);
// All ranks, in rank order. Errors name the rank and the tensor.
Result<std::vector<Registration>> buildTrainerRegistrations(const ModelSpec& model,
                                                            const TrainerLayout& layout);
Result<std::vector<Registration>> buildRolloutRegistrations(const ModelSpec& model,
                                                            const RolloutLayout& layout);

// Command-line flags shared by the benchmarks and the demo: --trainer-fsdp, --trainer-tp,
// --trainer-pp, --trainer-ep, --dense-shard (fsdp|ep-fsdp), --rollout-tp, --rollout-ep,
// --replicas, --trainer-dtype, --rollout-dtype (float32|bfloat16|...), --flat. Unset flags keep
// the model's defaults.
void addLayoutOptions(cxxopts::Options& options);
// defaultLayouts(model) with the flags of `parsed` applied, then checkLayouts.
Result<ModelLayouts> layoutsFromOptions(const ModelSpec& model, const cxxopts::ParseResult& parsed);

}  // namespace wsync
