// The checksum components of the contexts, without sockets: what trainers sum per rollout rank
// (TrainerChecksums) against what a rollout rank finds in its slot (RolloutChecksums). A slot that
// holds what was sent verifies; a wrong byte (or a patch that could not be applied) fails with a
// ChecksumFailed (the coordinator's cue to re-send) that names the trainer and its tensors.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <numeric>

#include "runtime/rollout_checksums.h"
#include "runtime/trainer_checksums.h"

namespace wsync {
namespace {

constexpr uint64_t kVersion = 5;

// Two trainers, one rollout rank (rank 0) with two float32 buffers in a 4 KiB slot:
//  - trainer 0 writes tensor "embed" (8 elements) into buffer 0, one run;
//  - trainer 1 writes tensor "layers.0.w" (a 2x3 region of its 2x4 buffer, columns 1..3) into
//    buffer 1, rows of 3.
class RuntimeChecksumsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::iota(embed_.begin(), embed_.end(), 1.0f);
    std::iota(weight_.begin(), weight_.end(), 100.0f);
    WriteOp embed;
    embed.tensor = 0;
    embed.src_rank = 0;
    embed.src_buffer = 0;
    embed.dst_rank = 0;
    embed.dst_buffer = 0;
    embed.run = 8;
    WriteOp weight;
    weight.tensor = 1;
    weight.src_rank = 1;
    weight.src_buffer = 0;
    weight.dst_rank = 0;
    weight.dst_buffer = 1;
    Region strided;
    strided.src_offset = 1;
    strided.count[0] = 3;
    strided.count[1] = 2;
    strided.src_stride[0] = 4;
    strided.dst_stride[0] = 3;
    rollout_plan_.role = Role::kRollout;
    rollout_plan_.tensors = {{"embed", Dims{8}}, {"layers.0.w", Dims{2, 4}}};
    setRegion(weight, strided, rollout_plan_.shapes);
    rollout_plan_.writes = {embed, weight};
    // Each trainer's view: its own write, its tensor first in its table.
    trainer_plans_[0].tensors = {{"embed", Dims{8}}};
    trainer_plans_[0].writes = {embed};
    trainer_plans_[1].tensors = {{"layers.0.w", Dims{2, 4}}};
    weight.tensor = 0;
    weight.run = 0;
    setRegion(weight, strided, trainer_plans_[1].shapes);
    trainer_plans_[1].writes = {weight};
    // The slot as the writes leave it.
    std::memcpy(slot_.data() + offsets_[0], embed_.data(), sizeof(embed_));
    for (int row = 0; row < 2; ++row) {
      std::memcpy(slot_.data() + offsets_[1] + static_cast<size_t>(row) * 3 * sizeof(float),
                  weight_.data() + 1 + static_cast<ptrdiff_t>(row) * 4, 3 * sizeof(float));
    }
  }

  // What trainer `t` sends rollout 0, summed as SentChecksums carries it.
  uint64_t trainerSum(int32_t t) {
    const uint8_t* source = t == 0 ? reinterpret_cast<const uint8_t*>(embed_.data())
                                   : reinterpret_cast<const uint8_t*>(weight_.data());
    TrainerChecksums sums;
    sums.addWrites(
        trainer_plans_[t], [&](int32_t) { return source; }, [](size_t) { return nullptr; });
    EXPECT_TRUE(sums.build(0, MemoryKind::kHost, -1).isOk());
    Result<std::vector<RankChecksum>> got =
        sums.sums([](int32_t) { return true; }, nullptr, std::chrono::milliseconds(1000));
    EXPECT_TRUE(got.isOk()) << got.status().toString();
    EXPECT_EQ(got->size(), 1u);
    EXPECT_EQ(got->front().rank, 0);
    return got->front().sum;
  }

  VerifyMsg verifyMsg() { return VerifyMsg{kVersion, 0, {{0, trainerSum(0)}, {1, trainerSum(1)}}}; }

  Result<std::optional<ChecksumFailedMsg>> verify(const VerifyMsg& msg,
                                                  const RolloutChecksums::PatchFailures& failures) {
    RolloutChecksums checksums(rollout_plan_, offsets_, 0, MemoryKind::kHost, -1);
    return checksums.verify(msg, slot_.data(), failures, "rollout 0, version 5", nullptr,
                            std::chrono::milliseconds(1000));
  }

  std::array<float, 8> embed_{};
  std::array<float, 8> weight_{};
  RankPlan rollout_plan_;
  RankPlan trainer_plans_[2];
  std::vector<uint64_t> offsets_{0, 256};
  std::vector<uint8_t> slot_ = std::vector<uint8_t>(4096, 0);
};

TEST_F(RuntimeChecksumsTest, SlotHoldingWhatWasSentVerifies) {
  Result<std::optional<ChecksumFailedMsg>> outcome = verify(verifyMsg(), {});
  ASSERT_TRUE(outcome.isOk()) << outcome.status().toString();
  EXPECT_FALSE(outcome->has_value()) << (*outcome)->detail;
}

TEST_F(RuntimeChecksumsTest, WrongByteFailsNamingTheTrainerAndItsTensor) {
  const VerifyMsg msg = verifyMsg();
  slot_[offsets_[1] + 3 * sizeof(float) + 1] ^= 0x40;  // the second row of "layers.0.w"
  Result<std::optional<ChecksumFailedMsg>> outcome = verify(msg, {});
  ASSERT_TRUE(outcome.isOk()) << outcome.status().toString();
  ASSERT_TRUE(outcome->has_value());
  const ChecksumFailedMsg& failed = **outcome;
  EXPECT_EQ(failed.version, kVersion);
  EXPECT_EQ(failed.trainers, std::vector<int32_t>{1});  // the coordinator re-sends its bytes
  EXPECT_EQ(failed.detail,
            "rollout 0, version 5: the bytes from trainer 1 ('layers.0.w') do not match their "
            "checksum");
  // Bytes outside every received region are no trainer's: they change no sum.
  slot_[offsets_[1] + 3 * sizeof(float) + 1] ^= 0x40;
  slot_[4000] ^= 0xFF;
  outcome = verify(msg, {});
  ASSERT_TRUE(outcome.isOk());
  EXPECT_FALSE(outcome->has_value());
}

TEST_F(RuntimeChecksumsTest, PatchThatCouldNotBeAppliedFailsThatTrainer) {
  Result<std::optional<ChecksumFailedMsg>> outcome =
      verify(verifyMsg(), {{0, "no ready slot holds base version 4"}});
  ASSERT_TRUE(outcome.isOk());
  ASSERT_TRUE(outcome->has_value());
  EXPECT_EQ((*outcome)->trainers, std::vector<int32_t>{0});
  EXPECT_EQ((*outcome)->detail,
            "rollout 0, version 5: the bytes from trainer 0 ('embed') could not be patched: no "
            "ready slot holds base version 4");
}

TEST_F(RuntimeChecksumsTest, SumMissingFromVerifyFailsThatTrainer) {
  VerifyMsg msg = verifyMsg();
  msg.sums.pop_back();  // nothing expected from trainer 1, yet its bytes are there
  Result<std::optional<ChecksumFailedMsg>> outcome = verify(msg, {});
  ASSERT_TRUE(outcome.isOk());
  ASSERT_TRUE(outcome->has_value());
  EXPECT_EQ((*outcome)->trainers, std::vector<int32_t>{1});
}

TEST_F(RuntimeChecksumsTest, TrainerSumsOnlyRanksWhoseReplicaTakesTheVersion) {
  const auto* source = reinterpret_cast<const uint8_t*>(embed_.data());
  TrainerChecksums sums;
  sums.addWrites(
      trainer_plans_[0], [&](int32_t) { return source; }, [](size_t) { return nullptr; });
  ASSERT_TRUE(sums.build(2, MemoryKind::kHost, -1).isOk());
  EXPECT_EQ(sums.coveredExtensions(), 2u);
  Result<std::vector<RankChecksum>> got =
      sums.sums([](int32_t) { return false; }, nullptr, std::chrono::milliseconds(1000));
  ASSERT_TRUE(got.isOk());
  EXPECT_TRUE(got->empty());
  // The span as sent: the source region of a non-converting op, its destination in the slot.
  const ChecksumSpan span =
      TrainerChecksums::sentSpan(trainer_plans_[1], trainer_plans_[1].writes[0], source, nullptr);
  EXPECT_EQ(span.src, reinterpret_cast<uintptr_t>(source) + sizeof(float));
  EXPECT_EQ(span.src_pitch, 4 * sizeof(float));
  EXPECT_EQ(span.dst_pitch, 3 * sizeof(float));
  EXPECT_EQ(span.rows, 2u);
}

}  // namespace
}  // namespace wsync
