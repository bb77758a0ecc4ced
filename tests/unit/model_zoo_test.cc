// The model zoo (real HF parameter tables) and its trainer / rollout layouts.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "layout/registration.h"
#include "model_layouts.h"
#include "model_zoo.h"
#include "plan/planner.h"

namespace wsync {
namespace {

ModelSpec mustMake(const std::string& name) {
  Result<ModelSpec> m = makeModel(name);
  EXPECT_TRUE(m.isOk()) << m.status().toString();
  return std::move(m).value();
}

const ModelTensor* findByName(const ModelSpec& m, const std::string& name) {
  for (const ModelTensor& t : m.tensors()) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

Dims shapeOf(const ModelSpec& m, const std::string& name) {
  const ModelTensor* t = findByName(m, name);
  return t ? t->shape : Dims{};
}

TEST(ModelZoo, ParameterTotals) {
  // Exact totals of the public checkpoints (sum of safetensors numel).
  EXPECT_EQ(mustMake("llama3-8b").numParameters(), int64_t{8030261248});
  EXPECT_EQ(mustMake("qwen3-30b-a3b").numParameters(), int64_t{30532122624});
  EXPECT_EQ(mustMake("kimi-k2").numParameters(), int64_t{1026408232448});
  const struct {
    const char* name;
    double expected;
  } cases[] = {{"llama3-8b", 8.03e9}, {"qwen3-30b-a3b", 30.5e9}, {"kimi-k2", 1.03e12}};
  for (const auto& c : cases) {
    const double n = static_cast<double>(mustMake(c.name).numParameters());
    EXPECT_LE(std::abs(n - c.expected), 0.01 * c.expected) << c.name << " has " << n;
  }
}

TEST(ModelZoo, NamesAreUniqueAndCountsRight) {
  const std::map<std::string, size_t> expected_tensors = {
      // embed + 32 * 9 + norm + lm_head
      {"llama3-8b", 1 + 32 * 9 + 2},
      // embed + 48 * (2 norms + q,k,v,o + q_norm,k_norm + router + 128*3) + norm + lm_head
      {"qwen3-30b-a3b", 1 + 48 * (9 + 384) + 2},
      // embed + layer 0 (2 norms + 7 MLA + 3 MLP) + 60 * (2 + 7 + 2 router + 3 shared + 1152)
      {"kimi-k2", 1 + 12 + 60 * (14 + 1152) + 2},
  };
  for (const std::string& name : modelNames()) {
    const ModelSpec m = mustMake(name);
    std::set<std::string> names;
    for (const ModelTensor& t : m.tensors()) {
      EXPECT_TRUE(names.insert(t.name).second) << name << ": duplicate " << t.name;
      EXPECT_GE(t.shape.product(), 1) << t.name;
      EXPECT_EQ(isExpertKind(t.kind), t.expert >= 0) << t.name;
    }
    EXPECT_EQ(m.tensors().size(), expected_tensors.at(name)) << name;
  }
}

TEST(ModelZoo, ExactShapes) {
  const ModelSpec llama = mustMake("llama3-8b");
  EXPECT_EQ(shapeOf(llama, "model.embed_tokens.weight"), (Dims{128256, 4096}));
  EXPECT_EQ(shapeOf(llama, "model.layers.31.self_attn.k_proj.weight"), (Dims{1024, 4096}));
  EXPECT_EQ(shapeOf(llama, "model.layers.0.mlp.down_proj.weight"), (Dims{4096, 14336}));
  EXPECT_EQ(shapeOf(llama, "lm_head.weight"), (Dims{128256, 4096}));
  EXPECT_EQ(findByName(llama, "model.layers.32.input_layernorm.weight"), nullptr);

  const ModelSpec qwen = mustMake("qwen3-30b-a3b");
  EXPECT_EQ(shapeOf(qwen, "model.layers.0.self_attn.q_proj.weight"), (Dims{4096, 2048}));
  EXPECT_EQ(shapeOf(qwen, "model.layers.0.self_attn.o_proj.weight"), (Dims{2048, 4096}));
  EXPECT_EQ(shapeOf(qwen, "model.layers.0.self_attn.v_proj.weight"), (Dims{512, 2048}));
  EXPECT_EQ(shapeOf(qwen, "model.layers.7.self_attn.k_norm.weight"), (Dims{128}));
  EXPECT_EQ(shapeOf(qwen, "model.layers.47.mlp.gate.weight"), (Dims{128, 2048}));
  EXPECT_EQ(shapeOf(qwen, "model.layers.47.mlp.experts.127.down_proj.weight"), (Dims{2048, 768}));
  EXPECT_EQ(findByName(qwen, "model.layers.0.mlp.experts.128.up_proj.weight"), nullptr);

  const ModelSpec kimi = mustMake("kimi-k2");
  EXPECT_EQ(shapeOf(kimi, "model.embed_tokens.weight"), (Dims{163840, 7168}));
  EXPECT_EQ(shapeOf(kimi, "model.layers.0.mlp.gate_proj.weight"), (Dims{18432, 7168}));
  EXPECT_EQ(findByName(kimi, "model.layers.0.mlp.gate.weight"), nullptr);  // layer 0 is dense
  EXPECT_EQ(shapeOf(kimi, "model.layers.5.self_attn.q_a_proj.weight"), (Dims{1536, 7168}));
  EXPECT_EQ(shapeOf(kimi, "model.layers.5.self_attn.q_b_proj.weight"), (Dims{64 * 192, 1536}));
  EXPECT_EQ(shapeOf(kimi, "model.layers.5.self_attn.kv_a_proj_with_mqa.weight"), (Dims{576, 7168}));
  EXPECT_EQ(shapeOf(kimi, "model.layers.5.self_attn.kv_a_layernorm.weight"), (Dims{512}));
  EXPECT_EQ(shapeOf(kimi, "model.layers.5.self_attn.kv_b_proj.weight"), (Dims{64 * 256, 512}));
  EXPECT_EQ(shapeOf(kimi, "model.layers.5.self_attn.o_proj.weight"), (Dims{7168, 8192}));
  EXPECT_EQ(shapeOf(kimi, "model.layers.60.mlp.gate.weight"), (Dims{384, 7168}));
  EXPECT_EQ(shapeOf(kimi, "model.layers.60.mlp.gate.e_score_correction_bias"), (Dims{384}));
  EXPECT_EQ(shapeOf(kimi, "model.layers.1.mlp.shared_experts.down_proj.weight"),
            (Dims{7168, 2048}));
  EXPECT_EQ(shapeOf(kimi, "model.layers.1.mlp.experts.383.gate_proj.weight"), (Dims{2048, 7168}));
  EXPECT_EQ(findByName(kimi, "model.layers.61.input_layernorm.weight"), nullptr);
}

TEST(ModelZoo, FindAndTemplates) {
  const ModelSpec qwen = mustMake("qwen3-30b-a3b");
  const int32_t k = qwen.find(TensorKind::kAttnK, 3);
  ASSERT_GE(k, 0);
  EXPECT_EQ(qwen.tensors()[static_cast<size_t>(k)].name, "model.layers.3.self_attn.k_proj.weight");
  EXPECT_EQ(qwen.find(TensorKind::kMlpGate, 3), -1);  // every Qwen3-MoE layer is sparse
  EXPECT_EQ(ModelSpec::expertTemplate(3, TensorKind::kExpertUp),
            "model.layers.3.mlp.experts.{}.up_proj.weight");
  EXPECT_EQ(qwen.expertShape(TensorKind::kExpertDown), (Dims{2048, 768}));
}

TEST(ModelZoo, UnknownModelIsNamed) {
  Result<ModelSpec> m = makeModel("gpt-5");
  ASSERT_FALSE(m.isOk());
  EXPECT_EQ(m.status().code(), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(m.status().message().find("gpt-5"), std::string::npos);
  EXPECT_NE(m.status().message().find("kimi-k2"), std::string::npos);
}

// Per tensor: the distinct boxes the registrations hold, summed by volume. Identical boxes (a
// replicated shard) count once; layouts never produce partially overlapping boxes, so a complete
// layout sums to each tensor's numel.
std::map<std::string, int64_t> distinctCoverage(const std::vector<Registration>& regs) {
  std::map<std::string, std::set<std::pair<std::vector<int64_t>, std::vector<int64_t>>>> boxes;
  for (const Registration& r : regs) {
    for (const LocalBuffer& b : r.buffers) {
      for (const Piece& p : b.pieces) {
        const Box& box = p.box;
        std::vector<int64_t> off(box.offset.v.begin(), box.offset.v.begin() + box.rank());
        std::vector<int64_t> ext(box.extent.v.begin(), box.extent.v.begin() + box.rank());
        boxes[r.tensors[static_cast<size_t>(p.tensor)].name].insert({off, ext});
      }
    }
  }
  std::map<std::string, int64_t> out;
  for (const auto& [name, set] : boxes) {
    int64_t v = 0;
    for (const auto& [off, ext] : set) {
      int64_t n = 1;
      for (int64_t e : ext)
        n *= e;
      v += n;
    }
    out[name] = v;
  }
  return out;
}

void expectComplete(const ModelSpec& m, const std::vector<Registration>& regs, const char* who) {
  const std::map<std::string, int64_t> cover = distinctCoverage(regs);
  EXPECT_EQ(cover.size(), m.tensors().size()) << who;
  for (const ModelTensor& t : m.tensors()) {
    auto it = cover.find(t.name);
    ASSERT_NE(it, cover.end()) << who << " miss " << t.name;
    EXPECT_EQ(it->second, t.shape.product()) << who << ": " << t.name;
  }
}

int64_t pieceElements(const std::vector<Registration>& regs) {
  int64_t n = 0;
  for (const Registration& r : regs) {
    for (const LocalBuffer& b : r.buffers) {
      for (const Piece& p : b.pieces)
        n += p.box.volume();
    }
  }
  return n;
}

struct Built {
  std::vector<Registration> trainers;
  std::vector<Registration> rollouts;
};

Built buildDefault(const ModelSpec& m) {
  const ModelLayouts l = defaultLayouts(m.config());
  EXPECT_TRUE(checkLayouts(m, l).isOk());
  Result<std::vector<Registration>> t = buildTrainerRegistrations(m, l.trainer);
  Result<std::vector<Registration>> r = buildRolloutRegistrations(m, l.rollout);
  EXPECT_TRUE(t.isOk()) << t.status().toString();
  EXPECT_TRUE(r.isOk()) << r.status().toString();
  if (!t.isOk() || !r.isOk()) return {};
  return {std::move(t).value(), std::move(r).value()};
}

TEST(ModelLayouts, LlamaFsdp8ToTp2x4PlansAllBytes) {
  const ModelSpec m = mustMake("llama3-8b");
  const Built b = buildDefault(m);
  ASSERT_EQ(b.trainers.size(), 8u);
  ASSERT_EQ(b.rollouts.size(), 8u);
  // FSDP shards every tensor once: the trainers hold exactly the model.
  EXPECT_EQ(pieceElements(b.trainers), m.numParameters());
  expectComplete(m, b.trainers, "trainers");
  const std::vector<Registration> replica0(b.rollouts.begin(), b.rollouts.begin() + 2);
  expectComplete(m, replica0, "rollout replica 0");
  for (const Registration& r : b.rollouts)
    EXPECT_EQ(r.replica, r.rank / 2);
  // vLLM names: fused qkv and gate_up buffers, half the heads each.
  const LocalBuffer* qkv = nullptr;
  for (const LocalBuffer& buf : b.rollouts[1].buffers) {
    if (buf.name == "model.layers.0.self_attn.qkv_proj.weight") qkv = &buf;
  }
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(qkv->num_elements, (2048 + 512 + 512) * int64_t{4096});

  Result<Plan> plan = makePlan(b.trainers, b.rollouts);
  ASSERT_TRUE(plan.isOk()) << plan.status().toString();
  EXPECT_EQ(plan->stats.trainer_ranks, 8);
  EXPECT_EQ(plan->stats.rollout_ranks, 8);
  EXPECT_EQ(plan->stats.replicas, 4);
  EXPECT_EQ(plan->stats.bytes_total, pieceElements(b.rollouts) * 2);  // bfloat16
  EXPECT_EQ(plan->tensors.size(), m.tensors().size());
}

TEST(ModelLayouts, QwenEp8ToTp4Ep4x2PlansAllBytes) {
  const ModelSpec m = mustMake("qwen3-30b-a3b");
  const Built b = buildDefault(m);
  ASSERT_EQ(b.trainers.size(), 8u);
  ASSERT_EQ(b.rollouts.size(), 8u);
  EXPECT_EQ(pieceElements(b.trainers), m.numParameters());
  expectComplete(m, b.trainers, "trainers");
  const std::vector<Registration> replica1(b.rollouts.begin() + 4, b.rollouts.end());
  expectComplete(m, replica1, "rollout replica 1");
  // Trainer rank 3 holds experts 48..63 of every layer whole, as separate tensors.
  int expert_buffers = 0;
  for (const LocalBuffer& buf : b.trainers[3].buffers) {
    if (buf.name.find(".mlp.experts.") == std::string::npos) continue;
    ++expert_buffers;
    EXPECT_EQ(buf.num_elements, 768 * 2048) << buf.name;
  }
  EXPECT_EQ(expert_buffers, 48 * 16 * 3);
  // Rollout rank 6 (replica 1, EP rank 2) stacks experts 64..95 per layer.
  bool found = false;
  for (const LocalBuffer& buf : b.rollouts[6].buffers) {
    if (buf.name != "model.layers.10.mlp.experts.w2_weight") continue;
    found = true;
    ASSERT_EQ(buf.pieces.size(), 32u);
    const TensorDecl& first = b.rollouts[6].tensors[static_cast<size_t>(buf.pieces[0].tensor)];
    EXPECT_EQ(first.name, "model.layers.10.mlp.experts.64.down_proj.weight");
  }
  EXPECT_TRUE(found);

  Result<Plan> plan = makePlan(b.trainers, b.rollouts);
  ASSERT_TRUE(plan.isOk()) << plan.status().toString();
  EXPECT_EQ(plan->stats.replicas, 2);
  EXPECT_EQ(plan->stats.bytes_total, pieceElements(b.rollouts) * 2);
  // Whole experts on both sides: every expert travels as a broadcast or one write per stack piece.
  EXPECT_GT(plan->groups.size() + plan->writes.size(), 0u);
}

TEST(ModelLayouts, KimiTrainerRanksHoldTheirExpertsAndStage) {
  const ModelSpec m = mustMake("kimi-k2");
  const ModelLayouts l = defaultLayouts(m.config());
  ASSERT_EQ(l.trainer.ranks(), 256);
  ASSERT_EQ(l.rollout.ranks(), 128);
  // Rank 0: stage 0 (layers 0..30 + embed), EP group 0 (experts 0..47), FSDP rank 0.
  Result<Registration> r0 = buildTrainerRegistration(m, l.trainer, 0);
  ASSERT_TRUE(r0.isOk()) << r0.status().toString();
  // Rank 255: stage 1 (layers 31..60 + norm + lm_head), EP group 7 (336..383), FSDP rank 15.
  Result<Registration> r255 = buildTrainerRegistration(m, l.trainer, 255);
  ASSERT_TRUE(r255.isOk()) << r255.status().toString();
  EXPECT_FALSE(buildTrainerRegistration(m, l.trainer, 256).isOk());

  auto pieceOf = [](const Registration& r, const std::string& name) -> const Piece* {
    for (const LocalBuffer& b : r.buffers) {
      for (const Piece& p : b.pieces) {
        if (r.tensors[static_cast<size_t>(p.tensor)].name == name) return &p;
      }
    }
    return nullptr;
  };
  const Piece* e0 = pieceOf(*r0, "model.layers.1.mlp.experts.0.gate_proj.weight");
  ASSERT_NE(e0, nullptr);
  EXPECT_EQ(e0->box, (Box{{0, 0}, {128, 7168}}));
  EXPECT_EQ(pieceOf(*r0, "model.layers.1.mlp.experts.48.gate_proj.weight"), nullptr);
  EXPECT_EQ(pieceOf(*r0, "model.layers.31.input_layernorm.weight"), nullptr);
  EXPECT_NE(pieceOf(*r0, "model.embed_tokens.weight"), nullptr);
  EXPECT_EQ(pieceOf(*r0, "lm_head.weight"), nullptr);
  const Piece* e383 = pieceOf(*r255, "model.layers.60.mlp.experts.383.down_proj.weight");
  ASSERT_NE(e383, nullptr);
  EXPECT_EQ(e383->box, (Box{{6720, 0}, {448, 2048}}));  // 7168 rows, torch.chunk into 16
  const Piece* head = pieceOf(*r255, "lm_head.weight");
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(head->box, (Box{{15 * 10240, 0}, {10240, 7168}}));
  EXPECT_EQ(pieceOf(*r255, "model.layers.30.input_layernorm.weight"), nullptr);

  // Expert pieces: 30 MoE layers x 48 experts x 3 per rank, on both stages.
  auto expertPieces = [](const Registration& r) {
    int n = 0;
    for (const LocalBuffer& b : r.buffers) {
      n +=
          b.name.find(".mlp.experts.") != std::string::npos ? static_cast<int>(b.pieces.size()) : 0;
    }
    return n;
  };
  EXPECT_EQ(expertPieces(*r0), 30 * 48 * 3);
  EXPECT_EQ(expertPieces(*r255), 30 * 48 * 3);
}

TEST(ModelLayouts, KimiRolloutReplicaIsCompleteWith12ExpertsPerRank) {
  const ModelSpec m = mustMake("kimi-k2");
  const ModelLayouts l = defaultLayouts(m.config());
  std::vector<Registration> replica;
  for (int32_t r = 32; r < 64; ++r) {
    Result<Registration> reg = buildRolloutRegistration(m, l.rollout, r);
    ASSERT_TRUE(reg.isOk()) << reg.status().toString();
    EXPECT_EQ(reg->replica, 1);
    replica.push_back(std::move(reg).value());
  }
  expectComplete(m, replica, "kimi rollout replica 1");
  for (const LocalBuffer& b : replica[5].buffers) {
    if (b.name != "model.layers.7.mlp.experts.w1_weight") continue;
    ASSERT_EQ(b.pieces.size(), 12u);
    EXPECT_EQ(replica[5].tensors[static_cast<size_t>(b.pieces[0].tensor)].name,
              "model.layers.7.mlp.experts.60.gate_proj.weight");
  }
}

TEST(ModelLayouts, OptionsOverrideDefaultsAndBadLayoutsAreNamed) {
  const ModelSpec m = mustMake("llama3-8b");
  cxxopts::Options options("t");
  addLayoutOptions(options);
  const char* argv[] = {"t", "--trainer-fsdp", "2", "--trainer-tp",    "4",      "--rollout-tp",
                        "8", "--replicas",     "1", "--trainer-dtype", "float32"};
  const cxxopts::ParseResult parsed = options.parse(11, argv);
  Result<ModelLayouts> l = layoutsFromOptions(m, parsed);
  ASSERT_TRUE(l.isOk()) << l.status().toString();
  EXPECT_EQ(l->trainer.ranks(), 8);
  EXPECT_EQ(l->rollout.ranks(), 8);
  EXPECT_EQ(l->trainer.dtype, DType::kFloat32);
  // TP 4 x FSDP 2: o_proj (row-parallel) blocks are split along both dims.
  Result<std::vector<Registration>> t = buildTrainerRegistrations(m, l->trainer);
  ASSERT_TRUE(t.isOk()) << t.status().toString();
  EXPECT_EQ(pieceElements(*t), m.numParameters() + 3 * (65 * 4096));  // norms replicated over TP
  expectComplete(m, *t, "tp4 x fsdp2 trainers");
  Result<std::vector<Registration>> r = buildRolloutRegistrations(m, l->rollout);
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  Result<Plan> plan = makePlan(*t, *r);
  ASSERT_TRUE(plan.isOk()) << plan.status().toString();
  EXPECT_EQ(plan->stats.bytes_total, pieceElements(*r) * 2);

  const char* bad[] = {"t", "--rollout-tp", "3", "--rollout-ep", "2"};
  Result<ModelLayouts> b = layoutsFromOptions(m, options.parse(5, bad));
  ASSERT_FALSE(b.isOk());
  EXPECT_NE(b.status().message().find("rollout tp 3"), std::string::npos);
  const char* flat_tp[] = {"t", "--flat", "--trainer-tp", "2"};
  EXPECT_FALSE(layoutsFromOptions(m, options.parse(4, flat_tp)).isOk());
}

TEST(ModelLayouts, PipelineStagesAndDenseReplicatedOverEpPlan) {
  // Llama over PP 4 x FSDP 2: each stage holds 8 layers; embed on stage 0, lm_head on stage 3.
  const ModelSpec llama = mustMake("llama3-8b");
  ModelLayouts l = defaultLayouts(llama.config());
  l.trainer.fsdp = 2;
  l.trainer.pp = 4;
  Result<std::vector<Registration>> t = buildTrainerRegistrations(llama, l.trainer);
  ASSERT_TRUE(t.isOk()) << t.status().toString();
  ASSERT_EQ(t->size(), 8u);
  EXPECT_EQ(pieceElements(*t), llama.numParameters());
  expectComplete(llama, *t, "llama pp4 x fsdp2");
  EXPECT_EQ((*t)[0].tensors.front().name, "model.embed_tokens.weight");
  EXPECT_EQ((*t)[7].tensors.back().name, "lm_head.weight");
  EXPECT_EQ((*t)[2].tensors.front().name, "model.layers.8.input_layernorm.weight");

  // Qwen over EP 4 x FSDP 2 with dense tensors replicated over the 4 EP groups: experts are
  // Shard(0) over 2, dense tensors held 4 times.
  const ModelSpec qwen = mustMake("qwen3-30b-a3b");
  ModelLayouts q = defaultLayouts(qwen.config());
  q.trainer.ep = 4;
  q.trainer.fsdp = 2;
  q.trainer.dense_replicated_over_ep = true;
  Result<std::vector<Registration>> qt = buildTrainerRegistrations(qwen, q.trainer);
  ASSERT_TRUE(qt.isOk()) << qt.status().toString();
  expectComplete(qwen, *qt, "qwen ep4 x fsdp2");
  int64_t expert_params = 0;
  for (const ModelTensor& tensor : qwen.tensors()) {
    if (tensor.expert >= 0) expert_params += tensor.shape.product();
  }
  EXPECT_EQ(pieceElements(*qt), expert_params + 4 * (qwen.numParameters() - expert_params));
  Result<std::vector<Registration>> qr = buildRolloutRegistrations(qwen, q.rollout);
  ASSERT_TRUE(qr.isOk());
  Result<Plan> plan = makePlan(*qt, *qr);
  ASSERT_TRUE(plan.isOk()) << plan.status().toString();
  EXPECT_EQ(plan->stats.bytes_total, pieceElements(*qr) * 2);
  EXPECT_LE(plan->stats.senderImbalance(), 1.05);
}

TEST(ModelLayouts, FlatTrainerRangesPlan) {
  const ModelSpec m = mustMake("llama3-8b");
  ModelLayouts l = defaultLayouts(m.config());
  l.trainer.flat = true;
  l.trainer.fsdp = 3;  // ranges that cut rows
  Result<std::vector<Registration>> t = buildTrainerRegistrations(m, l.trainer);
  ASSERT_TRUE(t.isOk()) << t.status().toString();
  EXPECT_EQ(pieceElements(*t), m.numParameters());
  Result<std::vector<Registration>> r = buildRolloutRegistrations(m, l.rollout);
  ASSERT_TRUE(r.isOk());
  Result<Plan> plan = makePlan(*t, *r);
  ASSERT_TRUE(plan.isOk()) << plan.status().toString();
  EXPECT_EQ(plan->stats.trainer_ranks, 3);
  EXPECT_EQ(plan->stats.bytes_total, pieceElements(*r) * 2);
}

}  // namespace
}  // namespace wsync
