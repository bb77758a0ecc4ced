// Delta versions through the public C API (config.delta = 1), in real jobs under mpirun -np 5:
// world ranks 0-1 are trainers holding the column halves of one 128 x 512 float32 tensor; world
// ranks 2-3 are replica 0 (row halves: strided sources, contiguous destinations) and world rank 4
// is replica 1 (the whole tensor: contiguous sources, strided destinations). Host memory, so
// every write crosses UCX and takes patches.
//
// A version changes about 1 % of the elements (and version 5 every element, which makes every
// patch larger than the max share: dense); every rollout rank checks every element of every
// version it gets against the pattern, so a delta version equals the full version element by
// element. Covered: consecutive versions (patches; the stats show the bytes on the wire far below
// the full bytes), 2 and 3 slots, float32 -> bfloat16 conversion, a skipped version (a slow reader:
// that replica's next version is a patch against the version it still holds, since the trainers
// keep each write op's bytes of the last version its replica took), and a corrupted patch
// (WSYNC_DEBUG_CORRUPT_EVERY: the checksum catches it and the version is re-sent dense).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "mp/mpi_gtest_main.h"
#include "support/delta_values.h"
#include "wsync/wsync.h"

namespace {

constexpr int64_t kRows = 128;
constexpr int64_t kCols = 512;
constexpr int kTrainers = 2;
constexpr uint64_t kEveryElementChanges = 5;

bool isTrainer() {
  return worldRank() < kTrainers;
}
int rolloutRank() {
  return worldRank() - kTrainers;
}
int replicaOf() {
  return rolloutRank() < 2 ? 0 : 1;
}

// Element `i` (row-major in the whole tensor) at `version` (tests/support/delta_values.h).
float valueOf(int64_t i, uint64_t version) {
  return wsync_test::deltaValueOf(i, version, kEveryElementChanges);
}

// This rank's box of the tensor: [row0, row0 + rows) x [col0, col0 + cols).
struct Box {
  int64_t row0 = 0, rows = kRows, col0 = 0, cols = kCols;
};
Box myBox() {
  if (isTrainer()) return {0, kRows, worldRank() * (kCols / 2), kCols / 2};
  if (replicaOf() == 0) return {rolloutRank() * (kRows / 2), kRows / 2, 0, kCols};
  return {};
}

struct Job {
  wsync_context_t ctx = nullptr;
  std::vector<float> params;  // trainer
  int buffer = -1;
  wsync_dtype_t dtype = WSYNC_DTYPE_FLOAT32;
};

Job startJob(int slots, wsync_dtype_t rollout_dtype) {
  Job job;
  wsync_config_t cfg = WSYNC_CONFIG_INITIALIZER;
  cfg.role = isTrainer() ? WSYNC_ROLE_TRAINER : WSYNC_ROLE_ROLLOUT;
  cfg.replica = isTrainer() ? -1 : replicaOf();
  cfg.num_slots = slots;
  cfg.timeout_ms = 30000;
  cfg.delta = 1;
  EXPECT_EQ(wsync_context_create(&cfg, &job.ctx), WSYNC_SUCCESS) << wsync_last_error(nullptr);
  const Box box = myBox();
  const int64_t shape[2] = {kRows, kCols};
  const int64_t offset[2] = {box.row0, box.col0};
  const int64_t extent[2] = {box.rows, box.cols};
  wsync_piece_t piece = WSYNC_PIECE_INITIALIZER;
  piece.tensor = "w";
  piece.ndim = 2;
  piece.global_shape = shape;
  piece.box_offset = offset;
  piece.box_extent = extent;
  job.dtype = isTrainer() ? WSYNC_DTYPE_FLOAT32 : rollout_dtype;
  if (isTrainer()) job.params.assign(static_cast<size_t>(box.rows * box.cols), 0.0f);
  EXPECT_EQ(wsync_register_buffer(job.ctx, "w", job.dtype, WSYNC_MEMORY_HOST,
                                  isTrainer() ? job.params.data() : nullptr, box.rows * box.cols, 1,
                                  &piece, &job.buffer),
            WSYNC_SUCCESS)
      << wsync_last_error(job.ctx);
  EXPECT_EQ(wsync_commit(job.ctx), WSYNC_SUCCESS) << wsync_last_error(job.ctx);
  return job;
}

// Trainer: publishes `version` and waits for it; returns its stats.
wsync_version_stats_t publish(Job& job, uint64_t version) {
  const Box box = myBox();
  for (int64_t r = 0; r < box.rows; ++r)
    for (int64_t c = 0; c < box.cols; ++c)
      job.params[static_cast<size_t>(r * box.cols + c)] =
          valueOf((box.row0 + r) * kCols + box.col0 + c, version);
  wsync_request_t req = nullptr;
  EXPECT_EQ(wsync_publish(job.ctx, version, &req), WSYNC_SUCCESS) << wsync_last_error(job.ctx);
  EXPECT_EQ(wsync_request_wait(req, -1), WSYNC_SUCCESS) << wsync_last_error(job.ctx);
  wsync_request_free(req);
  wsync_version_stats_t stats = WSYNC_VERSION_STATS_INITIALIZER;
  EXPECT_EQ(wsync_version_stats(job.ctx, &stats), WSYNC_SUCCESS) << wsync_last_error(job.ctx);
  EXPECT_EQ(stats.version, version);
  return stats;
}

// Rollout: the elements of `lease` that differ from `version`'s.
int64_t mismatches(const Job& job, wsync_lease_t lease, uint64_t version) {
  uint64_t v = 0;
  EXPECT_EQ(wsync_lease_version(lease, &v), WSYNC_SUCCESS);
  EXPECT_EQ(v, version);
  void* data = nullptr;
  EXPECT_EQ(wsync_lease_buffer(lease, job.buffer, &data), WSYNC_SUCCESS);
  const Box box = myBox();
  int64_t bad = 0;
  for (int64_t r = 0; r < box.rows; ++r) {
    for (int64_t c = 0; c < box.cols; ++c) {
      const size_t at = static_cast<size_t>(r * box.cols + c);
      const float got = job.dtype == WSYNC_DTYPE_BFLOAT16
                            ? wsync_test::floatOfBf16(static_cast<const uint16_t*>(data)[at])
                            : static_cast<const float*>(data)[at];
      bad += got != valueOf((box.row0 + r) * kCols + box.col0 + c, version);
    }
  }
  return bad;
}

// Rollout: the newest version is `version` and every element holds its value.
void expectNewest(const Job& job, uint64_t version) {
  wsync_lease_t lease = nullptr;
  ASSERT_EQ(wsync_acquire(job.ctx, WSYNC_VERSION_NEWEST, &lease), WSYNC_SUCCESS)
      << wsync_last_error(job.ctx);
  EXPECT_EQ(mismatches(job, lease, version), 0)
      << "rollout " << rolloutRank() << ", version " << version;
  wsync_lease_release(lease);
}

// Versions 1..n, each checked on every rollout rank; the trainers check the wire bytes: version 1
// and version 5 (every element changed) dense, the others below a tenth of the full bytes.
void runVersions(int slots, wsync_dtype_t dtype, uint64_t n) {
  Job job = startJob(slots, dtype);
  for (uint64_t v = 1; v <= n; ++v) {
    if (isTrainer()) {
      const wsync_version_stats_t s = publish(job, v);
      EXPECT_EQ(s.replicas_ready, 2) << "version " << v;
      EXPECT_EQ(s.checksum_failures, 0u) << "version " << v;
      EXPECT_GT(s.full_bytes, 0u);
      if (v == 1 || v == kEveryElementChanges) {
        EXPECT_EQ(s.wire_bytes, s.full_bytes) << "version " << v << " should be dense";
      } else {
        EXPECT_LT(s.wire_bytes * 10, s.full_bytes)
            << "version " << v << ": " << s.wire_bytes << " of " << s.full_bytes << " bytes";
      }
    }
    MPI_Barrier(MPI_COMM_WORLD);  // delivered: ready on every replica
    if (!isTrainer()) expectNewest(job, v);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  EXPECT_EQ(wsync_context_destroy(job.ctx), WSYNC_SUCCESS) << wsync_last_error(nullptr);
}

TEST(Delta, ConsecutiveVersionsTwoSlots) {
  runVersions(2, WSYNC_DTYPE_FLOAT32, 8);
}

TEST(Delta, ThreeSlotsBfloat16) {
  runVersions(3, WSYNC_DTYPE_BFLOAT16, 8);
}

// Replica 1's reader holds version 1 while version 2 arrives, so version 3 (which needs that slot)
// skips replica 1; version 4 then goes to replica 1 as patches against version 2 (the bytes the
// trainers kept for its writes), to replica 0 against version 3, every element exact.
TEST(Delta, SkippedVersionGoesDense) {
  Job job = startJob(2, WSYNC_DTYPE_BFLOAT16);
  wsync_lease_t old = nullptr;
  for (uint64_t v = 1; v <= 5; ++v) {
    if (isTrainer()) {
      const wsync_version_stats_t s = publish(job, v);
      if (v == 3) EXPECT_EQ(s.replicas_skipped, 1);
      if (v == 4) {
        EXPECT_EQ(s.replicas_ready, 2);
        EXPECT_LT(s.wire_bytes * 10, s.full_bytes) << s.wire_bytes << " of " << s.full_bytes;
      }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (!isTrainer()) {
      if (replicaOf() == 1 && v == 1)
        ASSERT_EQ(wsync_acquire(job.ctx, 1, &old), WSYNC_SUCCESS);  // a slow reader
      if (replicaOf() == 1 && v == 3) {
        EXPECT_EQ(mismatches(job, old, 1), 0);  // its slot was never written under the lease
        wsync_lease_release(old);
        expectNewest(job, 2);  // skipped version 3
      } else {
        expectNewest(job, v);
      }
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  EXPECT_EQ(wsync_context_destroy(job.ctx), WSYNC_SUCCESS) << wsync_last_error(nullptr);
}

// Trainer 0 flips a byte of its last patch of versions 3 and 6: the rank that applies it fails
// verification, and the version is re-sent dense (never readable corrupt).
TEST(Delta, CorruptedPatchIsCaughtAndResentDense) {
  if (worldRank() == 0) setenv("WSYNC_DEBUG_CORRUPT_EVERY", "3", 1);
  Job job = startJob(2, WSYNC_DTYPE_FLOAT32);
  unsetenv("WSYNC_DEBUG_CORRUPT_EVERY");
  for (uint64_t v = 1; v <= 7; ++v) {
    if (isTrainer()) {
      const wsync_version_stats_t s = publish(job, v);
      const bool corrupted = v % 3 == 0;
      EXPECT_EQ(s.checksum_failures, corrupted ? 1u : 0u) << "version " << v;
      EXPECT_EQ(s.retries, corrupted ? 1u : 0u) << "version " << v;
      EXPECT_EQ(s.replicas_ready, 2);
      // The re-send is dense: on the wire at least the re-sent replica's bytes from the trainers
      // (the smaller replica, whichever failed, gets half the tensor's float32 bytes).
      if (corrupted) EXPECT_GE(s.wire_bytes, static_cast<uint64_t>(kRows * kCols * 4 / 2));
      if (!corrupted && v > 1 && v != kEveryElementChanges)
        EXPECT_LT(s.wire_bytes * 10, s.full_bytes);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (!isTrainer()) expectNewest(job, v);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  EXPECT_EQ(wsync_context_destroy(job.ctx), WSYNC_SUCCESS) << wsync_last_error(nullptr);
}

}  // namespace

WSYNC_MPI_GTEST_MAIN()
