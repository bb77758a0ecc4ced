// TrainerPeers without a coordinator: a rollout rank's slots exposed by a real UCX transport in
// this process, reached through the backend the registry picks for the rank's transport name.
// Writes land in the named slot and buffer and nowhere else; `also` runs with the transport before
// the rank counts as connected; unknown ranks, slots, buffers and backends are named.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "runtime/trainer_peers.h"
#include "transport/registry.h"

namespace wsync {
namespace {

using namespace std::chrono_literals;

constexpr size_t kSlotBytes = 8192;
constexpr uint8_t kUntouched = 0xA5;

bool mentions(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

class TrainerPeersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<const WriteBackend*> backend = targetBackendFor(MemoryKind::kHost, DeviceTransport{});
    ASSERT_TRUE(backend.isOk()) << backend.status().toString();
    Result<std::unique_ptr<WriteTransport>> target = backend.value()->create(TransportSetup{});
    ASSERT_TRUE(target.isOk()) << target.status().toString();
    target_ = std::move(target).value();
    rollout_.rank = 1;
    rollout_.transport = backend.value()->name;
    rollout_.transport_address = target_->localAddress();
    rollout_.buffer_byte_offsets = {0, 4096};
    for (int s = 0; s < 2; ++s) {
      Result<std::unique_ptr<ExposedMemory>> slot = target_->allocateExposed(kSlotBytes);
      ASSERT_TRUE(slot.isOk()) << slot.status().toString();
      std::memset(slot.value()->data(), kUntouched, kSlotBytes);
      rollout_.slot_descriptors.push_back(slot.value()->descriptor());
      slots_.push_back(std::move(slot).value());
    }
    source_.resize(1024);
    for (size_t i = 0; i < source_.size(); ++i)
      source_[i] = static_cast<uint8_t>(i * 7 + 1);
    peers_.setUp(MemoryKind::kHost, TransportSetup{});
    ASSERT_TRUE(peers_.addSource(source_.data(), source_.size()).isOk());
    ASSERT_TRUE(peers_.addSource(nullptr, 0).isOk());  // empty memory is skipped
  }

  std::unique_ptr<WriteTransport> target_;
  std::vector<std::unique_ptr<ExposedMemory>> slots_;
  PeerInfo rollout_;
  std::vector<uint8_t> source_;
  TrainerPeers peers_;
};

TEST_F(TrainerPeersTest, WritesLandInTheNamedSlotAndBufferOnly) {
  int also_calls = 0;
  std::string also_backend;
  ASSERT_TRUE(peers_
                  .connect(rollout_,
                           [&](WriteTransport& t) {
                             ++also_calls;
                             also_backend = t.name();
                             return Status::ok();
                           })
                  .isOk());
  EXPECT_EQ(also_calls, 1);
  EXPECT_EQ(also_backend, rollout_.transport);
  EXPECT_TRUE(peers_.connected(1));
  EXPECT_FALSE(peers_.connected(0));
  // Slot 1, buffer 1 (byte 4096 of the slot) + 8: 4 rows of 100 bytes, source rows 128 apart,
  // destination rows 200 apart.
  ASSERT_TRUE(peers_.write(1, 1, 1, 8, 200, 0, source_.data(), 128, 0, 100, 4, 1).isOk());
  ASSERT_TRUE(peers_.flush(10s).isOk());
  std::vector<uint8_t> want(kSlotBytes, kUntouched);
  for (size_t row = 0; row < 4; ++row)
    std::memcpy(want.data() + 4096 + 8 + row * 200, source_.data() + row * 128, 100);
  EXPECT_EQ(std::memcmp(slots_[1]->data(), want.data(), kSlotBytes), 0);
  const std::vector<uint8_t> untouched(kSlotBytes, kUntouched);
  EXPECT_EQ(std::memcmp(slots_[0]->data(), untouched.data(), kSlotBytes), 0);
}

TEST_F(TrainerPeersTest, AFailingAlsoLeavesTheRankUnconnectedAndIsNamed) {
  const Status s = peers_.connect(rollout_, [](WriteTransport&) {
    return protocolError("rollout 1: delta landing part outside its area");
  });
  EXPECT_EQ(s.code(), WSYNC_ERR_PROTOCOL) << s.toString();
  EXPECT_TRUE(mentions(s, "rollout 1 (" + rollout_.transport + ")")) << s.toString();
  EXPECT_FALSE(peers_.connected(1));
  EXPECT_EQ(peers_.write(1, 0, 0, 0, 0, 0, source_.data(), 0, 0, 8, 1, 1).code(),
            WSYNC_ERR_PROTOCOL);
}

TEST_F(TrainerPeersTest, UnknownRanksSlotsAndBuffersAreNamed) {
  ASSERT_TRUE(peers_.connect(rollout_, nullptr).isOk());
  const Status rank = peers_.write(5, 0, 0, 0, 0, 0, source_.data(), 0, 0, 8, 1, 1);
  EXPECT_EQ(rank.code(), WSYNC_ERR_PROTOCOL);
  EXPECT_TRUE(mentions(rank, "rollout 5")) << rank.toString();
  const Status slot = peers_.write(1, 2, 0, 0, 0, 0, source_.data(), 0, 0, 8, 1, 1);
  EXPECT_EQ(slot.code(), WSYNC_ERR_PROTOCOL);
  EXPECT_TRUE(mentions(slot, "slot 2 of rollout 1")) << slot.toString();
  const Status buffer = peers_.write(1, 0, 7, 0, 0, 0, source_.data(), 0, 0, 8, 1, 1);
  EXPECT_EQ(buffer.code(), WSYNC_ERR_PROTOCOL);
  EXPECT_TRUE(mentions(buffer, "buffer 7 of rollout 1")) << buffer.toString();
  // A write past the slot is refused by the transport and posts nothing.
  const Status past = peers_.write(1, 0, 1, kSlotBytes, 0, 0, source_.data(), 0, 0, 8, 1, 1);
  EXPECT_EQ(past.code(), WSYNC_ERR_INVALID_ARGUMENT) << past.toString();
  EXPECT_TRUE(peers_.flush(10s).isOk());
}

TEST_F(TrainerPeersTest, BadPeersAreRefusedNamingTheRank) {
  PeerInfo negative = rollout_;
  negative.rank = -1;
  EXPECT_EQ(peers_.connect(negative, nullptr).code(), WSYNC_ERR_PROTOCOL);
  PeerInfo unknown = rollout_;
  unknown.rank = 2;
  unknown.transport = "carrier_pigeon";
  const Status backend = peers_.connect(unknown, nullptr);
  EXPECT_FALSE(backend.isOk());
  EXPECT_TRUE(mentions(backend, "rollout 2 (carrier_pigeon)")) << backend.toString();
  EXPECT_FALSE(peers_.connected(2));
  PeerInfo truncated = rollout_;
  truncated.rank = 3;
  truncated.slot_descriptors[1].resize(3);
  const Status slot = peers_.connect(truncated, nullptr);
  EXPECT_FALSE(slot.isOk());
  EXPECT_TRUE(mentions(slot, "rollout 3 (" + rollout_.transport + "), slot 1")) << slot.toString();
  EXPECT_FALSE(peers_.connected(3));
}

}  // namespace
}  // namespace wsync
