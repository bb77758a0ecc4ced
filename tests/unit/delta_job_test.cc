// Delta versions across membership changes, in one process: a coordinator started through the
// C++ API with delta versions on, and ranks on threads joining with WSYNC_BOOTSTRAP_EXPLICIT (real
// control connections, real UCX writes into host memory, so every write takes patches). Covered
// here (the mp test tests/mp/delta_test.cc covers slots, conversion, skips and corruption): a
// replica that joins and is cold-filled from a peer gets its first version from the trainer
// dense (the trainer holds no base for its writes) and patches after; a replica lost mid-run
// costs the others nothing; trainers that restart hold no base, so their first version goes
// dense to every replica, and patches follow. Every rollout checks every element of every version
// it reads (a delta version equals the full version element by element).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/coordinator.h"
#include "support/delta_values.h"
#include "support/explicit_job.h"
#include "wsync/wsync.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr char kSecret[] = "delta-job-test-secret";
constexpr int64_t kRows = 64;
constexpr int64_t kCols = 256;
constexpr int64_t kElements = kRows * kCols;

using wsync_test::deltaValueOf;

struct Job {
  std::unique_ptr<wsync::Coordinator> coordinator;
  std::string address;
  std::mutex log_mu;
  std::vector<std::string> log;
  bool logged(const std::string& text) {
    std::lock_guard lock(log_mu);
    return std::any_of(log.begin(), log.end(), [&](const std::string& line) {
      return line.find(text) != std::string::npos;
    });
  }
};

void start(Job& job, bool trainer_restart = false) {
  wsync::CoordinatorOptions opt;
  opt.num_trainers = 1;
  opt.num_rollouts = 1;
  opt.control.secret = kSecret;
  opt.timeout = std::chrono::milliseconds(20000);
  opt.job.delta = true;
  opt.trainer_restart = trainer_restart;
  opt.trainer_restart_timeout = std::chrono::milliseconds(20000);
  opt.log = [&job](const std::string& line) {
    std::lock_guard lock(job.log_mu);
    job.log.push_back(line);
  };
  auto c = wsync::Coordinator::start(std::move(opt));
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  job.address = "127.0.0.1:" + std::to_string((*c)->port());
  job.coordinator = std::move(c).value();
}

// One rank's whole tensor "w" (float32 on the trainer, `dtype` on rollouts).
wsync_status_t registerWhole(wsync_context_t ctx, wsync_dtype_t dtype, void* data, int* buffer) {
  const int64_t shape[2] = {kRows, kCols};
  const int64_t offset[2] = {0, 0};
  wsync_piece_t piece = WSYNC_PIECE_INITIALIZER;
  piece.tensor = "w";
  piece.ndim = 2;
  piece.global_shape = shape;
  piece.box_offset = offset;
  piece.box_extent = shape;
  return wsync_register_buffer(ctx, "w", dtype, WSYNC_MEMORY_HOST, data, kElements, 1, &piece,
                               buffer);
}

class Trainer {
 public:
  explicit Trainer(const Job& job) : params_(static_cast<size_t>(kElements), 0.0f) {
    wsync_config_t cfg =
        wsync_test::explicitConfig(job.address, kSecret, WSYNC_ROLE_TRAINER, 0, -1, 1, 1);
    cfg.delta = 1;
    EXPECT_EQ(wsync_context_create(&cfg, &ctx_), WSYNC_SUCCESS) << wsync_last_error(nullptr);
    int buffer = -1;
    EXPECT_EQ(registerWhole(ctx_, WSYNC_DTYPE_FLOAT32, params_.data(), &buffer), WSYNC_SUCCESS)
        << wsync_last_error(ctx_);
    EXPECT_EQ(wsync_commit(ctx_), WSYNC_SUCCESS) << wsync_last_error(ctx_);
  }
  ~Trainer() {
    if (ctx_ != nullptr) EXPECT_EQ(wsync_context_destroy(ctx_), WSYNC_SUCCESS);
  }
  // Publishes v and waits for it: its stats.
  wsync_version_stats_t publish(uint64_t v) {
    for (int64_t i = 0; i < kElements; ++i)
      params_[static_cast<size_t>(i)] = deltaValueOf(i, v);
    wsync_request_t req = nullptr;
    EXPECT_EQ(wsync_publish(ctx_, v, &req), WSYNC_SUCCESS) << wsync_last_error(ctx_);
    EXPECT_EQ(wsync_request_wait(req, -1), WSYNC_SUCCESS) << wsync_request_error(req);
    wsync_request_free(req);
    wsync_version_stats_t stats = WSYNC_VERSION_STATS_INITIALIZER;
    EXPECT_EQ(wsync_version_stats(ctx_, &stats), WSYNC_SUCCESS);
    EXPECT_EQ(stats.version, v);
    return stats;
  }
  void lose() {  // its connection drops without goodbye, as a crash does
    wsync_context_abort(ctx_);
    (void)wsync_context_destroy(ctx_);
    ctx_ = nullptr;
  }

 private:
  std::vector<float> params_;
  wsync_context_t ctx_ = nullptr;
};

// A one-rank bfloat16 replica reading every newest version until it saw `last` (or `abort_at`,
// where its connection drops), checking every element; `seen` its newest checked version,
// `from_peer` its first version's origin.
struct Reader {
  std::atomic<uint64_t> seen{0};
  std::atomic<int64_t> wrong{0};
  std::atomic<bool> done{false};
  int from_peer = -1;
  std::string failure;
};

void readVersions(wsync_config_t cfg, uint64_t last, uint64_t abort_at, Reader* r) {
  cfg.delta = 1;
  wsync_context_t ctx = nullptr;
  ASSERT_EQ(wsync_context_create(&cfg, &ctx), WSYNC_SUCCESS) << wsync_last_error(nullptr);
  int buffer = -1;
  ASSERT_EQ(registerWhole(ctx, WSYNC_DTYPE_BFLOAT16, nullptr, &buffer), WSYNC_SUCCESS)
      << wsync_last_error(ctx);
  ASSERT_EQ(wsync_commit(ctx), WSYNC_SUCCESS) << wsync_last_error(ctx);
  uint64_t newest = 0;
  while (newest < last && newest < abort_at) {
    if (wsync_wait_version(ctx, newest, 20000, &newest) != WSYNC_SUCCESS) {
      r->failure = wsync_last_error(ctx);
      break;
    }
    wsync_lease_t lease = nullptr;
    ASSERT_EQ(wsync_acquire(ctx, WSYNC_VERSION_NEWEST, &lease), WSYNC_SUCCESS);
    uint64_t v = 0;
    wsync_lease_version(lease, &v);
    void* data = nullptr;
    ASSERT_EQ(wsync_lease_buffer(lease, buffer, &data), WSYNC_SUCCESS);
    const auto* bf16 = static_cast<const uint16_t*>(data);
    for (int64_t i = 0; i < kElements; ++i)
      r->wrong += wsync_test::floatOfBf16(bf16[i]) != deltaValueOf(i, v);
    wsync_lease_release(lease);
    if (r->from_peer < 0) {
      wsync_version_stats_t stats = WSYNC_VERSION_STATS_INITIALIZER;
      ASSERT_EQ(wsync_version_stats(ctx, &stats), WSYNC_SUCCESS);
      r->from_peer = stats.first_version_from_peer;
    }
    r->seen = v;
  }
  if (newest >= abort_at) wsync_context_abort(ctx);
  (void)wsync_context_destroy(ctx);
  r->done = true;
}

void waitSeen(const Reader& r, uint64_t v) {
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (r.seen < v && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_GE(r.seen.load(), v);
}

wsync_config_t rolloutConfig(const Job& job, int rank, int replica) {
  return wsync_test::explicitConfig(job.address, kSecret, WSYNC_ROLE_ROLLOUT, rank, replica, 1, 1);
}

wsync_config_t joinerConfig(const Job& job, int replica) {
  wsync_config_t cfg = rolloutConfig(job, -1, replica);
  cfg.num_rollouts = 0;
  cfg.replica_size = 1;
  cfg.replica_rank = 0;
  return cfg;
}

bool dense(const wsync_version_stats_t& s) {
  return s.full_bytes > 0 && s.wire_bytes == s.full_bytes;
}
bool patched(const wsync_version_stats_t& s) {
  return s.full_bytes > 0 && s.wire_bytes * 5 < s.full_bytes;  // ~1 % changed: far below
}

// Replica 1 joins after version 3 and is cold-filled from replica 0; the trainer's writes to it
// have no base: its first version from the trainer is dense for it (patches for replica 0), then
// both take patches. Replica 1 is then lost (its connection drops); replica 0 goes on with patches.
TEST(DeltaJob, JoinedReplicaGetsDenseThenPatchesAndItsLossCostsNothing) {
  constexpr uint64_t kJoinAfter = 3, kLoseAt = 8, kLast = 12;
  Job job;
  start(job);
  Reader first, joiner;
  std::thread first_thread(readVersions, rolloutConfig(job, 0, 0), kLast, UINT64_MAX, &first);
  std::thread joiner_thread;
  {
    Trainer trainer(job);
    for (uint64_t v = 1; v <= kLast; ++v) {
      if (v == kJoinAfter + 1) {
        joiner_thread = std::thread(readVersions, joinerConfig(job, 1), kLast, kLoseAt, &joiner);
        waitSeen(joiner, kJoinAfter);  // cold-filled with version 3
        const auto deadline = Clock::now() + std::chrono::seconds(20);
        while (!job.logged("replica 1 joined") && Clock::now() < deadline)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (v == kLoseAt + 1) {  // replica 1 read version 8 and dropped its connection
        const auto deadline = Clock::now() + std::chrono::seconds(20);
        while (!job.logged("replica 1 (rollout ranks 1) dropped") && Clock::now() < deadline)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      const wsync_version_stats_t s = trainer.publish(v);
      EXPECT_EQ(s.checksum_failures, 0u) << "version " << v;
      if (v == 1) {
        EXPECT_TRUE(dense(s)) << "version 1: no base anywhere";
      } else if (v == kJoinAfter + 1) {
        EXPECT_EQ(s.replicas_ready, 2) << "version " << v;
        // replica 0's half patched, replica 1's dense: more than a patch, less than twice dense
        EXPECT_GT(s.wire_bytes * 2, s.full_bytes) << "the joiner's first version is dense";
        EXPECT_LT(s.wire_bytes, s.full_bytes) << "replica 0 still takes a patch";
      } else if (v <= kLoseAt) {
        EXPECT_TRUE(patched(s)) << "version " << v << ": " << s.wire_bytes << " of "
                                << s.full_bytes;
      } else {
        EXPECT_TRUE(patched(s)) << "version " << v << " after the loss: " << s.wire_bytes << " of "
                                << s.full_bytes;
        EXPECT_EQ(s.replicas_ready, 1) << "version " << v;
      }
    }
  }
  first_thread.join();
  joiner_thread.join();
  EXPECT_EQ(first.seen.load(), kLast);
  EXPECT_EQ(joiner.seen.load(), kLoseAt);
  EXPECT_EQ(first.wrong.load(), 0);
  EXPECT_EQ(joiner.wrong.load(), 0);
  EXPECT_EQ(joiner.from_peer, 1);
  EXPECT_TRUE(job.logged("replica 1 cold-started from replica 0 with version 3"));
  EXPECT_TRUE(job.logged("replica 1 (rollout ranks 1) dropped"));
  EXPECT_TRUE(first.failure.empty()) << first.failure;
  EXPECT_TRUE(job.coordinator->wait(std::chrono::seconds(20)).isOk());
}

// The trainer is lost after version 4 and a new one takes its place: it holds no base, so its
// first version is dense, and patches follow; the replica reads every version bit for bit.
TEST(DeltaJob, RestartedTrainersSendTheirFirstVersionDenseThenPatches) {
  constexpr uint64_t kLostAfter = 4, kLast = 9;
  Job job;
  start(job, /*trainer_restart=*/true);
  Reader reader;
  std::thread reader_thread(readVersions, rolloutConfig(job, 0, 0), kLast, UINT64_MAX, &reader);
  {
    Trainer trainer(job);
    for (uint64_t v = 1; v <= kLostAfter; ++v) {
      const wsync_version_stats_t s = trainer.publish(v);
      EXPECT_EQ(dense(s), v == 1) << "version " << v;
    }
    waitSeen(reader, kLostAfter);
    trainer.lose();
  }
  {
    Trainer restarted(job);
    for (uint64_t v = kLostAfter + 1; v <= kLast; ++v) {
      const wsync_version_stats_t s = restarted.publish(v);
      if (v == kLostAfter + 1) {
        EXPECT_TRUE(dense(s)) << "the restarted trainer's first version: " << s.wire_bytes << " of "
                              << s.full_bytes;
      } else {
        EXPECT_TRUE(patched(s)) << "version " << v << ": " << s.wire_bytes << " of "
                                << s.full_bytes;
      }
    }
  }
  reader_thread.join();
  EXPECT_EQ(reader.seen.load(), kLast);
  EXPECT_EQ(reader.wrong.load(), 0);
  EXPECT_TRUE(reader.failure.empty()) << reader.failure;
  EXPECT_TRUE(job.logged("trainers restarted"));
  EXPECT_TRUE(job.coordinator->wait(std::chrono::seconds(20)).isOk());
}

}  // namespace
