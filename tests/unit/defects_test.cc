// Regression tests for defects an outside probe found (issue 12): values from a caller or a peer
// that must be rejected where they enter, with an error naming them.
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/admission.h"
#include "coordinator/coordinator.h"
#include "layout/registration_checks.h"
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
  const std::string address = "127.0.0.1:1";  // outlives cfg, which points into it
  wsync_config_t cfg = explicitConfig(address, WSYNC_ROLE_ROLLOUT, 0);
  cfg.replica = INT_MAX;
  wsync_context_t ctx = nullptr;
  EXPECT_EQ(wsync_context_create(&cfg, &ctx), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(wsync_last_error(nullptr), "replica")) << wsync_last_error(nullptr);
  EXPECT_TRUE(mentions(wsync_last_error(nullptr), std::to_string(INT_MAX)))
      << wsync_last_error(nullptr);
  EXPECT_EQ(ctx, nullptr);
}

TEST(Defects, HugeRankCountIsRejectedAtCreate) {
  const std::string address = "127.0.0.1:1";  // outlives cfg, which points into it
  wsync_config_t cfg = explicitConfig(address, WSYNC_ROLE_TRAINER, 0);
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

// Defect: releasing the same lease twice was a use after free (SIGSEGV).
TEST(Defects, SecondLeaseReleaseIsAnErrorThatChangesNothing) {
  auto coordinator = startCoordinator(1, 1);
  ASSERT_NE(coordinator, nullptr);
  const std::string address = "127.0.0.1:" + std::to_string(coordinator->port());
  constexpr int64_t kN = 64;
  std::vector<float> weights(kN, 1.5f);
  int64_t shape[1] = {kN}, offset[1] = {0}, strides[1] = {1};
  wsync_piece_t piece = WSYNC_PIECE_INITIALIZER;
  piece.tensor = "w";
  piece.ndim = 1;
  piece.global_shape = shape;
  piece.box_offset = offset;
  piece.box_extent = shape;
  piece.local_strides = strides;
  wsync_context_t trainer = nullptr, rollout = nullptr;
  wsync_status_t rollout_status = WSYNC_ERR_INTERNAL;
  std::thread rollout_thread([&] {
    wsync_config_t cfg = explicitConfig(address, WSYNC_ROLE_ROLLOUT, 0);
    rollout_status = wsync_context_create(&cfg, &rollout);
    if (rollout_status != WSYNC_SUCCESS) return;
    rollout_status = wsync_register_buffer(rollout, "w", WSYNC_DTYPE_FLOAT32, WSYNC_MEMORY_HOST,
                                           nullptr, kN, 1, &piece, nullptr);
    if (rollout_status == WSYNC_SUCCESS) rollout_status = wsync_commit(rollout);
  });
  wsync_config_t cfg = explicitConfig(address, WSYNC_ROLE_TRAINER, 0);
  wsync_status_t trainer_status = wsync_context_create(&cfg, &trainer);
  if (trainer_status == WSYNC_SUCCESS) {
    trainer_status = wsync_register_buffer(trainer, "w", WSYNC_DTYPE_FLOAT32, WSYNC_MEMORY_HOST,
                                           weights.data(), kN, 1, &piece, nullptr);
  }
  if (trainer_status == WSYNC_SUCCESS) trainer_status = wsync_commit(trainer);
  rollout_thread.join();
  ASSERT_EQ(trainer_status, WSYNC_SUCCESS) << wsync_last_error(trainer);
  ASSERT_EQ(rollout_status, WSYNC_SUCCESS) << wsync_last_error(rollout);
  wsync_request_t request = nullptr;
  ASSERT_EQ(wsync_publish(trainer, 1, &request), WSYNC_SUCCESS) << wsync_last_error(trainer);
  ASSERT_EQ(wsync_request_wait(request, 10000), WSYNC_SUCCESS) << wsync_last_error(trainer);
  wsync_request_free(request);
  uint64_t newest = 0;
  ASSERT_EQ(wsync_wait_version(rollout, 0, 10000, &newest), WSYNC_SUCCESS);
  wsync_lease_t lease = nullptr;
  ASSERT_EQ(wsync_acquire(rollout, WSYNC_VERSION_NEWEST, &lease), WSYNC_SUCCESS);
  void* data = nullptr;
  ASSERT_EQ(wsync_lease_buffer(lease, 0, &data), WSYNC_SUCCESS);
  EXPECT_EQ(static_cast<float*>(data)[kN - 1], 1.5f);
  EXPECT_EQ(wsync_lease_release(lease), WSYNC_SUCCESS);
  EXPECT_EQ(wsync_lease_release(lease), WSYNC_ERR_INVALID_USAGE);
  EXPECT_TRUE(mentions(wsync_last_error(nullptr), "already released")) << wsync_last_error(nullptr);
  wsync_lease_t again = nullptr;  // the slot is still usable: leases work as before
  EXPECT_EQ(wsync_acquire(rollout, WSYNC_VERSION_NEWEST, &again), WSYNC_SUCCESS);
  EXPECT_EQ(wsync_lease_release(again), WSYNC_SUCCESS);
  wsync_context_destroy(trainer);
  wsync_context_destroy(rollout);
}

// A committed-less trainer context of a 1 x 1 job whose coordinator is `coordinator`.
struct CreatedPair {
  wsync_context_t trainer = nullptr;
  wsync_context_t rollout = nullptr;
  ~CreatedPair() {
    wsync_context_abort(trainer);
    wsync_context_abort(rollout);
    wsync_context_destroy(trainer);
    wsync_context_destroy(rollout);
  }
};
void createPair(const std::string& address, CreatedPair& pair) {
  wsync_status_t rollout_status = WSYNC_ERR_INTERNAL;
  std::thread rollout_thread([&] {
    wsync_config_t cfg = explicitConfig(address, WSYNC_ROLE_ROLLOUT, 0);
    rollout_status = wsync_context_create(&cfg, &pair.rollout);
  });
  wsync_config_t cfg = explicitConfig(address, WSYNC_ROLE_TRAINER, 0);
  const wsync_status_t trainer_status = wsync_context_create(&cfg, &pair.trainer);
  rollout_thread.join();
  ASSERT_EQ(trainer_status, WSYNC_SUCCESS) << wsync_last_error(nullptr);
  ASSERT_EQ(rollout_status, WSYNC_SUCCESS) << wsync_last_error(nullptr);
}

// Defect: a box at offset INT64_MAX, and a [2^32, 2^32] tensor in a 16-element buffer, were
// accepted by wsync_register_buffer (overflowing arithmetic) and failed only at commit, blamed on
// another rank. Now registration refuses them, naming the tensor and the offending field.
TEST(Defects, OverflowingRegistrationsAreRejectedAtRegistration) {
  auto coordinator = startCoordinator(1, 1);
  ASSERT_NE(coordinator, nullptr);
  const std::string address = "127.0.0.1:" + std::to_string(coordinator->port());
  CreatedPair pair;
  ASSERT_NO_FATAL_FAILURE(createPair(address, pair));
  std::vector<float> data(16, 0.0f);
  for (wsync_context_t ctx : {pair.trainer, pair.rollout}) {
    void* memory = ctx == pair.trainer ? data.data() : nullptr;
    int64_t shape[1] = {16}, offset[1] = {INT64_MAX}, extent[1] = {1};
    wsync_piece_t piece = WSYNC_PIECE_INITIALIZER;
    piece.tensor = "far";
    piece.ndim = 1;
    piece.global_shape = shape;
    piece.box_offset = offset;
    piece.box_extent = extent;
    EXPECT_EQ(wsync_register_buffer(ctx, "far", WSYNC_DTYPE_FLOAT32, WSYNC_MEMORY_HOST, memory, 16,
                                    1, &piece, nullptr),
              WSYNC_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(mentions(wsync_last_error(ctx), "tensor 'far'")) << wsync_last_error(ctx);
    EXPECT_TRUE(mentions(wsync_last_error(ctx), "box_offset[0]")) << wsync_last_error(ctx);

    int64_t huge[2] = {int64_t{1} << 32, int64_t{1} << 32};
    wsync_piece_t big = WSYNC_PIECE_INITIALIZER;
    big.tensor = "huge";
    big.ndim = 2;
    big.global_shape = huge;
    EXPECT_EQ(wsync_register_buffer(ctx, "huge", WSYNC_DTYPE_FLOAT32, WSYNC_MEMORY_HOST, memory, 16,
                                    1, &big, nullptr),
              WSYNC_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(mentions(wsync_last_error(ctx), "tensor 'huge'")) << wsync_last_error(ctx);
    EXPECT_TRUE(mentions(wsync_last_error(ctx), "global_shape")) << wsync_last_error(ctx);

    // A [2^20, 2^20] tensor (fits int64) whose whole box would need 2^40 elements of 16.
    int64_t wide[2] = {int64_t{1} << 20, int64_t{1} << 20};
    big.tensor = "wide";
    big.global_shape = wide;
    EXPECT_EQ(wsync_register_buffer(ctx, "wide", WSYNC_DTYPE_FLOAT32, WSYNC_MEMORY_HOST, memory, 16,
                                    1, &big, nullptr),
              WSYNC_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(mentions(wsync_last_error(ctx), "tensor 'wide'")) << wsync_last_error(ctx);
    EXPECT_TRUE(mentions(wsync_last_error(ctx), "box_extent")) << wsync_last_error(ctx);
  }
}

// The coordinator checks every decoded registration the same way (a peer that skipped the
// checks), before the planner sizes anything by it.
TEST(Defects, CoordinatorChecksDecodedRegistrations) {
  wsync::Registration reg;
  reg.role = wsync::Role::kRollout;
  const int32_t t = reg.declareTensor("w", wsync::Dims{16});
  wsync::LocalBuffer b;
  b.name = "w";
  b.num_elements = 16;
  wsync::Piece piece;
  piece.tensor = t;
  piece.box = {wsync::Dims{INT64_MAX}, wsync::Dims{1}};
  piece.local_strides = wsync::Dims{1};
  b.pieces.push_back(piece);
  reg.buffers.push_back(b);
  wsync::Status s = wsync::checkRegistration(reg);
  EXPECT_EQ(s.code(), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(s.message().c_str(), "box_offset[0]")) << s.toString();
  reg.buffers[0].pieces[0].box = {wsync::Dims{0}, wsync::Dims{16}};
  EXPECT_TRUE(wsync::checkRegistration(reg).isOk());
  reg.buffers[0].pieces[0].tensor = 7;
  EXPECT_EQ(wsync::checkRegistration(reg).code(), WSYNC_ERR_INVALID_ARGUMENT);
  reg.buffers[0].pieces[0].tensor = t;
  reg.tensors[0].shape = wsync::Dims{int64_t{1} << 32, int64_t{1} << 32};
  s = wsync::checkRegistration(reg);
  EXPECT_EQ(s.code(), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(s.message().c_str(), "global_shape")) << s.toString();
}

}  // namespace
