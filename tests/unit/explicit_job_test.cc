// A whole job in one process, without MPI: a coordinator started through the C++ API and ranks
// joining with WSYNC_BOOTSTRAP_EXPLICIT on threads (the path of engines launched outside mpirun).
// Data moves by real UCX one-sided writes between the contexts' own UCX workers.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/coordinator.h"
#include "models/demo_policy.h"
#include "support/explicit_job.h"
#include "wsync/wsync.h"

namespace {

constexpr char kSecret[] = "explicit-job-test-secret";

struct Job {
  std::unique_ptr<wsync::Coordinator> coordinator;
  std::string address;
};

Job startCoordinator(int trainers, int rollouts, int timeout_ms) {
  wsync::CoordinatorOptions opt;
  opt.num_trainers = trainers;
  opt.num_rollouts = rollouts;
  opt.control.secret = kSecret;
  opt.timeout = std::chrono::milliseconds(timeout_ms);
  auto c = wsync::Coordinator::start(std::move(opt));
  EXPECT_TRUE(c.isOk()) << c.status().toString();
  Job job;
  job.address = "127.0.0.1:" + std::to_string((*c)->port());
  job.coordinator = std::move(c).value();
  return job;
}

wsync_config_t explicitConfig(const Job& job, wsync_role_t role, int rank, int trainers,
                              int rollouts) {
  const int replica = role == WSYNC_ROLE_ROLLOUT ? rank : -1;  // one-rank replicas
  return wsync_test::explicitConfig(job.address, kSecret, role, rank, replica, trainers, rollouts);
}

TEST(ExplicitJob, EveryVersionArrivesBitForBit) {
  constexpr int kTrainers = 2, kRollouts = 2, kVersions = 30;
  Job job = startCoordinator(kTrainers, kRollouts, 20000);
  wsync_demo::PolicyShape shape;
  shape.layers = 1;
  shape.hidden = 128;
  shape.ffn = 256;
  shape.vocab = 512;
  const auto tensors = wsync_demo::policyTensors(shape);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kTrainers; ++t) {
    threads.emplace_back([&, t] {
      wsync_config_t cfg = explicitConfig(job, WSYNC_ROLE_TRAINER, t, kTrainers, kRollouts);
      wsync_context_t ctx = nullptr;
      if (wsync_context_create(&cfg, &ctx) != WSYNC_SUCCESS) return void(++failures);
      const auto layout = wsync_demo::trainerLayout(tensors, kTrainers, t);
      std::vector<std::vector<float>> params(layout.size());
      std::vector<void*> data;
      for (size_t b = 0; b < layout.size(); ++b) {
        params[b].resize(static_cast<size_t>(std::max<int64_t>(1, layout[b].num_elements)));
        data.push_back(params[b].data());
      }
      std::vector<int> indices;
      if (wsync_demo::registerBuffers(ctx, tensors, layout, WSYNC_DTYPE_FLOAT32, data, &indices) !=
              WSYNC_SUCCESS ||
          wsync_commit(ctx) != WSYNC_SUCCESS) {
        ADD_FAILURE() << wsync_last_error(ctx);
        ++failures;
      } else {
        for (uint64_t v = 1; v <= kVersions; ++v) {
          for (size_t b = 0; b < layout.size(); ++b)
            wsync_demo::fillTrainerBuffer(tensors, layout[b], v, params[b].data());
          wsync_request_t req = nullptr;
          ASSERT_EQ(wsync_publish(ctx, v, &req), WSYNC_SUCCESS) << wsync_last_error(ctx);
          EXPECT_EQ(wsync_request_wait(req, -1), WSYNC_SUCCESS);
          wsync_request_free(req);
        }
      }
      EXPECT_EQ(wsync_context_destroy(ctx), WSYNC_SUCCESS);
    });
  }
  for (int r = 0; r < kRollouts; ++r) {
    threads.emplace_back([&, r] {
      wsync_config_t cfg = explicitConfig(job, WSYNC_ROLE_ROLLOUT, r, kTrainers, kRollouts);
      wsync_context_t ctx = nullptr;
      if (wsync_context_create(&cfg, &ctx) != WSYNC_SUCCESS) return void(++failures);
      const auto layout =
          wsync_demo::rolloutLayout(tensors, wsync_demo::RolloutLayout::kMixed, 1, 0);
      std::vector<int> indices;
      if (wsync_demo::registerBuffers(ctx, tensors, layout, WSYNC_DTYPE_BFLOAT16, {}, &indices) !=
              WSYNC_SUCCESS ||
          wsync_commit(ctx) != WSYNC_SUCCESS) {
        ADD_FAILURE() << wsync_last_error(ctx);
        ++failures;
      } else {
        uint64_t newest = 0;
        while (newest < kVersions) {
          ASSERT_EQ(wsync_wait_version(ctx, newest, -1, &newest), WSYNC_SUCCESS)
              << wsync_last_error(ctx);
          wsync_lease_t lease = nullptr;
          ASSERT_EQ(wsync_acquire(ctx, WSYNC_VERSION_NEWEST, &lease), WSYNC_SUCCESS);
          uint64_t v = 0;
          wsync_lease_version(lease, &v);
          for (size_t b = 0; b < layout.size(); ++b) {
            void* p = nullptr;
            ASSERT_EQ(wsync_lease_buffer(lease, indices[b], &p), WSYNC_SUCCESS);
            std::string error;
            EXPECT_EQ(
                wsync_demo::countMismatches(tensors, layout[b], WSYNC_DTYPE_BFLOAT16, p, v, &error),
                0)
                << error;
          }
          wsync_lease_release(lease);
        }
      }
      EXPECT_EQ(wsync_context_destroy(ctx), WSYNC_SUCCESS);
    });
  }
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_TRUE(job.coordinator->wait(std::chrono::seconds(20)).isOk());
}

TEST(ExplicitJob, WrongSecretIsRefused) {
  Job job = startCoordinator(1, 1, 5000);
  wsync_config_t cfg = explicitConfig(job, WSYNC_ROLE_TRAINER, 0, 1, 1);
  cfg.secret = "not-the-secret";
  cfg.timeout_ms = 3000;
  wsync_context_t ctx = nullptr;
  EXPECT_EQ(wsync_context_create(&cfg, &ctx), WSYNC_ERR_PROTOCOL) << wsync_last_error(nullptr);
  EXPECT_EQ(ctx, nullptr);
}

TEST(ExplicitJob, RankOutOfRangeIsRejectedLocally) {
  Job job = startCoordinator(1, 1, 5000);
  wsync_config_t cfg = explicitConfig(job, WSYNC_ROLE_TRAINER, 3, 1, 1);
  wsync_context_t ctx = nullptr;
  EXPECT_EQ(wsync_context_create(&cfg, &ctx), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(wsync_last_error(nullptr)).find("rank 3"), std::string::npos)
      << wsync_last_error(nullptr);
}

TEST(ExplicitJob, MissingRankTimesOutAndIsNamed) {
  Job job = startCoordinator(1, 1, 1000);
  wsync_config_t cfg = explicitConfig(job, WSYNC_ROLE_TRAINER, 0, 1, 1);
  cfg.timeout_ms = 5000;
  wsync_context_t ctx = nullptr;
  EXPECT_EQ(wsync_context_create(&cfg, &ctx), WSYNC_ERR_TIMEOUT);
  EXPECT_NE(std::string(wsync_last_error(nullptr)).find("rollout 0"), std::string::npos)
      << wsync_last_error(nullptr);
  const wsync::Status s = job.coordinator->wait(std::chrono::seconds(5));
  EXPECT_EQ(s.code(), WSYNC_ERR_TIMEOUT) << s.toString();
}

}  // namespace
