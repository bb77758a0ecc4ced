// The cluster model (benchmarks/cluster_model/cluster_model.h) on small plans whose link loads and
// times are computed by hand in each test, the rollout formats' bytes (rollout_format.h), the
// validation ranks' version changes (version_changes.h) and the cluster description parser.
#include "cluster_model.h"

#include <gtest/gtest.h>

#include <cmath>

#include "cluster_spec.h"
#include "layout/builders.h"
#include "plan/planner.h"
#include "rollout_format.h"
#include "version_changes.h"

namespace wsync::cluster {
namespace {

// 1 rank per node, 1 NIC of 8 Gbit/s (1 GB/s), no latency terms: times are bytes / 1e9.
ClusterSpec simpleSpec() {
  ClusterSpec s;
  s.trainer = {1, 1, 8.0};
  s.rollout = {1, 1, 8.0};
  s.network_latency_us = 0;
  s.message_overhead_us = 0;
  s.control_ms = 0;
  return s;
}

WriteOp write(int32_t src, int32_t dst, int64_t elements, DType dst_dtype = DType::kFloat32) {
  WriteOp op;
  op.tensor = 0;
  op.src_rank = src;
  op.dst_rank = dst;
  op.src_buffer = op.dst_buffer = 0;
  op.src_dtype = DType::kFloat32;
  op.dst_dtype = dst_dtype;
  op.run = elements;
  return op;
}

Plan planOf(int trainers, int rollouts, std::vector<WriteOp> writes) {
  Plan p;
  p.tensors.push_back({"t", Dims{1 << 20}});
  p.writes = std::move(writes);
  p.stats.trainer_ranks = trainers;
  p.stats.rollout_ranks = rollouts;
  return p;
}

const LinkLoad* findLink(const Prediction& p, const std::string& name) {
  for (const LinkLoad& l : p.links)
    if (l.name == name) return &l;
  return nullptr;
}

std::vector<MemoryKind> hostRanks(int n) {
  return std::vector<MemoryKind>(n, MemoryKind::kHost);
}

TEST(ClusterModel, TwoSendersIntoOneReceiverMakeItsNicTheBottleneck) {
  // Trainers 0 and 1 (nodes 0, 1) each send 250 M float32 = 1 GB to rollout 0: the rollout NIC in
  // carries 2 GB -> 2 s; each trainer NIC out 1 GB -> 1 s.
  const Plan plan = planOf(2, 1, {write(0, 0, 250'000'000), write(1, 0, 250'000'000)});
  Result<Prediction> p = predictSync(plan, hostRanks(2), hostRanks(1), simpleSpec());
  ASSERT_TRUE(p.isOk()) << p.status().toString();
  EXPECT_EQ(p->trainer_nodes, 2);
  EXPECT_EQ(p->rollout_nodes, 1);
  EXPECT_EQ(p->bottleneck_link, "rollout-node0/nic0/rx");
  EXPECT_DOUBLE_EQ(p->predicted_seconds, 2.0);
  EXPECT_DOUBLE_EQ(p->bytes_over_network, 2e9);
  EXPECT_EQ(p->busiest_rank, "rollout 0");
  ASSERT_NE(findLink(*p, "trainer-node1/nic0/tx"), nullptr);
  EXPECT_DOUBLE_EQ(findLink(*p, "trainer-node1/nic0/tx")->seconds, 1.0);
}

TEST(ClusterModel, BytesAreCountedInTheDestinationDtype) {
  // 500 M elements converted to bfloat16 on the sender: 1 GB on the wire, not 2.
  const Plan plan = planOf(1, 1, {write(0, 0, 500'000'000, DType::kBFloat16)});
  Result<Prediction> p = predictSync(plan, hostRanks(1), hostRanks(1), simpleSpec());
  ASSERT_TRUE(p.isOk());
  EXPECT_DOUBLE_EQ(p->bytes_delivered, 1e9);
  EXPECT_DOUBLE_EQ(p->predicted_seconds, 1.0);
}

TEST(ClusterModel, RanksShareNodeNicsAndSpreadOverSeveral) {
  // 4 trainer ranks on one node with 2 NICs: ranks 0,1 -> NIC 0, ranks 2,3 -> NIC 1. Each sends
  // 0.5 GB: each NIC out carries 1 GB (1 s at 1 GB/s); a rollout node of 1 rank with 4 NICs
  // spreads its 2 GB in over all four (0.5 s each).
  ClusterSpec s = simpleSpec();
  s.trainer = {4, 2, 8.0};
  s.rollout = {1, 4, 8.0};
  const Plan plan = planOf(4, 1,
                           {write(0, 0, 125'000'000), write(1, 0, 125'000'000),
                            write(2, 0, 125'000'000), write(3, 0, 125'000'000)});
  Result<Prediction> p = predictSync(plan, hostRanks(4), hostRanks(1), s);
  ASSERT_TRUE(p.isOk());
  EXPECT_EQ(p->trainer_nodes, 1);
  EXPECT_DOUBLE_EQ(findLink(*p, "trainer-node0/nic0/tx")->bytes, 1e9);
  EXPECT_DOUBLE_EQ(findLink(*p, "trainer-node0/nic1/tx")->bytes, 1e9);
  for (int nic = 0; nic < 4; ++nic)
    EXPECT_DOUBLE_EQ(findLink(*p, "rollout-node0/nic" + std::to_string(nic) + "/rx")->bytes, 5e8);
  EXPECT_DOUBLE_EQ(p->predicted_seconds, 1.0);
  EXPECT_DOUBLE_EQ(p->trainer_nic_balance, 1.0);
  EXPECT_DOUBLE_EQ(p->rollout_nic_balance, 1.0);
}

TEST(ClusterModel, DeviceMemoryCrossesPcieAndLatencyTermsAdd) {
  // Device memory, PCIe 0.5 GB/s: 1 GB takes 2 s on each side's PCIe (slower than the 1 GB/s
  // NIC). Latency 100 us once, 1000 messages x 10 us = 10 ms of issue (not the bottleneck),
  // control 3 ms: 2 + 0.0001 + 0.003.
  ClusterSpec s = simpleSpec();
  s.pcie_gbyte = 0.5;
  s.network_latency_us = 100;
  s.message_overhead_us = 10;
  s.control_ms = 3;
  std::vector<WriteOp> ops;
  for (int i = 0; i < 1000; ++i)
    ops.push_back(write(0, 0, 250'000));
  const Plan plan = planOf(1, 1, ops);
  const std::vector<MemoryKind> dev{MemoryKind::kDevice};
  Result<Prediction> p = predictSync(plan, dev, dev, s);
  ASSERT_TRUE(p.isOk());
  EXPECT_EQ(p->bottleneck_link.substr(p->bottleneck_link.size() - 8), "/pcie/tx");
  EXPECT_NEAR(p->predicted_seconds, 2.0 + 1e-4 + 3e-3, 1e-12);
  EXPECT_NEAR(findLink(*p, "trainer0/issue")->seconds, 0.01, 1e-12);
  EXPECT_EQ(p->messages, 1000);
}

TEST(ClusterModel, SameNodeDeviceTrafficUsesNvlinkNotTheNic) {
  // A broadcast ring inside one rollout node: trainer 0 (node 0) -> rollout 0 -> rollout 1
  // (both on rollout node 0). 1 GB crosses the network once (trainer NIC out, rollout 0's NIC
  // in), then NVLink (2 GB/s) rollout 0 -> 1: 0.5 s.
  ClusterSpec s = simpleSpec();
  s.rollout = {2, 2, 8.0};
  s.nvlink_gbyte = 2;
  Plan plan = planOf(1, 2, {});
  BroadcastGroup g;
  g.tensor = 0;
  g.num_elements = 250'000'000;
  g.src = {0, 0, 0};
  g.dst = {{0, 0, 0}, {1, 0, 0}};
  plan.groups.push_back(g);
  const std::vector<MemoryKind> dev{MemoryKind::kDevice, MemoryKind::kDevice};
  s.pcie_gbyte = 100;
  Result<Prediction> p = predictSync(plan, {MemoryKind::kDevice}, dev, s);
  ASSERT_TRUE(p.isOk());
  EXPECT_DOUBLE_EQ(p->bytes_delivered, 2e9);
  EXPECT_DOUBLE_EQ(p->bytes_over_network, 1e9);
  EXPECT_DOUBLE_EQ(p->bytes_within_nodes, 1e9);
  EXPECT_DOUBLE_EQ(findLink(*p, "rollout0/nvlink/tx")->seconds, 0.5);
  EXPECT_EQ(findLink(*p, "rollout-node0/nic1/rx"), nullptr);  // rollout 1 got it by NVLink
  EXPECT_DOUBLE_EQ(p->bandwidth_seconds, 1.0);
}

TEST(ClusterModel, BinomialBroadcastChargesTheRootOncePerRound) {
  // 1 sender, 3 receivers on their own nodes, binomial: rounds 0 -> 1, then 0 -> 2 and 1 -> 3.
  // The root's NIC sends the 1 GB twice (2 s); two rounds of 50 us latency.
  ClusterSpec s = simpleSpec();
  s.broadcast = BroadcastAlgorithm::kBinomial;
  s.network_latency_us = 50;
  Plan plan = planOf(1, 3, {});
  BroadcastGroup g;
  g.num_elements = 250'000'000;
  g.src = {0, 0, 0};
  g.dst = {{0, 0, 0}, {1, 0, 0}, {2, 0, 0}};
  plan.groups.push_back(g);
  Result<Prediction> p = predictSync(plan, hostRanks(1), hostRanks(3), s);
  ASSERT_TRUE(p.isOk());
  EXPECT_DOUBLE_EQ(findLink(*p, "trainer-node0/nic0/tx")->bytes, 2e9);
  EXPECT_DOUBLE_EQ(findLink(*p, "rollout-node0/nic0/tx")->bytes, 1e9);
  EXPECT_EQ(p->bottleneck_link, "trainer-node0/nic0/tx");
  EXPECT_NEAR(p->predicted_seconds, 2.0 + 2 * 50e-6, 1e-12);
}

TEST(ClusterModel, RealPlanOfAnFsdpToTpLayout) {
  // A [1000, 1000] float32 tensor, 2 trainers Shard(0) (500 rows each), 2 rollouts wanting
  // column halves: each trainer sends 500 x 500 x 4 = 1 MB to each rollout, i.e. 2 MB out per
  // trainer and 2 MB in per rollout; with rows as messages, 500 messages per write op.
  std::vector<Registration> trainers(2), rollouts(2);
  for (int r = 0; r < 2; ++r) {
    trainers[r].role = Role::kTrainer;
    trainers[r].rank = r;
    ASSERT_TRUE(addSplit(trainers[r], "w", Dims{1000, 1000}, DType::kFloat32, 0, 2, r).isOk());
    rollouts[r].role = Role::kRollout;
    rollouts[r].rank = r;
    rollouts[r].replica = 0;
    ASSERT_TRUE(addSplit(rollouts[r], "w", Dims{1000, 1000}, DType::kFloat32, 1, 2, r).isOk());
  }
  Result<Plan> plan = makePlan(trainers, rollouts);
  ASSERT_TRUE(plan.isOk()) << plan.status().toString();
  ClusterSpec s = simpleSpec();
  s.rows_are_messages = true;
  Result<Prediction> p = predictSync(*plan, memoryKinds(trainers), memoryKinds(rollouts), s);
  ASSERT_TRUE(p.isOk());
  EXPECT_DOUBLE_EQ(p->bytes_over_network, 4e6);
  EXPECT_DOUBLE_EQ(findLink(*p, "trainer-node1/nic0/tx")->bytes, 2e6);
  EXPECT_DOUBLE_EQ(findLink(*p, "rollout-node0/nic0/rx")->bytes, 2e6);
  EXPECT_EQ(p->messages, 4 * 500);
  EXPECT_DOUBLE_EQ(p->predicted_seconds, 2e-3);
}

TEST(ClusterModel, MemoryKindsMustMatchThePlan) {
  const Plan plan = planOf(2, 1, {write(0, 0, 10)});
  Result<Prediction> p = predictSync(plan, hostRanks(1), hostRanks(1), simpleSpec());
  ASSERT_FALSE(p.isOk());
  EXPECT_EQ(p.status().code(), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(p.status().message().find("plan has 2"), std::string::npos);
}

TEST(ClusterModel, DeltaWireShareIsTheSmallestEncodingPerChunk) {
  // 4096-byte chunks of bf16 (2048 elements, 4096 dense bytes, 4-byte header):
  EXPECT_DOUBLE_EQ(deltaWireShare(-1, 2, 4096), 1.0);                                 // off: dense
  EXPECT_DOUBLE_EQ(deltaWireShare(0.0, 2, 4096), 4.0 / 4096);                         // header only
  EXPECT_DOUBLE_EQ(deltaWireShare(0.01, 2, 4096), (2048 * 0.01 * 4 + 4) / 4096);      // index list
  EXPECT_DOUBLE_EQ(deltaWireShare(0.2, 2, 4096), (256 + 2048 * 0.2 * 2 + 4) / 4096);  // bitmap
  EXPECT_DOUBLE_EQ(deltaWireShare(1.0, 2, 4096), (4096 + 4.0) / 4096);  // dense + header
}

TEST(ClusterModel, DeltaVersionsShrinkOnlyNetworkBytes) {
  // Trainer 0 -> rollout 0 across nodes, 500 M bf16 = 1 GB; 1% changed: index lists of 4 bytes per
  // changed element plus a 4-byte header per 4 KiB chunk.
  ClusterSpec spec = simpleSpec();
  spec.changed_share = 0.01;
  const Plan plan = planOf(1, 1, {write(0, 0, 500'000'000, DType::kBFloat16)});
  Result<Prediction> p = predictSync(plan, hostRanks(1), hostRanks(1), spec);
  ASSERT_TRUE(p.isOk()) << p.status().toString();
  const double share = deltaWireShare(0.01, 2, 4096);
  EXPECT_DOUBLE_EQ(p->bytes_over_network_dense, 1e9);
  EXPECT_DOUBLE_EQ(p->bytes_over_network, 1e9 * share);
  EXPECT_DOUBLE_EQ(p->bytes_delivered, 1e9);  // the rollout still holds the whole version
  EXPECT_DOUBLE_EQ(p->predicted_seconds, share);
}

TEST(ClusterModel, TwoRegionsShareOneLinkThatBecomesTheBottleneck) {
  // Two trainers on two nodes send 1 GB each to two rollouts on two nodes: every NIC carries 1 GB
  // (1 s), the one 8 Gbit/s region link carries 2 GB (2 s).
  ClusterSpec spec = simpleSpec();
  spec.region_link_gbit = 8;
  const Plan plan = planOf(2, 2, {write(0, 0, 250'000'000), write(1, 1, 250'000'000)});
  Result<Prediction> p = predictSync(plan, hostRanks(2), hostRanks(2), spec);
  ASSERT_TRUE(p.isOk()) << p.status().toString();
  EXPECT_EQ(p->bottleneck_link, "region-link");
  EXPECT_DOUBLE_EQ(p->predicted_seconds, 2.0);
  ASSERT_NE(findLink(*p, "region-link"), nullptr);
  EXPECT_EQ(findLink(*p, "region-link")->kind, LinkKind::kRegion);
}

TEST(RolloutFormat, PartialBlocksAreTheCoverMinusTheWholeBlocks) {
  const BlockScaling b128 = *formatScaling(RolloutFormat::kFp8Block128);
  const Dims shape{1000, 300};  // 8 x 3 blocks of 128, the last row and column uneven
  // Rows 0..447 (3.5 block rows), all columns: block row 3 is cut -> 3 partial blocks.
  EXPECT_EQ(partialBlocks(Box{Dims{0, 0}, Dims{448, 300}}, shape, b128), 3);
  // Rows 448..999: block row 3 cut again; the uneven last block row is whole (clipped) -> 3.
  EXPECT_EQ(partialBlocks(Box{Dims{448, 0}, Dims{552, 300}}, shape, b128), 3);
  // Aligned rows, columns 100..299: column block 0 cut -> one partial per block row (2 rows).
  EXPECT_EQ(partialBlocks(Box{Dims{128, 100}, Dims{256, 200}}, shape, b128), 2);
  EXPECT_EQ(partialBlocks(Box::whole(shape), shape, b128), 0);
  // MXFP8 (1 x 32 along columns): row shards never cut a block.
  const BlockScaling mx = *formatScaling(RolloutFormat::kMxfp8);
  EXPECT_EQ(partialBlocks(Box{Dims{0, 0}, Dims{7, 320}}, Dims{10, 320}, mx), 0);
  // Columns 16..79 cut column blocks 0 (0..31) and 2 (64..95) of each of the 7 rows.
  EXPECT_EQ(partialBlocks(Box{Dims{0, 16}, Dims{7, 64}}, Dims{10, 320}, mx), 7 * 2);
}

TEST(RolloutFormat, QuantizesLinearWeightsOnly) {
  EXPECT_TRUE(quantizedTensor("model.layers.0.mlp.down_proj.weight", Dims{7168, 2048}));
  EXPECT_TRUE(quantizedTensor("model.layers.3.mlp.experts.5.up_proj.weight", Dims{2048, 7168}));
  EXPECT_FALSE(quantizedTensor("model.embed_tokens.weight", Dims{1000, 64}));
  EXPECT_FALSE(quantizedTensor("lm_head.weight", Dims{1000, 64}));
  EXPECT_FALSE(quantizedTensor("model.layers.3.mlp.gate.weight", Dims{384, 7168}));
  EXPECT_FALSE(quantizedTensor("model.norm.weight", Dims{7168}));
}

TEST(RolloutFormat, CountsScalesAndThePartialMaximaOfStraddlingBlocks) {
  // One 448 x 256 weight: trainers FSDP 2 on dim 0 (224 rows each: block row 1 straddles both),
  // one rollout holding all of it. Blocks: 4 x 2 = 8 float32 scales = 32 bytes; 2 blocks straddle,
  // each with 2 holders: 4 partial maxima, 16 bytes into and out of the coordinator.
  const Dims shape{448, 256};
  std::vector<Registration> trainers(2), rollouts(1);
  for (int r = 0; r < 2; ++r) {
    trainers[r].role = Role::kTrainer;
    trainers[r].rank = r;
    const int32_t t = trainers[r].declareTensor("layers.0.mlp.down_proj.weight", shape);
    LocalBuffer buf;
    buf.name = "w";
    buf.dtype = DType::kBFloat16;
    buf.num_elements = 224 * 256;
    buf.pieces.push_back({t, Box{Dims{224 * r, 0}, Dims{224, 256}}, 0, Dims{256, 1}});
    trainers[r].buffers.push_back(buf);
  }
  rollouts[0].role = Role::kRollout;
  rollouts[0].replica = 0;
  const int32_t t = rollouts[0].declareTensor("layers.0.mlp.down_proj.weight", shape);
  LocalBuffer buf;
  buf.name = "w";
  buf.dtype = DType::kBFloat16;
  buf.num_elements = 448 * 256;
  buf.pieces.push_back({t, Box::whole(shape), 0, Dims{256, 1}});
  rollouts[0].buffers.push_back(buf);
  Result<Plan> plan = makePlan(trainers, rollouts, PlannerOptions{});
  ASSERT_TRUE(plan.isOk()) << plan.status().toString();
  Result<FormatCosts> c = buildFormatCosts(*plan, trainers, rollouts, RolloutFormat::kFp8Block128);
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_EQ(c->quantized_tensors, 1);
  EXPECT_DOUBLE_EQ(c->scale_bytes, 32);
  EXPECT_EQ(c->straddling_blocks, 2);
  EXPECT_EQ(c->partial_maxima, 4);
  EXPECT_EQ(c->amax_trainers, 2);
  EXPECT_DOUBLE_EQ(c->amax_bytes_in, 16);
  EXPECT_DOUBLE_EQ(c->amax_bytes_out, 16);
  // On the links: 448 x 256 one-byte elements + 32 scale bytes into the rollout; the coordinator
  // carries the maxima.
  ClusterSpec spec = simpleSpec();
  spec.rollout_format = RolloutFormat::kFp8Block128;
  Result<Prediction> p = predictSync(*plan, hostRanks(2), hostRanks(1), spec, &*c);
  ASSERT_TRUE(p.isOk()) << p.status().toString();
  EXPECT_DOUBLE_EQ(p->bytes_delivered, 448.0 * 256 + 32);
  EXPECT_DOUBLE_EQ(p->scale_bytes, 32);
  ASSERT_NE(findLink(*p, "coordinator/nic/rx"), nullptr);
  EXPECT_DOUBLE_EQ(findLink(*p, "coordinator/nic/rx")->bytes, 16);
  EXPECT_EQ(findLink(*p, "coordinator/nic/tx")->kind, LinkKind::kCoordinator);
  // MXFP8: 448 rows x 8 e8m0 scales = 3584 bytes; no block straddles a row shard.
  Result<FormatCosts> mx = buildFormatCosts(*plan, trainers, rollouts, RolloutFormat::kMxfp8);
  ASSERT_TRUE(mx.isOk());
  EXPECT_DOUBLE_EQ(mx->scale_bytes, 448 * 8);
  EXPECT_EQ(mx->partial_maxima, 0);
}

// A registration of one bf16 tensor [rows, cols] held as `pieces` boxes, each in its own buffer
// with row-major strides over its box.
Registration pieceRegistration(Role role, const Dims& shape, const std::vector<Box>& boxes) {
  Registration reg;
  reg.role = role;
  const int32_t t = reg.declareTensor("layers.0.mlp.up_proj.weight", shape);
  for (size_t i = 0; i < boxes.size(); ++i) {
    LocalBuffer buf;
    buf.name = "b" + std::to_string(i);
    buf.dtype = DType::kBFloat16;
    buf.num_elements = boxes[i].volume();
    buf.pieces.push_back({t, boxes[i], 0, Dims{boxes[i].extent[1], 1}});
    reg.buffers.push_back(buf);
  }
  return reg;
}

// The global tensor assembled from a registration's buffers.
std::vector<uint16_t> assemble(const Registration& reg,
                               const std::vector<std::vector<uint16_t>>& data, const Dims& shape) {
  std::vector<uint16_t> global(static_cast<size_t>(shape.product()), 0xFFFF);
  for (size_t b = 0; b < reg.buffers.size(); ++b) {
    const Box& box = reg.buffers[b].pieces[0].box;
    for (int64_t r = 0; r < box.extent[0]; ++r)
      for (int64_t c = 0; c < box.extent[1]; ++c)
        global[(box.offset[0] + r) * shape[1] + box.offset[1] + c] = data[b][r * box.extent[1] + c];
  }
  return global;
}

TEST(VersionChanges, TrainerAndRolloutLayoutsAgreeOnEveryVersion) {
  // Trainers hold rows (two shards), rollouts columns (three shards): after the same versions'
  // changes both hold the same tensor, and about share x elements changed per version.
  const Dims shape{96, 60};
  const Registration trainers = pieceRegistration(
      Role::kTrainer, shape, {Box{Dims{0, 0}, Dims{50, 60}}, Box{Dims{50, 0}, Dims{46, 60}}});
  const Registration rollouts =
      pieceRegistration(Role::kRollout, shape,
                        {Box{Dims{0, 0}, Dims{96, 20}}, Box{Dims{0, 20}, Dims{96, 20}},
                         Box{Dims{0, 40}, Dims{96, 20}}});
  auto init = [](const Registration& reg, std::vector<std::vector<uint16_t>>& data,
                 std::vector<void*>& ptrs) {
    for (const LocalBuffer& b : reg.buffers) {
      data.emplace_back(static_cast<size_t>(b.num_elements));
      ptrs.push_back(data.back().data());
    }
    for (size_t b = 0; b < reg.buffers.size(); ++b)
      fillOrCheckInitial(reg, reg.buffers[b], ptrs[b], /*check=*/false);
  };
  std::vector<std::vector<uint16_t>> td, rd;
  std::vector<void*> tp, rp;
  init(trainers, td, tp);
  init(rollouts, rd, rp);
  const VersionChanges tc(trainers, 0.05), rc(rollouts, 0.05);
  std::vector<uint16_t> previous = assemble(trainers, td, shape);
  for (uint64_t v = 2; v <= 4; ++v) {
    EXPECT_EQ(tc.apply(v, tp), std::llround(0.05 * 96 * 60));  // every draw lands on one trainer
    EXPECT_EQ(rc.apply(v, rp), std::llround(0.05 * 96 * 60));
    const std::vector<uint16_t> t = assemble(trainers, td, shape);
    EXPECT_EQ(t, assemble(rollouts, rd, shape)) << "version " << v;
    int64_t changed = 0;
    for (size_t i = 0; i < t.size(); ++i)
      changed += t[i] != previous[i];
    EXPECT_GT(changed, 0.04 * 96 * 60);  // repeated draws may change an element twice
    EXPECT_LE(changed, std::llround(0.05 * 96 * 60));
    previous = t;
  }
  // A rollout that applied one version fewer differs.
  std::vector<std::vector<uint16_t>> ld;
  std::vector<void*> lp;
  init(rollouts, ld, lp);
  for (uint64_t v = 2; v <= 3; ++v)
    rc.apply(v, lp);
  EXPECT_NE(assemble(rollouts, ld, shape), previous);
  EXPECT_GT(countPieceMismatches(rollouts, rollouts.buffers[0], ld[0].data(), rd[0].data()), 0);
}

TEST(ClusterSpecText, ParsesKeysCommentsAndRoundTrips) {
  ClusterSpec s;
  ASSERT_TRUE(parseClusterSpec("# a comment\nname = test  # trailing\ngpus_per_node = 4\n"
                               "nic_gbit = 200\nrollout_nics_per_node = 2\n"
                               "broadcast = binomial\nrows_are_messages = true\n"
                               "changed_share = 0.02\nregion_link_gbit = 100\n"
                               "rollout_format = mxfp8\ncoordinator_nic_gbit = 25\n",
                               &s)
                  .isOk());
  EXPECT_EQ(s.name, "test");
  EXPECT_EQ(s.trainer.ranks_per_node, 4);
  EXPECT_EQ(s.rollout.ranks_per_node, 4);
  EXPECT_EQ(s.rollout.nics_per_node, 2);
  EXPECT_EQ(s.trainer.nics_per_node, 8);  // default kept
  EXPECT_DOUBLE_EQ(s.trainer.nic_gbit, 200);
  EXPECT_EQ(s.broadcast, BroadcastAlgorithm::kBinomial);
  EXPECT_TRUE(s.rows_are_messages);
  EXPECT_DOUBLE_EQ(s.changed_share, 0.02);
  EXPECT_DOUBLE_EQ(s.region_link_gbit, 100);
  EXPECT_EQ(s.rollout_format, RolloutFormat::kMxfp8);
  EXPECT_DOUBLE_EQ(s.coordinator_nic_gbit, 25);
  ClusterSpec again;
  ASSERT_TRUE(parseClusterSpec(formatClusterSpec(s), &again).isOk());
  EXPECT_EQ(formatClusterSpec(again), formatClusterSpec(s));
}

TEST(ClusterSpecText, RejectsUnknownKeysAndBadValuesNamingTheLine) {
  ClusterSpec s;
  Status st = parseClusterSpec("name = x\nnic_gbps = 3\n", &s);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("line 2"), std::string::npos);
  EXPECT_NE(st.message().find("nic_gbps"), std::string::npos);
  EXPECT_FALSE(parseClusterSpec("nic_gbit = -1\n", &s).isOk());
  EXPECT_FALSE(parseClusterSpec("gpus_per_node = 2.5\n", &s).isOk());
  EXPECT_FALSE(parseClusterSpec("wire_efficiency = 1.5\n", &s).isOk());
  EXPECT_FALSE(parseClusterSpec("just words\n", &s).isOk());
  EXPECT_FALSE(parseClusterSpec("rollout_format = fp4\n", &s).isOk());
}

}  // namespace
}  // namespace wsync::cluster
