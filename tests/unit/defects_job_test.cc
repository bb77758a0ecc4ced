// Regression tests for defects an outside probe found (issue 12) that need a running job: an
// in-process coordinator, a trainer and rollout ranks on threads (defects_job.h).
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "defects_job.h"

namespace {

using wsync_test::Job;
using wsync_test::JobSpec;
using wsync_test::publishAndWait;
using wsync_test::startJob;
using Clock = std::chrono::steady_clock;

bool mentions(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

// Defect: after a job failed (here: a version timed out because a reader held the only writable
// slot and max_staleness 0 forbade skipping), wsync_request_wait and wsync_wait_version returned
// TIMEOUT at once forever, which callers retry: a spin. Now they return the job's error, always.
TEST(DefectsJob, FailedJobReturnsItsErrorNeverTimeout) {
  JobSpec spec;
  spec.timeout_ms = 1500;
  spec.max_staleness = 0;
  auto job = startJob(spec);
  ASSERT_TRUE(job && job->committed()) << (job ? job->errors() : "no coordinator");
  std::string error;
  ASSERT_EQ(publishAndWait(*job, 1, &error), WSYNC_SUCCESS) << error;
  uint64_t newest = 0;
  ASSERT_EQ(wsync_wait_version(job->rollouts[0], 0, 5000, &newest), WSYNC_SUCCESS);
  wsync_lease_t lease = nullptr;  // holds v1's slot: v3 must go there and cannot
  ASSERT_EQ(wsync_acquire(job->rollouts[0], 1, &lease), WSYNC_SUCCESS);
  ASSERT_EQ(publishAndWait(*job, 2, &error), WSYNC_SUCCESS) << error;
  wsync_request_t request = nullptr;
  ASSERT_EQ(wsync_publish(job->trainer, 3, &request), WSYNC_SUCCESS);
  wsync_status_t first = wsync_request_wait(request, 10000);
  ASSERT_NE(first, WSYNC_SUCCESS);
  ASSERT_NE(first, WSYNC_ERR_TIMEOUT) << wsync_request_error(request);
  const std::string request_error = wsync_request_error(request);
  EXPECT_TRUE(mentions(request_error, "version 3")) << request_error;
  EXPECT_TRUE(mentions(request_error, "not delivered within 1500 ms")) << request_error;
  for (int i = 0; i < 1000; ++i) {  // every later call: the same error, no TIMEOUT
    ASSERT_EQ(wsync_request_wait(request, 50), first) << "call " << i;
  }
  EXPECT_EQ(wsync_request_test(request), first);
  EXPECT_EQ(std::string(wsync_request_error(request)), request_error);
  wsync_request_free(request);
  // The rollout learns the job failed (the coordinator's Error), then always says so.
  wsync_status_t rollout_first = WSYNC_ERR_TIMEOUT;
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (rollout_first == WSYNC_ERR_TIMEOUT && Clock::now() < deadline)
    rollout_first = wsync_wait_version(job->rollouts[0], 2, 100, &newest);
  ASSERT_NE(rollout_first, WSYNC_ERR_TIMEOUT);
  ASSERT_NE(rollout_first, WSYNC_SUCCESS);
  const std::string rollout_error = wsync_last_error(job->rollouts[0]);
  EXPECT_FALSE(rollout_error.empty());
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(wsync_wait_version(job->rollouts[0], 2, 50, &newest), rollout_first) << "call " << i;
  }
  EXPECT_EQ(std::string(wsync_last_error(job->rollouts[0])), rollout_error);
  wsync_request_t late = nullptr;  // a publish after the failure fails with the same error
  EXPECT_EQ(wsync_publish(job->trainer, 4, &late), first);
  EXPECT_EQ(late, nullptr);
  wsync_lease_release(lease);
}

// Defect: a rollout whose reader held its slot past timeout_ms failed the whole job, although
// the coordinator had skipped its replica. Now it stays out of versions while the lease is held
// (well past timeout_ms), the other replica and the trainer go on, and it takes the next version
// once the slot is free.
TEST(DefectsJob, SlowReaderOnlySlowsItsReplica) {
  JobSpec spec;
  spec.num_rollouts = 2;  // two replicas of one rank
  spec.timeout_ms = 800;
  spec.skip_grace_ms = 50;
  auto job = startJob(spec);
  ASSERT_TRUE(job && job->committed()) << (job ? job->errors() : "no coordinator");
  wsync_context_t slow = job->rollouts[0], fast = job->rollouts[1];
  uint64_t version = 0;
  auto publish = [&](uint64_t v) {
    job->weights[0] = static_cast<float>(v);
    std::string error;
    const wsync_status_t s = publishAndWait(*job, v, &error);
    EXPECT_EQ(s, WSYNC_SUCCESS) << "version " << v << ": " << error;
    return s == WSYNC_SUCCESS;
  };
  ASSERT_TRUE(publish(++version));
  uint64_t newest = 0;
  ASSERT_EQ(wsync_wait_version(slow, 0, 5000, &newest), WSYNC_SUCCESS);
  wsync_lease_t lease = nullptr;  // a long generation on v1
  ASSERT_EQ(wsync_acquire(slow, 1, &lease), WSYNC_SUCCESS);
  const auto held_since = Clock::now();
  while (Clock::now() - held_since < std::chrono::milliseconds(3 * spec.timeout_ms))
    ASSERT_TRUE(publish(++version));
  ASSERT_GE(version, 4u);
  auto newestOf = [](wsync_context_t ctx) {
    uint64_t v = 0;
    return wsync_newest_version(ctx, &v) == WSYNC_SUCCESS ? v : 0;
  };
  EXPECT_EQ(newestOf(fast), version);
  EXPECT_LT(newestOf(slow), version);  // skipped while its reader held the slot
  void* data = nullptr;                // the lease still reads v1's bytes
  ASSERT_EQ(wsync_lease_buffer(lease, 0, &data), WSYNC_SUCCESS);
  EXPECT_EQ(static_cast<float*>(data)[0], 1.0f);
  EXPECT_EQ(static_cast<float*>(data)[1], 0.5f);
  ASSERT_EQ(wsync_lease_release(lease), WSYNC_SUCCESS);
  ASSERT_TRUE(publish(++version));  // the slot is free: the slow replica takes it
  EXPECT_EQ(newestOf(slow), version);
  wsync_lease_t now = nullptr;
  ASSERT_EQ(wsync_acquire(slow, WSYNC_VERSION_NEWEST, &now), WSYNC_SUCCESS)
      << wsync_last_error(slow);
  ASSERT_EQ(wsync_lease_buffer(now, 0, &data), WSYNC_SUCCESS);
  EXPECT_EQ(static_cast<float*>(data)[0], static_cast<float>(version));
  EXPECT_EQ(static_cast<float*>(data)[63], 31.5f);
  wsync_lease_release(now);
}

// Defect: a host trainer asked for float32 -> float8_e4m3 (only device memory converts it) got
// UNSUPPORTED at commit while rollouts were left waiting (under MPI: blocked in a broadcast
// communicator's creation). Now planning rejects it: every rank's commit fails with UNSUPPORTED,
// naming the tensor and the ranks, and no rank waits past its timeout.
TEST(DefectsJob, UnconvertiblePairIsRejectedAtPlanningOnEveryRank) {
  JobSpec spec;
  spec.num_rollouts = 2;
  spec.rollouts_per_replica = 2;
  spec.rollout_dtype = WSYNC_DTYPE_FLOAT8_E4M3;
  const auto started = Clock::now();
  auto job = startJob(spec);
  ASSERT_NE(job, nullptr);
  EXPECT_LT(Clock::now() - started, std::chrono::milliseconds(spec.timeout_ms));
  for (size_t rank = 0; rank < job->status.size(); ++rank) {
    EXPECT_EQ(job->status[rank], WSYNC_ERR_UNSUPPORTED)
        << "rank " << rank << ": " << job->error[rank];
    EXPECT_TRUE(mentions(job->error[rank], "tensor 'w'")) << job->error[rank];
    EXPECT_TRUE(mentions(job->error[rank], "trainer 0")) << job->error[rank];
    EXPECT_TRUE(mentions(job->error[rank], "float8_e4m3")) << job->error[rank];
  }
}

// Defect (issue 20, 4): a rollout waiting for a newer version after the trainers finished cleanly
// got TIMEOUT on every call forever. Now the coordinator tells it (TrainersDone) and the wait ends
// at once with WSYNC_ERR_TRAINERS_DONE, the last error naming the trainers' last version.
TEST(DefectsJob, RolloutLearnsThatTheTrainersFinished) {
  JobSpec spec;
  auto job = startJob(spec);
  ASSERT_TRUE(job && job->committed()) << (job ? job->errors() : "no coordinator");
  std::string error;
  ASSERT_EQ(publishAndWait(*job, 1, &error), WSYNC_SUCCESS) << error;
  ASSERT_EQ(publishAndWait(*job, 2, &error), WSYNC_SUCCESS) << error;
  uint64_t newest = 0;
  ASSERT_EQ(wsync_wait_version(job->rollouts[0], 0, 5000, &newest), WSYNC_SUCCESS);
  ASSERT_EQ(newest, 2u);
  ASSERT_EQ(wsync_context_destroy(job->trainer), WSYNC_SUCCESS);
  job->trainer = nullptr;
  const auto started = Clock::now();
  const wsync_status_t s = wsync_wait_version(job->rollouts[0], 2, 4000, &newest);
  EXPECT_EQ(s, WSYNC_ERR_TRAINERS_DONE) << wsync_last_error(job->rollouts[0]);
  EXPECT_LT(Clock::now() - started, std::chrono::milliseconds(2000));
  const std::string last = wsync_last_error(job->rollouts[0]);
  EXPECT_TRUE(mentions(last, "the trainers finished at version 2")) << last;
  EXPECT_EQ(std::string(wsync_status_string(WSYNC_ERR_TRAINERS_DONE)), "WSYNC_ERR_TRAINERS_DONE");
  // The newest version stays readable.
  wsync_lease_t lease = nullptr;
  ASSERT_EQ(wsync_acquire(job->rollouts[0], WSYNC_VERSION_NEWEST, &lease), WSYNC_SUCCESS);
  wsync_lease_release(lease);
  EXPECT_EQ(wsync_wait_version(job->rollouts[0], 1, 100, &newest), WSYNC_SUCCESS);
}

// Issue 20, 5: the C API's smaller defects. A failed wsync_lease_buffer sets the context's last
// error (not an earlier call's); copy_flip with no live memory registered is INVALID_USAGE; a
// second process claiming trainer 0 of the running job is told that trainer 0 is taken.
TEST(DefectsJob, LeaseBufferCopyFlipAndTakenTrainerErrors) {
  JobSpec spec;
  auto job = startJob(spec);
  ASSERT_TRUE(job && job->committed()) << (job ? job->errors() : "no coordinator");
  std::string error;
  ASSERT_EQ(publishAndWait(*job, 1, &error), WSYNC_SUCCESS) << error;
  wsync_context_t rollout = job->rollouts[0];
  uint64_t newest = 0;
  ASSERT_EQ(wsync_wait_version(rollout, 0, 5000, &newest), WSYNC_SUCCESS);
  ASSERT_EQ(wsync_wait_version(rollout, 1, 10, &newest), WSYNC_ERR_TIMEOUT);  // an earlier error
  wsync_lease_t lease = nullptr;
  ASSERT_EQ(wsync_acquire(rollout, WSYNC_VERSION_NEWEST, &lease), WSYNC_SUCCESS);
  void* data = nullptr;
  EXPECT_EQ(wsync_lease_buffer(lease, 7, &data), WSYNC_ERR_INVALID_ARGUMENT);
  const std::string lease_error = wsync_last_error(rollout);
  EXPECT_TRUE(mentions(lease_error, "wsync_lease_buffer: buffer index 7")) << lease_error;
  wsync_lease_release(lease);

  uint64_t flipped = 0;
  EXPECT_EQ(wsync_copy_flip(rollout, WSYNC_VERSION_NEWEST, nullptr, &flipped),
            WSYNC_ERR_INVALID_USAGE);
  const std::string flip_error = wsync_last_error(rollout);
  EXPECT_TRUE(mentions(flip_error, "no buffer was registered with live memory")) << flip_error;

  wsync_config_t cfg = wsync_test::jobConfig(*job, spec, WSYNC_ROLE_TRAINER, 0);
  cfg.timeout_ms = 3000;
  wsync_context_t second = nullptr;
  EXPECT_NE(wsync_context_create(&cfg, &second), WSYNC_SUCCESS);
  const std::string taken = wsync_last_error(nullptr);
  EXPECT_TRUE(mentions(taken, "trainer 0 is taken")) << taken;
  EXPECT_FALSE(mentions(taken, "rollout replica")) << taken;
  if (second != nullptr) wsync_context_destroy(second);
  // The job goes on.
  EXPECT_EQ(publishAndWait(*job, 2, &error), WSYNC_SUCCESS) << error;
}

}  // namespace
