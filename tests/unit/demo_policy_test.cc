// The demo policy's Llama-3-8B preset: real names, shapes and parameter count, and layouts that
// cover every element (the device-memory sync benchmark relies on both); the checks of received
// bytes, whole and by range (the rollout demo's sample checks).
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "models/demo_policy.h"

namespace {

using wsync_demo::BufferSpec;
using wsync_demo::TensorSpec;

std::map<std::string, std::vector<int64_t>> shapesByName(const std::vector<TensorSpec>& tensors) {
  std::map<std::string, std::vector<int64_t>> out;
  for (const TensorSpec& t : tensors)
    out[t.name] = t.shape;
  return out;
}

// Elements of every tensor covered by the pieces of `layout`, by tensor index.
std::vector<int64_t> coveredElements(size_t num_tensors, const std::vector<BufferSpec>& layout) {
  std::vector<int64_t> covered(num_tensors, 0);
  for (const BufferSpec& b : layout) {
    for (const auto& p : b.pieces) {
      int64_t n = 1;
      for (int64_t e : p.extent)
        n *= e;
      covered[static_cast<size_t>(p.tensor)] += n;
    }
  }
  return covered;
}

TEST(DemoPolicy, Llama3_8bHasTheRealTensorsAndParameterCount) {
  const auto tensors = wsync_demo::policyTensors(wsync_demo::llama3_8b());
  EXPECT_EQ(tensors.size(), 291u);
  EXPECT_EQ(wsync_demo::totalElements(tensors), int64_t{8030261248});
  const auto shapes = shapesByName(tensors);
  EXPECT_EQ(shapes.size(), tensors.size()) << "duplicate tensor names";
  using Shape = std::vector<int64_t>;
  EXPECT_EQ(shapes.at("model.embed_tokens.weight"), (Shape{128256, 4096}));
  EXPECT_EQ(shapes.at("lm_head.weight"), (Shape{128256, 4096}));
  EXPECT_EQ(shapes.at("model.norm.weight"), (Shape{4096}));
  EXPECT_EQ(shapes.at("model.layers.31.input_layernorm.weight"), (Shape{4096}));
  EXPECT_EQ(shapes.at("model.layers.31.post_attention_layernorm.weight"), (Shape{4096}));
  EXPECT_EQ(shapes.at("model.layers.0.self_attn.q_proj.weight"), (Shape{4096, 4096}));
  EXPECT_EQ(shapes.at("model.layers.0.self_attn.k_proj.weight"), (Shape{1024, 4096}));
  EXPECT_EQ(shapes.at("model.layers.0.self_attn.v_proj.weight"), (Shape{1024, 4096}));
  EXPECT_EQ(shapes.at("model.layers.0.self_attn.o_proj.weight"), (Shape{4096, 4096}));
  EXPECT_EQ(shapes.at("model.layers.0.mlp.gate_proj.weight"), (Shape{14336, 4096}));
  EXPECT_EQ(shapes.at("model.layers.0.mlp.up_proj.weight"), (Shape{14336, 4096}));
  EXPECT_EQ(shapes.at("model.layers.0.mlp.down_proj.weight"), (Shape{4096, 14336}));
  EXPECT_EQ(shapes.count("model.layers.32.input_layernorm.weight"), 0u);
}

TEST(DemoPolicy, DefaultShapeKeepsTheSmallPolicy) {
  const auto tensors = wsync_demo::policyTensors(wsync_demo::PolicyShape{});
  EXPECT_EQ(tensors.size(), 34u);  // embed, 4 layers of 8, final norm
  const auto shapes = shapesByName(tensors);
  EXPECT_EQ(shapes.count("lm_head.weight"), 0u);
  EXPECT_EQ(shapes.count("model.layers.0.post_attention_layernorm.weight"), 0u);
  EXPECT_EQ(tensors.back().name, "model.norm.weight");
}

TEST(DemoPolicy, Llama3_8bLayoutsCoverEveryElement) {
  const auto tensors = wsync_demo::policyTensors(wsync_demo::llama3_8b());
  // Trainers: Shard(0) over 2 ranks, every element exactly once.
  std::vector<int64_t> trainers(tensors.size(), 0);
  for (int r = 0; r < 2; ++r) {
    const auto c = coveredElements(tensors.size(), wsync_demo::trainerLayout(tensors, 2, r));
    for (size_t t = 0; t < tensors.size(); ++t)
      trainers[t] += c[t];
  }
  // Rollouts: TP 2 in each layout, every element once (replicated norms: once per rank).
  for (auto layout : {wsync_demo::RolloutLayout::kMixed, wsync_demo::RolloutLayout::kMatch,
                      wsync_demo::RolloutLayout::kDiffer}) {
    std::vector<int64_t> rollouts(tensors.size(), 0);
    for (int r = 0; r < 2; ++r) {
      const auto c =
          coveredElements(tensors.size(), wsync_demo::rolloutLayout(tensors, layout, 2, r));
      for (size_t t = 0; t < tensors.size(); ++t)
        rollouts[t] += c[t];
    }
    for (size_t t = 0; t < tensors.size(); ++t) {
      int64_t n = 1;
      for (int64_t d : tensors[t].shape)
        n *= d;
      EXPECT_EQ(trainers[t], n) << tensors[t].name;
      const bool replicated =
          tensors[t].shape.size() == 1 && layout != wsync_demo::RolloutLayout::kMatch;
      EXPECT_EQ(rollouts[t], replicated ? 2 * n : n)
          << tensors[t].name << " in layout " << static_cast<int>(layout);
    }
  }
}

// A fused qkv buffer of the mixed layout (three pieces), filled with version 3 in float32.
struct QkvBuffer {
  std::vector<TensorSpec> tensors =
      wsync_demo::policyTensors(wsync_demo::PolicyShape{1, 64, 96, 128, false, false});
  BufferSpec buffer;
  std::vector<float> data;
  QkvBuffer() {
    for (const BufferSpec& b :
         wsync_demo::rolloutLayout(tensors, wsync_demo::RolloutLayout::kMixed, 2, 1)) {
      if (b.name.find("qkv_proj") != std::string::npos) buffer = b;
    }
    data.resize(static_cast<size_t>(buffer.num_elements));
    wsync_demo::fillTrainerBuffer(tensors, buffer, 3, data.data());
  }
  int64_t inRange(int64_t begin, int64_t count) const {
    return wsync_demo::countMismatchesInRange(tensors, buffer, WSYNC_DTYPE_FLOAT32,
                                              data.data() + begin, 3, begin, count, nullptr);
  }
};

TEST(DemoPolicy, RangeChecksSeeOnlyTheirElementsAndAddUpToTheWholeCheck) {
  QkvBuffer q;
  ASSERT_EQ(q.buffer.pieces.size(), 3u);
  const int64_t n = q.buffer.num_elements;
  EXPECT_EQ(wsync_demo::countMismatches(q.tensors, q.buffer, WSYNC_DTYPE_FLOAT32, q.data.data(), 3,
                                        nullptr),
            0);
  // One wrong element in the k piece, and every element of the last 10 wrong (another version).
  const int64_t wrong = q.buffer.pieces[1].local_offset + 5;
  q.data[static_cast<size_t>(wrong)] += 1.0f;
  for (int64_t e = n - 10; e < n; ++e)
    q.data[static_cast<size_t>(e)] = -q.data[static_cast<size_t>(e)] + 0.5f;
  std::string first;
  EXPECT_EQ(wsync_demo::countMismatches(q.tensors, q.buffer, WSYNC_DTYPE_FLOAT32, q.data.data(), 3,
                                        &first),
            11);
  EXPECT_NE(first.find("k_proj"), std::string::npos) << first;
  EXPECT_EQ(q.inRange(wrong, 1), 1);
  EXPECT_EQ(q.inRange(wrong - 100, 100), 0);  // ends just before it
  EXPECT_EQ(q.inRange(wrong + 1, 100), 0);
  EXPECT_EQ(q.inRange(0, 2 * n), 11);  // clipped to the buffer's end
  EXPECT_EQ(q.inRange(n - 5, 4096), 5);
  int64_t sum = 0;
  for (int64_t begin = 0; begin < n; begin += 1000)
    sum += q.inRange(begin, 1000);
  EXPECT_EQ(sum, 11);
}

}  // namespace
