// Versioned double buffering through the public C API, in real jobs under mpirun -np 2
// (world rank 0: trainer, world rank 1: a one-rank rollout replica with two slots):
//  - acquire never waits for a transfer: while a (deliberately slowed) version streams in, it
//    returns the previous version at once, and a lease keeps its bytes intact throughout;
//  - a replica whose readers hold the only writable slot is skipped, and later gets the newest
//    version (it never sees the skipped one);
//  - with max_staleness 0 the version waits for the readers instead of being skipped.
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "mp/mpi_gtest_main.h"
#include "wsync/wsync.h"

namespace {

constexpr int64_t kRows = 64;
constexpr int64_t kCols = 256;
constexpr int kStarted = 1;  // MPI tag: the trainer has published the version the rollout waits on

bool isTrainer() {
  return worldRank() == 0;
}

float valueOf(int64_t i, uint64_t version) {
  return static_cast<float>(i % 1000) + 1000.0f * static_cast<float>(version);
}

struct Job {
  wsync_context_t ctx = nullptr;
  std::vector<float> params;  // trainer
  int buffer = -1;
};

Job startJob(int max_staleness, int send_delay_ms) {
  Job job;
  if (isTrainer() && send_delay_ms > 0)
    setenv("WSYNC_DEBUG_SEND_DELAY_MS", std::to_string(send_delay_ms).c_str(), 1);
  wsync_config_t cfg = WSYNC_CONFIG_INITIALIZER;
  cfg.role = isTrainer() ? WSYNC_ROLE_TRAINER : WSYNC_ROLE_ROLLOUT;
  cfg.replica = 0;
  cfg.timeout_ms = 20000;
  cfg.max_staleness = max_staleness;
  EXPECT_EQ(wsync_context_create(&cfg, &job.ctx), WSYNC_SUCCESS) << wsync_last_error(nullptr);
  const int64_t shape[2] = {kRows, kCols};
  wsync_piece_t piece = WSYNC_PIECE_INITIALIZER;
  piece.tensor = "w";
  piece.ndim = 2;
  piece.global_shape = shape;
  if (isTrainer()) job.params.assign(kRows * kCols, 0.0f);
  EXPECT_EQ(wsync_register_buffer(job.ctx, "w", WSYNC_DTYPE_FLOAT32, WSYNC_MEMORY_HOST,
                                  isTrainer() ? job.params.data() : nullptr, kRows * kCols, 1,
                                  &piece, &job.buffer),
            WSYNC_SUCCESS);
  EXPECT_EQ(wsync_commit(job.ctx), WSYNC_SUCCESS) << wsync_last_error(job.ctx);
  unsetenv("WSYNC_DEBUG_SEND_DELAY_MS");
  return job;
}

// Trainer: sets the parameters for `version`, publishes it and tells the rollout it started.
// Returns the request (the caller waits for it).
wsync_request_t publish(Job& job, uint64_t version) {
  for (int64_t i = 0; i < kRows * kCols; ++i)
    job.params[static_cast<size_t>(i)] = valueOf(i, version);
  wsync_request_t req = nullptr;
  EXPECT_EQ(wsync_publish(job.ctx, version, &req), WSYNC_SUCCESS) << wsync_last_error(job.ctx);
  const int v = static_cast<int>(version);
  MPI_Send(&v, 1, MPI_INT, 1, kStarted, MPI_COMM_WORLD);
  return req;
}

void waitStarted(uint64_t version) {
  int v = 0;
  MPI_Recv(&v, 1, MPI_INT, 0, kStarted, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  ASSERT_EQ(static_cast<uint64_t>(v), version);
}

// Rollout: every element of the leased buffer holds `version`'s value.
void expectLeaseHolds(wsync_lease_t lease, int buffer, uint64_t version) {
  uint64_t v = 0;
  ASSERT_EQ(wsync_lease_version(lease, &v), WSYNC_SUCCESS);
  ASSERT_EQ(v, version);
  void* data = nullptr;
  ASSERT_EQ(wsync_lease_buffer(lease, buffer, &data), WSYNC_SUCCESS);
  const float* w = static_cast<const float*>(data);
  int64_t bad = 0;
  for (int64_t i = 0; i < kRows * kCols; ++i)
    bad += w[i] != valueOf(i, version);
  EXPECT_EQ(bad, 0) << "version " << version;
}

uint64_t waitNewer(Job& job, uint64_t than) {
  uint64_t newest = 0;
  EXPECT_EQ(wsync_wait_version(job.ctx, than, -1, &newest), WSYNC_SUCCESS)
      << wsync_last_error(job.ctx);
  return newest;
}

TEST(Versioning, AcquireReturnsPreviousVersionWhileTheNextStreamsIn) {
  Job job = startJob(/*max_staleness=*/-1, /*send_delay_ms=*/400);
  if (isTrainer()) {
    for (uint64_t v = 1; v <= 2; ++v) {
      wsync_request_t req = publish(job, v);
      EXPECT_EQ(wsync_request_wait(req, -1), WSYNC_SUCCESS) << wsync_last_error(job.ctx);
      wsync_request_free(req);
    }
  } else {
    waitStarted(1);
    ASSERT_EQ(waitNewer(job, 0), 1u);
    wsync_lease_t held = nullptr;
    ASSERT_EQ(wsync_acquire(job.ctx, WSYNC_VERSION_NEWEST, &held), WSYNC_SUCCESS);
    waitStarted(2);  // version 2 is now in flight (its transfer is held back 400 ms)
    int during = 0;
    for (int i = 0; i < 50; ++i) {
      wsync_lease_t lease = nullptr;
      ASSERT_EQ(wsync_acquire(job.ctx, WSYNC_VERSION_NEWEST, &lease), WSYNC_SUCCESS);
      uint64_t v = 0;
      wsync_lease_version(lease, &v);
      during += v == 1;
      wsync_lease_release(lease);
    }
    EXPECT_EQ(during, 50) << "acquire returned the in-flight version";
    ASSERT_EQ(waitNewer(job, 1), 2u);
    expectLeaseHolds(held, job.buffer, 1);  // the old slot was never written under the lease
    wsync_lease_t fresh = nullptr;
    ASSERT_EQ(wsync_acquire(job.ctx, WSYNC_VERSION_NEWEST, &fresh), WSYNC_SUCCESS);
    expectLeaseHolds(fresh, job.buffer, 2);
    wsync_lease_release(fresh);
    wsync_lease_release(held);
  }
  EXPECT_EQ(wsync_context_destroy(job.ctx), WSYNC_SUCCESS) << wsync_last_error(nullptr);
}

TEST(Versioning, BusyReplicaSkipsToTheNewestVersion) {
  Job job = startJob(/*max_staleness=*/-1, /*send_delay_ms=*/0);
  if (isTrainer()) {
    for (uint64_t v = 1; v <= 4; ++v) {
      wsync_request_t req = publish(job, v);
      EXPECT_EQ(wsync_request_wait(req, -1), WSYNC_SUCCESS) << wsync_last_error(job.ctx);
      wsync_request_free(req);
      MPI_Barrier(MPI_COMM_WORLD);  // the rollout has looked at version v
    }
  } else {
    waitStarted(1);
    ASSERT_EQ(waitNewer(job, 0), 1u);
    wsync_lease_t old = nullptr;
    ASSERT_EQ(wsync_acquire(job.ctx, 1, &old), WSYNC_SUCCESS);  // a long read of version 1
    MPI_Barrier(MPI_COMM_WORLD);
    waitStarted(2);  // goes into the free slot
    ASSERT_EQ(waitNewer(job, 1), 2u);
    MPI_Barrier(MPI_COMM_WORLD);
    waitStarted(3);               // the only writable slot holds version 1 under a lease: skipped
    MPI_Barrier(MPI_COMM_WORLD);  // the trainer saw version 3 delivered (to no replica)
    uint64_t newest = 0;
    ASSERT_EQ(wsync_newest_version(job.ctx, &newest), WSYNC_SUCCESS);
    EXPECT_EQ(newest, 2u);
    expectLeaseHolds(old, job.buffer, 1);
    wsync_lease_release(old);
    waitStarted(4);
    EXPECT_EQ(waitNewer(job, 2), 4u);  // version 3 never shows up
    wsync_lease_t lease = nullptr;
    EXPECT_EQ(wsync_acquire(job.ctx, 3, &lease), WSYNC_ERR_NOT_READY);
    ASSERT_EQ(wsync_acquire(job.ctx, WSYNC_VERSION_NEWEST, &lease), WSYNC_SUCCESS);
    expectLeaseHolds(lease, job.buffer, 4);
    wsync_lease_release(lease);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  EXPECT_EQ(wsync_context_destroy(job.ctx), WSYNC_SUCCESS) << wsync_last_error(nullptr);
}

TEST(Versioning, StalenessBoundMakesTheVersionWaitForReaders) {
  Job job = startJob(/*max_staleness=*/0, /*send_delay_ms=*/0);
  if (isTrainer()) {
    for (uint64_t v = 1; v <= 3; ++v) {
      wsync_request_t req = publish(job, v);
      EXPECT_EQ(wsync_request_wait(req, -1), WSYNC_SUCCESS) << wsync_last_error(job.ctx);
      wsync_request_free(req);
    }
  } else {
    waitStarted(1);
    ASSERT_EQ(waitNewer(job, 0), 1u);
    wsync_lease_t old = nullptr;
    ASSERT_EQ(wsync_acquire(job.ctx, 1, &old), WSYNC_SUCCESS);
    waitStarted(2);
    ASSERT_EQ(waitNewer(job, 1), 2u);
    waitStarted(3);  // needs the slot under `old`; may not be skipped
    std::this_thread::sleep_for(std::chrono::milliseconds(600));  // past the skip grace
    uint64_t newest = 0;
    ASSERT_EQ(wsync_newest_version(job.ctx, &newest), WSYNC_SUCCESS);
    EXPECT_EQ(newest, 2u);
    wsync_lease_release(old);
    EXPECT_EQ(waitNewer(job, 2), 3u);  // delivered once the reader let go
  }
  EXPECT_EQ(wsync_context_destroy(job.ctx), WSYNC_SUCCESS) << wsync_last_error(nullptr);
}

}  // namespace

WSYNC_MPI_GTEST_MAIN()
