// Model zoo: the parameter tables of real models (Hugging Face tensor names and global shapes),
// tagged by kind so that layouts (src/models/model_layouts.h) can place each tensor the way real
// trainers and inference engines do. Only metadata: no weights are allocated.
// Thread-safety: all functions are pure; a ModelSpec is immutable after makeModel().
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "layout/box.h"

namespace wsync {

// What a tensor is, so a layout can treat it (split dim, fusion, expert placement).
enum class TensorKind : uint8_t {
  kEmbed,             // model.embed_tokens.weight [vocab, hidden]
  kNorm,              // RMSNorm weights [hidden] (input/post-attention/final)
  kAttnQ,             // q_proj [heads*head_dim, hidden]
  kAttnK,             // k_proj [kv_heads*head_dim, hidden]
  kAttnV,             // v_proj [kv_heads*head_dim, hidden]
  kAttnO,             // o_proj [hidden, heads*head_dim]
  kAttnQNorm,         // Qwen3 q_norm [head_dim]
  kAttnKNorm,         // Qwen3 k_norm [head_dim]
  kMlaQA,             // q_a_proj [q_lora_rank, hidden]
  kMlaQANorm,         // q_a_layernorm [q_lora_rank]
  kMlaQB,             // q_b_proj [heads*(nope+rope), q_lora_rank]
  kMlaKvA,            // kv_a_proj_with_mqa [kv_lora_rank+rope, hidden]
  kMlaKvANorm,        // kv_a_layernorm [kv_lora_rank]
  kMlaKvB,            // kv_b_proj [heads*(nope+v), kv_lora_rank]
  kMlaO,              // o_proj [hidden, heads*v_head_dim]
  kMlpGate,           // dense gate_proj [intermediate, hidden]
  kMlpUp,             // dense up_proj [intermediate, hidden]
  kMlpDown,           // dense down_proj [hidden, intermediate]
  kSharedExpertGate,  // shared_experts.gate_proj [shared*moe_intermediate, hidden]
  kSharedExpertUp,    // shared_experts.up_proj
  kSharedExpertDown,  // shared_experts.down_proj [hidden, shared*moe_intermediate]
  kExpertGate,        // experts.{e}.gate_proj [moe_intermediate, hidden]
  kExpertUp,          // experts.{e}.up_proj [moe_intermediate, hidden]
  kExpertDown,        // experts.{e}.down_proj [hidden, moe_intermediate]
  kRouter,            // mlp.gate.weight [num_experts, hidden]
  kRouterBias,        // mlp.gate.e_score_correction_bias [num_experts]
  kLmHead,            // lm_head.weight [vocab, hidden]
};
inline constexpr int kNumTensorKinds = static_cast<int>(TensorKind::kLmHead) + 1;
const char* tensorKindName(TensorKind kind);  // "embed", "norm", "attn_q", ..., "lm_head"
bool isExpertKind(TensorKind kind);           // kExpertGate/Up/Down (routed experts)

// Architecture numbers, as in the model's config.json.
struct ModelConfig {
  std::string name;  // zoo name: "llama3-8b", "qwen3-30b-a3b", "kimi-k2"
  int64_t hidden = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;      // GQA; unused with MLA
  int head_dim = 0;          // GQA; unused with MLA
  int64_t intermediate = 0;  // dense MLP
  int64_t vocab = 0;
  bool tie_word_embeddings = false;  // false: a separate lm_head.weight
  bool qk_norm = false;              // Qwen3 q_norm / k_norm
  // Mixture of experts (num_experts == 0: dense model).
  int num_experts = 0;
  int64_t moe_intermediate = 0;
  int num_shared_experts = 0;
  int first_dense_layers = 0;  // DeepSeek first_k_dense_replace
  bool router_bias = false;    // DeepSeek-V3 e_score_correction_bias
  // Multi-head latent attention (DeepSeek-V2/V3); mla == false: GQA attention.
  bool mla = false;
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;

  bool isMoeLayer(int layer) const { return num_experts > 0 && layer >= first_dense_layers; }
};

struct ModelTensor {
  std::string name;  // Hugging Face checkpoint name
  Dims shape;        // global shape
  TensorKind kind = TensorKind::kNorm;
  int32_t layer = -1;   // decoder layer, -1 for embed / final norm / lm_head
  int32_t expert = -1;  // routed expert index for expert kinds, else -1
};

// A model's full parameter table, in checkpoint order: embed, then per layer (attention, norms,
// MLP or router + shared experts + experts in index order), then final norm and lm_head.
class ModelSpec {
 public:
  ModelSpec(ModelConfig config, std::vector<ModelTensor> tensors);

  const ModelConfig& config() const { return config_; }
  const std::vector<ModelTensor>& tensors() const { return tensors_; }
  int64_t numParameters() const;  // sum of shape products

  // The index in tensors() of the non-expert tensor of `kind` in `layer` (-1 for the non-layer
  // tensors), or -1 when the model has none.
  int32_t find(TensorKind kind, int32_t layer) const;
  // The HF name template of routed expert tensors of `kind` in `layer`, "{}" for the expert index
  // (as layout builders take it), e.g. "model.layers.3.mlp.experts.{}.gate_proj.weight".
  static std::string expertTemplate(int32_t layer, TensorKind kind);
  // The per-expert shape of `kind` (kExpertGate/Up: [moe_intermediate, hidden]; Down: transposed).
  Dims expertShape(TensorKind kind) const;

 private:
  ModelConfig config_;
  std::vector<ModelTensor> tensors_;
  // (layer + 1) * kNumTensorKinds + kind -> index, for non-expert tensors.
  std::vector<int32_t> index_;
};

// The zoo's model names, in a fixed order.
std::vector<std::string> modelNames();
// The config of zoo model `name`; INVALID_ARGUMENT naming the model and the known names otherwise.
Result<ModelConfig> modelConfig(std::string_view name);
// The parameter table for `config` (checked: positive sizes, heads dividing, MLA ranks set).
Result<ModelSpec> makeModel(const ModelConfig& config);
// modelConfig + makeModel.
Result<ModelSpec> makeModel(std::string_view name);

}  // namespace wsync
