// The planning of block-scaled rollout tensors (plan/block_scaling_plan.h): scale shapes, the
// rollout's renaming and its errors, the replicas' agreement, the trainers' quantized sources, and
// the maxima exchange against a brute-force answer over random trainer layouts (partitions that
// cut blocks, replicated and overlapping pieces, experts, uneven last blocks).
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <tuple>

#include "plan/block_scaling_plan.h"

namespace wsync {
namespace {

BlockScaling blocks(int64_t rows, int64_t cols, ScaleFormat f = ScaleFormat::kFloat32) {
  BlockScaling s;
  s.format = f;
  s.block_rows = rows;
  s.block_cols = cols;
  s.scale_tensor = "w_scale";
  return s;
}

Box box(std::initializer_list<int64_t> offset, std::initializer_list<int64_t> extent) {
  Box b;
  b.offset = Dims(offset);
  b.extent = Dims(extent);
  return b;
}

// A registration with one buffer per box of `tensor`.
Registration withPieces(Role role, int32_t rank, const std::string& tensor, const Dims& shape,
                        const std::vector<Box>& boxes, DType dtype) {
  Registration reg;
  reg.role = role;
  reg.rank = rank;
  const int32_t t = reg.declareTensor(tensor, shape);
  for (size_t i = 0; i < boxes.size(); ++i) {
    LocalBuffer b;
    b.name = tensor + "/" + std::to_string(i);
    b.dtype = dtype;
    b.num_elements = boxes[i].volume();
    b.pieces.push_back(Piece{t, boxes[i], 0, rowMajorStrides(boxes[i].extent)});
    reg.buffers.push_back(b);
  }
  return reg;
}

TEST(BlockScalingPlan, ScaleShapesCoversAndBlockBoxes) {
  EXPECT_EQ(scaleShape(Dims{7168, 2048}, blocks(128, 128)), (Dims{56, 16}));
  EXPECT_EQ(scaleShape(Dims{300, 200}, blocks(128, 128)), (Dims{3, 2}));
  EXPECT_EQ(scaleShape(Dims{4, 64, 96}, blocks(1, 32, ScaleFormat::kE8M0)), (Dims{4, 64, 3}));
  EXPECT_EQ(blockCover(box({100, 0}, {110, 200}), blocks(128, 128)), box({0, 0}, {2, 2}));
  EXPECT_EQ(blockBox(Dims{2, 1}, Dims{300, 200}, blocks(128, 128)), box({256, 128}, {44, 72}));
  EXPECT_TRUE(coversBlock(box({256, 0}, {44, 200}), Dims{2, 1}, Dims{300, 200}, blocks(128, 128)));
  EXPECT_FALSE(coversBlock(box({0, 0}, {100, 200}), Dims{0, 0}, Dims{300, 200}, blocks(128, 128)));
  EXPECT_NE(checkBlockScaling(blocks(2, 32, ScaleFormat::kE8M0), Dims{64, 64}), "");
  EXPECT_NE(checkBlockScaling(blocks(1, 32, ScaleFormat::kE8M0), Dims{64, 40}), "");
  EXPECT_NE(checkBlockScaling(blocks(128, 128), Dims{64}), "");
  EXPECT_EQ(checkBlockScaling(blocks(128, 128), Dims{64, 64}), "");
}

TEST(BlockScalingPlan, RolloutPiecesAreRenamedAndCheckedWithNames) {
  const Dims shape{300, 256};
  const std::vector<ScaledTensor> scaled = {{"w", blocks(128, 128)}};
  Registration ok =
      withPieces(Role::kRollout, 3, "w", shape, {box({0, 128}, {300, 128})}, DType::kFloat8E4M3);
  const int32_t s = ok.declareTensor("w_scale", Dims{3, 2});
  LocalBuffer sb;
  sb.name = "scales";
  sb.dtype = DType::kFloat32;
  sb.num_elements = 3;
  sb.pieces.push_back(Piece{s, box({0, 1}, {3, 1}), 0, Dims{1, 1}});
  ok.buffers.push_back(sb);
  ASSERT_TRUE(applyRolloutScalings(ok, scaled).isOk());
  EXPECT_EQ(ok.tensors[0].name, valuesName(scaled[0]));
  EXPECT_EQ(ok.tensors[1].name, scalesName(scaled[0]));

  Registration cut =
      withPieces(Role::kRollout, 1, "w", shape, {box({0, 100}, {300, 156})}, DType::kFloat8E4M3);
  const Status c = applyRolloutScalings(cut, scaled);
  EXPECT_EQ(c.code(), WSYNC_ERR_MISMATCH);
  EXPECT_NE(c.message().find("rollout 1"), std::string::npos) << c.message();
  EXPECT_NE(c.message().find("cuts blocks of 128 along dim 1"), std::string::npos);

  Registration bf16 =
      withPieces(Role::kRollout, 0, "w", shape, {Box::whole(shape)}, DType::kBFloat16);
  EXPECT_EQ(applyRolloutScalings(bf16, scaled).code(), WSYNC_ERR_MISMATCH);

  Registration wrong_dtype = ok;
  wrong_dtype.tensors[0].name = "w";
  wrong_dtype.tensors[1].name = "w_scale";
  wrong_dtype.buffers[1].dtype = DType::kBFloat16;
  const Status d = applyRolloutScalings(wrong_dtype, scaled);
  EXPECT_EQ(d.code(), WSYNC_ERR_MISMATCH);
  EXPECT_NE(d.message().find("holds scales as bfloat16"), std::string::npos) << d.message();

  // An uneven last block may end at the tensor's end.
  Registration tail = withPieces(Role::kRollout, 2, "w", Dims{300, 200},
                                 {box({256, 128}, {44, 72})}, DType::kFloat8E4M3);
  EXPECT_TRUE(applyRolloutScalings(tail, scaled).isOk());
}

TEST(BlockScalingPlan, RanksOfAReplicaMustAgreeReplicasMayDiffer) {
  const Dims shape{256, 256};
  const std::vector<ScaledTensor> fp32 = {{"w", blocks(128, 128)}};
  const std::vector<ScaledTensor> pow2 = {{"w", blocks(128, 128, ScaleFormat::kPow2Float32)}};
  const std::vector<ScaledTensor> none;
  auto rank = [&](int32_t r, int32_t replica) {
    Registration reg =
        withPieces(Role::kRollout, r, "w", shape, {Box::whole(shape)}, DType::kFloat8E4M3);
    reg.replica = replica;
    return reg;
  };
  const Registration a = rank(0, 0), b = rank(1, 1), c = rank(2, 1);
  auto table = jobScalingTable({{&a, &fp32}, {&b, &pow2}, {&c, &pow2}});
  ASSERT_TRUE(table.isOk()) << table.status().toString();
  EXPECT_EQ(table->size(), 2u);
  auto bad = jobScalingTable({{&a, &fp32}, {&b, &pow2}, {&c, &none}});
  EXPECT_EQ(bad.status().code(), WSYNC_ERR_MISMATCH);
  EXPECT_NE(bad.status().message().find("replica 1"), std::string::npos);
  EXPECT_NE(bad.status().message().find("unscaled"), std::string::npos);
}

TEST(BlockScalingPlan, TrainersQuantizeFromFloatingTypesOnly) {
  const Dims shape{256, 256};
  Registration t = withPieces(Role::kTrainer, 0, "w", shape, {Box::whole(shape)}, DType::kInt8);
  auto r = addQuantizedSources(t, {{"w", blocks(128, 128)}});
  EXPECT_EQ(r.status().code(), WSYNC_ERR_UNSUPPORTED);
  EXPECT_NE(r.status().message().find("trainer 0"), std::string::npos);
}

// The brute force: per (entry, block) every (trainer, grid index) holding part of it; exchanged
// when some holder does not cover it.
struct Holder {
  size_t trainer;
  uint64_t index;
  bool covers;
};

// The table's cuts: the rollouts' piece boundaries inside the weight, per dim; trainer pieces are
// quantized in parts between those on block boundaries, each part whole in one rollout piece,
// with no block cut (so no maxima exchanged that the uncut pieces would not exchange).
TEST(BlockScalingPlan, TrainerPiecesAreQuantizedInPartsAtTheRolloutsCuts) {
  const Dims shape{300, 512};
  ScaledTensor t{"w", blocks(128, 128), {}};
  // TP 2 over columns in one replica, TP 3 over rows (cut at 128 and 256) in another
  Registration a0 =
      withPieces(Role::kRollout, 0, "w", shape, {box({0, 0}, {300, 256})}, DType::kFloat8E4M3);
  Registration a1 =
      withPieces(Role::kRollout, 1, "w", shape, {box({0, 256}, {300, 256})}, DType::kFloat8E4M3);
  Registration b0 =
      withPieces(Role::kRollout, 2, "w", shape,
                 {box({0, 0}, {128, 512}), box({128, 0}, {128, 512}), box({256, 0}, {44, 512})},
                 DType::kFloat8E4M3);
  a1.replica = a0.replica = 0;
  b0.replica = 1;
  std::vector<Registration> rollouts{a0, a1, b0};
  for (Registration& r : rollouts) {
    r.declareTensor("w_scale", scaleShape(shape, t.scaling));
    ASSERT_TRUE(applyRolloutScalings(r, {t}).isOk());
  }
  std::vector<ScaledTensor> table{t};
  setRolloutCuts(table, rollouts);
  ASSERT_EQ(table[0].cuts.size(), 2u);
  EXPECT_EQ(table[0].cuts[0], (std::vector<int64_t>{128, 256}));
  EXPECT_EQ(table[0].cuts[1], (std::vector<int64_t>{256}));
  EXPECT_EQ(table[0], t);  // the cuts are not part of the scheme

  // A trainer row shard [100, 300) x all columns: rows cut at 128 and 256, columns at 256.
  Registration trainer =
      withPieces(Role::kTrainer, 0, "w", shape, {box({100, 0}, {200, 512})}, DType::kBFloat16);
  Result<std::vector<QuantizedSource>> parts = addQuantizedSources(trainer, table);
  ASSERT_TRUE(parts.isOk()) << parts.status().toString();
  const std::vector<Box> expected{box({100, 0}, {28, 256}),  box({100, 256}, {28, 256}),
                                  box({128, 0}, {128, 256}), box({128, 256}, {128, 256}),
                                  box({256, 0}, {44, 256}),  box({256, 256}, {44, 256})};
  ASSERT_EQ(parts->size(), expected.size());
  for (size_t k = 0; k < expected.size(); ++k) {
    const QuantizedSource& q = (*parts)[k];
    EXPECT_EQ(q.box, expected[k]) << "part " << k;
    EXPECT_EQ(q.source_piece, 0);
    EXPECT_EQ(q.cover, blockCover(q.box, t.scaling)) << "part " << k;
    EXPECT_EQ(trainer.buffers[static_cast<size_t>(q.values_buffer)].num_elements, q.box.volume());
    EXPECT_NE(trainer.buffers[static_cast<size_t>(q.values_buffer)].name.find("/part"),
              std::string::npos);
  }
  // The only block cut is the one the piece itself cuts (rows 100..128): the same blocks are
  // exchanged as for the uncut piece, with the other trainer's rows [0, 100).
  Registration other =
      withPieces(Role::kTrainer, 1, "w", shape, {box({0, 0}, {100, 512})}, DType::kBFloat16);
  Result<std::vector<QuantizedSource>> other_parts = addQuantizedSources(other, table);
  ASSERT_TRUE(other_parts.isOk());
  const MaximaExchange cut = planMaximaExchange({*parts, *other_parts}, table);
  std::vector<ScaledTensor> uncut_table{t};
  Registration trainer_uncut =
      withPieces(Role::kTrainer, 0, "w", shape, {box({100, 0}, {200, 512})}, DType::kBFloat16);
  Registration other_uncut =
      withPieces(Role::kTrainer, 1, "w", shape, {box({0, 0}, {100, 512})}, DType::kBFloat16);
  Result<std::vector<QuantizedSource>> trainer_sources =
      addQuantizedSources(trainer_uncut, uncut_table);
  Result<std::vector<QuantizedSource>> other_sources =
      addQuantizedSources(other_uncut, uncut_table);
  ASSERT_TRUE(trainer_sources.isOk() && other_sources.isOk());
  const MaximaExchange uncut = planMaximaExchange({*trainer_sources, *other_sources}, uncut_table);
  EXPECT_EQ(cut.num_blocks, uncut.num_blocks);
  EXPECT_EQ(cut.num_blocks, 4u);  // row block 0, four column blocks
  // Cuts off the block boundaries (not from a checked rollout) are ignored.
  std::vector<ScaledTensor> odd{t};
  odd[0].cuts = {{150}, {100, 600}};
  Registration trainer_odd =
      withPieces(Role::kTrainer, 0, "w", shape, {box({100, 0}, {200, 512})}, DType::kBFloat16);
  Result<std::vector<QuantizedSource>> odd_sources = addQuantizedSources(trainer_odd, odd);
  ASSERT_TRUE(odd_sources.isOk());
  EXPECT_EQ(odd_sources->size(), 1u);
}

TEST(BlockScalingPlan, ExchangeMatchesBruteForceOverRandomLayouts) {
  std::mt19937_64 rng(20261205);
  for (int it = 0; it < 300; ++it) {
    const bool experts = it % 3 == 2;
    std::uniform_int_distribution<int64_t> dim(1, 300);
    Dims shape = experts
                     ? Dims{std::uniform_int_distribution<int64_t>(1, 4)(rng), dim(rng), dim(rng)}
                     : Dims{dim(rng), dim(rng)};
    const int r = shape.size();
    const int64_t choices[] = {1, 7, 32, 64, 128};
    BlockScaling s = blocks(choices[rng() % 5], choices[rng() % 5]);
    const std::vector<ScaledTensor> table = {{"w", s}};
    const int trainers = 1 + static_cast<int>(rng() % 5);
    std::vector<Registration> regs;
    std::vector<std::vector<QuantizedSource>> sources;
    for (int t = 0; t < trainers; ++t) {
      std::vector<Box> boxes;
      const int pieces = static_cast<int>(rng() % 3);  // 0..2 random boxes, overlaps allowed
      for (int p = 0; p < pieces; ++p) {
        Box b;
        b.offset = Dims::zeros(r);
        b.extent = Dims::zeros(r);
        for (int d = 0; d < r; ++d) {
          const int64_t lo = static_cast<int64_t>(rng() % static_cast<uint64_t>(shape[d]));
          const int64_t hi =
              lo + 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(shape[d] - lo));
          b.offset[d] = lo;
          b.extent[d] = hi - lo;
        }
        boxes.push_back(b);
      }
      regs.push_back(withPieces(Role::kTrainer, t, "w", shape, boxes, DType::kBFloat16));
      auto q = addQuantizedSources(regs.back(), table);
      ASSERT_TRUE(q.isOk()) << q.status().toString();
      sources.push_back(*q);
    }
    const MaximaExchange ex = planMaximaExchange(sources, table);
    // Brute force.
    std::map<std::vector<int64_t>, std::vector<Holder>> holders;
    for (size_t t = 0; t < sources.size(); ++t) {
      uint64_t base = 0;
      for (const QuantizedSource& q : sources[t]) {
        uint64_t i = 0;
        Dims idx = q.cover.offset;
        const int64_t n = q.cover.volume();
        for (int64_t k = 0; k < n; ++k, ++i) {
          int64_t rem = k;
          for (int d = r - 1; d >= 0; --d) {
            idx[d] = q.cover.offset[d] + rem % q.cover.extent[d];
            rem /= q.cover.extent[d];
          }
          std::vector<int64_t> key(idx.v.begin(), idx.v.begin() + r);
          holders[key].push_back({t, base + i, coversBlock(q.box, idx, shape, s)});
        }
        base += static_cast<uint64_t>(n);
      }
    }
    std::vector<std::set<uint64_t>> want(sources.size());
    std::map<std::pair<size_t, uint64_t>, std::vector<int64_t>> block_of_want;
    size_t blocks_want = 0;
    for (const auto& [key, hs] : holders) {
      bool partial = false;
      for (const Holder& h : hs)
        partial |= !h.covers;
      if (!partial) continue;
      ++blocks_want;
      for (const Holder& h : hs) {
        want[h.trainer].insert(h.index);
        block_of_want[{h.trainer, h.index}] = key;
      }
    }
    ASSERT_EQ(ex.num_blocks, blocks_want) << "iteration " << it;
    std::map<uint32_t, std::vector<int64_t>> id_key;
    for (size_t t = 0; t < sources.size(); ++t) {
      ASSERT_EQ(std::set<uint64_t>(ex.exchanged[t].begin(), ex.exchanged[t].end()), want[t])
          << "iteration " << it << " trainer " << t;
      ASSERT_TRUE(std::is_sorted(ex.exchanged[t].begin(), ex.exchanged[t].end()));
      for (size_t i = 0; i < ex.exchanged[t].size(); ++i) {  // one id per block, consistently
        const auto& key = block_of_want[{t, ex.exchanged[t][i]}];
        auto [it_id, fresh] = id_key.emplace(ex.block_of[t][i], key);
        ASSERT_EQ(it_id->second, key);
        (void)fresh;
      }
    }
  }
}

}  // namespace
}  // namespace wsync
