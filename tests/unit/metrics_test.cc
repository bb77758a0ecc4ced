// The coordinator's metrics (coordinator/metrics.h) fed by a real VersionSequencer driven by
// hand (time as an argument), the Delivered stats codec (protocol/protocol.h), the bytes a
// plan delivers per replica, and the Prometheus text.
#include "coordinator/metrics.h"

#include <gtest/gtest.h>

#include <set>

#include "common/wire.h"
#include "layout/builders.h"
#include "plan/planner.h"

namespace wsync {
namespace {

using std::chrono::milliseconds;

const SequencerTime kT0{};
SequencerTime at(int ms) {
  return kT0 + milliseconds(ms);
}

// One trainer; replica 0 = rollout 0, replica 1 = rollout 1; 2 slots each. Every event's output
// goes through the metrics, as the coordinator does.
class MetricsTest : public ::testing::Test {
 protected:
  void SetUp() override { build(SequencerOptions{}); }
  void build(SequencerOptions options, size_t keep = 128) {
    seq_ = std::make_unique<VersionSequencer>(options, 1);
    ASSERT_TRUE(seq_->addReplica({0, {0}, 2}).isOk());
    ASSERT_TRUE(seq_->addReplica({1, {1}, 2}).isOk());
    metrics_ = std::make_unique<CoordinatorMetrics>(keep);
    metrics_->setReplicaBytes({{0, 1000}, {1, 3000}});
  }

  std::optional<DeliveredMsg> feed(Result<SequencerOutput> out, int ms) {
    EXPECT_TRUE(out.isOk()) << out.status().toString();
    if (!out.isOk()) return std::nullopt;
    last_ = std::move(out).value();
    return metrics_->observe(last_, *seq_, at(ms));
  }
  int32_t slotFor(int32_t rollout) const {  // the Prepare slot of `rollout` in last_
    for (const OutgoingMessage& m : last_.messages) {
      if (m.type == MessageType::kPrepare && m.to.front().rank == rollout)
        return std::get<SlotMsg>(m.payload).slot;
    }
    return -1;
  }

  // Version v: published at t0, replica 0 ready at t0 + 10 ms, replica 1 at t0 + 30 ms (or
  // skipped when skip_1: it never prepares). Returns the Delivered message the metrics made.
  std::optional<DeliveredMsg> runVersion(uint64_t v, int t0, bool skip_1 = false) {
    feed(seq_->onPublish(0, v, at(t0)), t0);
    const int32_t s0 = slotFor(0), s1 = slotFor(1);
    feed(seq_->onPrepared(0, {v, s0}, at(t0 + 1)), t0 + 1);
    if (skip_1) {
      feed(seq_->advance(at(t0 + 250)), t0 + 250);  // past the 200 ms grace
    } else {
      feed(seq_->onPrepared(1, {v, s1}, at(t0 + 2)), t0 + 2);
    }
    const int base = skip_1 ? t0 + 250 : t0;
    feed(seq_->onReceived(0, v, at(base + 5)), base + 5);
    if (!skip_1) feed(seq_->onReceived(1, v, at(base + 6)), base + 6);
    // Trainer done: replica 0 ready at +10; replica 1 already received, ready too (same event).
    return feed(seq_->onSent(0, v, at(base + 10)), base + 10);
  }

  std::unique_ptr<VersionSequencer> seq_;
  std::unique_ptr<CoordinatorMetrics> metrics_;
  SequencerOutput last_;
};

TEST_F(MetricsTest, VersionAndReplicaStatsFollowTheSequencer) {
  std::optional<DeliveredMsg> d = runVersion(1, 0);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->version, 1u);
  ASSERT_TRUE(d->has_stats);
  EXPECT_EQ(d->stats.bytes, 4000u);
  EXPECT_EQ(d->stats.microseconds, 10000u);  // published at 0, delivered at 10 ms
  EXPECT_EQ(d->stats.replicas_ready, 2);
  EXPECT_EQ(d->stats.replicas_skipped, 0);
  EXPECT_EQ(d->stats.replicas_lost, 0);

  const MetricsSnapshot s = metrics_->snapshot();
  EXPECT_EQ(s.versions_started, 1u);
  EXPECT_EQ(s.versions_delivered, 1u);
  EXPECT_EQ(s.newest_delivered, 1u);
  EXPECT_EQ(s.bytes, 4000u);
  ASSERT_EQ(s.recent.size(), 1u);
  ASSERT_EQ(s.recent[0].replicas.size(), 2u);
  EXPECT_EQ(s.recent[0].replicas[1].replica, 1);
  EXPECT_EQ(s.recent[0].replicas[1].bytes, 3000);
  EXPECT_DOUBLE_EQ(s.recent[0].replicas[1].seconds, 0.010);
  ASSERT_EQ(s.replicas.size(), 2u);
  EXPECT_EQ(s.replicas[0].ready_version, 1u);
  EXPECT_EQ(s.replicas[0].lag_versions, 0u);
  EXPECT_EQ(s.retries, 0u);
  EXPECT_EQ(s.checksum_failures, 0u);
}

TEST_F(MetricsTest, SkippedReplicaLagsAndIsCounted) {
  ASSERT_TRUE(runVersion(1, 0).has_value());
  std::optional<DeliveredMsg> d = runVersion(2, 100, /*skip_1=*/true);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->stats.replicas_ready, 1);
  EXPECT_EQ(d->stats.replicas_skipped, 1);
  EXPECT_EQ(d->stats.bytes, 1000u);  // replica 0 only
  EXPECT_EQ(d->stats.microseconds, 260000u);
  const MetricsSnapshot s = metrics_->snapshot();
  EXPECT_EQ(s.skipped, 1u);
  EXPECT_EQ(s.bytes, 5000u);
  EXPECT_EQ(s.replicas[1].versions_skipped, 1u);
  EXPECT_EQ(s.replicas[1].ready_version, 1u);
  EXPECT_EQ(s.replicas[1].lag_versions, 1u);
  EXPECT_EQ(s.recent.back().replicas[1].outcome, ReplicaOutcome::kSkipped);
}

TEST_F(MetricsTest, LostReplicaIsCounted) {
  feed(seq_->onPublish(0, 1, at(0)), 0);
  const int32_t s0 = slotFor(0);
  feed(seq_->onPrepared(0, {1, s0}, at(1)), 1);
  feed(seq_->removeReplica(1, at(2)), 2);  // Go goes out for replica 0 alone
  feed(seq_->onReceived(0, 1, at(3)), 3);
  std::optional<DeliveredMsg> d = feed(seq_->onSent(0, 1, at(4)), 4);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->stats.replicas_lost, 1);
  EXPECT_EQ(d->stats.replicas_ready, 1);
  const MetricsSnapshot s = metrics_->snapshot();
  EXPECT_EQ(s.lost, 1u);
  EXPECT_TRUE(s.replicas[1].lost);
}

TEST_F(MetricsTest, MemoryIsBoundedAndCountersCumulative) {
  build(SequencerOptions{}, /*keep=*/8);
  for (uint64_t v = 1; v <= 50; ++v)
    ASSERT_TRUE(runVersion(v, static_cast<int>(v) * 100).has_value()) << v;
  const MetricsSnapshot s = metrics_->snapshot();
  EXPECT_EQ(s.versions_delivered, 50u);
  EXPECT_EQ(s.bytes, 50u * 4000u);
  ASSERT_EQ(s.recent.size(), 8u);
  EXPECT_EQ(s.recent.front().version, 43u);
  EXPECT_EQ(s.recent.back().version, 50u);
  EXPECT_EQ(s.replicas[1].versions_ready, 50u);
  EXPECT_NEAR(s.replicas[1].seconds, 50 * 0.010, 1e-9);
}

TEST_F(MetricsTest, PrometheusTextHasHelpTypeAndLabels) {
  ASSERT_TRUE(runVersion(1, 0).has_value());
  ASSERT_TRUE(runVersion(2, 100).has_value());
  const std::string text = prometheusText(metrics_->snapshot());
  EXPECT_NE(text.find("# HELP wsync_versions_delivered_total "), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE wsync_versions_delivered_total counter\n"
                      "wsync_versions_delivered_total 2\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\nwsync_delivered_bytes_total 8000\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nwsync_replica_bytes_total{replica=\"1\"} 6000\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE wsync_replica_lag_versions gauge\n"), std::string::npos);
  EXPECT_NE(text.find("\nwsync_retries_total 0\n"), std::string::npos);
  EXPECT_NE(text.find("\nwsync_checksum_failures_total 0\n"), std::string::npos);
  // Every sample line names a metric declared by a TYPE line before it.
  std::set<std::string> declared;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = text.find('\n', pos);
    ASSERT_NE(end, std::string::npos) << "the text must end with a newline";
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.rfind("# TYPE ", 0) == 0) {
      declared.insert(line.substr(7, line.find(' ', 7) - 7));
    } else if (line.rfind("#", 0) != 0) {
      const std::string name = line.substr(0, line.find_first_of("{ "));
      EXPECT_TRUE(declared.count(name)) << line;
      EXPECT_EQ(name.rfind("wsync_", 0), 0u) << line;
    }
  }
}

TEST(MetricsLines, VersionAndSummaryLines) {
  VersionStats v;
  v.version = 12;
  v.bytes = 2000000;
  v.seconds = 0.002;
  v.replicas_ready = 2;
  EXPECT_EQ(versionLine(v),
            "version 12: 2/2 replicas ready, 0 skipped, 0 lost, 2000000 bytes in 0.0020 s (1.00 "
            "GB/s)");
  MetricsSnapshot s;
  s.versions_delivered = 4;
  s.newest_delivered = 4;
  s.seconds = 0.004;
  EXPECT_NE(summaryLine(s).find("4 versions delivered (newest 4)"), std::string::npos);
  EXPECT_NE(summaryLine(s).find("1.000 ms per version"), std::string::npos);
}

// Issue 20: replicas dropped between versions (kill -9 while none was in flight) count as lost in
// the summary, not only those lost while a version was in flight.
TEST(MetricsLines, SummaryCountsDroppedReplicas) {
  CoordinatorMetrics metrics;
  for (int i = 0; i < 6; ++i)
    metrics.onReplicaDropped();
  const MetricsSnapshot s = metrics.snapshot();
  EXPECT_EQ(s.dropped, 6u);
  EXPECT_NE(summaryLine(s).find("6 lost replicas (0 while a version was in flight)"),
            std::string::npos)
      << summaryLine(s);
}

TEST(DeliveredCodec, StatsRoundTrip) {
  DeliveredMsg m;
  m.version = 77;
  m.has_stats = true;
  m.stats = {123456789, 4321, 3, 1, 2, 0, 0};
  m.ready_replicas = {0, 2, 5};
  m.skipped_replicas = {1};
  m.lost_replicas = {3, 4};
  DeliveredMsg back;
  ASSERT_TRUE(decode(encode(m), back).isOk());
  EXPECT_EQ(back.version, 77u);
  EXPECT_EQ(back.ready_replicas, (std::vector<int32_t>{0, 2, 5}));
  EXPECT_EQ(back.skipped_replicas, (std::vector<int32_t>{1}));
  EXPECT_EQ(back.lost_replicas, (std::vector<int32_t>{3, 4}));
  ASSERT_TRUE(back.has_stats);
  EXPECT_EQ(back.stats.bytes, 123456789u);
  EXPECT_EQ(back.stats.microseconds, 4321u);
  EXPECT_EQ(back.stats.replicas_ready, 3);
  EXPECT_EQ(back.stats.replicas_skipped, 1);
  EXPECT_EQ(back.stats.replicas_lost, 2);
}

TEST(DeliveredCodec, PayloadWithoutStatsDecodesWithoutStats) {
  DeliveredMsg back;
  back.has_stats = true;
  DeliveredMsg plain;
  plain.version = 9;
  ASSERT_TRUE(decode(encode(plain), back).isOk());
  EXPECT_EQ(back.version, 9u);
  EXPECT_FALSE(back.has_stats);
}

TEST(DeliveredCodec, MalformedStatsAreRejectedAndLeaveTheMessage) {
  DeliveredMsg m;
  m.version = 5;
  m.has_stats = true;
  m.stats.replicas_ready = 2;
  const std::vector<uint8_t> good = encode(m);
  // The stats block starts after the version (1 byte) and three empty replica lists (1 byte each).
  for (size_t n = 5; n < good.size(); ++n) {  // every truncation inside the stats block
    DeliveredMsg back;
    back.version = 999;
    const std::vector<uint8_t> cut(good.begin(), good.begin() + static_cast<long>(n));
    const Status s = decode(cut, back);
    EXPECT_EQ(s.code(), WSYNC_ERR_PROTOCOL) << n;
    EXPECT_EQ(back.version, 999u) << "written only on success";
  }
  DeliveredMsg plain;
  plain.version = 5;
  std::vector<uint8_t> format0 = encode(plain);
  format0.push_back(0);
  DeliveredMsg back;
  EXPECT_EQ(decode(format0, back).code(), WSYNC_ERR_PROTOCOL);
  std::vector<uint8_t> trailing = good;
  trailing.push_back(1);
  EXPECT_EQ(decode(trailing, back).code(), WSYNC_ERR_PROTOCOL);
  // A replica count over the bound.
  ByteWriter w;
  w.varu(5);
  for (int list = 0; list < 3; ++list)
    w.varu(0);
  w.u8(1);
  w.varu(0);
  w.varu(0);
  w.varu(uint64_t{1} << 40);
  EXPECT_EQ(decode(w.take(), back).code(), WSYNC_ERR_PROTOCOL);
}

TEST(DeliveredCodec, NewerFormatFieldsAreSkipped) {
  DeliveredMsg m;
  m.version = 5;
  m.has_stats = true;
  m.stats.bytes = 10;
  std::vector<uint8_t> bytes = encode(m);
  bytes[4] = 3;         // the format byte, after the version and three empty replica lists
  bytes.push_back(42);  // a field format 3 appended
  DeliveredMsg back;
  ASSERT_TRUE(decode(bytes, back).isOk());
  EXPECT_EQ(back.stats.bytes, 10u);
}

// The bytes per replica of a real plan: 2 trainers each holding half of a 64 x 32 float tensor;
// replica 0 (one rank) wants it whole in bfloat16 (write ops), replica 1 (two ranks) a half each
// in float32 (the trainers' boxes: broadcast groups).
TEST(ReplicaBytes, CountsEveryRankOfEveryReplica) {
  const Dims shape{64, 32};
  std::vector<Registration> trainers(2), rollouts(3);
  for (int32_t t = 0; t < 2; ++t) {
    trainers[t].role = Role::kTrainer;
    trainers[t].rank = t;
    ASSERT_TRUE(addSplit(trainers[t], "w", shape, DType::kFloat32, 0, 2, t).isOk());
  }
  for (int32_t r = 0; r < 3; ++r) {
    rollouts[r].role = Role::kRollout;
    rollouts[r].rank = r;
    rollouts[r].replica = r == 0 ? 0 : 1;
  }
  ASSERT_TRUE(addReplicated(rollouts[0], "w", shape, DType::kBFloat16).isOk());
  ASSERT_TRUE(addSplit(rollouts[1], "w", shape, DType::kFloat32, 0, 2, 0).isOk());
  ASSERT_TRUE(addSplit(rollouts[2], "w", shape, DType::kFloat32, 0, 2, 1).isOk());
  Result<Plan> plan = makePlan(trainers, rollouts, PlannerOptions{});
  ASSERT_TRUE(plan.isOk()) << plan.status().toString();
  EXPECT_FALSE(plan->groups.empty());
  EXPECT_FALSE(plan->writes.empty());
  const std::map<int32_t, int64_t> bytes = replicaBytes(*plan, {0, 1, 1});
  EXPECT_EQ(bytes.at(0), 64 * 32 * 2);
  EXPECT_EQ(bytes.at(1), 64 * 32 * 4);
  EXPECT_EQ(bytes.at(0) + bytes.at(1), plan->stats.bytes_total);
}

}  // namespace
}  // namespace wsync
