// The coordinator's metrics in a real job, in one process without MPI: a coordinator started
// through the C++ API with its metrics served over HTTP (coordinator/metrics_http.h), two
// trainers and two one-rank replicas joining with WSYNC_BOOTSTRAP_EXPLICIT on threads (UCX
// one-sided writes). Checks that /metrics, scraped with an HTTP client, counts exactly the
// versions and bytes published, and that wsync_version_stats() reports the same on the trainers
// (from the Delivered messages) and the newest ready version, its age and lag on the rollouts.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/coordinator.h"
#include "coordinator/metrics.h"
#include "coordinator/metrics_http.h"
#include "support/explicit_job.h"
#include "wsync/wsync.h"

namespace {

constexpr char kSecret[] = "metrics-job-test-secret";
constexpr int kTrainers = 2, kRollouts = 2, kVersions = 25;
constexpr int64_t kRows = 64, kCols = 64;

float valueOf(int64_t i, uint64_t version) {
  return static_cast<float>(i % 4096) + 4096.0f * static_cast<float>(version);
}

// The value of sample `name` (no labels) in Prometheus text; -1 when absent.
double sampleOf(const std::string& text, const std::string& name) {
  const std::string key = "\n" + name + " ";
  const size_t at = text.find(key);
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + key.size()));
}

wsync_config_t explicitConfig(const std::string& address, wsync_role_t role, int rank) {
  const int replica = role == WSYNC_ROLE_ROLLOUT ? rank : -1;
  return wsync_test::explicitConfig(address, kSecret, role, rank, replica, kTrainers, kRollouts);
}

// Registers "w" [kRows, kCols]: trainer t holds rows [t * kRows / 2, ...); rollouts want it whole.
int registerW(wsync_context_t ctx, bool trainer, int rank, std::vector<float>* params) {
  const int64_t shape[2] = {kRows, kCols};
  const int64_t half[2] = {kRows / kTrainers, kCols};
  const int64_t offset[2] = {rank * kRows / kTrainers, 0};
  wsync_piece_t piece = WSYNC_PIECE_INITIALIZER;
  piece.tensor = "w";
  piece.ndim = 2;
  piece.global_shape = shape;
  int64_t n = kRows * kCols;
  if (trainer) {
    piece.box_offset = offset;
    piece.box_extent = half;
    n = half[0] * half[1];
    params->assign(static_cast<size_t>(n), 0.0f);
  }
  int index = -1;
  EXPECT_EQ(wsync_register_buffer(ctx, "w", WSYNC_DTYPE_FLOAT32, WSYNC_MEMORY_HOST,
                                  trainer ? params->data() : nullptr, n, 1, &piece, &index),
            WSYNC_SUCCESS)
      << wsync_last_error(ctx);
  return index;
}

TEST(MetricsJob, ScrapedCountersAndVersionStatsMatchWhatWasPublished) {
  auto metrics = std::make_shared<wsync::CoordinatorMetrics>();
  wsync::CoordinatorOptions opt;
  opt.num_trainers = kTrainers;
  opt.num_rollouts = kRollouts;
  opt.control.secret = kSecret;
  opt.timeout = std::chrono::milliseconds(20000);
  opt.metrics = metrics;
  auto coordinator = wsync::Coordinator::start(std::move(opt));
  ASSERT_TRUE(coordinator.isOk()) << coordinator.status().toString();
  const std::string address = "127.0.0.1:" + std::to_string((*coordinator)->port());
  auto http = wsync::MetricsHttpServer::start(
      "127.0.0.1", 0, [metrics] { return wsync::prometheusText(metrics->snapshot()); });
  ASSERT_TRUE(http.isOk()) << http.status().toString();

  std::atomic<uint64_t> bytes_per_version{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kTrainers; ++t) {
    threads.emplace_back([&, t] {
      wsync_config_t cfg = explicitConfig(address, WSYNC_ROLE_TRAINER, t);
      wsync_context_t ctx = nullptr;
      ASSERT_EQ(wsync_context_create(&cfg, &ctx), WSYNC_SUCCESS) << wsync_last_error(nullptr);
      std::vector<float> params;
      registerW(ctx, true, t, &params);
      ASSERT_EQ(wsync_commit(ctx), WSYNC_SUCCESS) << wsync_last_error(ctx);
      wsync_plan_info_t plan{};
      ASSERT_EQ(wsync_plan_info(ctx, &plan), WSYNC_SUCCESS);
      bytes_per_version = plan.bytes_per_version;
      wsync_version_stats_t stats = WSYNC_VERSION_STATS_INITIALIZER;
      EXPECT_EQ(wsync_version_stats(ctx, &stats), WSYNC_ERR_NOT_READY);
      for (uint64_t v = 1; v <= kVersions; ++v) {
        const int64_t first = t * (kRows / kTrainers) * kCols;
        for (size_t i = 0; i < params.size(); ++i)
          params[i] = valueOf(first + static_cast<int64_t>(i), v);
        wsync_request_t req = nullptr;
        ASSERT_EQ(wsync_publish(ctx, v, &req), WSYNC_SUCCESS) << wsync_last_error(ctx);
        ASSERT_EQ(wsync_request_wait(req, -1), WSYNC_SUCCESS) << wsync_last_error(ctx);
        wsync_request_free(req);
        ASSERT_EQ(wsync_version_stats(ctx, &stats), WSYNC_SUCCESS) << wsync_last_error(ctx);
        EXPECT_EQ(stats.version, v);
        EXPECT_EQ(stats.bytes, plan.bytes_per_version);
        EXPECT_EQ(stats.replicas_ready, kRollouts);
        EXPECT_EQ(stats.replicas_skipped + stats.replicas_lost, 0);
        EXPECT_GT(stats.seconds, 0.0);
        EXPECT_EQ(stats.retries + stats.checksum_failures, 0u);
      }
      EXPECT_EQ(wsync_context_destroy(ctx), WSYNC_SUCCESS);
    });
  }
  for (int r = 0; r < kRollouts; ++r) {
    threads.emplace_back([&, r] {
      wsync_config_t cfg = explicitConfig(address, WSYNC_ROLE_ROLLOUT, r);
      wsync_context_t ctx = nullptr;
      ASSERT_EQ(wsync_context_create(&cfg, &ctx), WSYNC_SUCCESS) << wsync_last_error(nullptr);
      const int index = registerW(ctx, false, r, nullptr);
      wsync_version_stats_t stats = WSYNC_VERSION_STATS_INITIALIZER;
      EXPECT_EQ(wsync_version_stats(ctx, &stats), WSYNC_ERR_INVALID_USAGE);  // before commit
      ASSERT_EQ(wsync_commit(ctx), WSYNC_SUCCESS) << wsync_last_error(ctx);
      uint64_t newest = 0;
      while (newest < kVersions) {
        ASSERT_EQ(wsync_wait_version(ctx, newest, -1, &newest), WSYNC_SUCCESS)
            << wsync_last_error(ctx);
        ASSERT_EQ(wsync_version_stats(ctx, &stats), WSYNC_SUCCESS) << wsync_last_error(ctx);
        EXPECT_GE(stats.version, newest);
        EXPECT_EQ(stats.lag, stats.newest_started - stats.version);
      }
      wsync_lease_t lease = nullptr;
      ASSERT_EQ(wsync_acquire(ctx, kVersions, &lease), WSYNC_SUCCESS);
      void* data = nullptr;
      ASSERT_EQ(wsync_lease_buffer(lease, index, &data), WSYNC_SUCCESS);
      const auto* w = static_cast<const float*>(data);
      int64_t wrong = 0;
      for (int64_t i = 0; i < kRows * kCols; ++i)
        wrong += w[i] != valueOf(i, kVersions);
      EXPECT_EQ(wrong, 0);
      wsync_lease_release(lease);
      std::this_thread::sleep_for(std::chrono::milliseconds(60));
      ASSERT_EQ(wsync_version_stats(ctx, &stats), WSYNC_SUCCESS);
      EXPECT_EQ(stats.version, static_cast<uint64_t>(kVersions));
      EXPECT_EQ(stats.newest_started, static_cast<uint64_t>(kVersions));
      EXPECT_EQ(stats.lag, 0u);
      EXPECT_GE(stats.age_ms, 60);
      EXPECT_EQ(stats.bytes, 0u);  // a trainer field
      wsync_version_stats_t wrong_size = WSYNC_VERSION_STATS_INITIALIZER;
      wrong_size.size = 8;
      EXPECT_EQ(wsync_version_stats(ctx, &wrong_size), WSYNC_ERR_INVALID_ARGUMENT);
      EXPECT_EQ(wrong_size.version, 0u) << "written only on success";
      EXPECT_EQ(wsync_context_destroy(ctx), WSYNC_SUCCESS);
    });
  }
  for (auto& t : threads)
    t.join();
  EXPECT_TRUE((*coordinator)->wait(std::chrono::seconds(20)).isOk());

  httplib::Client client("127.0.0.1", (*http)->port());
  httplib::Result scrape = client.Get("/metrics");
  ASSERT_TRUE(scrape) << "GET /metrics failed: " << httplib::to_string(scrape.error());
  EXPECT_EQ(scrape->status, 200);
  EXPECT_NE(scrape->get_header_value("Content-Type").find("text/plain"), std::string::npos);
  const std::string& text = scrape->body;
  ASSERT_GT(bytes_per_version.load(), 0u);
  EXPECT_EQ(sampleOf(text, "wsync_versions_delivered_total"), kVersions) << text;
  EXPECT_EQ(sampleOf(text, "wsync_versions_started_total"), kVersions);
  EXPECT_EQ(sampleOf(text, "wsync_newest_version"), kVersions);
  EXPECT_EQ(sampleOf(text, "wsync_delivered_bytes_total"),
            static_cast<double>(kVersions * bytes_per_version.load()));
  EXPECT_EQ(sampleOf(text, "wsync_replica_skips_total"), 0);
  const double per_replica = static_cast<double>(kVersions * bytes_per_version.load() / 2);
  EXPECT_EQ(sampleOf(text, "wsync_replica_bytes_total{replica=\"1\"}"), per_replica) << text;
  EXPECT_EQ(sampleOf(text, "wsync_replica_versions_ready_total{replica=\"0\"}"), kVersions);
  httplib::Result other = client.Get("/");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404);
  (*http)->stop();
}

}  // namespace
