// NcclBroadcaster under mpirun (np 2 or 4): real NCCL broadcasts between GPUs of one host, checked
// byte for byte on every receiver. Each rank uses GPU (node-local rank % device count). The tests
// that move data skip on every rank unless each rank of a node has its own GPU and there are at
// least two (NCCL refuses two ranks on one GPU); argument checks run everywhere.
// Nothing here calls CUDA or NCCL before main (gtest registration only).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "mp/mpi_gtest_main.h"
#include "transport/nccl/nccl_broadcaster.h"

namespace wsync {
namespace {

constexpr size_t kGuardBytes = 64;  // after every buffer: must never be written
constexpr uint8_t kGuardByte = 0x5A;
constexpr uint8_t kStaleByte = 0xEE;  // receivers' bytes before a broadcast

int visibleGpus() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

// This rank's index and the rank count on its node. Collective over MPI_COMM_WORLD.
std::pair<int, int> nodeLocalRank() {
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(node, &rank);
  MPI_Comm_size(node, &size);
  MPI_Comm_free(&node);
  return {rank, size};
}

// Collective over MPI_COMM_WORLD (MPI_Comm_split_type): every rank calls it.
int myDevice() {
  const int n = visibleGpus();
  return n > 0 ? nodeLocalRank().first % n : 0;
}

// Empty when every rank can run the NCCL tests; all ranks agree, so none enters a collective
// alone.
std::string gpuSkipReason() {
  const int gpus = visibleGpus();
  const int local_ranks = nodeLocalRank().second;
  int ok = gpus >= 2 && gpus >= local_ranks ? 1 : 0;
  int all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (all_ok) return "";
  return "needs at least 2 GPUs and one GPU per rank of a node (world rank " +
         std::to_string(worldRank()) + " sees " + std::to_string(gpus) + " GPUs for " +
         std::to_string(local_ranks) + " ranks on its node)";
}

#define WSYNC_SKIP_WITHOUT_GPUS()                  \
  do {                                             \
    const std::string reason_ = gpuSkipReason();   \
    if (!reason_.empty()) GTEST_SKIP() << reason_; \
  } while (0)

// Rank 0 makes the id, every rank gets it.
std::vector<uint8_t> sharedUniqueId() {
  std::vector<uint8_t> id(NCCL_UNIQUE_ID_BYTES, 0);
  int ok = 1;
  if (worldRank() == 0) {
    auto made = makeNcclUniqueId();
    if (made.isOk()) {
      id = made.value();
    } else {
      ADD_FAILURE() << made.status().toString();
      ok = 0;
    }
  }
  MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Bcast(id.data(), static_cast<int>(id.size()), MPI_BYTE, 0, MPI_COMM_WORLD);
  if (!ok) id.clear();
  return id;
}

std::unique_ptr<NcclBroadcaster> makeOrFail(const std::vector<BroadcastComm>& comms,
                                            NcclBroadcasterOptions options) {
  const std::vector<uint8_t> id = sharedUniqueId();
  if (id.empty()) return nullptr;
  options.device = myDevice();
  auto made = NcclBroadcaster::create(id, worldRank(), worldSize(), comms, options);
  if (!made.isOk()) {
    ADD_FAILURE() << "world rank " << worldRank() << ": " << made.status().toString();
    return nullptr;
  }
  return std::move(made).value();
}

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (cudaMalloc(&ptr_, bytes_) != cudaSuccess) ptr_ = nullptr;
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr && !leak_) cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  char* get() const { return static_cast<char*>(ptr_); }
  void leak() { leak_ = true; }  // when a kernel may still write it

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  bool leak_ = false;
};

class Stream {
 public:
  Stream() { cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking); }
  ~Stream() {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// True once `stream` has nothing left, within `limit`.
bool streamDrains(cudaStream_t stream, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    const cudaError_t q = cudaStreamQuery(stream);
    if (q != cudaErrorNotReady) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

uint8_t patternByte(int version, int32_t comm, size_t k, size_t i) {
  return static_cast<uint8_t>((i * 131u + k * 29u + static_cast<size_t>(comm) * 7u +
                               static_cast<size_t>(version) * 13u + 1u) ^
                              (i >> 9));
}

// One broadcast of the test: a buffer of `bytes` (+ guard) on every member.
struct Transfer {
  int32_t comm = 0;
  size_t k = 0;
  int32_t root = 0;
  size_t bytes = 0;
  std::unique_ptr<DeviceBuffer> buffer;
};

std::vector<BroadcastComm> memberSets(int n) {
  std::vector<BroadcastComm> comms;
  BroadcastComm all{10, {}};
  for (int r = 0; r < n; ++r)
    all.world_ranks.push_back(r);
  comms.push_back(all);
  comms.push_back({11, {0, 1}});
  if (n >= 4) {
    comms.push_back({12, {1, 3}});
    comms.push_back({13, {0, 2, 3}});
  } else {
    comms.push_back({12, {0, 1}});  // two communicators over one member set
  }
  return comms;
}

bool isMember(const BroadcastComm& c, int rank) {
  for (int32_t r : c.world_ranks) {
    if (r == rank) return true;
  }
  return false;
}

// ---- argument checks: no GPU needed ----------------------------------------------------------

TEST(NcclBroadcasterArgs, RejectsBadArgumentsBeforeTouchingNccl) {
  const std::vector<uint8_t> id(NCCL_UNIQUE_ID_BYTES, 0);
  const NcclBroadcasterOptions options;
  const auto code = [&](const std::vector<uint8_t>& uid, int rank, int world,
                        const std::vector<BroadcastComm>& comms) {
    auto r = NcclBroadcaster::create(uid, rank, world, comms, options);
    EXPECT_FALSE(r.isOk());
    return std::make_pair(r.status().code(), r.status().message());
  };
  auto [c1, m1] = code(std::vector<uint8_t>(10, 0), 0, 2, {});
  EXPECT_EQ(c1, WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(m1.find("unique id has 10 bytes"), std::string::npos) << m1;
  auto [c2, m2] = code(id, 2, 2, {});
  EXPECT_EQ(c2, WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(m2.find("NCCL rank 2"), std::string::npos) << m2;
  auto [c3, m3] = code(id, 0, 2, {{7, {1, 0}}});
  EXPECT_EQ(c3, WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(m3.find("communicator 7"), std::string::npos) << m3;
  EXPECT_NE(m3.find("sorted"), std::string::npos) << m3;
  auto [c4, m4] = code(id, 0, 2, {{7, {0, 1}}, {7, {0}}});
  EXPECT_EQ(c4, WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(m4.find("repeats the id"), std::string::npos) << m4;
  auto [c5, m5] = code(id, 0, 2, {{3, {0, 5}}});
  EXPECT_EQ(c5, WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(m5.find("rank 5 outside"), std::string::npos) << m5;
  auto [c6, m6] = code(id, 0, 2, {{4, {}}});
  EXPECT_EQ(c6, WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(m6.find("no members"), std::string::npos) << m6;
}

TEST(NcclBroadcasterArgs, MissingDeviceIsAClearError) {
  // One past the last visible device (device 0 on a machine without a usable GPU).
  NcclBroadcasterOptions options;
  options.device = visibleGpus();
  auto r =
      NcclBroadcaster::create(std::vector<uint8_t>(NCCL_UNIQUE_ID_BYTES, 0), 0, 1, {}, options);
  ASSERT_FALSE(r.isOk());
  EXPECT_TRUE(r.status().code() == WSYNC_ERR_INVALID_ARGUMENT ||
              r.status().code() == WSYNC_ERR_SYSTEM)
      << r.status().toString();
  EXPECT_NE(r.status().message().find("CUDA device"), std::string::npos) << r.status().toString();
}

TEST(NcclBroadcasterArgs, UniqueIdsAreNcclSizedAndDistinct) {
  auto a = makeNcclUniqueId();
  auto b = makeNcclUniqueId();
  ASSERT_TRUE(a.isOk()) << a.status().toString();
  ASSERT_TRUE(b.isOk()) << b.status().toString();
  EXPECT_EQ(a.value().size(), static_cast<size_t>(NCCL_UNIQUE_ID_BYTES));
  EXPECT_NE(a.value(), b.value());
}

// ---- real broadcasts -------------------------------------------------------------------------

// Each rank its own NCCL world of one rank (so ranks may share a GPU): the whole life cycle runs
// for real (non-blocking init, splits, grouped launches with packing, waits, finalize) and the
// root's bytes come back untouched, guards included.
TEST(NcclBroadcasterOneRank, LifeCycleOnOneGpu) {
  int have = visibleGpus() >= 1 ? 1 : 0;
  int all_have = 0;
  MPI_Allreduce(&have, &all_have, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all_have) GTEST_SKIP() << "needs a GPU (world rank " << worldRank() << " sees none)";
  auto id = makeNcclUniqueId();
  ASSERT_TRUE(id.isOk()) << id.status().toString();
  NcclBroadcasterOptions options;
  options.device = myDevice();
  options.timeout = std::chrono::seconds(60);
  options.bucket_bytes = 4096;
  auto made = NcclBroadcaster::create(id.value(), 0, 1, {{5, {0}}, {6, {0}}}, options);
  ASSERT_TRUE(made.isOk()) << made.status().toString();
  auto b = std::move(made).value();
  ASSERT_EQ(cudaSetDevice(b->device()), cudaSuccess);

  const std::vector<size_t> sizes = {1, 100, 4095, 4096, 70000, 7, 9};
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;
  std::vector<std::vector<uint8_t>> expected;
  for (size_t k = 0; k < sizes.size(); ++k) {
    buffers.push_back(std::make_unique<DeviceBuffer>(sizes[k] + kGuardBytes));
    ASSERT_NE(buffers.back()->get(), nullptr);
    std::vector<uint8_t> host(sizes[k] + kGuardBytes, kGuardByte);
    for (size_t i = 0; i < sizes[k]; ++i)
      host[i] = patternByte(0, 5, k, i);
    ASSERT_EQ(cudaMemcpy(buffers[k]->get(), host.data(), host.size(), cudaMemcpyHostToDevice),
              cudaSuccess);
    expected.push_back(std::move(host));
  }
  Stream stream;
  for (int round = 0; round < 2; ++round) {
    for (size_t k = 0; k < sizes.size(); ++k) {
      ASSERT_TRUE(b->post(k % 3 == 2 ? 6 : 5, 0, buffers[k]->get(), sizes[k]).isOk());
    }
    const Status launched = b->launch(stream.get());
    ASSERT_TRUE(launched.isOk()) << launched.toString();
    const Status waited = b->wait(stream.get(), std::chrono::seconds(60));
    ASSERT_TRUE(waited.isOk()) << waited.toString();
    EXPECT_EQ(b->lastLaunchStats().posts, sizes.size());
    EXPECT_GT(b->lastLaunchStats().packed_buckets, 0u);
  }
  for (size_t k = 0; k < sizes.size(); ++k) {
    std::vector<uint8_t> got(expected[k].size());
    ASSERT_EQ(cudaMemcpy(got.data(), buffers[k]->get(), got.size(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_EQ(got, expected[k]) << "buffer " << k << " (" << sizes[k] << " bytes)";
  }
  EXPECT_FALSE(b->aborted());
}

TEST(NcclBroadcaster, BroadcastsBucketedAndDirectAcrossMemberSets) {
  WSYNC_SKIP_WITHOUT_GPUS();
  const int me = worldRank();
  const std::vector<BroadcastComm> comms = memberSets(worldSize());
  NcclBroadcasterOptions options;
  options.timeout = std::chrono::seconds(60);
  options.bucket_bytes = 64 << 10;
  auto b = makeOrFail(comms, options);
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(cudaSetDevice(b->device()), cudaSuccess);

  // Small ones pack (several per bucket), ones >= 64 KiB go alone, a zero-byte one moves nothing.
  const std::vector<size_t> sizes = {1,
                                     3,
                                     17,
                                     1000,
                                     4096,
                                     65535,
                                     65536,
                                     65537,
                                     300000,
                                     5,
                                     2,
                                     0,
                                     40000,
                                     40000,
                                     24000,
                                     1,
                                     (size_t{1} << 20) + 3};
  std::vector<Transfer> transfers;
  for (const BroadcastComm& c : comms) {
    if (!isMember(c, me)) continue;
    for (size_t k = 0; k < sizes.size(); ++k) {
      Transfer t;
      t.comm = c.id;
      t.k = k;
      // Runs of four with the same root (packable), the root moving between runs.
      t.root = c.world_ranks[(k / 4) % c.world_ranks.size()];
      t.bytes = sizes[k];
      t.buffer = std::make_unique<DeviceBuffer>(t.bytes + kGuardBytes);
      ASSERT_NE(t.buffer->get(), nullptr);
      transfers.push_back(std::move(t));
    }
  }
  // This rank's posting order: k-major with the comms in an order that differs between ranks
  // (reversed on odd ranks); each comm's own order is the same everywhere.
  std::vector<size_t> post_order;
  for (size_t k = 0; k < sizes.size(); ++k) {
    std::vector<size_t> at_k;
    for (size_t t = 0; t < transfers.size(); ++t) {
      if (transfers[t].k == k) at_k.push_back(t);
    }
    if (me % 2 == 1) std::reverse(at_k.begin(), at_k.end());
    post_order.insert(post_order.end(), at_k.begin(), at_k.end());
  }

  Stream stream;
  for (int version = 0; version < 3; ++version) {
    for (const Transfer& t : transfers) {
      std::vector<uint8_t> host(t.bytes + kGuardBytes, kGuardByte);
      for (size_t i = 0; i < t.bytes; ++i) {
        host[i] = t.root == me ? patternByte(version, t.comm, t.k, i) : kStaleByte;
      }
      ASSERT_EQ(cudaMemcpy(t.buffer->get(), host.data(), host.size(), cudaMemcpyHostToDevice),
                cudaSuccess);
    }
    for (size_t t : post_order) {
      const Transfer& x = transfers[t];
      ASSERT_TRUE(b->post(x.comm, x.root, x.buffer->get(), x.bytes).isOk());
    }
    const Status launched = b->launch(stream.get());
    ASSERT_TRUE(launched.isOk()) << launched.toString();
    const Status waited = b->wait(stream.get(), std::chrono::seconds(60));
    ASSERT_TRUE(waited.isOk()) << waited.toString();

    const NcclLaunchStats& s = b->lastLaunchStats();
    EXPECT_GT(s.packed_buckets, 0u);
    EXPECT_LT(s.broadcasts, s.posts);  // bucketing merged some
    EXPECT_EQ(s.posts, transfers.size() - transfers.size() / sizes.size());  // minus the 0-byte

    for (const Transfer& t : transfers) {
      std::vector<uint8_t> host(t.bytes + kGuardBytes);
      ASSERT_EQ(cudaMemcpy(host.data(), t.buffer->get(), host.size(), cudaMemcpyDeviceToHost),
                cudaSuccess);
      size_t bad = t.bytes;
      for (size_t i = 0; i < t.bytes && bad == t.bytes; ++i) {
        if (host[i] != patternByte(version, t.comm, t.k, i)) bad = i;
      }
      EXPECT_EQ(bad, t.bytes) << "comm " << t.comm << " broadcast " << t.k << " (" << t.bytes
                              << " bytes from rank " << t.root << "): first wrong byte at " << bad;
      for (size_t i = t.bytes; i < host.size(); ++i) {
        if (host[i] != kGuardByte) {
          ADD_FAILURE() << "comm " << t.comm << " broadcast " << t.k << ": wrote past its "
                        << t.bytes << " bytes (offset " << i << ")";
          break;
        }
      }
    }
  }
}

TEST(NcclBroadcaster, RejectsBadPostsAndMisuse) {
  WSYNC_SKIP_WITHOUT_GPUS();
  const int me = worldRank();
  const int n = worldSize();
  std::vector<BroadcastComm> comms = {{20, {}}, {21, {0}}};
  for (int r = 0; r < n; ++r)
    comms[0].world_ranks.push_back(r);
  NcclBroadcasterOptions options;
  options.timeout = std::chrono::seconds(60);
  auto b = makeOrFail(comms, options);
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(cudaSetDevice(b->device()), cudaSuccess);
  DeviceBuffer buf(4096);
  ASSERT_NE(buf.get(), nullptr);

  EXPECT_EQ(b->post(99, 0, buf.get(), 16).code(), WSYNC_ERR_INVALID_ARGUMENT);
  if (me == 0) {
    const Status s = b->post(21, 1, buf.get(), 16);
    EXPECT_EQ(s.code(), WSYNC_ERR_INVALID_ARGUMENT) << s.toString();
    EXPECT_NE(s.message().find("root is not a member"), std::string::npos) << s.toString();
  } else {
    const Status s = b->post(21, 0, buf.get(), 16);
    EXPECT_EQ(s.code(), WSYNC_ERR_INVALID_USAGE) << s.toString();
  }
  std::vector<uint8_t> host_memory(64);
  const Status host = b->post(20, 0, host_memory.data(), host_memory.size());
  EXPECT_EQ(host.code(), WSYNC_ERR_INVALID_ARGUMENT) << host.toString();
  EXPECT_NE(host.message().find("device memory"), std::string::npos) << host.toString();

  Stream stream;
  EXPECT_TRUE(b->launch(stream.get()).isOk());  // nothing queued
  EXPECT_TRUE(b->wait(stream.get(), std::chrono::seconds(1)).isOk());

  // A real broadcast; a second launch before the wait is misuse and changes nothing.
  std::vector<uint8_t> pattern(4096);
  for (size_t i = 0; i < pattern.size(); ++i)
    pattern[i] = static_cast<uint8_t>(i * 7 + 3);
  std::vector<uint8_t> init = me == n - 1 ? pattern : std::vector<uint8_t>(4096, kStaleByte);
  ASSERT_EQ(cudaMemcpy(buf.get(), init.data(), init.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_TRUE(b->post(20, n - 1, buf.get(), 4096).isOk());
  ASSERT_TRUE(b->launch(stream.get()).isOk());
  EXPECT_EQ(b->launch(stream.get()).code(), WSYNC_ERR_INVALID_USAGE);
  const Status waited = b->wait(stream.get(), std::chrono::seconds(60));
  ASSERT_TRUE(waited.isOk()) << waited.toString();
  EXPECT_FALSE(b->aborted());
  std::vector<uint8_t> got(4096);
  ASSERT_EQ(cudaMemcpy(got.data(), buf.get(), got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(got, pattern);
}

// ---- timeouts (last: they abort communicators) -----------------------------------------------

TEST(NcclBroadcasterTimeout, InitTimesOutWhenARankNeverJoins) {
  // Only rank 0 touches NCCL here: one GPU is enough.
  int rank0_has_gpu = visibleGpus() >= 1 ? 1 : 0;
  MPI_Bcast(&rank0_has_gpu, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (!rank0_has_gpu) GTEST_SKIP() << "needs a GPU on world rank 0";
  if (worldSize() < 2) GTEST_SKIP() << "needs a second rank that never joins";
  const std::vector<uint8_t> id = sharedUniqueId();
  ASSERT_FALSE(id.empty());
  const int device = myDevice();  // collective: before the rank-0-only part
  if (worldRank() == 0) {
    NcclBroadcasterOptions options;
    options.device = device;
    options.timeout = std::chrono::seconds(3);
    const auto start = std::chrono::steady_clock::now();
    auto r = NcclBroadcaster::create(id, 0, worldSize(), {}, options);
    const auto took = std::chrono::steady_clock::now() - start;
    ASSERT_FALSE(r.isOk());
    EXPECT_EQ(r.status().code(), WSYNC_ERR_TIMEOUT) << r.status().toString();
    EXPECT_NE(r.status().message().find("NCCL rank 0"), std::string::npos) << r.status().toString();
    EXPECT_LT(took, std::chrono::seconds(30));
  }
  MPI_Barrier(MPI_COMM_WORLD);  // the others never call create
}

TEST(NcclBroadcasterTimeout, WaitTimesOutWhenThePeerNeverLaunches) {
  WSYNC_SKIP_WITHOUT_GPUS();
  const int me = worldRank();
  NcclBroadcasterOptions options;
  options.timeout = std::chrono::seconds(3);
  auto b = makeOrFail({{30, {0, 1}}}, options);
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(cudaSetDevice(b->device()), cudaSuccess);
  auto buf = std::make_unique<DeviceBuffer>(size_t{1} << 20);
  ASSERT_NE(buf->get(), nullptr);
  Stream stream;
  if (me == 0) {
    // Rank 0 expects 1 MiB from rank 1, which never sends: the hand-off (NCCL connects peers on
    // first use) or the wait must time out, and everything is aborted.
    ASSERT_TRUE(b->post(30, 1, buf->get(), size_t{1} << 20).isOk());
    const auto start = std::chrono::steady_clock::now();
    Status s = b->launch(stream.get());
    if (s.isOk()) s = b->wait(stream.get(), std::chrono::seconds(2));
    const auto took = std::chrono::steady_clock::now() - start;
    EXPECT_EQ(s.code(), WSYNC_ERR_TIMEOUT) << s.toString();
    EXPECT_TRUE(b->aborted());
    EXPECT_LT(took, std::chrono::seconds(30));
    EXPECT_EQ(b->post(30, 1, buf->get(), 16).code(), WSYNC_ERR_INVALID_USAGE);
    // Aborted kernels end: the stream drains.
    if (!streamDrains(stream.get(), std::chrono::seconds(20))) {
      ADD_FAILURE() << "the stream still runs 20 s after the abort";
      buf->leak();
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  b->abort();  // the partner gives up too instead of finalizing against a gone peer
  EXPECT_TRUE(b->aborted());
}

}  // namespace
}  // namespace wsync

WSYNC_MPI_GTEST_MAIN()
