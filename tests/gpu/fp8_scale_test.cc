// Float8 with a per-tensor scale through the C API, under mpirun -np 2 on one GPU: world rank 0
// is a device-memory trainer holding float32, world rank 1 a device-memory rollout holding
// float8 e4m3. The trainer sets the tensor's scale, publishes, changes scale and values,
// publishes again; the rollout checks every byte of each version against e4m3 codes computed on
// the host from the format's definition (values chosen so that x * scale is exact in e4m3).
// Skips (both ranks) without a usable CUDA device.
#include <cuda_runtime_api.h>
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gpu/mpi_gpu.h"
#include "mp/mpi_gtest_main.h"
#include "wsync/wsync.h"

namespace {

constexpr int64_t kRows = 64;
constexpr int64_t kCols = 32;
constexpr int64_t kCount = kRows * kCols;

// The exact e4m3 value the rollout must hold for element i (a multiple of 0.5 in [0.5, 8],
// alternating sign): at most 4 significant bits, so exactly representable.
float target(int64_t i, uint64_t version) {
  const float v = 0.5f * static_cast<float>((i + static_cast<int64_t>(version)) % 16 + 1);
  return (i % 2 == 0) ? v : -v;
}

// e4m3 code of a normal value v = +-(1 + m/8) * 2^(e-7) (exact by construction).
uint8_t e4m3Code(float v) {
  const uint8_t sign = v < 0 ? 0x80 : 0;
  int exponent = 0;
  const float mantissa = std::frexp(std::fabs(v), &exponent);  // in [0.5, 1)
  const int e = exponent - 1 + 7;
  const int m = static_cast<int>(std::lround((mantissa * 2 - 1) * 8));
  return static_cast<uint8_t>(sign | (e << 3) | m);
}

TEST(Float8Scale, RolloutReceivesScaledE4m3) {
  if (!everyRankHasGpu()) GTEST_SKIP() << "no usable CUDA device";
  const bool trainer = worldRank() == 0;
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  wsync_config_t cfg = WSYNC_CONFIG_INITIALIZER;
  cfg.role = trainer ? WSYNC_ROLE_TRAINER : WSYNC_ROLE_ROLLOUT;
  cfg.replica = trainer ? -1 : 0;
  cfg.cuda_device = 0;
  cfg.timeout_ms = 60000;
  wsync_context_t ctx = nullptr;
  ASSERT_EQ(wsync_context_create(&cfg, &ctx), WSYNC_SUCCESS) << wsync_last_error(nullptr);

  void* data = nullptr;
  const size_t bytes = static_cast<size_t>(kCount) * (trainer ? 4 : 1);
  if (trainer) ASSERT_EQ(cudaMalloc(&data, bytes), cudaSuccess);
  int64_t shape[2] = {kRows, kCols};
  int64_t offset[2] = {0, 0};
  wsync_piece_t piece = WSYNC_PIECE_INITIALIZER;
  piece.tensor = "layers.0.mlp.w";
  piece.ndim = 2;
  piece.global_shape = shape;
  piece.box_offset = offset;
  piece.box_extent = shape;
  int index = -1;
  ASSERT_EQ(wsync_register_buffer(ctx, "w", trainer ? WSYNC_DTYPE_FLOAT32 : WSYNC_DTYPE_FLOAT8_E4M3,
                                  WSYNC_MEMORY_DEVICE, data, kCount, 1, &piece, &index),
            WSYNC_SUCCESS)
      << wsync_last_error(ctx);
  ASSERT_EQ(wsync_commit(ctx), WSYNC_SUCCESS) << wsync_last_error(ctx);

  const float scales[2] = {4.0f, 0.25f};
  for (uint64_t version = 1; version <= 2; ++version) {
    const float scale = scales[version - 1];
    if (trainer) {
      std::vector<float> values(kCount);
      for (int64_t i = 0; i < kCount; ++i)
        values[i] = target(i, version) / scale;  // exact: scale is a power of two
      ASSERT_EQ(cudaMemcpy(data, values.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      ASSERT_EQ(wsync_set_tensor_scale(ctx, "layers.0.mlp.w", scale), WSYNC_SUCCESS)
          << wsync_last_error(ctx);
      wsync_request_t request = nullptr;
      ASSERT_EQ(wsync_publish(ctx, version, &request), WSYNC_SUCCESS) << wsync_last_error(ctx);
      EXPECT_EQ(wsync_request_wait(request, -1), WSYNC_SUCCESS) << wsync_last_error(ctx);
      wsync_request_free(request);
    } else {
      uint64_t newest = 0;
      while (newest < version) {
        ASSERT_EQ(wsync_wait_version(ctx, newest, -1, &newest), WSYNC_SUCCESS)
            << wsync_last_error(ctx);
      }
      wsync_lease_t lease = nullptr;
      ASSERT_EQ(wsync_acquire(ctx, version, &lease), WSYNC_SUCCESS) << wsync_last_error(ctx);
      void* slot = nullptr;
      ASSERT_EQ(wsync_lease_buffer(lease, index, &slot), WSYNC_SUCCESS);
      std::vector<uint8_t> got(kCount);
      ASSERT_EQ(cudaMemcpy(got.data(), slot, kCount, cudaMemcpyDeviceToHost), cudaSuccess);
      wsync_lease_release(lease);
      int64_t wrong = 0;
      for (int64_t i = 0; i < kCount; ++i) {
        const uint8_t want = e4m3Code(target(i, version));
        if (got[i] != want && wrong++ < 3) {
          ADD_FAILURE() << "version " << version << " element " << i << ": code 0x" << std::hex
                        << int(got[i]) << ", want 0x" << int(want) << " (" << std::dec
                        << target(i, version) << " = x * " << scale << ")";
        }
      }
      EXPECT_EQ(wrong, 0) << "version " << version << " (scale " << scale << ")";
    }
    MPI_Barrier(MPI_COMM_WORLD);  // the next version starts after this one was checked
  }
  EXPECT_EQ(wsync_context_destroy(ctx), WSYNC_SUCCESS) << wsync_last_error(nullptr);
  if (data != nullptr) cudaFree(data);
}

}  // namespace

WSYNC_MPI_GTEST_MAIN()
