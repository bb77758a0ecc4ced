// Bad input and misuse through the public C API, in real jobs under mpirun -np 3:
// world rank 0 is trainer 0 (and hosts the coordinator), world ranks 1 and 2 are rollouts 0 and 1
// (replicas 0 and 1). Every scenario is a fresh job. Each asserts that every rank gets the named
// error (no hang, no crash), and that the other ranks' contexts fail the same way.
#include <chrono>
#include <cstdlib>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "mp/mpi_gtest_main.h"
#include "wsync/wsync.h"

namespace {

constexpr int kTimeoutMs = 5000;

bool isTrainer() {
  return worldRank() == 0;
}

wsync_context_t create(int timeout_ms = kTimeoutMs) {
  wsync_config_t cfg = WSYNC_CONFIG_INITIALIZER;
  cfg.role = isTrainer() ? WSYNC_ROLE_TRAINER : WSYNC_ROLE_ROLLOUT;
  cfg.replica = isTrainer() ? -1 : worldRank() - 1;
  cfg.timeout_ms = timeout_ms;
  wsync_context_t ctx = nullptr;
  const wsync_status_t s = wsync_context_create(&cfg, &ctx);
  EXPECT_EQ(s, WSYNC_SUCCESS) << wsync_last_error(nullptr);
  return ctx;
}

// Registers one buffer holding box [offset, offset+extent) of tensor `name` (global `shape`).
wsync_status_t registerBox(wsync_context_t ctx, const char* name, std::vector<int64_t> shape,
                           std::vector<int64_t> offset, std::vector<int64_t> extent,
                           wsync_dtype_t dtype, std::vector<float>* storage) {
  int64_t n = 1;
  for (int64_t e : extent)
    n *= e;
  void* data = nullptr;
  if (isTrainer()) {
    storage->assign(static_cast<size_t>(n) * 2, 0.0f);  // room for 8-byte dtypes too
    data = storage->data();
  }
  wsync_piece_t piece = WSYNC_PIECE_INITIALIZER;
  piece.tensor = name;
  piece.ndim = static_cast<int>(shape.size());
  piece.global_shape = shape.data();
  piece.box_offset = offset.data();
  piece.box_extent = extent.data();
  return wsync_register_buffer(ctx, name, dtype, WSYNC_MEMORY_HOST, data, n, 1, &piece, nullptr);
}

// Commits and expects `want` on every rank, with a message containing every string of `needles`.
void expectCommitFails(wsync_context_t ctx, wsync_status_t want,
                       const std::vector<std::string>& needles) {
  const wsync_status_t s = wsync_commit(ctx);
  EXPECT_EQ(s, want) << wsync_status_string(s) << ": " << wsync_last_error(ctx);
  const std::string message = wsync_last_error(ctx);
  for (const std::string& n : needles)
    EXPECT_NE(message.find(n), std::string::npos) << message;
  wsync_context_destroy(ctx);
}

TEST(CapiErrors, ShapeMismatchIsNamedOnEveryRank) {
  wsync_context_t ctx = create();
  ASSERT_NE(ctx, nullptr);
  std::vector<float> mem;
  const std::vector<int64_t> shape =
      isTrainer() ? std::vector<int64_t>{8, 4} : std::vector<int64_t>{8, 5};
  ASSERT_EQ(registerBox(ctx, "layers.0.w", shape, {0, 0}, shape, WSYNC_DTYPE_FLOAT32, &mem),
            WSYNC_SUCCESS);
  expectCommitFails(ctx, WSYNC_ERR_MISMATCH,
                    {"layers.0.w", "[8, 4]", "[8, 5]", "trainer 0", "rollout"});
}

TEST(CapiErrors, DtypeThatCannotConvertIsNamed) {
  wsync_context_t ctx = create();
  ASSERT_NE(ctx, nullptr);
  std::vector<float> mem;
  ASSERT_EQ(registerBox(ctx, "step", {4}, {0}, {4},
                        isTrainer() ? WSYNC_DTYPE_INT32 : WSYNC_DTYPE_FLOAT32, &mem),
            WSYNC_SUCCESS);
  expectCommitFails(ctx, WSYNC_ERR_MISMATCH, {"step", "int32", "float32"});
}

TEST(CapiErrors, TensorNoTrainerHoldsIsNamed) {
  wsync_context_t ctx = create();
  ASSERT_NE(ctx, nullptr);
  std::vector<float> mem;
  ASSERT_EQ(registerBox(ctx, "a", {4}, {0}, {4}, WSYNC_DTYPE_FLOAT32, &mem), WSYNC_SUCCESS);
  if (!isTrainer()) {
    ASSERT_EQ(registerBox(ctx, "lm_head.weight", {4}, {0}, {4}, WSYNC_DTYPE_FLOAT32, &mem),
              WSYNC_SUCCESS);
  }
  expectCommitFails(ctx, WSYNC_ERR_MISMATCH, {"lm_head.weight", "rollout"});
}

TEST(CapiErrors, CoverageHoleIsNamed) {
  wsync_context_t ctx = create();
  ASSERT_NE(ctx, nullptr);
  std::vector<float> mem;
  // The trainer holds rows [0, 4) of an [8, 4] tensor; rollouts want all of it.
  const std::vector<int64_t> extent =
      isTrainer() ? std::vector<int64_t>{4, 4} : std::vector<int64_t>{8, 4};
  ASSERT_EQ(registerBox(ctx, "w", {8, 4}, {0, 0}, extent, WSYNC_DTYPE_FLOAT32, &mem),
            WSYNC_SUCCESS);
  expectCommitFails(ctx, WSYNC_ERR_MISMATCH, {"'w'", "rollout"});
}

TEST(CapiErrors, BadArgumentsAreRejectedLocally) {
  wsync_context_t ctx = create();
  ASSERT_NE(ctx, nullptr);
  std::vector<float> mem;
  // A box outside the tensor: named, nothing registered, the context stays usable.
  EXPECT_EQ(registerBox(ctx, "w", {8, 4}, {6, 0}, {4, 4}, WSYNC_DTYPE_FLOAT32, &mem),
            WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(wsync_last_error(ctx)).find("'w'"), std::string::npos)
      << wsync_last_error(ctx);
  EXPECT_EQ(wsync_register_buffer(ctx, "x", static_cast<wsync_dtype_t>(99), WSYNC_MEMORY_HOST,
                                  nullptr, 0, 0, nullptr, nullptr),
            WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(wsync_register_buffer(ctx, nullptr, WSYNC_DTYPE_FLOAT32, WSYNC_MEMORY_HOST, nullptr, 0,
                                  0, nullptr, nullptr),
            WSYNC_ERR_INVALID_ARGUMENT);
  // Wrong order: versions and leases before commit.
  wsync_request_t req = nullptr;
  wsync_lease_t lease = nullptr;
  uint64_t v = 0;
  if (isTrainer()) {
    EXPECT_EQ(wsync_publish(ctx, 1, &req), WSYNC_ERR_INVALID_USAGE);
    EXPECT_EQ(wsync_acquire(ctx, WSYNC_VERSION_NEWEST, &lease), WSYNC_ERR_INVALID_USAGE);
  } else {
    EXPECT_EQ(wsync_acquire(ctx, WSYNC_VERSION_NEWEST, &lease), WSYNC_ERR_INVALID_USAGE);
    EXPECT_EQ(wsync_newest_version(ctx, &v), WSYNC_ERR_INVALID_USAGE);
    EXPECT_EQ(wsync_publish(ctx, 1, &req), WSYNC_ERR_INVALID_USAGE);
  }
  EXPECT_EQ(req, nullptr);
  EXPECT_EQ(lease, nullptr);
  // The context still commits fine after the rejected calls.
  ASSERT_EQ(registerBox(ctx, "w", {8, 4}, {0, 0}, {8, 4}, WSYNC_DTYPE_FLOAT32, &mem),
            WSYNC_SUCCESS);
  // float8 scales: the trainer's, for tensors it declared, finite and > 0.
  if (isTrainer()) {
    EXPECT_EQ(wsync_set_tensor_scale(ctx, "w", 0.5f), WSYNC_SUCCESS) << wsync_last_error(ctx);
    EXPECT_EQ(wsync_set_tensor_scale(ctx, "nope", 2.0f), WSYNC_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(wsync_last_error(ctx)).find("'nope'"), std::string::npos)
        << wsync_last_error(ctx);
    EXPECT_EQ(wsync_set_tensor_scale(ctx, "w", 0.0f), WSYNC_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(wsync_set_tensor_scale(ctx, "w", -1.0f), WSYNC_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(wsync_set_tensor_scale(ctx, "w", std::numeric_limits<float>::infinity()),
              WSYNC_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(wsync_set_tensor_scale(ctx, nullptr, 1.0f), WSYNC_ERR_INVALID_ARGUMENT);
  } else {
    EXPECT_EQ(wsync_set_tensor_scale(ctx, "w", 2.0f), WSYNC_ERR_INVALID_USAGE);
  }
  EXPECT_EQ(wsync_set_tensor_scale(nullptr, "w", 2.0f), WSYNC_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(wsync_commit(ctx), WSYNC_SUCCESS) << wsync_last_error(ctx);
  EXPECT_EQ(wsync_commit(ctx), WSYNC_ERR_INVALID_USAGE);
  EXPECT_EQ(registerBox(ctx, "late", {4}, {0}, {4}, WSYNC_DTYPE_FLOAT32, &mem),
            WSYNC_ERR_INVALID_USAGE);
  if (isTrainer()) {
    ASSERT_EQ(wsync_publish(ctx, 3, &req), WSYNC_SUCCESS);
    EXPECT_EQ(wsync_request_wait(req, -1), WSYNC_SUCCESS);
    EXPECT_STREQ(wsync_request_error(req), "");  // a successful publish has no error
    wsync_request_free(req);
    EXPECT_EQ(wsync_publish(ctx, 3, &req), WSYNC_ERR_INVALID_USAGE);  // not increasing
    EXPECT_NE(std::string(wsync_last_error(ctx)).find("version 3"), std::string::npos);
  } else {
    EXPECT_EQ(wsync_wait_version(ctx, 0, -1, &v), WSYNC_SUCCESS) << wsync_last_error(ctx);
    EXPECT_EQ(v, 3u);
    EXPECT_EQ(wsync_acquire(ctx, 2, &lease), WSYNC_ERR_NOT_READY);
    ASSERT_EQ(wsync_acquire(ctx, 3, &lease), WSYNC_SUCCESS);
    void* data = nullptr;
    EXPECT_EQ(wsync_lease_buffer(lease, 1, &data), WSYNC_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(wsync_lease_buffer(lease, 0, &data), WSYNC_SUCCESS);
    wsync_lease_release(lease);
  }
  EXPECT_EQ(wsync_context_destroy(ctx), WSYNC_SUCCESS) << wsync_last_error(nullptr);
}

// A publish that fails after wsync_publish returned keeps its error: the rollouts leave without
// goodbye (abort) once committed, so the trainer's version 1 fails in the background. The failed
// wait and test name it in wsync_last_error, and wsync_request_error keeps it until the free.
TEST(CapiErrors, FailedAsyncPublishKeepsItsError) {
  wsync_context_t ctx = create();
  ASSERT_NE(ctx, nullptr);
  std::vector<float> mem;
  ASSERT_EQ(registerBox(ctx, "w", {8, 4}, {0, 0}, {8, 4}, WSYNC_DTYPE_FLOAT32, &mem),
            WSYNC_SUCCESS);
  ASSERT_EQ(wsync_commit(ctx), WSYNC_SUCCESS) << wsync_last_error(ctx);
  if (!isTrainer()) {
    EXPECT_EQ(wsync_context_abort(ctx), WSYNC_SUCCESS);
    MPI_Barrier(MPI_COMM_WORLD);
    wsync_context_destroy(ctx);
    return;
  }
  MPI_Barrier(MPI_COMM_WORLD);  // both rollouts are gone
  wsync_request_t req = nullptr;
  ASSERT_EQ(wsync_publish(ctx, 1, &req), WSYNC_SUCCESS) << wsync_last_error(ctx);
  // Another failure first: from here on, wsync_last_error changes only through the request.
  EXPECT_EQ(wsync_set_tensor_scale(ctx, "nope", 2.0f), WSYNC_ERR_INVALID_ARGUMENT);
  const wsync_status_t s = wsync_request_wait(req, -1);
  EXPECT_EQ(s, WSYNC_ERR_REMOTE) << wsync_status_string(s) << ": " << wsync_last_error(ctx);
  const std::string error = wsync_request_error(req);
  EXPECT_EQ(error.rfind("version 1", 0), 0u) << error;
  EXPECT_NE(error.find("disconnected"), std::string::npos) << error;
  EXPECT_NE(error.find("rollout"), std::string::npos) << error;
  EXPECT_EQ(wsync_last_error(ctx), error);
  // test() reports the same failure, and sets the last error again.
  EXPECT_EQ(wsync_set_tensor_scale(ctx, "nope", 2.0f), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(wsync_request_test(req), s);
  EXPECT_EQ(wsync_last_error(ctx), error);
  const char* kept = wsync_request_error(req);
  EXPECT_EQ(wsync_request_wait(req, 0), s);
  EXPECT_EQ(wsync_request_error(req), kept);  // the same string, unchanged, until the free
  EXPECT_EQ(std::string(kept), error);
  wsync_request_free(req);
  wsync_context_destroy(ctx);
}

TEST(CapiErrors, ConfigIsValidated) {
  wsync_config_t cfg = WSYNC_CONFIG_INITIALIZER;
  wsync_context_t ctx = nullptr;
  cfg.magic = 0;
  EXPECT_EQ(wsync_context_create(&cfg, &ctx), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(wsync_last_error(nullptr)).find("magic"), std::string::npos);
  cfg = WSYNC_CONFIG_INITIALIZER;
  cfg.role = WSYNC_ROLE_ROLLOUT;  // no replica
  EXPECT_EQ(wsync_context_create(&cfg, &ctx), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(wsync_last_error(nullptr)).find("replica"), std::string::npos);
  EXPECT_EQ(wsync_context_create(nullptr, &ctx), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ctx, nullptr);
  cfg = WSYNC_CONFIG_INITIALIZER;
  cfg.device_transport = static_cast<wsync_device_transport_t>(7);
  EXPECT_EQ(wsync_context_create(&cfg, &ctx), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(wsync_last_error(nullptr)).find("device_transport"), std::string::npos);
  cfg = WSYNC_CONFIG_INITIALIZER;
  cfg.cuda_ipc_export = static_cast<wsync_cuda_ipc_export_t>(7);
  EXPECT_EQ(wsync_context_create(&cfg, &ctx), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(wsync_last_error(nullptr)).find("cuda_ipc_export"), std::string::npos);
  EXPECT_EQ(ctx, nullptr);
}

// Run alone (its own mpirun): world rank 2 never creates a context.
TEST(CapiTimeout, RankThatNeverArrivesIsNamed) {
  if (worldRank() == 2) {
    std::this_thread::sleep_for(std::chrono::milliseconds(3000));
    return;
  }
  wsync_config_t cfg = WSYNC_CONFIG_INITIALIZER;
  cfg.role = isTrainer() ? WSYNC_ROLE_TRAINER : WSYNC_ROLE_ROLLOUT;
  cfg.replica = 0;
  cfg.timeout_ms = 1500;
  wsync_context_t ctx = nullptr;
  EXPECT_EQ(wsync_context_create(&cfg, &ctx), WSYNC_ERR_TIMEOUT);
  EXPECT_EQ(ctx, nullptr);
  EXPECT_NE(std::string(wsync_last_error(nullptr)).find("world rank(s) 2"), std::string::npos)
      << wsync_last_error(nullptr);
}

}  // namespace

WSYNC_MPI_GTEST_MAIN()
