#include "model_layouts.h"

#include <algorithm>
#include <utility>

#include "layout/builders.h"

namespace wsync {

namespace {

std::string str(int64_t v) {
  return std::to_string(v);
}

// The dimension a Megatron-style trainer TP splits for `kind`: 0 (column-parallel, vocab-parallel),
// 1 (row-parallel), -1 (replicated over TP).
int trainerTpDim(TensorKind kind) {
  switch (kind) {
    case TensorKind::kEmbed:
    case TensorKind::kLmHead:
    case TensorKind::kAttnQ:
    case TensorKind::kAttnK:
    case TensorKind::kAttnV:
    case TensorKind::kMlaQB:
    case TensorKind::kMlaKvB:
    case TensorKind::kMlpGate:
    case TensorKind::kMlpUp:
    case TensorKind::kSharedExpertGate:
    case TensorKind::kSharedExpertUp:
      return 0;
    case TensorKind::kAttnO:
    case TensorKind::kMlaO:
    case TensorKind::kMlpDown:
    case TensorKind::kSharedExpertDown:
      return 1;
    default:
      return -1;
  }
}

// One contiguous row-major buffer (named after the tensor) holding `box` of the tensor. Used only
// for TP x FSDP2 blocks, whose boxes are split along two dims (no builder covers that); an empty
// box gets a buffer with no piece, as the builders do.
Result<int32_t> addBlock(Registration& reg, const std::string& tensor, const Dims& shape,
                         DType dtype, const Box& box, MemoryKind memory) {
  const int32_t index = reg.declareTensor(tensor, shape);
  if (index < 0) {
    return mismatch("addBlock: tensor '" + tensor + "' already declared with another shape than " +
                    shape.toString());
  }
  LocalBuffer buffer;
  buffer.name = tensor;
  buffer.dtype = dtype;
  buffer.memory = memory;
  if (!box.empty()) {
    buffer.num_elements = box.volume();
    buffer.pieces.push_back({index, box, 0, rowMajorStrides(box.extent)});
  }
  reg.buffers.push_back(std::move(buffer));
  return static_cast<int32_t>(reg.buffers.size() - 1);
}

// Drops the registration's name-index cache and spare capacity: a Kimi-K2 trainer job has ~1.2M
// buffers over 256 registrations, and the cache alone would cost ~150 MB. Vectors already at their
// size are moved, not copied.
Registration slim(Registration&& r) {
  Registration out;
  out.role = r.role;
  out.rank = r.rank;
  out.replica = r.replica;
  out.tensors = std::move(r.tensors);
  out.buffers = std::move(r.buffers);
  if (out.tensors.capacity() > out.tensors.size()) out.tensors.shrink_to_fit();
  if (out.buffers.capacity() > out.buffers.size()) out.buffers.shrink_to_fit();
  return out;
}

struct LayerRange {
  int32_t begin = 0;
  int32_t end = 0;  // exclusive
};

LayerRange stageLayers(int num_layers, int pp, int stage) {
  const int q = num_layers / pp;
  const int r = num_layers % pp;
  auto begin = [&](int s) { return s * q + std::min(s, r); };
  return {begin(stage), begin(stage + 1)};
}

// FSDP2 Shard(0) (or FSDP1 flat range) of a dense tensor, after the trainer's TP split.
Result<int32_t> placeTrainerDense(Registration& reg, const ModelTensor& t,
                                  const TrainerLayout& layout, int parts, int index, int tp_rank) {
  if (layout.flat) {
    WSYNC_ASSIGN_OR_RETURN(IndexRange r,
                           splitRange(t.shape.product(), parts, index, SplitRule::kTorchChunk));
    return addFlatRange(reg, t.name, t.shape, layout.dtype, r.begin, r.begin + r.size,
                        layout.memory);
  }
  const int tp_dim = trainerTpDim(t.kind);
  if (layout.tp == 1 || tp_dim < 0) {
    return addSplit(reg, t.name, t.shape, layout.dtype, 0, parts, index, SplitRule::kTorchChunk,
                    layout.memory);
  }
  WSYNC_ASSIGN_OR_RETURN(Box box, splitBox(t.shape, tp_dim, layout.tp, tp_rank, SplitRule::kEven));
  WSYNC_ASSIGN_OR_RETURN(IndexRange rows,
                         splitRange(box.extent[0], parts, index, SplitRule::kTorchChunk));
  box.offset[0] += rows.begin;
  box.extent[0] = rows.size;
  return addBlock(reg, t.name, t.shape, layout.dtype, box, layout.memory);
}

}  // namespace

ModelLayouts defaultLayouts(const ModelConfig& config) {
  ModelLayouts l;
  if (config.name == "llama3-8b") {
    l.trainer.fsdp = 8;
    l.rollout.tp = 2;
    l.rollout.replicas = 4;
  } else if (config.name == "qwen3-30b-a3b") {
    l.trainer.ep = 8;
    l.rollout.tp = 4;
    l.rollout.ep = 4;
    l.rollout.replicas = 2;
  } else if (config.name == "kimi-k2") {
    l.trainer.fsdp = 16;
    l.trainer.pp = 2;
    l.trainer.ep = 8;
    l.trainer.dense_replicated_over_ep = true;
    l.rollout.ep = 32;
    l.rollout.replicas = 4;
  }
  return l;
}

std::string describeLayouts(const ModelLayouts& l) {
  const TrainerLayout& t = l.trainer;
  const RolloutLayout& r = l.rollout;
  const int dense_parts = t.dense_replicated_over_ep ? t.fsdp : t.fsdp * t.ep;
  std::string s = "trainer FSDP" + str(t.fsdp) + " x TP" + str(t.tp) + " x PP" + str(t.pp) +
                  " x EP" + str(t.ep) + " = " + str(t.ranks()) + " ranks (dense " +
                  (t.flat ? "flat ranges" : "Shard(0)") + " over " + str(dense_parts) + " ranks";
  if (t.dense_replicated_over_ep && t.ep > 1) s += ", replicated x" + str(t.ep);
  s += ", " + std::string(dtypeName(t.dtype)) + ") -> rollout TP" + str(r.tp) + " x EP" +
       str(r.ep) + " x " + str(r.replicas) + " replicas = " + str(r.ranks()) + " ranks (" +
       dtypeName(r.dtype) + ")";
  return s;
}

Status checkLayouts(const ModelSpec& model, const ModelLayouts& layouts) {
  const TrainerLayout& t = layouts.trainer;
  const RolloutLayout& r = layouts.rollout;
  const ModelConfig& c = model.config();
  if (t.fsdp < 1 || t.tp < 1 || t.pp < 1 || t.ep < 1) {
    return invalidArgument("trainer layout: fsdp " + str(t.fsdp) + ", tp " + str(t.tp) + ", pp " +
                           str(t.pp) + ", ep " + str(t.ep) + " must all be >= 1");
  }
  if (r.tp < 1 || r.ep < 1 || r.replicas < 1) {
    return invalidArgument("rollout layout: tp " + str(r.tp) + ", ep " + str(r.ep) + ", replicas " +
                           str(r.replicas) + " must all be >= 1");
  }
  if (t.pp > c.num_layers) {
    return invalidArgument("trainer pp " + str(t.pp) + " exceeds the " + str(c.num_layers) +
                           " layers of " + c.name);
  }
  if (c.num_experts > 0 && (t.ep > c.num_experts || r.ep > c.num_experts)) {
    return invalidArgument("trainer ep " + str(t.ep) + " / rollout ep " + str(r.ep) +
                           " exceed the " + str(c.num_experts) + " experts of " + c.name);
  }
  if (std::max(r.tp, r.ep) % std::min(r.tp, r.ep) != 0) {
    return invalidArgument("rollout tp " + str(r.tp) + " and ep " + str(r.ep) +
                           ": the larger must be a multiple of the smaller");
  }
  if (t.flat && t.tp > 1) {
    return invalidArgument("--flat (FSDP1 flat ranges) needs trainer tp 1, got tp " + str(t.tp));
  }
  const int64_t trainer_ranks = int64_t{t.fsdp} * t.tp * t.pp * t.ep;
  const int64_t rollout_ranks = int64_t{std::max(r.tp, r.ep)} * r.replicas;
  if (trainer_ranks > (1 << 20) || rollout_ranks > (1 << 20)) {
    return invalidArgument("layout too large: " + str(trainer_ranks) + " trainer / " +
                           str(rollout_ranks) + " rollout ranks (at most 2^20)");
  }
  return Status::ok();
}

Result<Registration> buildTrainerRegistration(const ModelSpec& model, const TrainerLayout& layout,
                                              int32_t rank) {
  const ModelConfig& c = model.config();
  if (rank < 0 || rank >= layout.ranks()) {
    return invalidArgument("trainer rank " + str(rank) + " outside [0, " + str(layout.ranks()) +
                           ")");
  }
  const int tp_rank = rank % layout.tp;
  const int fsdp_rank = (rank / layout.tp) % layout.fsdp;
  const int ep_rank = (rank / (layout.tp * layout.fsdp)) % layout.ep;
  const int stage = rank / (layout.tp * layout.fsdp * layout.ep);
  const LayerRange layers = stageLayers(c.num_layers, layout.pp, stage);
  const bool first_stage = stage == 0;
  const bool last_stage = stage == layout.pp - 1;
  const int dense_parts = layout.dense_replicated_over_ep ? layout.fsdp : layout.fsdp * layout.ep;
  const int dense_index =
      layout.dense_replicated_over_ep ? fsdp_rank : ep_rank * layout.fsdp + fsdp_rank;
  IndexRange experts;
  if (c.num_experts > 0) {
    WSYNC_ASSIGN_OR_RETURN(experts,
                           splitRange(c.num_experts, layout.ep, ep_rank, SplitRule::kBalanced));
  }
  const bool whole_experts = layout.fsdp == 1 && !layout.flat;

  // Pass 1: which tensors this rank holds (so the vectors are allocated once, at their size).
  std::vector<int32_t> held;
  const std::vector<ModelTensor>& all = model.tensors();
  for (size_t i = 0; i < all.size(); ++i) {
    const ModelTensor& t = all[i];
    if (t.layer < 0) {
      if (!(t.kind == TensorKind::kEmbed ? first_stage : last_stage)) continue;
    } else if (t.layer < layers.begin || t.layer >= layers.end) {
      continue;
    }
    if (t.expert >= 0 && (t.expert < experts.begin || t.expert >= experts.begin + experts.size)) {
      continue;
    }
    held.push_back(static_cast<int32_t>(i));
  }

  // Pass 2: one buffer per held tensor.
  Registration reg;
  reg.role = Role::kTrainer;
  reg.rank = rank;
  reg.tensors.reserve(held.size());
  reg.buffers.reserve(held.size());
  for (int32_t i : held) {
    const ModelTensor& t = all[static_cast<size_t>(i)];
    Result<int32_t> added = int32_t{0};
    if (t.expert >= 0) {
      if (whole_experts) {
        if (t.expert != experts.begin) continue;  // one call adds all local experts of this kind
        added = addSeparateExperts(reg, ModelSpec::expertTemplate(t.layer, t.kind),
                                   model.expertShape(t.kind), c.num_experts, layout.dtype,
                                   layout.ep, ep_rank, layout.memory);
      } else if (layout.flat) {
        Result<IndexRange> r =
            splitRange(t.shape.product(), layout.fsdp, fsdp_rank, SplitRule::kTorchChunk);
        if (!r.isOk()) return r.status().withContext("trainer rank " + str(rank) + ", " + t.name);
        added = addFlatRange(reg, t.name, t.shape, layout.dtype, r->begin, r->begin + r->size,
                             layout.memory);
      } else {
        added = addSplit(reg, t.name, t.shape, layout.dtype, 0, layout.fsdp, fsdp_rank,
                         SplitRule::kTorchChunk, layout.memory);
      }
    } else {
      added = placeTrainerDense(reg, t, layout, dense_parts, dense_index, tp_rank);
    }
    if (!added.isOk()) return added.status().withContext("trainer rank " + str(rank));
  }
  return slim(std::move(reg));
}

Result<Registration> buildRolloutRegistration(const ModelSpec& model, const RolloutLayout& layout,
                                              int32_t rank) {
  const ModelConfig& c = model.config();
  if (rank < 0 || rank >= layout.ranks()) {
    return invalidArgument("rollout rank " + str(rank) + " outside [0, " + str(layout.ranks()) +
                           ")");
  }
  const int size = layout.ranksPerReplica();
  const int local = rank % size;
  const int tp = layout.tp;
  const int tp_rank = local % tp;
  const int ep_rank = local % layout.ep;
  const DType dt = layout.dtype;
  const MemoryKind mem = layout.memory;

  Registration reg;
  reg.role = Role::kRollout;
  reg.rank = rank;
  reg.replica = rank / size;
  const std::vector<ModelTensor>& all = model.tensors();
  auto name = [&all](int32_t index) -> const std::string& {
    return all[static_cast<size_t>(index)].name;
  };
  for (const ModelTensor& t : all) {
    if (t.expert > 0) continue;  // one stack per (layer, kind), added at expert 0
    const std::string prefix =
        t.layer >= 0 ? "model.layers." + std::to_string(t.layer) + "." : std::string();
    Result<int32_t> added = int32_t{0};
    if (t.expert >= 0) {
      const char* stack = t.kind == TensorKind::kExpertGate ? "mlp.experts.w1_weight"
                          : t.kind == TensorKind::kExpertUp ? "mlp.experts.w3_weight"
                                                            : "mlp.experts.w2_weight";
      added =
          addStackedExperts(reg, prefix + stack, ModelSpec::expertTemplate(t.layer, t.kind),
                            model.expertShape(t.kind), c.num_experts, dt, layout.ep, ep_rank, mem);
    } else {
      switch (t.kind) {
        case TensorKind::kEmbed:
        case TensorKind::kLmHead:
          added = addSplit(reg, t.name, t.shape, dt, 0, tp, tp_rank, SplitRule::kBalanced, mem);
          break;
        case TensorKind::kAttnQ:
          if (c.mla) {
            added = addSplit(reg, t.name, t.shape, dt, 0, tp, tp_rank, SplitRule::kEven, mem);
          } else {
            added =
                addQkv(reg, prefix + "self_attn.qkv_proj.weight", t.name,
                       name(model.find(TensorKind::kAttnK, t.layer)),
                       name(model.find(TensorKind::kAttnV, t.layer)), c.num_heads, c.num_kv_heads,
                       c.head_dim, static_cast<int>(c.hidden), dt, tp, tp_rank, mem);
          }
          break;
        case TensorKind::kAttnK:
        case TensorKind::kAttnV:
        case TensorKind::kMlpUp:
        case TensorKind::kSharedExpertUp:
          continue;  // fused with q / gate
        case TensorKind::kMlaKvA:
          if (c.q_lora_rank > 0) continue;  // fused with q_a
          added = addReplicated(reg, t.name, t.shape, dt, mem);
          break;
        case TensorKind::kMlaQA: {
          const ModelTensor& kv_a =
              all[static_cast<size_t>(model.find(TensorKind::kMlaKvA, t.layer))];
          // vLLM's fused_qkv_a_proj: q_a_proj and kv_a_proj_with_mqa side by side, replicated.
          added = addFused(reg, prefix + "self_attn.fused_qkv_a_proj.weight",
                           {{t.name, t.shape}, {kv_a.name, kv_a.shape}}, 0, dt, 1, 0,
                           SplitRule::kEven, mem);
          break;
        }
        case TensorKind::kMlaQB:
        case TensorKind::kMlaKvB:
          added = addSplit(reg, t.name, t.shape, dt, 0, tp, tp_rank, SplitRule::kEven, mem);
          break;
        case TensorKind::kAttnO:
        case TensorKind::kMlaO:
        case TensorKind::kMlpDown:
        case TensorKind::kSharedExpertDown:
          added = addSplit(reg, t.name, t.shape, dt, 1, tp, tp_rank, SplitRule::kEven, mem);
          break;
        case TensorKind::kMlpGate:
          added = addGateUp(reg, prefix + "mlp.gate_up_proj.weight", t.name,
                            name(model.find(TensorKind::kMlpUp, t.layer)), t.shape[0], t.shape[1],
                            dt, tp, tp_rank, mem);
          break;
        case TensorKind::kSharedExpertGate:
          added = addGateUp(reg, prefix + "mlp.shared_experts.gate_up_proj.weight", t.name,
                            name(model.find(TensorKind::kSharedExpertUp, t.layer)), t.shape[0],
                            t.shape[1], dt, tp, tp_rank, mem);
          break;
        default:  // norms, q_norm / k_norm, q_a / kv_a layernorms, router, router bias
          added = addReplicated(reg, t.name, t.shape, dt, mem);
          break;
      }
    }
    if (!added.isOk()) return added.status().withContext("rollout rank " + str(rank));
  }
  return slim(std::move(reg));
}

Result<std::vector<Registration>> buildTrainerRegistrations(const ModelSpec& model,
                                                            const TrainerLayout& layout) {
  std::vector<Registration> out;
  out.reserve(static_cast<size_t>(layout.ranks()));
  for (int32_t r = 0; r < layout.ranks(); ++r) {
    WSYNC_ASSIGN_OR_RETURN(Registration reg, buildTrainerRegistration(model, layout, r));
    out.push_back(std::move(reg));
  }
  return out;
}

Result<std::vector<Registration>> buildRolloutRegistrations(const ModelSpec& model,
                                                            const RolloutLayout& layout) {
  std::vector<Registration> out;
  out.reserve(static_cast<size_t>(layout.ranks()));
  for (int32_t r = 0; r < layout.ranks(); ++r) {
    WSYNC_ASSIGN_OR_RETURN(Registration reg, buildRolloutRegistration(model, layout, r));
    out.push_back(std::move(reg));
  }
  return out;
}

void addLayoutOptions(cxxopts::Options& options) {
  // clang-format off
  options.add_options("layout")
      ("trainer-fsdp", "trainer FSDP (Shard(0)) group size", cxxopts::value<int>())
      ("trainer-tp", "trainer tensor-parallel size", cxxopts::value<int>())
      ("trainer-pp", "trainer pipeline stages", cxxopts::value<int>())
      ("trainer-ep", "trainer expert-parallel size", cxxopts::value<int>())
      ("dense-shard",
       "trainer dense tensors: Shard(0) over 'fsdp' (replicated over EP groups) or 'ep-fsdp'",
       cxxopts::value<std::string>())
      ("rollout-tp", "rollout tensor-parallel size", cxxopts::value<int>())
      ("rollout-ep", "rollout expert-parallel size", cxxopts::value<int>())
      ("replicas", "rollout engine replicas", cxxopts::value<int>())
      ("trainer-dtype", "trainer dtype (float32|bfloat16|...)", cxxopts::value<std::string>())
      ("rollout-dtype", "rollout dtype (float32|bfloat16|...)", cxxopts::value<std::string>())
      ("flat", "trainer uses FSDP1 flat ranges instead of Shard(0)");
  // clang-format on
}

Result<ModelLayouts> layoutsFromOptions(const ModelSpec& model,
                                        const cxxopts::ParseResult& parsed) {
  ModelLayouts l = defaultLayouts(model.config());
  auto setInt = [&parsed](const char* flag, int& field) {
    if (parsed.count(flag)) field = parsed[flag].as<int>();
  };
  setInt("trainer-fsdp", l.trainer.fsdp);
  setInt("trainer-tp", l.trainer.tp);
  setInt("trainer-pp", l.trainer.pp);
  setInt("trainer-ep", l.trainer.ep);
  setInt("rollout-tp", l.rollout.tp);
  setInt("rollout-ep", l.rollout.ep);
  setInt("replicas", l.rollout.replicas);
  if (parsed.count("dense-shard")) {
    const std::string v = parsed["dense-shard"].as<std::string>();
    if (v != "fsdp" && v != "ep-fsdp") {
      return invalidArgument("--dense-shard must be 'fsdp' or 'ep-fsdp', got '" + v + "'");
    }
    l.trainer.dense_replicated_over_ep = v == "fsdp";
  }
  for (auto [flag, field] : {std::pair<const char*, DType*>{"trainer-dtype", &l.trainer.dtype},
                             std::pair<const char*, DType*>{"rollout-dtype", &l.rollout.dtype}}) {
    if (!parsed.count(flag)) continue;
    const std::string v = parsed[flag].as<std::string>();
    const std::optional<DType> d = parseDType(v);
    if (!d) return invalidArgument(std::string("--") + flag + ": unknown dtype '" + v + "'");
    *field = *d;
  }
  if (parsed.count("flat")) l.trainer.flat = parsed["flat"].as<bool>();
  WSYNC_RETURN_IF_ERROR(checkLayouts(model, l));
  return l;
}

}  // namespace wsync
