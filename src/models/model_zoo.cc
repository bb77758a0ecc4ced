#include "model_zoo.h"

#include <utility>

namespace wsync {

const char* tensorKindName(TensorKind kind) {
  switch (kind) {
    case TensorKind::kEmbed:
      return "embed";
    case TensorKind::kNorm:
      return "norm";
    case TensorKind::kAttnQ:
      return "attn_q";
    case TensorKind::kAttnK:
      return "attn_k";
    case TensorKind::kAttnV:
      return "attn_v";
    case TensorKind::kAttnO:
      return "attn_o";
    case TensorKind::kAttnQNorm:
      return "attn_q_norm";
    case TensorKind::kAttnKNorm:
      return "attn_k_norm";
    case TensorKind::kMlaQA:
      return "mla_q_a";
    case TensorKind::kMlaQANorm:
      return "mla_q_a_norm";
    case TensorKind::kMlaQB:
      return "mla_q_b";
    case TensorKind::kMlaKvA:
      return "mla_kv_a";
    case TensorKind::kMlaKvANorm:
      return "mla_kv_a_norm";
    case TensorKind::kMlaKvB:
      return "mla_kv_b";
    case TensorKind::kMlaO:
      return "mla_o";
    case TensorKind::kMlpGate:
      return "mlp_gate";
    case TensorKind::kMlpUp:
      return "mlp_up";
    case TensorKind::kMlpDown:
      return "mlp_down";
    case TensorKind::kSharedExpertGate:
      return "shared_expert_gate";
    case TensorKind::kSharedExpertUp:
      return "shared_expert_up";
    case TensorKind::kSharedExpertDown:
      return "shared_expert_down";
    case TensorKind::kExpertGate:
      return "expert_gate";
    case TensorKind::kExpertUp:
      return "expert_up";
    case TensorKind::kExpertDown:
      return "expert_down";
    case TensorKind::kRouter:
      return "router";
    case TensorKind::kRouterBias:
      return "router_bias";
    case TensorKind::kLmHead:
      return "lm_head";
  }
  return "unknown";
}

bool isExpertKind(TensorKind kind) {
  return kind == TensorKind::kExpertGate || kind == TensorKind::kExpertUp ||
         kind == TensorKind::kExpertDown;
}

ModelSpec::ModelSpec(ModelConfig config, std::vector<ModelTensor> tensors)
    : config_(std::move(config)), tensors_(std::move(tensors)) {
  index_.assign(static_cast<size_t>(config_.num_layers + 1) * kNumTensorKinds, -1);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const ModelTensor& t = tensors_[i];
    if (t.expert >= 0) continue;
    // kNorm appears several times per layer; find() returns the first (input_layernorm).
    int32_t& slot =
        index_[static_cast<size_t>(t.layer + 1) * kNumTensorKinds + static_cast<size_t>(t.kind)];
    if (slot < 0) slot = static_cast<int32_t>(i);
  }
}

int64_t ModelSpec::numParameters() const {
  int64_t n = 0;
  for (const ModelTensor& t : tensors_)
    n += t.shape.product();
  return n;
}

int32_t ModelSpec::find(TensorKind kind, int32_t layer) const {
  if (layer < -1 || layer >= config_.num_layers) return -1;
  return index_[static_cast<size_t>(layer + 1) * kNumTensorKinds + static_cast<size_t>(kind)];
}

std::string ModelSpec::expertTemplate(int32_t layer, TensorKind kind) {
  const char* proj = kind == TensorKind::kExpertGate ? "gate_proj"
                     : kind == TensorKind::kExpertUp ? "up_proj"
                                                     : "down_proj";
  return "model.layers." + std::to_string(layer) + ".mlp.experts.{}." + proj + ".weight";
}

Dims ModelSpec::expertShape(TensorKind kind) const {
  if (kind == TensorKind::kExpertDown) return {config_.hidden, config_.moe_intermediate};
  return {config_.moe_intermediate, config_.hidden};
}

namespace {

// The zoo, as each model's config.json has it (ModelConfig's fields in their declared order).
const std::vector<ModelConfig>& zoo() {
  static const std::vector<ModelConfig> configs = {
      // meta-llama/Meta-Llama-3-8B.
      {.name = "llama3-8b",
       .hidden = 4096,
       .num_layers = 32,
       .num_heads = 32,
       .num_kv_heads = 8,
       .head_dim = 128,
       .intermediate = 14336,
       .vocab = 128256},
      // Qwen/Qwen3-30B-A3B (decoder_sparse_step 1, no mlp_only_layers, no shared expert);
      // intermediate unused: every layer is sparse.
      {.name = "qwen3-30b-a3b",
       .hidden = 2048,
       .num_layers = 48,
       .num_heads = 32,
       .num_kv_heads = 4,
       .head_dim = 128,
       .intermediate = 6144,
       .vocab = 151936,
       .qk_norm = true,
       .num_experts = 128,
       .moe_intermediate = 768},
      // moonshotai/Kimi-K2-Instruct (DeepseekV3ForCausalLM, no MTP layer).
      {.name = "kimi-k2",
       .hidden = 7168,
       .num_layers = 61,
       .num_heads = 64,
       .num_kv_heads = 64,
       .intermediate = 18432,
       .vocab = 163840,
       .num_experts = 384,
       .moe_intermediate = 2048,
       .num_shared_experts = 1,
       .first_dense_layers = 1,
       .router_bias = true,
       .mla = true,
       .q_lora_rank = 1536,
       .kv_lora_rank = 512,
       .qk_nope_head_dim = 128,
       .qk_rope_head_dim = 64,
       .v_head_dim = 128},
  };
  return configs;
}

}  // namespace

std::vector<std::string> modelNames() {
  std::vector<std::string> names;
  for (const ModelConfig& c : zoo())
    names.push_back(c.name);
  return names;
}

Result<ModelConfig> modelConfig(std::string_view name) {
  for (const ModelConfig& c : zoo())
    if (c.name == name) return c;
  std::string known;
  for (const std::string& n : modelNames())
    known += (known.empty() ? "" : ", ") + n;
  return invalidArgument("unknown model '" + std::string(name) + "' (known: " + known + ")");
}

namespace {

Status checkConfig(const ModelConfig& c) {
  const std::string who = "model '" + c.name + "': ";
  if (c.hidden < 1 || c.num_layers < 1 || c.num_heads < 1 || c.vocab < 1) {
    return invalidArgument(who + "hidden, num_layers, num_heads and vocab must be positive");
  }
  if (c.mla) {
    if (c.kv_lora_rank < 1 || c.qk_nope_head_dim < 1 || c.qk_rope_head_dim < 1 ||
        c.v_head_dim < 1 || c.q_lora_rank < 0) {
      return invalidArgument(who + "MLA needs kv_lora_rank, qk_nope/rope_head_dim, v_head_dim");
    }
  } else if (c.head_dim < 1 || c.num_kv_heads < 1 || c.num_heads % c.num_kv_heads != 0) {
    return invalidArgument(who + "num_heads " + std::to_string(c.num_heads) +
                           " must be a multiple of num_kv_heads " + std::to_string(c.num_kv_heads) +
                           " and head_dim positive");
  }
  if (c.num_experts > 0 && c.moe_intermediate < 1) {
    return invalidArgument(who + "experts need moe_intermediate > 0");
  }
  const bool has_dense_layer = c.num_experts == 0 || c.first_dense_layers > 0;
  if (has_dense_layer && c.intermediate < 1) {
    return invalidArgument(who + "dense layers need intermediate > 0");
  }
  if (c.first_dense_layers < 0 || c.first_dense_layers > c.num_layers) {
    return invalidArgument(who + "first_dense_layers outside [0, num_layers]");
  }
  return Status::ok();
}

}  // namespace

Result<ModelSpec> makeModel(const ModelConfig& c) {
  WSYNC_RETURN_IF_ERROR(checkConfig(c));
  std::vector<ModelTensor> t;
  const int64_t experts_per_layer = c.num_experts > 0 ? 3 * int64_t{c.num_experts} + 8 : 0;
  t.reserve(static_cast<size_t>(c.num_layers) * static_cast<size_t>(experts_per_layer + 16) + 3);
  auto add = [&t](std::string name, Dims shape, TensorKind kind, int32_t layer,
                  int32_t expert = -1) {
    t.push_back({std::move(name), shape, kind, layer, expert});
  };
  const int64_t h = c.hidden;
  add("model.embed_tokens.weight", {c.vocab, h}, TensorKind::kEmbed, -1);
  for (int32_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {h}, TensorKind::kNorm, l);
    if (c.mla) {
      const int64_t qk_head = c.qk_nope_head_dim + c.qk_rope_head_dim;
      if (c.q_lora_rank > 0) {
        add(p + "self_attn.q_a_proj.weight", {c.q_lora_rank, h}, TensorKind::kMlaQA, l);
        add(p + "self_attn.q_a_layernorm.weight", {c.q_lora_rank}, TensorKind::kMlaQANorm, l);
        add(p + "self_attn.q_b_proj.weight", {c.num_heads * qk_head, c.q_lora_rank},
            TensorKind::kMlaQB, l);
      } else {
        add(p + "self_attn.q_proj.weight", {c.num_heads * qk_head, h}, TensorKind::kAttnQ, l);
      }
      add(p + "self_attn.kv_a_proj_with_mqa.weight", {c.kv_lora_rank + c.qk_rope_head_dim, h},
          TensorKind::kMlaKvA, l);
      add(p + "self_attn.kv_a_layernorm.weight", {c.kv_lora_rank}, TensorKind::kMlaKvANorm, l);
      add(p + "self_attn.kv_b_proj.weight",
          {c.num_heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank}, TensorKind::kMlaKvB,
          l);
      add(p + "self_attn.o_proj.weight", {h, c.num_heads * c.v_head_dim}, TensorKind::kMlaO, l);
    } else {
      const int64_t q_rows = int64_t{c.num_heads} * c.head_dim;
      const int64_t kv_rows = int64_t{c.num_kv_heads} * c.head_dim;
      add(p + "self_attn.q_proj.weight", {q_rows, h}, TensorKind::kAttnQ, l);
      add(p + "self_attn.k_proj.weight", {kv_rows, h}, TensorKind::kAttnK, l);
      add(p + "self_attn.v_proj.weight", {kv_rows, h}, TensorKind::kAttnV, l);
      add(p + "self_attn.o_proj.weight", {h, q_rows}, TensorKind::kAttnO, l);
      if (c.qk_norm) {
        add(p + "self_attn.q_norm.weight", {c.head_dim}, TensorKind::kAttnQNorm, l);
        add(p + "self_attn.k_norm.weight", {c.head_dim}, TensorKind::kAttnKNorm, l);
      }
    }
    add(p + "post_attention_layernorm.weight", {h}, TensorKind::kNorm, l);
    if (!c.isMoeLayer(l)) {
      add(p + "mlp.gate_proj.weight", {c.intermediate, h}, TensorKind::kMlpGate, l);
      add(p + "mlp.up_proj.weight", {c.intermediate, h}, TensorKind::kMlpUp, l);
      add(p + "mlp.down_proj.weight", {h, c.intermediate}, TensorKind::kMlpDown, l);
      continue;
    }
    add(p + "mlp.gate.weight", {c.num_experts, h}, TensorKind::kRouter, l);
    if (c.router_bias) {
      add(p + "mlp.gate.e_score_correction_bias", {c.num_experts}, TensorKind::kRouterBias, l);
    }
    if (c.num_shared_experts > 0) {
      const int64_t si = c.num_shared_experts * c.moe_intermediate;
      add(p + "mlp.shared_experts.gate_proj.weight", {si, h}, TensorKind::kSharedExpertGate, l);
      add(p + "mlp.shared_experts.up_proj.weight", {si, h}, TensorKind::kSharedExpertUp, l);
      add(p + "mlp.shared_experts.down_proj.weight", {h, si}, TensorKind::kSharedExpertDown, l);
    }
    const int64_t mi = c.moe_intermediate;
    for (int32_t e = 0; e < c.num_experts; ++e) {
      const std::string q = p + "mlp.experts." + std::to_string(e) + ".";
      add(q + "gate_proj.weight", {mi, h}, TensorKind::kExpertGate, l, e);
      add(q + "up_proj.weight", {mi, h}, TensorKind::kExpertUp, l, e);
      add(q + "down_proj.weight", {h, mi}, TensorKind::kExpertDown, l, e);
    }
  }
  add("model.norm.weight", {h}, TensorKind::kNorm, -1);
  if (!c.tie_word_embeddings) add("lm_head.weight", {c.vocab, h}, TensorKind::kLmHead, -1);
  return ModelSpec(c, std::move(t));
}

Result<ModelSpec> makeModel(std::string_view name) {
  WSYNC_ASSIGN_OR_RETURN(ModelConfig config, modelConfig(name));
  return makeModel(config);
}

}  // namespace wsync
