// Regression tests for defects an outside probe found (issue 12): values from a caller or a peer
// that must be rejected where they enter, with an error naming them.
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <string>
#include <thread>

#include "coordinator/admission.h"
#include "coordinator/coordinator.h"
#include "wsync/wsync.h"

namespace {

constexpr char kSecret[] = "defects-test-secret";

std::unique_ptr<wsync::Coordinator> startCoordinator(int trainers, int rollouts) {
  wsync::CoordinatorOptions opt;
  opt.num_trainers = trainers;
  opt.num_rollouts = rollouts;
  opt.control.secret = kSecret;
  opt.timeout = std::chrono::milliseconds(10000);
  auto c = wsync::Coordinator::start(std::move(opt));
  EXPECT_TRUE(c.isOk()) << c.status().toString();
  return c.isOk() ? std::move(c).value() : nullptr;
}

wsync_config_t explicitConfig(const std::string& address, wsync_role_t role, int rank) {
  wsync_config_t cfg = WSYNC_CONFIG_INITIALIZER;
  cfg.role = role;
  cfg.bootstrap = WSYNC_BOOTSTRAP_EXPLICIT;
  cfg.rank = rank;
  cfg.num_trainers = 1;
  cfg.num_rollouts = 1;
  cfg.replica = role == WSYNC_ROLE_ROLLOUT ? 0 : -1;
  cfg.coordinator_address = address.c_str();
  cfg.secret = kSecret;
  cfg.timeout_ms = 10000;
  return cfg;
}

bool mentions(const char* text, const std::string& what) {
  return std::string(text).find(what) != std::string::npos;
}

// Defect: config.replica = INT_MAX passed create and the coordinator died of bad_alloc at commit.
TEST(Defects, HugeReplicaIsRejectedAtCreate) {
  wsync_config_t cfg = explicitConfig("127.0.0.1:1", WSYNC_ROLE_ROLLOUT, 0);
  cfg.replica = INT_MAX;
  wsync_context_t ctx = nullptr;
  EXPECT_EQ(wsync_context_create(&cfg, &ctx), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(wsync_last_error(nullptr), "replica")) << wsync_last_error(nullptr);
  EXPECT_TRUE(mentions(wsync_last_error(nullptr), std::to_string(INT_MAX)))
      << wsync_last_error(nullptr);
  EXPECT_EQ(ctx, nullptr);
}

TEST(Defects, HugeRankCountIsRejectedAtCreate) {
  wsync_config_t cfg = explicitConfig("127.0.0.1:1", WSYNC_ROLE_TRAINER, 0);
  cfg.num_rollouts = INT_MAX;
  wsync_context_t ctx = nullptr;
  EXPECT_EQ(wsync_context_create(&cfg, &ctx), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(wsync_last_error(nullptr), "num_rollouts")) << wsync_last_error(nullptr);
}

// The coordinator bounds a peer's replica index before it sizes per-replica tables by it.
TEST(Defects, CoordinatorRefusesHugeReplicaInHello) {
  wsync::JobShape job;
  job.num_trainers = 1;
  job.num_rollouts = 2;
  wsync::HelloMsg hello;
  hello.role = wsync::Role::kRollout;
  hello.role_rank = 0;
  hello.replica = INT_MAX;
  const wsync::Status s = wsync::checkHello(job, hello, {});
  EXPECT_EQ(s.code(), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(s.message().find("replica " + std::to_string(INT_MAX)), std::string::npos)
      << s.toString();
  hello.replica = 1;
  EXPECT_TRUE(wsync::checkHello(job, hello, {}).isOk());
}

// Defect: wsync_publish(UINT64_MAX) succeeded on the trainer and the rollouts died on it.
TEST(Defects, PublishOfReservedVersionIsRejectedAtTheCall) {
  auto coordinator = startCoordinator(1, 1);
  ASSERT_NE(coordinator, nullptr);
  const std::string address = "127.0.0.1:" + std::to_string(coordinator->port());
  wsync_context_t trainer = nullptr, rollout = nullptr;
  wsync_status_t rollout_status = WSYNC_ERR_INTERNAL;
  std::thread rollout_thread([&] {
    wsync_config_t cfg = explicitConfig(address, WSYNC_ROLE_ROLLOUT, 0);
    rollout_status = wsync_context_create(&cfg, &rollout);
  });
  wsync_config_t cfg = explicitConfig(address, WSYNC_ROLE_TRAINER, 0);
  const wsync_status_t trainer_status = wsync_context_create(&cfg, &trainer);
  rollout_thread.join();
  ASSERT_EQ(trainer_status, WSYNC_SUCCESS) << wsync_last_error(nullptr);
  ASSERT_EQ(rollout_status, WSYNC_SUCCESS) << wsync_last_error(nullptr);
  wsync_request_t request = nullptr;
  EXPECT_EQ(wsync_publish(trainer, WSYNC_VERSION_NEWEST, &request), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(wsync_last_error(trainer), "18446744073709551615"))
      << wsync_last_error(trainer);
  EXPECT_EQ(request, nullptr);
  wsync_context_abort(trainer);
  wsync_context_abort(rollout);
  wsync_context_destroy(trainer);
  wsync_context_destroy(rollout);
}

}  // namespace
