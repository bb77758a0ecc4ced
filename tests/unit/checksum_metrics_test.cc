// The coordinator's metrics of checksummed versions (coordinator/metrics.h) fed by a real
// VersionSequencer with job.checksums: failed verifications and re-sends per version and per
// replica, a replica rejected after its last re-send, the Delivered stats, the Prometheus text and
// the progress line.
#include <gtest/gtest.h>

#include "coordinator/metrics.h"

namespace wsync {
namespace {

const SequencerTime kT0{};

// One trainer; replica 0 = rollout 0, replica 1 = rollout 1; `retries` re-sends allowed.
class ChecksumMetricsTest : public ::testing::Test {
 protected:
  void build(int retries) {
    SequencerOptions options;
    options.job.checksums = true;
    options.job.checksum_retries = retries;
    seq_ = std::make_unique<VersionSequencer>(options, 1);
    ASSERT_TRUE(seq_->addReplica({0, {0}, 2}).isOk());
    ASSERT_TRUE(seq_->addReplica({1, {1}, 2}).isOk());
    metrics_.setReplicaBytes({{0, 1000}, {1, 3000}});
  }
  std::optional<DeliveredMsg> feed(Result<SequencerOutput> out) {
    EXPECT_TRUE(out.isOk()) << out.status().toString();
    if (!out.isOk()) return std::nullopt;
    return metrics_.observe(*out, *seq_, kT0);
  }
  int32_t slotOf(const Result<SequencerOutput>& out) {
    for (const OutgoingMessage& m : out->messages) {
      if (m.type == MessageType::kPrepare) return std::get<SlotMsg>(m.payload).slot;
    }
    return -1;
  }
  // Version v: rollout 0 fails its first `failures` verifications, rollout 1 none.
  std::optional<DeliveredMsg> runVersion(uint64_t v, int failures) {
    Result<SequencerOutput> started = seq_->onPublish(0, v, kT0);
    const int32_t slot = slotOf(started);
    feed(std::move(started));
    feed(seq_->onPrepared(0, {v, slot}, kT0));
    feed(seq_->onPrepared(1, {v, slot}, kT0));
    feed(seq_->onReceived(1, v, kT0));
    std::optional<DeliveredMsg> delivered;
    for (int attempt = 0; !delivered; ++attempt) {
      feed(seq_->onReceived(0, v, kT0));
      delivered = feed(seq_->onSent(0, v, kT0, {{0, 1}, {1, 2}}));
      if (delivered) break;
      if (attempt == 0) delivered = feed(seq_->onVerified(1, v, kT0));
      if (delivered) break;
      delivered = attempt < failures
                      ? feed(seq_->onChecksumFailed(0, ChecksumFailedMsg{v, {0}, "x"}, kT0))
                      : feed(seq_->onVerified(0, v, kT0));
    }
    return delivered;
  }

  std::unique_ptr<VersionSequencer> seq_;
  CoordinatorMetrics metrics_;
};

TEST_F(ChecksumMetricsTest, FailuresAndResendsAreCountedPerVersionAndReplica) {
  build(1);
  std::optional<DeliveredMsg> d = runVersion(1, 1);  // fails once, re-sent, verified
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->stats.retries, 1u);
  EXPECT_EQ(d->stats.checksum_failures, 1u);
  EXPECT_EQ(d->stats.replicas_ready, 2);
  d = runVersion(2, 2);  // fails twice: rejected after its one re-send
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->stats.retries, 1u);
  EXPECT_EQ(d->stats.checksum_failures, 2u);
  EXPECT_EQ(d->stats.replicas_ready, 1);
  EXPECT_EQ(d->stats.replicas_skipped, 1);

  const MetricsSnapshot s = metrics_.snapshot();
  EXPECT_EQ(s.retries, 2u);
  EXPECT_EQ(s.checksum_failures, 3u);
  EXPECT_EQ(s.checksum_verifications, 6u);  // per version: both ranks, then rank 0's re-send
  ASSERT_EQ(s.recent.size(), 2u);
  const ReplicaVersionStats& rejected = s.recent[1].replicas[0];
  EXPECT_EQ(rejected.outcome, ReplicaOutcome::kRejected);
  EXPECT_EQ(rejected.checksum_failures, 2u);
  EXPECT_EQ(rejected.retries, 1u);
  EXPECT_EQ(s.recent[1].replicas[1].outcome, ReplicaOutcome::kReady);
  ASSERT_EQ(s.replicas.size(), 2u);
  EXPECT_EQ(s.replicas[0].checksum_failures, 3u);
  EXPECT_EQ(s.replicas[0].retries, 2u);
  EXPECT_EQ(s.replicas[0].versions_skipped, 1u);
  EXPECT_EQ(s.replicas[0].ready_version, 1u);  // never readable corrupt: still version 1
  EXPECT_EQ(s.replicas[1].checksum_failures, 0u);

  const std::string text = prometheusText(s);
  EXPECT_NE(text.find("wsync_checksum_failures_total 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("wsync_retries_total 2\n"), std::string::npos);
  EXPECT_NE(text.find("wsync_replica_checksum_failures_total{replica=\"0\"} 3\n"),
            std::string::npos);
  EXPECT_NE(text.find("wsync_replica_retries_total{replica=\"1\"} 0\n"), std::string::npos);
  EXPECT_NE(versionLine(s.recent[1])
                .find("2 checksum failures, 1 retries (replica 0: 2 failed, "
                      "1 re-sent, rejected)"),
            std::string::npos)
      << versionLine(s.recent[1]);
}

}  // namespace
}  // namespace wsync
