// The Ready contract (issue 12, defect 5), under mpirun -np 3: world rank 0 is the trainer (and
// hosts the coordinator), world ranks 1 and 2 are the two ranks of one rollout replica, each
// holding half of the rows. For each of 300 versions the trainer publishes, waits for the request,
// then tells both rollout ranks through MPI; each rank at once acquires the newest version and
// the version itself: both must be that version, with its bytes. (Before the fix a completed
// request was sometimes not yet visible on the rollouts, and a rank's acquire(v) failed while
// its peer already held v.)
#include <string>
#include <vector>

#include "mp/mpi_gtest_main.h"
#include "wsync/wsync.h"

namespace {

constexpr int64_t kRows = 32;
constexpr int64_t kCols = 64;
constexpr uint64_t kVersions = 300;
constexpr int kDone = 7;  // MPI tag: the trainer's request for the version completed

float valueOf(int64_t i, uint64_t version) {
  return static_cast<float>(i) + 4096.0f * static_cast<float>(version);
}

TEST(ReadyContract, CompletedPublishIsAcquirableOnEveryRankOfTheReplica) {
  ASSERT_EQ(worldSize(), 3);
  const bool trainer = worldRank() == 0;
  const int half = worldRank() - 1;  // rollouts: rows [half * kRows / 2, ...)
  MPI_Comm comm;                     // the test's own messages, apart from wsync's
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  wsync_config_t cfg = WSYNC_CONFIG_INITIALIZER;
  cfg.role = trainer ? WSYNC_ROLE_TRAINER : WSYNC_ROLE_ROLLOUT;
  cfg.replica = 0;
  cfg.timeout_ms = 20000;
  wsync_context_t ctx = nullptr;
  ASSERT_EQ(wsync_context_create(&cfg, &ctx), WSYNC_SUCCESS) << wsync_last_error(nullptr);
  const int64_t shape[2] = {kRows, kCols};
  const int64_t offset[2] = {trainer ? 0 : half * kRows / 2, 0};
  const int64_t extent[2] = {trainer ? kRows : kRows / 2, kCols};
  wsync_piece_t piece = WSYNC_PIECE_INITIALIZER;
  piece.tensor = "w";
  piece.ndim = 2;
  piece.global_shape = shape;
  piece.box_offset = offset;
  piece.box_extent = extent;
  std::vector<float> params(static_cast<size_t>(kRows * kCols), 0.0f);
  const int64_t elements = extent[0] * extent[1];
  ASSERT_EQ(wsync_register_buffer(ctx, "w", WSYNC_DTYPE_FLOAT32, WSYNC_MEMORY_HOST,
                                  trainer ? params.data() : nullptr, elements, 1, &piece, nullptr),
            WSYNC_SUCCESS)
      << wsync_last_error(ctx);
  ASSERT_EQ(wsync_commit(ctx), WSYNC_SUCCESS) << wsync_last_error(ctx);
  int failures = 0;
  for (uint64_t v = 1; v <= kVersions; ++v) {
    unsigned long long told = v;
    if (trainer) {
      for (int64_t i = 0; i < kRows * kCols; ++i)
        params[static_cast<size_t>(i)] = valueOf(i, v);
      wsync_request_t request = nullptr;
      ASSERT_EQ(wsync_publish(ctx, v, &request), WSYNC_SUCCESS) << wsync_last_error(ctx);
      ASSERT_EQ(wsync_request_wait(request, -1), WSYNC_SUCCESS) << wsync_request_error(request);
      wsync_request_free(request);
      for (int r = 1; r <= 2; ++r)
        MPI_Send(&told, 1, MPI_UNSIGNED_LONG_LONG, r, kDone, comm);
    } else {
      MPI_Recv(&told, 1, MPI_UNSIGNED_LONG_LONG, 0, kDone, comm, MPI_STATUS_IGNORE);
      ASSERT_EQ(told, v);
      wsync_lease_t newest = nullptr, exact = nullptr;
      const wsync_status_t got_newest = wsync_acquire(ctx, WSYNC_VERSION_NEWEST, &newest);
      const wsync_status_t got_exact = wsync_acquire(ctx, v, &exact);
      uint64_t newest_version = 0;
      if (got_newest == WSYNC_SUCCESS) wsync_lease_version(newest, &newest_version);
      if (got_newest != WSYNC_SUCCESS || newest_version != v || got_exact != WSYNC_SUCCESS) {
        ++failures;
        ADD_FAILURE() << "rank " << worldRank() << " version " << v << ": newest " << newest_version
                      << " (status " << got_newest << "), exact status " << got_exact << ": "
                      << wsync_last_error(ctx);
      } else {
        void* data = nullptr;
        ASSERT_EQ(wsync_lease_buffer(exact, 0, &data), WSYNC_SUCCESS);
        const float* rows = static_cast<const float*>(data);
        const int64_t first = offset[0] * kCols;
        EXPECT_EQ(rows[0], valueOf(first, v));
        EXPECT_EQ(rows[elements - 1], valueOf(first + elements - 1, v));
      }
      wsync_lease_release(newest);
      wsync_lease_release(exact);
    }
    MPI_Barrier(comm);
  }
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(wsync_context_destroy(ctx), WSYNC_SUCCESS);
  MPI_Comm_free(&comm);
}

}  // namespace

WSYNC_MPI_GTEST_MAIN()
