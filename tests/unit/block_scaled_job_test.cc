// Block-scaled rollouts end to end, in one process (coordinator through the C++ API, ranks on
// threads with WSYNC_BOOTSTRAP_EXPLICIT, real UCX writes): bfloat16 trainers whose row shards cut
// 128x128 blocks -> replicas holding the same weights as block fp8 (float32 scales, TP column
// shards), as block fp8 with power-of-two scales, and as MXFP8 (1x32, e8m0); every version's
// float8 bytes and scales equal the full-tensor reference quantizer bit for bit (which the
// quantizer tests tie to vLLM's own). Then the errors commit must name: a rollout shard that cuts
// a block, a scale tensor of the wrong shape, two ranks of one replica that disagree.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <string>
#include <vector>

#include "support/block_scaled_job.h"

namespace {

using namespace block_scaled_job;  // NOLINT(google-build-using-namespace)
namespace bq = wsync::block_quant_testing;

// Plain, with checksums (the trainers sum the float8 bytes and scales they send), and with delta
// versions (the patches are taken on the float8 bytes and scales the rollouts hold; weights that
// change a few elements per version).
enum class Integrity { kPlain, kChecksums, kDelta };
class BlockScaledJob : public ::testing::TestWithParam<Integrity> {};

TEST_P(BlockScaledJob, EveryReplicaGetsTheEngineQuantizationBitForBit) {
  const auto fp32 = scaling(WSYNC_SCALE_FLOAT32, 128, 128, "w_scale");
  const auto pow2 = scaling(WSYNC_SCALE_POW2_FLOAT32, 128, 128, "w_scale");
  const auto mx_w = scaling(WSYNC_SCALE_E8M0, 1, 32, "w_mx");
  const auto e_fp32 = scaling(WSYNC_SCALE_FLOAT32, 128, 128, "e_scale");
  const auto e_mx = scaling(WSYNC_SCALE_E8M0, 1, 32, "e_mx");
  std::vector<RolloutRank> rollouts(4);
  // Replica 0: TP 2 over w's columns (block fp8, float32 scales: each rank its scale column);
  // rank 0 also holds every expert with its scales.
  for (int r = 0; r < 2; ++r) {
    RolloutRank& me = rollouts[static_cast<size_t>(r)];
    me.replica = 0;
    me.scalings = {{"w", fp32}};
    me.buffers.push_back({"w", WSYNC_DTYPE_FLOAT8_E4M3, {{"w", kW, {0, 128 * r}, {300, 128}}}});
    me.buffers.push_back({"w_scale", WSYNC_DTYPE_FLOAT32, {{"w_scale", {3, 2}, {0, r}, {3, 1}}}});
    if (r == 0) {
      me.scalings.push_back({"e", e_fp32});
      me.buffers.push_back({"e", WSYNC_DTYPE_FLOAT8_E4M3, {{"e", kE, {0, 0, 0}, kE}}});
      me.buffers.push_back(
          {"e_scale", WSYNC_DTYPE_FLOAT32, {{"e_scale", {3, 1, 1}, {0, 0, 0}, {3, 1, 1}}}});
    }
  }
  // Replica 1: power-of-two scales for w, MXFP8 experts.
  rollouts[2].replica = 1;
  rollouts[2].scalings = {{"w", pow2}, {"e", e_mx}};
  rollouts[2].buffers = {
      {"w", WSYNC_DTYPE_FLOAT8_E4M3, {{"w", kW, {0, 0}, kW}}},
      {"w_scale", WSYNC_DTYPE_FLOAT32, {{"w_scale", {3, 2}, {0, 0}, {3, 2}}}},
      {"e", WSYNC_DTYPE_FLOAT8_E4M3, {{"e", kE, {0, 0, 0}, kE}}},
      {"e_mx", WSYNC_DTYPE_UINT8, {{"e_mx", {3, 64, 3}, {0, 0, 0}, {3, 64, 3}}}}};
  // Replica 2: MXFP8 w; the experts unscaled in bfloat16 (a plain conversion beside).
  rollouts[3].replica = 2;
  rollouts[3].scalings = {{"w", mx_w}};
  rollouts[3].buffers = {{"w", WSYNC_DTYPE_FLOAT8_E4M3, {{"w", kW, {0, 0}, kW}}},
                         {"w_mx", WSYNC_DTYPE_UINT8, {{"w_mx", {300, 8}, {0, 0}, {300, 8}}}},
                         {"e", WSYNC_DTYPE_BFLOAT16, {{"e", kE, {0, 0, 0}, kE}}}};
  std::atomic<int> checked{0};
  JobSpec spec;
  for (int t = 0; t < 3; ++t)
    spec.trainers.push_back(trainerBuffers(t));
  spec.rollouts = rollouts;
  spec.versions = 4;
  spec.checksums = GetParam() == Integrity::kChecksums;
  spec.delta = GetParam() == Integrity::kDelta;
  spec.weights = weightsOf;
  if (spec.delta) {
    spec.weights = [](const std::string& t, uint64_t v) { return slowlyChangingWeights(t, v); };
  }
  const auto weights = spec.weights;
  const Outcome out = runJob(spec, [&](int r, uint64_t v, const std::vector<const uint8_t*>& data) {
    const RolloutRank& me = rollouts[static_cast<size_t>(r)];
    for (size_t b = 0; b < me.buffers.size(); ++b) {
      const Buffer& buf = me.buffers[b];
      const Piece& p = buf.pieces[0];
      const std::string& weight = p.tensor == "w" || p.tensor == "e" ? p.tensor
                                  : p.tensor[0] == 'w'               ? "w"
                                                                     : "e";
      const bq::HostTensor full = weights(weight, v);
      std::vector<uint8_t> want;
      if (buf.dtype == WSYNC_DTYPE_BFLOAT16) {
        want = boxBytes(full.bytes, p.shape, p.offset, p.extent, 2);
      } else {
        const wsync_block_scaling_t* s = nullptr;
        for (const auto& [tensor, sc] : me.scalings)
          if (tensor == weight) s = &sc;
        ASSERT_NE(s, nullptr);
        const bq::Quantized q = bq::referenceQuantize(full, internal(*s));
        const bool values = p.tensor == weight;
        want = values ? boxBytes(q.values, p.shape, p.offset, p.extent, 1)
                      : boxBytes(q.scales, p.shape, p.offset, p.extent,
                                 bq::scaleSize(internal(*s).format));
      }
      const std::vector<uint8_t> got(data[b], data[b] + want.size());
      ASSERT_EQ(got, want) << "rollout " << r << " buffer " << buf.name << " version " << v;
      ++checked;
    }
  });
  EXPECT_EQ(out.failures, 0);
  for (size_t r = 0; r < out.commit.size(); ++r)
    EXPECT_EQ(out.commit[r], WSYNC_SUCCESS) << out.errors[r];
  EXPECT_GT(checked.load(), 0);
  // Delta: some version after the first went as patches (fewer bytes on the wire than dense).
  if (spec.delta) EXPECT_GT(out.patched_versions, 0);
}

// Commit fails on every rank with MISMATCH, the message naming what `needle` says.
void expectCommitMismatch(const std::vector<RolloutRank>& rollouts, const std::string& needle) {
  JobSpec spec;
  for (int t = 0; t < 3; ++t)
    spec.trainers.push_back(trainerBuffers(t));
  spec.rollouts = rollouts;
  spec.weights = weightsOf;
  const Outcome out = runJob(spec, [](int, uint64_t, const std::vector<const uint8_t*>&) {});
  for (size_t r = 0; r < out.commit.size(); ++r) {
    EXPECT_EQ(out.commit[r], WSYNC_ERR_MISMATCH) << out.errors[r];
    EXPECT_NE(out.errors[r].find(needle), std::string::npos) << out.errors[r];
  }
}

std::string integrityName(const ::testing::TestParamInfo<Integrity>& info) {
  switch (info.param) {
    case Integrity::kPlain:
      return "Plain";
    case Integrity::kChecksums:
      return "Checksums";
    case Integrity::kDelta:
      return "Delta";
  }
  return "?";
}
INSTANTIATE_TEST_SUITE_P(Integrity, BlockScaledJob,
                         ::testing::Values(Integrity::kPlain, Integrity::kChecksums,
                                           Integrity::kDelta),
                         integrityName);

TEST(BlockScaledJobErrors, AShardThatCutsABlockIsNamedAtCommit) {
  std::vector<RolloutRank> rollouts(2);
  for (int r = 0; r < 2; ++r) {  // TP 2 over columns at 100: cuts the first 128-wide block
    const int64_t c0 = r == 0 ? 0 : 100, c1 = r == 0 ? 100 : 256;
    rollouts[static_cast<size_t>(r)].scalings = {
        {"w", scaling(WSYNC_SCALE_FLOAT32, 128, 128, "w_scale")}};
    rollouts[static_cast<size_t>(r)].buffers = {
        {"w", WSYNC_DTYPE_FLOAT8_E4M3, {{"w", kW, {0, c0}, {300, c1 - c0}}}}};
  }
  expectCommitMismatch(rollouts, "cuts blocks of 128 along dim 1");
}

TEST(BlockScaledJobErrors, AScaleTensorOfTheWrongShapeIsNamedAtCommit) {
  std::vector<RolloutRank> rollouts(1);
  rollouts[0].scalings = {{"w", scaling(WSYNC_SCALE_FLOAT32, 128, 128, "w_scale")}};
  rollouts[0].buffers = {{"w", WSYNC_DTYPE_FLOAT8_E4M3, {{"w", kW, {0, 0}, kW}}},
                         {"w_scale", WSYNC_DTYPE_FLOAT32, {{"w_scale", {2, 2}, {0, 0}, {2, 2}}}}};
  expectCommitMismatch(rollouts, "'w_scale' is declared with shape [2, 2]");
}

TEST(BlockScaledJobErrors, RanksOfOneReplicaThatDisagreeAreNamedAtCommit) {
  std::vector<RolloutRank> rollouts(2);
  rollouts[0].scalings = {{"w", scaling(WSYNC_SCALE_FLOAT32, 128, 128, "w_scale")}};
  rollouts[1].scalings = {{"w", scaling(WSYNC_SCALE_POW2_FLOAT32, 128, 128, "w_scale")}};
  for (int r = 0; r < 2; ++r) {
    rollouts[static_cast<size_t>(r)].buffers = {
        {"w", WSYNC_DTYPE_FLOAT8_E4M3, {{"w", kW, {0, 128 * r}, {300, 128}}}}};
  }
  expectCommitMismatch(rollouts, "ranks of one replica must agree");
}

// Replicas that join the running job: one with the scheme the job planned at commit gets its
// first version from the running replica (peer cold start of float8 bytes and scales) and every
// later one from the trainers, bit-equal; one asking for a scheme nobody held at commit is refused
// with UNSUPPORTED naming the tensor, and the job goes on.
TEST(BlockScaledJobJoin, AJoinerGetsPlannedSchemesAndIsRefusedOthers) {
  const auto fp32 = scaling(WSYNC_SCALE_FLOAT32, 128, 128, "w_scale");
  const auto pow2 = scaling(WSYNC_SCALE_POW2_FLOAT32, 128, 128, "w_scale");
  auto replica = [&](int id, uint64_t join_after, const wsync_block_scaling_t& s) {
    RolloutRank me;
    me.replica = id;
    me.join_after = join_after;
    me.scalings = {{"w", s}};
    me.buffers = {{"w", WSYNC_DTYPE_FLOAT8_E4M3, {{"w", kW, {0, 0}, kW}}},
                  {"w_scale", WSYNC_DTYPE_FLOAT32, {{"w_scale", {3, 2}, {0, 0}, {3, 2}}}}};
    return me;
  };
  JobSpec spec;
  for (int t = 0; t < 3; ++t) {
    std::vector<Buffer> only_w = trainerBuffers(t);
    only_w.resize(1);
    spec.trainers.push_back(only_w);
  }
  spec.rollouts = {replica(0, 0, fp32), replica(1, 3, fp32), replica(2, 3, pow2)};
  spec.versions = 60;
  spec.publish_gap_ms = 20;
  spec.weights = weightsOf;
  std::atomic<int> joiner_checked{0};
  const wsync::BlockScaling ref = internal(fp32);
  const Outcome out = runJob(spec, [&](int r, uint64_t v, const std::vector<const uint8_t*>& data) {
    const bq::Quantized q = bq::referenceQuantize(weightsOf("w", v), ref);
    ASSERT_EQ(std::vector<uint8_t>(data[0], data[0] + q.values.size()), q.values)
        << "rollout " << r << " version " << v;
    ASSERT_EQ(std::vector<uint8_t>(data[1], data[1] + q.scales.size()), q.scales)
        << "rollout " << r << " version " << v;
    if (r == 1) ++joiner_checked;
  });
  EXPECT_EQ(out.failures, 0);
  EXPECT_EQ(out.commit[0], WSYNC_SUCCESS) << out.errors[0];
  EXPECT_EQ(out.commit[1], WSYNC_SUCCESS) << out.errors[1];
  EXPECT_GT(joiner_checked.load(), 1);
  EXPECT_NE(out.commit[2], WSYNC_SUCCESS);
  EXPECT_NE(out.errors[2].find("no replica held at commit"), std::string::npos) << out.errors[2];
}

// An elastic job (no fixed rollout rank: every replica joins at run time) plans no block scaling
// at commit, and the trainers quantize only the schemes planned then (their quantizer is built
// from the commit's plan; a join's plan extension carries none). So a replica joining with block
// fp8 w is refused at once, UNSUPPORTED naming the tensor and what it needs, instead of waiting
// for bytes nobody quantizes; a bfloat16 replica joining beside it reads every version bit for bit
// and the trainers' publishes all complete.
TEST(BlockScaledJobJoin, ElasticJobRefusesBlockScaledJoinerNamingTheTensor) {
  const auto fp32 = scaling(WSYNC_SCALE_FLOAT32, 128, 128, "w_scale");
  RolloutRank fp8;
  fp8.replica = 1;
  fp8.join_after = 2;
  fp8.scalings = {{"w", fp32}};
  fp8.buffers = {{"w", WSYNC_DTYPE_FLOAT8_E4M3, {{"w", kW, {0, 0}, kW}}},
                 {"w_scale", WSYNC_DTYPE_FLOAT32, {{"w_scale", {3, 2}, {0, 0}, {3, 2}}}}};
  RolloutRank bf16;
  bf16.replica = 2;
  bf16.join_after = 4;
  bf16.buffers = {{"w", WSYNC_DTYPE_BFLOAT16, {{"w", kW, {0, 0}, kW}}}};
  JobSpec spec;
  for (int t = 0; t < 3; ++t) {
    std::vector<Buffer> only_w = trainerBuffers(t);
    only_w.resize(1);
    spec.trainers.push_back(only_w);
  }
  spec.rollouts = {fp8, bf16};  // both join: the coordinator has no fixed rollout rank
  spec.versions = 40;
  spec.publish_gap_ms = 20;
  spec.weights = weightsOf;
  std::atomic<int> fp8_read{0}, bf16_checked{0};
  const Outcome out = runJob(spec, [&](int r, uint64_t v, const std::vector<const uint8_t*>& data) {
    if (r == 0) return void(++fp8_read);
    const std::vector<uint8_t> want = weightsOf("w", v).bytes;
    ASSERT_EQ(std::vector<uint8_t>(data[0], data[0] + want.size()), want) << "version " << v;
    ++bf16_checked;
  });
  EXPECT_EQ(out.failures, 0);
  EXPECT_EQ(out.commit[0], WSYNC_ERR_UNSUPPORTED) << out.errors[0];
  for (const char* needle :
       {"joining replica 1 holds 'w' with block 128x128 float32 scales (scales 'w_scale')",
        "a block-scaled joiner needs a rollout with that scheme at commit",
        "this job had no fixed rollout rank at commit"}) {
    EXPECT_NE(out.errors[0].find(needle), std::string::npos) << out.errors[0];
  }
  EXPECT_LT(out.commit_ms[0], 5000.0) << "the refusal waited for something (the job's timeout?)";
  EXPECT_EQ(fp8_read.load(), 0);
  EXPECT_EQ(out.commit[1], WSYNC_SUCCESS) << out.errors[1];
  EXPECT_GT(bf16_checked.load(), 1);
}

// The C API over random layouts: a weight of random shape (2-D, or 3-D experts), a random scale
// format and block shape, 1-3 trainers holding a random grid partition of it (bfloat16 or float32;
// cuts anywhere, so blocks straddle trainers), one replica of 1-2 ranks sharding it along rows or
// columns at a block boundary, each with its rows or columns of scales: every rank's float8 bytes
// and scales equal the reference, every version (non-finite values from version 2 on).
TEST(BlockScaledJobRandom, RandomLayoutsMatchTheReference) {
  std::mt19937_64 rng(20261205);
  for (int it = 0; it < 6; ++it) {
    SCOPED_TRACE("iteration " + std::to_string(it));
    const wsync_scale_format_t formats[] = {WSYNC_SCALE_FLOAT32, WSYNC_SCALE_POW2_FLOAT32,
                                            WSYNC_SCALE_E8M0};
    const wsync_scale_format_t format = formats[it % 3];
    const int64_t rows_choice[] = {16, 32, 128};
    const int64_t cols_choice[] = {16, 64, 128};
    const int64_t block_rows = format == WSYNC_SCALE_E8M0 ? 1 : rows_choice[rng() % 3];
    const int64_t block_cols = format == WSYNC_SCALE_E8M0 ? 32 : cols_choice[rng() % 3];
    std::uniform_int_distribution<int64_t> dim(1, 300);
    const int64_t cols =
        format == WSYNC_SCALE_E8M0 ? 32 * (1 + static_cast<int64_t>(rng() % 8)) : dim(rng);
    std::vector<int64_t> shape = {dim(rng), cols};
    if (it % 2 == 1) shape.insert(shape.begin(), 1 + static_cast<int64_t>(rng() % 3));
    const wsync::Dims dims = dimsOf(shape);
    const int r = static_cast<int>(shape.size());
    const wsync_dtype_t trainer_dtype = rng() % 2 ? WSYNC_DTYPE_BFLOAT16 : WSYNC_DTYPE_FLOAT32;
    const wsync_block_scaling_t sc = scaling(format, block_rows, block_cols, "w_scale");
    const wsync::BlockScaling internal_sc = internal(sc);
    const wsync::Dims scale_dims = wsync::scaleShape(dims, internal_sc);

    JobSpec spec;
    spec.versions = 3;
    spec.weights = [&, it](const std::string&, uint64_t v) {
      std::mt19937_64 w(static_cast<uint64_t>(it) * 1000 + v);
      return bq::randomTensor(w, static_cast<wsync::DType>(trainer_dtype), dims, v >= 2 ? 2000 : 0);
    };
    const int trainers = 1 + static_cast<int>(rng() % 3);
    std::vector<int> parts(static_cast<size_t>(r), 1);
    parts[static_cast<size_t>(r - 2)] = 1 + static_cast<int>(rng() % 3);
    parts[static_cast<size_t>(r - 1)] = 1 + static_cast<int>(rng() % 2);
    const std::vector<wsync::Box> boxes = bq::randomPartition(rng, dims, parts);
    spec.trainers.resize(static_cast<size_t>(trainers));
    for (size_t i = 0; i < boxes.size(); ++i) {
      Piece p{"w", shape, {}, {}};
      for (int d = 0; d < r; ++d) {
        p.offset.push_back(boxes[i].offset[d]);
        p.extent.push_back(boxes[i].extent[d]);
      }
      spec.trainers[i % static_cast<size_t>(trainers)].push_back(
          {"w" + std::to_string(i), trainer_dtype, {p}});
    }
    for (auto& t : spec.trainers)  // a trainer without a piece registers an empty tensor box
      if (t.empty()) t.push_back({"none", trainer_dtype, {}});
    // The replica: 1 or 2 ranks, cut at a block boundary along rows or columns.
    const int d = r - 2 + static_cast<int>(rng() % 2);
    const int64_t block = d == r - 2 ? block_rows : block_cols;
    const int64_t cut =
        shape[static_cast<size_t>(d)] > block
            ? block * (1 + static_cast<int64_t>(
                               rng() %
                               static_cast<uint64_t>((shape[static_cast<size_t>(d)] - 1) / block)))
            : 0;
    const int ranks = cut > 0 ? 2 : 1;
    for (int k = 0; k < ranks; ++k) {
      RolloutRank me;
      me.scalings = {{"w", sc}};
      std::vector<int64_t> off(static_cast<size_t>(r), 0);
      std::vector<int64_t> ext = shape;
      if (ranks == 2) {
        off[static_cast<size_t>(d)] = k == 0 ? 0 : cut;
        ext[static_cast<size_t>(d)] = k == 0 ? cut : shape[static_cast<size_t>(d)] - cut;
      }
      wsync::Box box;
      box.offset = dimsOf(off);
      box.extent = dimsOf(ext);
      const wsync::Box cover = wsync::blockCover(box, internal_sc);
      std::vector<int64_t> scale_shape, cover_off, cover_ext;
      for (int e = 0; e < r; ++e) {
        scale_shape.push_back(scale_dims[e]);
        cover_off.push_back(cover.offset[e]);
        cover_ext.push_back(cover.extent[e]);
      }
      me.buffers.push_back({"w", WSYNC_DTYPE_FLOAT8_E4M3, {{"w", shape, off, ext}}});
      me.buffers.push_back({"w_scale",
                            format == WSYNC_SCALE_E8M0 ? WSYNC_DTYPE_UINT8 : WSYNC_DTYPE_FLOAT32,
                            {{"w_scale", scale_shape, cover_off, cover_ext}}});
      spec.rollouts.push_back(me);
    }
    std::atomic<int> checked{0};
    const Outcome out =
        runJob(spec, [&](int rank, uint64_t v, const std::vector<const uint8_t*>& data) {
          const bq::Quantized q = bq::referenceQuantize(spec.weights("w", v), internal_sc);
          const RolloutRank& me = spec.rollouts[static_cast<size_t>(rank)];
          for (size_t b = 0; b < 2; ++b) {
            const Piece& p = me.buffers[b].pieces[0];
            const std::vector<uint8_t> want =
                b == 0 ? boxBytes(q.values, p.shape, p.offset, p.extent, 1)
                       : boxBytes(q.scales, p.shape, p.offset, p.extent,
                                  bq::scaleSize(internal_sc.format));
            ASSERT_EQ(std::vector<uint8_t>(data[b], data[b] + want.size()), want)
                << "rollout " << rank << " " << me.buffers[b].name << " version " << v;
            ++checked;
          }
        });
    EXPECT_EQ(out.failures, 0);
    for (size_t k = 0; k < out.commit.size(); ++k)
      EXPECT_EQ(out.commit[k], WSYNC_SUCCESS) << out.errors[k];
    EXPECT_GT(checked.load(), 0);
  }
}

}  // namespace
