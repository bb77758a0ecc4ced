// A late Go per replica (protocol 7), under mpirun -np 3: world rank 0 is the trainer (hosting the
// coordinator), world rank 1 the one rank of replica 0 (fast: no long reads), world rank 2 the
// one rank of replica 1 (slow: a reader holds the slot the next version needs). Layouts match,
// so both replicas receive by MPI broadcast, and the slow one's late Go broadcasts to it alone.
//  - the fast replica reads a version while the slow one's reader still holds its slot (with
//    max_staleness 0 the slow one may not skip it: before the late Go, Go waited for it), and
//    the slow one then gets the same version by its own Go; bytes checked on both;
//  - a slow reader past the skip grace: the slow replica skips the version (Go(v, -1) to it
//    alone) and takes the next one;
//  - the publish latency with and without a slow reader, printed (no timed assertion).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "mp/mpi_gtest_main.h"
#include "wsync/wsync.h"

namespace {

constexpr int64_t kRows = 256;
constexpr int64_t kCols = 1024;  // 1 MiB of float32
constexpr int kTrainer = 0;
constexpr int kFast = 1;
constexpr int kSlow = 2;
constexpr int kTagSignal = 11;
constexpr int kTagTime = 12;
using Clock = std::chrono::steady_clock;  // CLOCK_MONOTONIC: one clock for the node's processes

float valueOf(int64_t i, uint64_t version) {
  return static_cast<float>(i % 4096) + 8192.0f * static_cast<float>(version);
}

struct Job {
  wsync_context_t ctx = nullptr;
  std::vector<float> params;  // trainer
  int buffer = -1;
  MPI_Comm comm = MPI_COMM_NULL;  // the test's own messages, apart from wsync's
  ~Job() {
    if (ctx) EXPECT_EQ(wsync_context_destroy(ctx), WSYNC_SUCCESS) << wsync_last_error(nullptr);
    if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
  }
};

void startJob(Job& job, int max_staleness) {
  ASSERT_EQ(worldSize(), 3);
  MPI_Comm_dup(MPI_COMM_WORLD, &job.comm);
  const bool trainer = worldRank() == kTrainer;
  wsync_config_t cfg = WSYNC_CONFIG_INITIALIZER;
  cfg.role = trainer ? WSYNC_ROLE_TRAINER : WSYNC_ROLE_ROLLOUT;
  cfg.replica = trainer ? 0 : worldRank() - 1;
  cfg.timeout_ms = 20000;
  cfg.max_staleness = max_staleness;
  ASSERT_EQ(wsync_context_create(&cfg, &job.ctx), WSYNC_SUCCESS) << wsync_last_error(nullptr);
  const int64_t shape[2] = {kRows, kCols};
  wsync_piece_t piece = WSYNC_PIECE_INITIALIZER;
  piece.tensor = "w";
  piece.ndim = 2;
  piece.global_shape = shape;
  if (trainer) job.params.assign(static_cast<size_t>(kRows * kCols), 0.0f);
  ASSERT_EQ(wsync_register_buffer(job.ctx, "w", WSYNC_DTYPE_FLOAT32, WSYNC_MEMORY_HOST,
                                  trainer ? job.params.data() : nullptr, kRows * kCols, 1, &piece,
                                  &job.buffer),
            WSYNC_SUCCESS)
      << wsync_last_error(job.ctx);
  ASSERT_EQ(wsync_commit(job.ctx), WSYNC_SUCCESS) << wsync_last_error(job.ctx);
}

// Trainer: publishes `version` and waits for it; the replicas that took it and skipped it.
struct Outcome {
  std::vector<int> ready, skipped;
};
Outcome publishAndWait(Job& job, uint64_t version) {
  for (int64_t i = 0; i < kRows * kCols; ++i)
    job.params[static_cast<size_t>(i)] = valueOf(i, version);
  Outcome outcome;
  wsync_request_t request = nullptr;
  EXPECT_EQ(wsync_publish(job.ctx, version, &request), WSYNC_SUCCESS) << wsync_last_error(job.ctx);
  if (request == nullptr) return outcome;
  EXPECT_EQ(wsync_request_wait(request, -1), WSYNC_SUCCESS) << wsync_request_error(request);
  for (auto [kind, list] : {std::pair{WSYNC_REPLICAS_READY, &outcome.ready},
                            std::pair{WSYNC_REPLICAS_SKIPPED, &outcome.skipped}}) {
    int ids[4] = {};
    int count = 0;
    EXPECT_EQ(wsync_request_replicas(request, kind, 4, ids, &count), WSYNC_SUCCESS);
    list->assign(ids, ids + std::min(count, 4));
  }
  wsync_request_free(request);
  return outcome;
}

// Rollout: the number of elements of the lease that do not hold `version`'s value.
int64_t wrongElements(wsync_lease_t lease, int buffer, uint64_t version) {
  uint64_t v = 0;
  if (wsync_lease_version(lease, &v) != WSYNC_SUCCESS || v != version) return kRows * kCols;
  void* data = nullptr;
  if (wsync_lease_buffer(lease, buffer, &data) != WSYNC_SUCCESS) return kRows * kCols;
  const float* w = static_cast<const float*>(data);
  int64_t bad = 0;
  for (int64_t i = 0; i < kRows * kCols; ++i)
    bad += w[i] != valueOf(i, version);
  return bad;
}

// Rollout: waits (bounded) for a version newer than `than`; 0 when none came.
uint64_t waitNewer(Job& job, uint64_t than, int timeout_ms = 20000) {
  uint64_t newest = 0;
  const wsync_status_t s = wsync_wait_version(job.ctx, than, timeout_ms, &newest);
  EXPECT_EQ(s, WSYNC_SUCCESS) << "a version after " << than << ": " << wsync_last_error(job.ctx);
  return s == WSYNC_SUCCESS ? newest : 0;
}

// Rollout: the newest version here, with its bytes checked.
uint64_t checkNewest(Job& job) {
  wsync_lease_t lease = nullptr;
  EXPECT_EQ(wsync_acquire(job.ctx, WSYNC_VERSION_NEWEST, &lease), WSYNC_SUCCESS)
      << wsync_last_error(job.ctx);
  if (lease == nullptr) return 0;
  uint64_t v = 0;
  wsync_lease_version(lease, &v);
  EXPECT_EQ(wrongElements(lease, job.buffer, v), 0) << "version " << v;
  wsync_lease_release(lease);
  return v;
}

void signal(const Job& job, int to) {
  int one = 1;
  MPI_Send(&one, 1, MPI_INT, to, kTagSignal, job.comm);
}
void awaitSignal(const Job& job, int from) {
  int one = 0;
  MPI_Recv(&one, 1, MPI_INT, from, kTagSignal, job.comm, MPI_STATUS_IGNORE);
}

// Versions 1 and 2 delivered everywhere; then the slow rank holds version 1 (slot 0, which
// version 3 needs). Returns that lease on the slow rank.
wsync_lease_t twoVersionsThenHoldTheFirst(Job& job) {
  for (uint64_t v = 1; v <= 2; ++v) {
    if (worldRank() == kTrainer) {
      const Outcome o = publishAndWait(job, v);
      EXPECT_EQ(o.ready, (std::vector<int>{0, 1})) << "version " << v;
    } else {
      EXPECT_EQ(waitNewer(job, v - 1), v);
    }
    MPI_Barrier(job.comm);
  }
  wsync_lease_t held = nullptr;
  if (worldRank() == kSlow) EXPECT_EQ(wsync_acquire(job.ctx, 1, &held), WSYNC_SUCCESS);
  MPI_Barrier(job.comm);
  return held;
}

TEST(LateGo, FastReplicaReadsWhileTheSlowOnesReaderHoldsItsSlotThenTheSlowOneTakesIt) {
  Job job;
  startJob(job, /*max_staleness=*/0);  // the slow replica may not skip: it must take version 3
  wsync_lease_t held = twoVersionsThenHoldTheFirst(job);
  if (worldRank() == kTrainer) {
    const Outcome o = publishAndWait(job, 3);
    EXPECT_EQ(o.ready, (std::vector<int>{0, 1}));
    EXPECT_TRUE(o.skipped.empty());
  } else if (worldRank() == kFast) {
    // Before the late Go, Go waited for the slow replica's reader: this wait timed out.
    EXPECT_EQ(waitNewer(job, 2, 10000), 3u) << "version 3 waited for the other replica's reader";
    EXPECT_EQ(checkNewest(job), 3u);
    signal(job, kSlow);  // version 3 is readable here while the slow replica's lease holds
  } else {
    awaitSignal(job, kFast);
    uint64_t newest = 0;
    ASSERT_EQ(wsync_newest_version(job.ctx, &newest), WSYNC_SUCCESS);
    EXPECT_EQ(newest, 2u);
    EXPECT_EQ(wrongElements(held, job.buffer, 1), 0) << "the held slot was written";
    ASSERT_EQ(wsync_lease_release(held), WSYNC_SUCCESS);
    EXPECT_EQ(waitNewer(job, 2), 3u) << "its own Go once its reader let go";
    EXPECT_EQ(checkNewest(job), 3u);
  }
  MPI_Barrier(job.comm);
}

TEST(LateGo, SlowReplicaPastTheGraceSkipsTheVersionAndTakesTheNext) {
  Job job;
  startJob(job, /*max_staleness=*/-1);
  wsync_lease_t held = twoVersionsThenHoldTheFirst(job);
  if (worldRank() == kTrainer) {
    Outcome o = publishAndWait(job, 3);  // delivered only once the slow replica skipped it
    EXPECT_EQ(o.ready, (std::vector<int>{0}));
    EXPECT_EQ(o.skipped, (std::vector<int>{1}));
    signal(job, kSlow);
    MPI_Barrier(job.comm);  // the slow reader let go
    o = publishAndWait(job, 4);
    EXPECT_EQ(o.ready, (std::vector<int>{0, 1}));
  } else if (worldRank() == kFast) {
    EXPECT_EQ(waitNewer(job, 2), 3u);
    EXPECT_EQ(checkNewest(job), 3u);
    MPI_Barrier(job.comm);
    EXPECT_EQ(waitNewer(job, 3), 4u);
    EXPECT_EQ(checkNewest(job), 4u);
  } else {
    awaitSignal(job, kTrainer);  // version 3 was delivered while the lease held its slot
    EXPECT_EQ(wrongElements(held, job.buffer, 1), 0) << "the held slot was written";
    ASSERT_EQ(wsync_lease_release(held), WSYNC_SUCCESS);
    wsync_lease_t lease = nullptr;
    EXPECT_EQ(wsync_acquire(job.ctx, 3, &lease), WSYNC_ERR_NOT_READY) << "version 3 was skipped";
    MPI_Barrier(job.comm);
    EXPECT_EQ(waitNewer(job, 2), 4u);
    EXPECT_EQ(checkNewest(job), 4u);
  }
  MPI_Barrier(job.comm);
}

// Each version of a phase: the trainer publishes at t0 and waits for the request (delivered);
// the fast rank stamps when the version became readable there. In the second phase the slow
// rank's reader holds the slot the version needs for kHoldMs from the publish (below the 200 ms
// skip grace): the slow replica takes it by a late Go (or, on a loaded machine, skips it).
TEST(LateGo, PublishLatencyWithAndWithoutASlowReader) {
  constexpr int kPerPhase = 10;
  constexpr int kHoldMs = 100;
  Job job;
  startJob(job, /*max_staleness=*/-1);
  uint64_t v = 0;
  std::vector<uint64_t> slow_seen;  // slow rank: its newest versions, in order
  int late = 0, skipped = 0;
  for (int phase = 0; phase < 2; ++phase) {
    std::vector<double> readable_ms, delivered_ms;
    for (int i = 0; i < kPerPhase + 2; ++i) {  // the first two fill both slots
      ++v;
      const bool hold = phase == 1 && i >= 2;
      wsync_lease_t held = nullptr;
      if (worldRank() == kSlow && hold && slow_seen.size() >= 2) {
        // The version in the slot this version needs: the newest but one seen here (gone when
        // the slot was drained for a version skipped since).
        if (wsync_acquire(job.ctx, slow_seen[slow_seen.size() - 2], &held) != WSYNC_SUCCESS)
          held = nullptr;
      }
      MPI_Barrier(job.comm);
      if (worldRank() == kTrainer) {
        const Clock::time_point t0 = Clock::now();
        const Outcome o = publishAndWait(job, v);
        const double delivered =
            std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        EXPECT_EQ(o.ready.size() + o.skipped.size(), 2u);
        long long fast_ns = 0;
        MPI_Recv(&fast_ns, 1, MPI_LONG_LONG, kFast, kTagTime, job.comm, MPI_STATUS_IGNORE);
        const double readable = std::chrono::duration<double, std::milli>(
                                    Clock::time_point(std::chrono::nanoseconds(fast_ns)) - t0)
                                    .count();
        if (i >= 2) {
          readable_ms.push_back(readable);
          delivered_ms.push_back(delivered);
        }
      } else if (worldRank() == kFast) {
        EXPECT_EQ(waitNewer(job, v - 1), v);
        const long long ns =
            std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
                .count();
        EXPECT_EQ(checkNewest(job), v);
        MPI_Send(&ns, 1, MPI_LONG_LONG, kTrainer, kTagTime, job.comm);
      } else if (held != nullptr) {
        std::this_thread::sleep_for(std::chrono::milliseconds(kHoldMs));
        EXPECT_EQ(wrongElements(held, job.buffer, slow_seen[slow_seen.size() - 2]), 0);
        wsync_lease_release(held);
      }
      MPI_Barrier(job.comm);  // delivered
      if (worldRank() == kSlow) {
        const uint64_t newest = checkNewest(job);
        if (held != nullptr) (newest == v ? late : skipped) += 1;
        if (slow_seen.empty() || slow_seen.back() != newest) slow_seen.push_back(newest);
      }
    }
    if (worldRank() == kTrainer) {
      auto median = [](std::vector<double> x) {
        std::sort(x.begin(), x.end());
        return x[x.size() / 2];
      };
      std::printf(
          "[late go] %s: publish -> readable on the fast replica: median %.2f ms (max %.2f); "
          "publish -> delivered: median %.2f ms (max %.2f), %d versions\n",
          phase == 0 ? "no slow reader" : "slow reader holding 100 ms", median(readable_ms),
          *std::max_element(readable_ms.begin(), readable_ms.end()), median(delivered_ms),
          *std::max_element(delivered_ms.begin(), delivered_ms.end()), kPerPhase);
      std::fflush(stdout);
    }
  }
  if (worldRank() == kSlow) {
    std::printf(
        "[late go] slow replica: of %d versions whose slot its reader held, %d taken by "
        "a late Go, %d skipped\n",
        late + skipped, late, skipped);
    EXPECT_GT(late + skipped, 0);
  }
  MPI_Barrier(job.comm);
}

}  // namespace

WSYNC_MPI_GTEST_MAIN()
