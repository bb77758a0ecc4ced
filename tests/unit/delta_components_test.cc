// The delta components of the contexts, without a coordinator or sockets (docs/delta.md): a
// trainer's TrainerDeltaState sends patches through a real UCX transport into the landing area a
// RolloutDelta exposed, and the rollout rebuilds the version in a free slot from the slot holding
// the base. One trainer, one rollout rank, three write ops: float32 converted to bfloat16 (the
// host converts into its staging), a bfloat16 region strided on the rollout side and one strided
// on the trainer side. Every element of every op's region is checked for each version.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "delta/delta_landing.h"
#include "runtime/rollout_delta.h"
#include "runtime/trainer_delta.h"
#include "runtime/trainer_membership.h"
#include "runtime/trainer_quantizer.h"
#include "runtime/trainer_sources.h"
#include "store/slot_store.h"
#include "transport/registry.h"

namespace wsync {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t kSharePpm = 250000;  // 0.25
constexpr int64_t kRun = 4096;          // op 0: elements
constexpr int64_t kRows = 64, kCols = 128, kWide = 256;

uint16_t bf16(float f) {  // exact for the small integers used here
  uint32_t bits = 0;
  std::memcpy(&bits, &f, 4);
  return static_cast<uint16_t>(bits >> 16);
}
float fromBf16(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f = 0;
  std::memcpy(&f, &bits, 4);
  return f;
}

class DeltaComponentsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Trainer buffers: 0 float32 [4096]; 1 bfloat16 [64 x 128]; 2 bfloat16 [64 x 256] of which op 2
    // sends columns 0..127. Rollout buffers (bfloat16): 0 [4096]; 1 [64 x 256] of which op 1
    // fills columns 0..127; 2 [64 x 128].
    a_.assign(kRun, 0.0F);
    b_.assign(kRows * kCols, 0);
    c_.assign(kRows * kWide, 0);
    for (int64_t i = 0; i < kRun; ++i)
      a_[i] = static_cast<float>(i % 50);
    for (int64_t i = 0; i < kRows * kCols; ++i)
      b_[i] = bf16(static_cast<float>(i % 40));
    for (int64_t i = 0; i < kRows * kWide; ++i)
      c_[i] = bf16(static_cast<float>(i % 30));
    buffers_ = {{"a", DType::kFloat32, MemoryKind::kHost, kRun, {}},
                {"b", DType::kBFloat16, MemoryKind::kHost, kRows * kCols, {}},
                {"c", DType::kBFloat16, MemoryKind::kHost, kRows * kWide, {}}};
    data_ = {a_.data(), b_.data(), c_.data()};
    ASSERT_TRUE(sources_.setUp(buffers_, data_, quantizer_, MemoryKind::kHost, 0, false).isOk());

    WriteOp a;
    a.tensor = 0;
    a.src_rank = 0;
    a.src_buffer = 0;
    a.dst_rank = 0;
    a.dst_buffer = 0;
    a.src_dtype = DType::kFloat32;
    a.dst_dtype = DType::kBFloat16;
    a.run = kRun;
    WriteOp b = a;
    b.tensor = 1;
    b.src_buffer = 1;
    b.dst_buffer = 1;
    b.src_dtype = DType::kBFloat16;
    b.run = 0;
    WriteOp c = b;
    c.tensor = 2;
    c.src_buffer = 2;
    c.dst_buffer = 2;
    Region rows_into_wide;  // op 1: rows of 128 into rows of 256
    rows_into_wide.count[0] = kCols;
    rows_into_wide.count[1] = kRows;
    rows_into_wide.src_stride[0] = kCols;
    rows_into_wide.dst_stride[0] = kWide;
    Region rows_from_wide = rows_into_wide;  // op 2: rows of 128 out of rows of 256
    rows_from_wide.src_stride[0] = kWide;
    rows_from_wide.dst_stride[0] = kCols;
    for (RankPlan* plan : {&trainer_plan_, &rollout_plan_}) {
      plan->tensors = {{"a", Dims{kRun}}, {"b", Dims{kRows, kWide}}, {"c", Dims{kRows, kCols}}};
      setRegion(b, rows_into_wide, plan->shapes);
      setRegion(c, rows_from_wide, plan->shapes);
      plan->writes = {a, b, c};
      plan->peers = {0};
    }
    trainer_plan_.role = Role::kTrainer;
    rollout_plan_.role = Role::kRollout;
    offsets_ = {0, kRun * 2, kRun * 2 + kRows * kWide * 2};
    slot_bytes_ = offsets_[2] + kRows * kCols * 2;
    staging_.assign(kRun * 2, 0);

    Result<const WriteBackend*> backend = targetBackendFor(MemoryKind::kHost, DeviceTransport{});
    ASSERT_TRUE(backend.isOk()) << backend.status().toString();
    Result<std::unique_ptr<WriteTransport>> transport = backend.value()->create(TransportSetup{});
    ASSERT_TRUE(transport.isOk()) << transport.status().toString();
    transport_ = std::move(transport).value();
    for (int s = 0; s < 2; ++s) {
      Result<std::unique_ptr<ExposedMemory>> slot = transport_->allocateExposed(slot_bytes_);
      ASSERT_TRUE(slot.isOk()) << slot.status().toString();
      std::memset(slot.value()->data(), 0, slot_bytes_);
      slots_.push_back(std::move(slot).value());
    }
    Result<std::unique_ptr<SlotStore>> store = SlotStore::create(2);
    ASSERT_TRUE(store.isOk());
    store_ = std::move(store).value();

    // The rollout rank exposes its landing area and cuts it into parts; the trainer learns its
    // part as the coordinator computes it (the same function).
    PeerInfo peer;
    peer.rank = 0;
    ASSERT_TRUE(rollout_
                    .exposeLanding(true, *transport_, MemoryKind::kHost, 0, slot_bytes_, 1,
                                   kSharePpm, &peer.delta_landing)
                    .isOk());
    ASSERT_FALSE(peer.delta_landing.empty());
    ASSERT_TRUE(rollout_.planParts(rollout_plan_, 1, kSharePpm).isOk());
    const uint64_t dense = slot_bytes_ - (kWide - kCols) * kRows * 2;
    const delta::LandingPart part = delta::landingParts({dense}, kSharePpm).front();
    peer.delta_landing_offset = part.offset;
    peer.delta_landing_bytes = part.bytes;
    ASSERT_TRUE(
        setUpDelta(trainer_plan_, {peer}, true, kSharePpm, MemoryKind::kHost, 0, trainer_).isOk());
    ASSERT_TRUE(transport_->connect(0, transport_->localAddress()).isOk());
    ASSERT_TRUE(attachDeltaLanding(peer, *transport_, trainer_).isOk());
    membership_.reset({0});
  }

  // Every trainer value changes by one for about one element in a hundred.
  void bump(int version) {
    uint64_t x = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(version);
    const auto next = [&x] {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      return x;
    };
    for (int k = 0; k < kRun / 100; ++k)
      a_[next() % kRun] += 1.0F;
    for (int k = 0; k < kRows * kCols / 100; ++k) {
      uint16_t& e = b_[next() % b_.size()];
      e = bf16(fromBf16(e) + 1.0F);
    }
    for (int k = 0; k < kRows * kWide / 100; ++k) {
      uint16_t& e = c_[next() % c_.size()];
      e = bf16(fromBf16(e) + 1.0F);
    }
  }

  // What the trainer's writes leave in a slot, as bfloat16 (the dense version).
  std::vector<uint16_t> expectedSlot() const {
    std::vector<uint16_t> slot(slot_bytes_ / 2, 0);
    for (int64_t i = 0; i < kRun; ++i)
      slot[i] = bf16(a_[i]);
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t col = 0; col < kCols; ++col) {
        slot[offsets_[1] / 2 + r * kWide + col] = b_[r * kCols + col];
        slot[offsets_[2] / 2 + r * kCols + col] = c_[r * kWide + col];
      }
    }
    return slot;
  }

  // The elements of slot `s` the ops write that differ from the expected version.
  int64_t wrongElements(int s) const {
    const std::vector<uint16_t> want = expectedSlot();
    const auto* got = static_cast<const uint16_t*>(slots_[s]->data());
    int64_t wrong = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const bool unwritten = i >= offsets_[1] / 2 && i < offsets_[2] / 2 &&
                             (i - offsets_[1] / 2) % kWide >= static_cast<size_t>(kCols);
      if (!unwritten && got[i] != want[i]) ++wrong;
    }
    return wrong;
  }

  // One send of `version` into `slot` with `base`; the wire bytes of the patches.
  uint64_t send(uint64_t version, int32_t slot, uint64_t base) {
    GoMsg go;
    go.version = version;
    go.slot_of_replica = {slot};
    go.base_of_replica = {base};
    const DeltaSendSources from{sources_, [this](size_t) { return staging_.data(); }};
    uint64_t wire = 0;
    const Status sent = sendDeltaPatches(go, trainer_plan_, trainer_, from, membership_, 0, &wire);
    EXPECT_TRUE(sent.isOk()) << sent.toString();
    EXPECT_TRUE(transport_->flush(10s).isOk());
    return wire;
  }

  std::vector<float> a_;
  std::vector<uint16_t> b_, c_;
  std::vector<LocalBuffer> buffers_;
  std::vector<void*> data_;
  TrainerQuantizer quantizer_;
  TrainerSources sources_;
  RankPlan trainer_plan_, rollout_plan_;
  std::vector<uint64_t> offsets_;
  uint64_t slot_bytes_ = 0;
  std::vector<uint8_t> staging_;
  std::unique_ptr<WriteTransport> transport_;
  std::vector<std::unique_ptr<ExposedMemory>> slots_;
  std::unique_ptr<SlotStore> store_;
  RolloutDelta rollout_;
  TrainerDeltaState trainer_;
  TrainerMembership membership_;
};

TEST_F(DeltaComponentsTest, PatchesRebuildEachVersionFromTheBaseSlot) {
  // Version 1 is dense: no base. The test lands it as the dense writes would.
  EXPECT_EQ(send(1, 0, 0), 0u);
  for (const TrainerDeltaState::Op& op : trainer_.ops)
    EXPECT_FALSE(op.patched);
  const std::vector<uint16_t> v1 = expectedSlot();
  std::memcpy(slots_[0]->data(), v1.data(), slot_bytes_);
  ASSERT_TRUE(store_->beginWrite(0, 1, 1s).isOk());
  ASSERT_TRUE(store_->markReady(0, 1).isOk());

  // Versions 2..5 alternate slots; each is rebuilt from the other slot's version.
  for (uint64_t v = 2; v <= 5; ++v) {
    const int32_t slot = static_cast<int32_t>(v % 2 == 0 ? 1 : 0);
    bump(static_cast<int>(v));
    const uint64_t wire = send(v, slot, v - 1);
    EXPECT_GT(wire, 0u);
    EXPECT_LT(wire * 5, slot_bytes_) << "version " << v << ": about 1 % changed";
    for (size_t i = 0; i < trainer_.ops.size(); ++i)
      EXPECT_TRUE(trainer_.ops[i].patched) << "op " << i << ", version " << v;
    ASSERT_TRUE(store_->beginWrite(slot, v, 1s).isOk());
    rollout_.setBase(v - 1);
    // Every op came as a patch: a staged slot would land none of them.
    EXPECT_EQ(rollout_.patchedOps(rollout_plan_, v), std::vector<bool>(3, true));
    EXPECT_TRUE(rollout_.patchedOps(rollout_plan_, v + 1).empty());
    const RolloutDelta::PatchFailures failed =
        rollout_.apply(rollout_plan_, offsets_, v, slot, *store_, slots_, 10s);
    EXPECT_TRUE(failed.empty()) << failed.front().second;
    EXPECT_EQ(wrongElements(slot), 0) << "version " << v;
    ASSERT_TRUE(store_->markReady(slot, v).isOk());
  }
}

TEST_F(DeltaComponentsTest, AMalformedAreaOrAMissingBaseIsNamedAndAStaleOneIgnored) {
  EXPECT_EQ(send(1, 0, 0), 0u);
  const std::vector<uint16_t> v1 = expectedSlot();
  std::memcpy(slots_[0]->data(), v1.data(), slot_bytes_);
  ASSERT_TRUE(store_->beginWrite(0, 1, 1s).isOk());
  ASSERT_TRUE(store_->markReady(0, 1).isOk());
  bump(2);
  ASSERT_GT(send(2, 1, 1), 0u);
  ASSERT_TRUE(store_->beginWrite(1, 2, 1s).isOk());

  // The area is of version 2: read as version 3 it carries nothing (every op came dense).
  rollout_.setBase(1);
  EXPECT_TRUE(rollout_.patchedOps(rollout_plan_, 3).empty());
  EXPECT_TRUE(rollout_.apply(rollout_plan_, offsets_, 3, 1, *store_, slots_, 10s).empty());
  // No ready slot holds base version 7.
  rollout_.setBase(7);
  RolloutDelta::PatchFailures failed =
      rollout_.apply(rollout_plan_, offsets_, 2, 1, *store_, slots_, 10s);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].first, 0);
  EXPECT_NE(failed[0].second.find("base version 7"), std::string::npos) << failed[0].second;
  // A damaged area (its first patch's table) fails trainer 0, naming the cause.
  rollout_.setBase(1);
  const auto sent = static_cast<const uint8_t*>(trainer_.staging.data());
  std::vector<uint8_t> damaged(sent, sent + trainer_.pairs[0].capacity);
  damaged[delta::kPairHeaderBytes + 8] ^= 0xFF;
  ASSERT_TRUE(transport_
                  ->write(trainer_.pairs[0].landing, trainer_.pairs[0].landing_offset,
                          damaged.data(), damaged.size())
                  .isOk());
  ASSERT_TRUE(transport_->flush(10s).isOk());
  failed = rollout_.apply(rollout_plan_, offsets_, 2, 1, *store_, slots_, 10s);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].first, 0);
  EXPECT_FALSE(failed[0].second.empty());
}

}  // namespace
}  // namespace wsync
