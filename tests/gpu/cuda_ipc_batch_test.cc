// The CUDA IPC backend's batched device copies (transport/cuda_ipc/copy_batch.h): the registered
// device ranges it looks sources up in (everywhere), and on a GPU which writes go into the one
// kernel a flush launches (sources inside registered device memory of the transport's device;
// not unregistered device memory, host memory, sources past a registered range, or anything once
// the registration went or when batching is off), with every byte of the target compared to a
// host reference. One process writing into memory it exposed itself (connect to its own
// address); across processes the write-transport conformance suite runs the same paths.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "common/cuda_check.h"
#include "gpu/device_bytes.h"
#include "transport/cuda_ipc/copy_batch.h"
#include "transport/cuda_ipc/cuda_ipc_transport.h"
#include "transport/cuda_ipc/device_sources.h"

namespace wsync {
namespace {

constexpr uint8_t kSentinel = 0xC3;
constexpr auto kTimeout = std::chrono::seconds(60);

TEST(DeviceSources, ContainsOnlyWhatLiesInsideRecordedMemory) {
  DeviceSources sources;
  alignas(64) static uint8_t memory[4096];
  EXPECT_FALSE(sources.contains(memory, 1));  // nothing recorded
  const uint64_t a = sources.add(memory, 1000);
  EXPECT_TRUE(sources.contains(memory, 1000));
  EXPECT_TRUE(sources.contains(memory + 999, 1));
  EXPECT_FALSE(sources.contains(memory + 999, 2));  // one byte past the end
  EXPECT_FALSE(sources.contains(memory + 1000, 1));
  EXPECT_FALSE(sources.contains(memory, 0));
  // A range touching the first merges with it; one with a gap does not.
  const uint64_t b = sources.add(memory + 1000, 1000);
  const uint64_t c = sources.add(memory + 3000, 500);
  EXPECT_TRUE(sources.contains(memory + 500, 1000));
  EXPECT_FALSE(sources.contains(memory + 1900, 1200));  // spans the gap [2000, 3000)
  EXPECT_TRUE(sources.contains(memory + 3000, 500));
  // Overlapping ranges: removing one keeps what the other covers.
  const uint64_t d = sources.add(memory + 100, 200);
  sources.remove(a);
  EXPECT_TRUE(sources.contains(memory + 100, 200));
  EXPECT_FALSE(sources.contains(memory + 50, 100));
  EXPECT_TRUE(sources.contains(memory + 1000, 1000));
  sources.remove(b);
  sources.remove(d);
  sources.remove(d);  // twice: a no-op
  EXPECT_FALSE(sources.contains(memory + 1000, 1));
  EXPECT_TRUE(sources.contains(memory + 3499, 1));
  sources.remove(c);
  EXPECT_FALSE(sources.contains(memory + 3000, 1));
  // A query that wraps around the address space is never inside.
  sources.add(memory, sizeof(memory));
  EXPECT_FALSE(sources.contains(memory + 8, UINT64_MAX));
}

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> out(n);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& b : out) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(x >> 24);
  }
  return out;
}

// One write: planes x rows x row_bytes from source offset `src` into target offset `dst`.
struct Block {
  uint64_t dst, dst_pitch, dst_plane_pitch;
  size_t src, src_pitch, src_plane_pitch, row_bytes, rows, planes;
};

// A transport connected to itself with `kRegion` bytes it exposed, filled with kSentinel, and the
// host image of what the target must hold.
class CudaIpcBatch : public ::testing::Test {
 protected:
  static constexpr size_t kRegion = 4 << 20;

  void SetUp() override {
    if (!cudaDeviceAvailable(0)) GTEST_SKIP() << "no usable CUDA device";
    ASSERT_TRUE(cudaUseDevice(0).isOk());
  }

  void open(const CudaIpcTransportOptions& options) {
    auto created = CudaIpcTransport::create(options);
    ASSERT_TRUE(created.isOk()) << created.status().toString();
    transport_ = std::move(created).value();
    auto mem = transport_->allocateExposed(kRegion);
    ASSERT_TRUE(mem.isOk()) << mem.status().toString();
    target_ = std::move(mem).value();
    ASSERT_EQ(cudaMemset(target_->data(), kSentinel, kRegion), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    want_.assign(kRegion, kSentinel);
    ASSERT_TRUE(transport_->connect(0, transport_->localAddress()).isOk());
    auto id = transport_->attach(0, target_->descriptor());
    ASSERT_TRUE(id.isOk()) << id.status().toString();
    remote_ = id.value();
  }

  // Posts `b` from `source` (whose bytes on the host are `host`) and records it in the image.
  void post(const uint8_t* source, const std::vector<uint8_t>& host, const Block& b) {
    const Status s =
        transport_->write3d(remote_, b.dst, b.dst_pitch, b.dst_plane_pitch, source + b.src,
                            b.src_pitch, b.src_plane_pitch, b.row_bytes, b.rows, b.planes);
    ASSERT_TRUE(s.isOk()) << s.toString();
    for (size_t p = 0; p < b.planes; ++p) {
      for (size_t r = 0; r < b.rows; ++r) {
        std::memcpy(want_.data() + b.dst + p * b.dst_plane_pitch + r * b.dst_pitch,
                    host.data() + b.src + p * b.src_plane_pitch + r * b.src_pitch, b.row_bytes);
      }
    }
  }

  // Flushes and compares the whole target with the image.
  void flushAndCheck(const char* what) {
    const Status s = transport_->flush(kTimeout);
    ASSERT_TRUE(s.isOk()) << what << ": " << s.toString();
    std::vector<uint8_t> got(kRegion);
    ASSERT_EQ(cudaMemcpy(got.data(), target_->data(), kRegion, cudaMemcpyDeviceToHost),
              cudaSuccess);
    size_t wrong = 0, first = 0;
    for (size_t i = 0; i < kRegion; ++i) {
      if (got[i] != want_[i] && wrong++ == 0) first = i;
    }
    EXPECT_EQ(wrong, 0u) << what << ": first wrong byte at " << first;
  }

  static std::unique_ptr<DeviceBytes> deviceCopy(const std::vector<uint8_t>& host) {
    auto d = std::make_unique<DeviceBytes>(host.size());
    EXPECT_EQ(cudaMemcpy(d->data, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return d;
  }

  std::unique_ptr<CudaIpcTransport> transport_;
  std::unique_ptr<ExposedMemory> target_;  // goes before the transport (declared after it)
  RemoteMemoryId remote_ = -1;
  std::vector<uint8_t> want_;
};

TEST_F(CudaIpcBatch, RegisteredDeviceSourcesGoInOneTimedKernel) {
  CudaIpcTransportOptions options;
  options.time_batches = true;
  open(options);
  if (HasFatalFailure()) return;
  EXPECT_EQ(transport_->lastBatch().copies, 0u);  // none ran yet
  const std::vector<uint8_t> a_host = pattern(1 << 20, 1), b_host = pattern(1 << 20, 2);
  const std::vector<uint8_t> c_host = pattern(1 << 20, 3), pageable = pattern(1 << 20, 4);
  auto a = deviceCopy(a_host), b = deviceCopy(b_host), c = deviceCopy(c_host);
  auto reg_a = transport_->registerSource(a->data, a->size);
  ASSERT_TRUE(reg_a.isOk()) << reg_a.status().toString();
  auto reg_c = transport_->registerSource(c->data, 512 << 10);  // the first half only
  ASSERT_TRUE(reg_c.isOk()) << reg_c.status().toString();

  // Batched: contiguous, 2-D, 3-D from a; the first half of c.
  post(a->bytes(), a_host, {0, 0, 0, 0, 0, 0, 300000, 1, 1});
  post(a->bytes(), a_host, {400000, 3000, 0, 1000, 2048, 0, 2000, 50, 1});
  post(a->bytes(), a_host, {600000, 512, 8192, 300000, 700, 6000, 500, 8, 4});
  post(c->bytes(), c_host, {700000, 0, 0, 0, 0, 0, 512 << 10, 1, 1});
  // Driver copies: unregistered device memory, pageable host memory, past c's registered half.
  post(b->bytes(), b_host, {1300000, 100, 0, 0, 200, 0, 100, 300, 1});
  post(pageable.data(), pageable, {1400000, 0, 0, 5, 0, 0, 100000, 1, 1});
  post(c->bytes(), c_host, {1600000, 0, 0, (512 << 10) - 8, 0, 0, 16, 1, 1});
  flushAndCheck("first flush");
  const CopyBatch::Timing first = transport_->lastBatch();
  EXPECT_EQ(first.copies, 4u);
  EXPECT_EQ(first.bytes, 300000u + 2000u * 50 + 500u * 8 * 4 + (512u << 10));
  EXPECT_GT(first.device_ms, 0);

  // a no longer registered: its writes are driver copies; c's half still batches, and a larger
  // batch (the task tables grow) follows in the same kernel.
  reg_a.value().reset();
  post(a->bytes(), a_host, {2000000, 0, 0, 100, 0, 0, 5000, 1, 1});
  for (size_t i = 0; i < 3000; ++i) {
    post(c->bytes(), c_host, {2100000 + i * 64, 0, 0, i * 50, 0, 0, 40, 1, 1});
  }
  flushAndCheck("second flush");
  const CopyBatch::Timing second = transport_->lastBatch();
  EXPECT_EQ(second.copies, 3000u);
  EXPECT_EQ(second.bytes, 3000u * 40);

  // A flush with only driver copies leaves the last batch as it was.
  post(b->bytes(), b_host, {3000000, 0, 0, 0, 0, 0, 4096, 1, 1});
  flushAndCheck("third flush");
  EXPECT_EQ(transport_->lastBatch().copies, 3000u);
}

TEST_F(CudaIpcBatch, WithoutBatchingEveryWriteIsADriverCopy) {
  CudaIpcTransportOptions options;
  options.batch_device_copies = false;
  open(options);
  if (HasFatalFailure()) return;
  const std::vector<uint8_t> host = pattern(1 << 20, 5);
  auto a = deviceCopy(host);
  auto reg = transport_->registerSource(a->data, a->size);
  ASSERT_TRUE(reg.isOk()) << reg.status().toString();
  post(a->bytes(), host, {0, 0, 0, 0, 0, 0, 300000, 1, 1});
  post(a->bytes(), host, {600000, 512, 8192, 300000, 700, 6000, 500, 8, 4});
  flushAndCheck("unbatched");
  EXPECT_EQ(transport_->lastBatch().copies, 0u);
}

// The device task tables: batches that repeat launch from the table uploaded the first time (a
// version alternates between slots), still copying the sources' current bytes; batches that
// differ, more than the tables kept, are uploaded again. Every destination byte is checked.
TEST(CopyBatchTables, RepeatedAndNewBatchesCopyTheirCurrentBytes) {
  if (!cudaDeviceAvailable(0)) GTEST_SKIP() << "no usable CUDA device";
  ASSERT_TRUE(cudaUseDevice(0).isOk());
  constexpr size_t kBytes = 1 << 20;
  DeviceBytes src(kBytes), dst(kBytes);
  Result<std::unique_ptr<CopyBatch>> batch = CopyBatch::create(/*timed=*/false);
  ASSERT_TRUE(batch.isOk()) << batch.status().toString();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  std::vector<uint8_t> host(kBytes), back(kBytes);
  // Batch `shape` (0..9): 8 + shape regions of 4096 bytes at offsets that differ per shape.
  auto runAndCheck = [&](int shape, uint8_t seed) {
    for (size_t i = 0; i < kBytes; ++i)
      host[i] = static_cast<uint8_t>(i * 31 + seed);
    ASSERT_EQ(cudaMemcpy(src.data, host.data(), kBytes, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemset(dst.data, 0, kBytes), cudaSuccess);
    std::vector<uint8_t> expected(kBytes, 0);
    for (int r = 0; r < 8 + shape; ++r) {
      const size_t from = static_cast<size_t>(r) * 8192 + static_cast<size_t>(shape) * 16;
      const size_t to = static_cast<size_t>(r) * 32768 + static_cast<size_t>(shape) * 256;
      CopyTask t;
      t.src = src.bytes() + from;
      t.dst = dst.bytes() + to;
      t.row_bytes = 4096;
      (*batch)->add(t);
      std::memcpy(expected.data() + to, host.data() + from, 4096);
    }
    ASSERT_TRUE((*batch)->launch(stream, kTimeout).isOk());
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(back.data(), dst.data, kBytes, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_TRUE(back == expected) << "shape " << shape << ", seed " << int{seed};
  };
  uint8_t seed = 0;
  for (int round = 0; round < 3; ++round) {  // two batches alternating: uploaded once each
    runAndCheck(0, ++seed);
    runAndCheck(1, ++seed);
  }
  for (int shape = 2; shape < 10; ++shape)  // more shapes than tables: evictions
    runAndCheck(shape, ++seed);
  runAndCheck(0, ++seed);  // evicted long ago: uploaded again
  runAndCheck(9, ++seed);  // still kept
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

}  // namespace
}  // namespace wsync
