// A rollout rank as the source of peer cold starts (runtime/rollout_cold_fill.h), without sockets:
// the lease is taken when the coordinator's ColdFill arrives, fills run one at a time in order on
// the cold fill thread, each holding its version's lease until its ColdFillDone, and the answers
// name what went wrong. Fills here have no peer to connect (no transport is created).
#include "runtime/rollout_cold_fill.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "codec/plan_codec.h"

namespace wsync {
namespace {

using std::chrono::milliseconds;

// A slot in plain host memory.
class HostSlot final : public ExposedMemory {
 public:
  explicit HostSlot(size_t bytes) : bytes_(bytes, 0) {}
  void* data() const override { return const_cast<uint8_t*>(bytes_.data()); }
  size_t size() const override { return bytes_.size(); }
  const std::vector<uint8_t>& descriptor() const override { return descriptor_; }

 private:
  std::vector<uint8_t> bytes_;
  std::vector<uint8_t> descriptor_;
};

class ColdFillerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LocalBuffer embed;
    embed.name = "embed";
    embed.num_elements = 64;
    buffers_.push_back(embed);
    for (int s = 0; s < 2; ++s)
      slots_.push_back(std::make_unique<HostSlot>(1024));
    store_ = std::move(SlotStore::create(2)).value();
    ASSERT_TRUE(store_->beginWrite(0, 7, milliseconds(0)).isOk());
    ASSERT_TRUE(store_->markReady(0, 7).isOk());
  }

  std::unique_ptr<ColdFiller> makeFiller(int delay_ms) {
    ColdFiller::Source source{3, MemoryKind::kHost, &buffers_, &offsets_, &slots_};
    ColdFiller::Settings settings;
    settings.timeout = milliseconds(1000);
    settings.debug_delay_ms = delay_ms;
    return std::make_unique<ColdFiller>(
        source, settings,
        [this](const ColdFillDoneMsg& done) {
          std::lock_guard lock(mu_);
          done_.push_back(done);
          cv_.notify_all();
          return Status::ok();
        },
        [this] {
          ++stop_checks_;  // a fill is running (it asks while it holds its lease or writes)
          return stopped_.load();
        });
  }

  // A fill of version `version`; `write_to` >= 0: one write of "embed" to that joiner rank.
  static ColdFillMsg fill(uint64_t id, uint64_t version, int32_t write_to = -1) {
    RankPlan plan;
    plan.tensors = {{"embed", Dims{64}}};
    if (write_to >= 0) {
      WriteOp op;
      op.tensor = 0;
      op.src_rank = 0;  // this rank, as the fill's sender
      op.src_buffer = 0;
      op.dst_rank = write_to;
      op.dst_buffer = 0;
      op.run = 64;
      plan.writes.push_back(op);
    }
    ColdFillMsg m;
    m.fill = id;
    m.version = version;
    m.target_slot = 1;
    m.rank_plan = encodeRankPlan(plan);
    return m;
  }

  // Waits until `count` ColdFillDone were sent; returns them.
  std::vector<ColdFillDoneMsg> waitDone(size_t count) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, milliseconds(5000), [&] { return done_.size() >= count; });
    return done_;
  }

  int leases() const { return store_->slotInfo(0)->leases; }

  std::vector<LocalBuffer> buffers_;
  std::vector<uint64_t> offsets_{0};
  std::vector<std::unique_ptr<ExposedMemory>> slots_;
  std::unique_ptr<SlotStore> store_;
  std::atomic<bool> stopped_{false};
  std::atomic<int> stop_checks_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<ColdFillDoneMsg> done_;
};

TEST_F(ColdFillerTest, VersionNoLongerHeldIsAnsweredAtOnce) {
  auto filler = makeFiller(0);
  ASSERT_TRUE(filler->start(fill(1, 6), *store_).isOk());
  // Answered on the calling (receiver) thread, before start returns: no fill was queued.
  ASSERT_EQ(done_.size(), 1u);
  EXPECT_EQ(done_[0].fill, 1u);
  EXPECT_EQ(done_[0].code, WSYNC_ERR_NOT_READY);
  EXPECT_NE(done_[0].message.find("rollout 3 cannot copy version 6"), std::string::npos)
      << done_[0].message;
  EXPECT_EQ(leases(), 0);
}

TEST_F(ColdFillerTest, FillsRunInOrderEachHoldingItsLeaseUntilAnswered) {
  auto filler = makeFiller(300);  // each fill holds its lease 300 ms before writing
  ASSERT_TRUE(filler->start(fill(2, 7), *store_).isOk());
  ASSERT_TRUE(filler->start(fill(3, 7, 5), *store_).isOk());
  // Both leases are taken at start (on the receiver thread), before either fill runs: the slot
  // holding version 7 cannot be written meanwhile.
  EXPECT_EQ(leases(), 2);
  const std::vector<ColdFillDoneMsg> done = waitDone(2);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].fill, 2u);  // in the order the coordinator sent them
  EXPECT_EQ(done[0].code, WSYNC_SUCCESS);
  EXPECT_EQ(done[0].bytes, 0u);
  EXPECT_EQ(done[1].fill, 3u);
  EXPECT_EQ(done[1].code, WSYNC_ERR_PROTOCOL);  // no joiner rank 5 among the fill's peers
  EXPECT_NE(done[1].message.find("rollout 3, cold fill of version 7: a write of tensor 'embed' to "
                                 "rollout 5 does not fit"),
            std::string::npos)
      << done[1].message;
  filler->stop();
  EXPECT_EQ(leases(), 0);  // every lease went back with its answer
}

TEST_F(ColdFillerTest, StopEndsTheRunningFillAndReleasesQueuedLeasesUnanswered) {
  auto filler = makeFiller(10000);
  ASSERT_TRUE(filler->start(fill(4, 7, 5), *store_).isOk());  // stopped before its write
  ASSERT_TRUE(filler->start(fill(5, 7), *store_).isOk());
  EXPECT_EQ(leases(), 2);
  for (int i = 0; i < 1000 && stop_checks_ == 0; ++i)  // fill 4 runs (holds its lease)
    std::this_thread::sleep_for(milliseconds(5));
  stopped_ = true;  // the rank stops: the running fill ends ABORTED
  filler->stop();
  ASSERT_EQ(done_.size(), 1u);
  EXPECT_EQ(done_[0].fill, 4u);
  EXPECT_EQ(done_[0].code, WSYNC_ERR_ABORTED);
  EXPECT_EQ(done_[0].message, "rollout 3, cold fill of version 7: stopped");
  EXPECT_EQ(leases(), 0);
  // Stopped: a later fill is not run (its lease is released with the filler).
  ASSERT_TRUE(filler->start(fill(6, 7), *store_).isOk());
  filler.reset();
  EXPECT_EQ(done_.size(), 1u);
  EXPECT_EQ(leases(), 0);
}

}  // namespace
}  // namespace wsync
