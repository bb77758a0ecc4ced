// Delta versions with device memory through the C API, under mpirun -np 4 on one GPU
// (docs/delta.md): world ranks 0-1 are trainers, 2-3 one rollout replica (TP 2). Each version
// changes about 1 % of the elements; every element of every version is checked on both rollout
// ranks, and the trainers' stats say whether the version went as patches (wire bytes well under the
// dense bytes) or dense. Three tensors cover the write shapes: a float32 trainer tensor converted
// to bfloat16 (device trainers convert into their staging first), a bfloat16 one whose rollout side
// is strided (device rollouts gather, patch and scatter), and one whose trainer side is strided
// (device trainers gather). Skips (every rank) without a usable CUDA device.
#include <cuda_runtime_api.h>
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "gpu/mpi_gpu.h"
#include "mp/mpi_gtest_main.h"
#include "wsync/wsync.h"

namespace {

constexpr int64_t kRows = 512;
constexpr int64_t kCols = 384;
constexpr int64_t kCount = kRows * kCols;
constexpr int kVersions = 8;
constexpr int kTrainers = 2;

// A failure after which this rank cannot follow the others' collectives ends the job (it would
// hang them otherwise): reported, then every rank aborts.
#define REQUIRE(cond)                                              \
  do {                                                             \
    if (!(cond)) {                                                 \
      ADD_FAILURE() << "world rank " << worldRank() << ": " #cond; \
      std::fflush(nullptr);                                        \
      MPI_Abort(MPI_COMM_WORLD, 1);                                \
    }                                                              \
  } while (0)
#define REQUIRE_OK(call, ctx)                                                                    \
  do {                                                                                           \
    if ((call) != WSYNC_SUCCESS) {                                                               \
      ADD_FAILURE() << "world rank " << worldRank() << ": " #call ": " << wsync_last_error(ctx); \
      std::fflush(nullptr);                                                                      \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                              \
    }                                                                                            \
  } while (0)

// One tensor: how the trainers and the rollout ranks split it (dimension 0: rows, 1: columns) and
// the trainers' dtype (the rollouts hold bfloat16).
struct TensorCase {
  const char* name;
  int trainer_dim;
  int rollout_dim;
  wsync_dtype_t trainer_dtype;
};
constexpr TensorCase kTensors[] = {
    {"layers.0.attn.qkv", 0, 1, WSYNC_DTYPE_FLOAT32},   // converts; rollout side contiguous
    {"layers.0.mlp.up", 1, 0, WSYNC_DTYPE_BFLOAT16},    // rollout side strided
    {"layers.0.mlp.down", 0, 1, WSYNC_DTYPE_BFLOAT16},  // trainer side strided
};

// The global values of tensor `t` at `version`: small integers (exact in bfloat16), of which each
// version bumps about 1 %, drawn by a per-version generator every rank repeats.
std::vector<float> globalValues(int t, int version) {
  std::vector<float> v(kCount);
  for (int64_t i = 0; i < kCount; ++i)
    v[i] = static_cast<float>((i * 7 + t * 13) % 64);
  for (int u = 2; u <= version; ++u) {
    uint64_t x = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(u * 3 + t + 1);
    for (int64_t k = 0; k < kCount / 100; ++k) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      v[x % kCount] += 1.0F;
    }
  }
  return v;
}

uint16_t bf16(float f) {  // exact for the values above
  uint32_t bits = 0;
  std::memcpy(&bits, &f, 4);
  return static_cast<uint16_t>(bits >> 16);
}

// The box of part `part` of `parts` along `dim`.
void box(int dim, int part, int parts, int64_t offset[2], int64_t extent[2]) {
  offset[0] = offset[1] = 0;
  extent[0] = kRows;
  extent[1] = kCols;
  extent[dim] /= parts;
  offset[dim] = extent[dim] * part;
}

// The elements of `values` in the box, row-major, as `dtype` bytes.
std::vector<uint8_t> boxBytes(const std::vector<float>& values, const int64_t offset[2],
                              const int64_t extent[2], wsync_dtype_t dtype) {
  const size_t esz = dtype == WSYNC_DTYPE_FLOAT32 ? 4 : 2;
  std::vector<uint8_t> out(static_cast<size_t>(extent[0] * extent[1]) * esz);
  size_t at = 0;
  for (int64_t r = 0; r < extent[0]; ++r) {
    for (int64_t c = 0; c < extent[1]; ++c, at += esz) {
      const float f = values[(offset[0] + r) * kCols + offset[1] + c];
      if (esz == 4) {
        std::memcpy(&out[at], &f, 4);
      } else {
        const uint16_t h = bf16(f);
        std::memcpy(&out[at], &h, 2);
      }
    }
  }
  return out;
}

struct JobCase {
  wsync_memory_kind_t trainer_memory;
  wsync_memory_kind_t rollout_memory;
  wsync_device_transport_t transport;
  bool expect_patches;  // false: every version dense (CUDA IPC)
  int corrupt_every;    // WSYNC_DEBUG_CORRUPT_EVERY for trainer 0
};

// One job of kVersions versions in `c`'s memory; returns after every rank destroyed its context.
void runJob(const JobCase& c) {
  const bool trainer = worldRank() < kTrainers;
  const int role_rank = trainer ? worldRank() : worldRank() - kTrainers;
  const wsync_memory_kind_t memory = trainer ? c.trainer_memory : c.rollout_memory;
  const bool on_device = memory == WSYNC_MEMORY_DEVICE;
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  if (c.corrupt_every > 0)
    setenv("WSYNC_DEBUG_CORRUPT_EVERY", std::to_string(c.corrupt_every).c_str(), 1);
  wsync_config_t cfg = WSYNC_CONFIG_INITIALIZER;
  cfg.role = trainer ? WSYNC_ROLE_TRAINER : WSYNC_ROLE_ROLLOUT;
  cfg.replica = trainer ? -1 : 0;
  cfg.cuda_device = 0;
  cfg.timeout_ms = 60000;
  cfg.device_transport = c.transport;
  cfg.delta = 1;
  wsync_context_t ctx = nullptr;
  REQUIRE_OK(wsync_context_create(&cfg, &ctx), nullptr);
  unsetenv("WSYNC_DEBUG_CORRUPT_EVERY");

  const int parts = trainer ? kTrainers : 2;
  std::vector<void*> data(std::size(kTensors), nullptr);  // trainers' memory
  std::vector<std::vector<uint8_t>> host(std::size(kTensors));
  std::vector<int> index(std::size(kTensors), -1);
  int64_t shape[2] = {kRows, kCols};
  for (size_t t = 0; t < std::size(kTensors); ++t) {
    const TensorCase& tc = kTensors[t];
    const int dim = trainer ? tc.trainer_dim : tc.rollout_dim;
    const wsync_dtype_t dtype = trainer ? tc.trainer_dtype : WSYNC_DTYPE_BFLOAT16;
    int64_t offset[2], extent[2];
    box(dim, role_rank, parts, offset, extent);
    const int64_t n = extent[0] * extent[1];
    if (trainer) {
      host[t] = boxBytes(globalValues(static_cast<int>(t), 1), offset, extent, dtype);
      if (on_device) {
        REQUIRE(cudaMalloc(&data[t], host[t].size()) == cudaSuccess);
      } else {
        data[t] = host[t].data();
      }
    }
    wsync_piece_t piece = WSYNC_PIECE_INITIALIZER;
    piece.tensor = tc.name;
    piece.ndim = 2;
    piece.global_shape = shape;
    piece.box_offset = offset;
    piece.box_extent = extent;
    REQUIRE_OK(wsync_register_buffer(ctx, tc.name, dtype, memory, data[t], n, 1, &piece, &index[t]),
               ctx);
  }
  REQUIRE_OK(wsync_commit(ctx), ctx);

  for (int version = 1; version <= kVersions; ++version) {
    if (trainer) {
      for (size_t t = 0; t < std::size(kTensors); ++t) {
        int64_t offset[2], extent[2];
        box(kTensors[t].trainer_dim, role_rank, parts, offset, extent);
        const std::vector<uint8_t> bytes = boxBytes(globalValues(static_cast<int>(t), version),
                                                    offset, extent, kTensors[t].trainer_dtype);
        REQUIRE(bytes.size() == host[t].size());
        if (on_device) {
          REQUIRE(cudaMemcpy(data[t], bytes.data(), bytes.size(), cudaMemcpyHostToDevice) ==
                  cudaSuccess);
        } else {
          std::memcpy(host[t].data(), bytes.data(), bytes.size());  // the registered memory
        }
      }
      wsync_request_t request = nullptr;
      REQUIRE_OK(wsync_publish(ctx, static_cast<uint64_t>(version), &request), ctx);
      REQUIRE_OK(wsync_request_wait(request, -1), ctx);
      wsync_request_free(request);
      wsync_version_stats_t s = WSYNC_VERSION_STATS_INITIALIZER;
      REQUIRE_OK(wsync_version_stats(ctx, &s), ctx);
      std::printf("[trainer %d] version %d: wire %llu of %llu bytes, %u re-sends\n", role_rank,
                  version, static_cast<unsigned long long>(s.wire_bytes),
                  static_cast<unsigned long long>(s.full_bytes), s.retries);
      EXPECT_EQ(s.version, static_cast<uint64_t>(version));
      EXPECT_EQ(s.replicas_ready, 1) << "version " << version;
      EXPECT_GT(s.full_bytes, 0u);
      // A patch applied wrongly would be caught by the checksums and re-sent dense: only the
      // corrupted versions may fail verification, each exactly once.
      const bool corrupted = c.corrupt_every > 0 && version % c.corrupt_every == 0;
      EXPECT_EQ(s.checksum_failures, corrupted ? 1u : 0u) << "version " << version;
      EXPECT_EQ(s.retries, corrupted ? 1u : 0u) << "version " << version;
      if (version == 1 || !c.expect_patches) {
        EXPECT_EQ(s.wire_bytes, s.full_bytes) << "version " << version << " should go dense";
      } else if (!corrupted) {
        // About 1 % changed: patches of a few per cent of the dense bytes.
        EXPECT_LT(s.wire_bytes * 5, s.full_bytes) << "version " << version << " went dense";
      }
    } else {
      uint64_t newest = 0;
      while (newest < static_cast<uint64_t>(version)) {
        REQUIRE_OK(wsync_wait_version(ctx, newest, -1, &newest), ctx);
      }
      wsync_lease_t lease = nullptr;
      REQUIRE_OK(wsync_acquire(ctx, static_cast<uint64_t>(version), &lease), ctx);
      for (size_t t = 0; t < std::size(kTensors); ++t) {
        int64_t offset[2], extent[2];
        box(kTensors[t].rollout_dim, role_rank, parts, offset, extent);
        const std::vector<uint8_t> want = boxBytes(globalValues(static_cast<int>(t), version),
                                                   offset, extent, WSYNC_DTYPE_BFLOAT16);
        void* slot = nullptr;
        REQUIRE_OK(wsync_lease_buffer(lease, index[t], &slot), ctx);
        std::vector<uint8_t> got(want.size());
        if (on_device) {
          REQUIRE(cudaMemcpy(got.data(), slot, got.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
        } else {
          std::memcpy(got.data(), slot, got.size());
        }
        int64_t wrong = 0;
        for (size_t i = 0; i < got.size(); i += 2)
          wrong += std::memcmp(&got[i], &want[i], 2) != 0;
        EXPECT_EQ(wrong, 0) << "rollout " << role_rank << ", version " << version << ", tensor "
                            << kTensors[t].name << ": " << wrong << " wrong elements";
      }
      wsync_lease_release(lease);
    }
    MPI_Barrier(MPI_COMM_WORLD);  // the next version starts after this one was checked
  }
  EXPECT_EQ(wsync_context_destroy(ctx), WSYNC_SUCCESS) << wsync_last_error(nullptr);
  if (on_device) {
    for (void* p : data)
      cudaFree(p);
  }
}

TEST(DeltaJobDevice, DeviceTrainersPatchStagedDeviceRollouts) {
  if (!everyRankHasGpu()) GTEST_SKIP() << "no usable CUDA device";
  runJob({WSYNC_MEMORY_DEVICE, WSYNC_MEMORY_DEVICE, WSYNC_DEVICE_TRANSPORT_STAGED, true, 0});
}

TEST(DeltaJobDevice, DeviceTrainersPatchHostRollouts) {
  if (!everyRankHasGpu()) GTEST_SKIP() << "no usable CUDA device";
  runJob({WSYNC_MEMORY_DEVICE, WSYNC_MEMORY_HOST, WSYNC_DEVICE_TRANSPORT_STAGED, true, 0});
}

TEST(DeltaJobDevice, HostTrainersPatchStagedDeviceRollouts) {
  if (!everyRankHasGpu()) GTEST_SKIP() << "no usable CUDA device";
  runJob({WSYNC_MEMORY_HOST, WSYNC_MEMORY_DEVICE, WSYNC_DEVICE_TRANSPORT_STAGED, true, 0});
}

TEST(DeltaJobDevice, CorruptedDevicePatchIsCaughtAndResentDense) {
  if (!everyRankHasGpu()) GTEST_SKIP() << "no usable CUDA device";
  runJob({WSYNC_MEMORY_DEVICE, WSYNC_MEMORY_DEVICE, WSYNC_DEVICE_TRANSPORT_STAGED, true, 3});
}

TEST(DeltaJobDevice, CudaIpcRolloutsStayDense) {
  if (!everyRankHasGpu()) GTEST_SKIP() << "no usable CUDA device";
  runJob({WSYNC_MEMORY_DEVICE, WSYNC_MEMORY_DEVICE, WSYNC_DEVICE_TRANSPORT_CUDA_IPC, false, 0});
}

}  // namespace

WSYNC_MPI_GTEST_MAIN()
