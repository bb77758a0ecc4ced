// Conformance suite of WriteTransport backends, run under mpirun with 2 ranks: rank 1 exposes
// memory (allocated by the transport, or provided by the caller), rank 0 writes patterns into it
// and flushes, then rank 1 checks every byte of the region: the written bytes equal the source,
// all others keep their sentinel. Addresses and descriptors travel over MPI.
//
// Collective discipline: both ranks run the same tests in the same order, and every MPI call in a
// test is reached by both ranks whatever failed; a test gives up only at bothOk(), together.
// Add a backend by adding a factory to backends().
// Device backends (CUDA IPC, staged UCX) expose device memory: the suite fills and reads it with
// cudaMemset / cudaMemcpy, writes from a device copy of the source, and skips (both ranks together)
// when this machine has no usable CUDA device. MPI's C API only: wsync links libmpi, not the C++
// bindings' libmpi_cxx.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <gtest/gtest.h>
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/status.h"
#include "transport/ucx/ucx_transport.h"
#include "transport/write_transport.h"

#ifdef WSYNC_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <Eigen/Core>

#include "common/cuda_check.h"
#include "kernels/convert_kernels.h"
#include "transport/cuda_ipc/cuda_ipc_transport.h"
#include "transport/ucx_staged/staged_ucx_transport.h"
#endif

namespace wsync {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr int kWriter = 0;
constexpr int kTarget = 1;
constexpr uint8_t kSentinel = 0xA5;
constexpr auto kFlushTimeout = 120s;  // generous: the CI machines have 2 shared cores

int rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// An MPI barrier that sleeps while it waits, so a rank parked in it leaves the (few, shared) cores
// to the writer and to the target's progress thread.
void barrier() {
  MPI_Request request;
  MPI_Ibarrier(MPI_COMM_WORLD, &request);
  int done = 0;
  MPI_Test(&request, &done, MPI_STATUS_IGNORE);
  while (!done) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
  }
}

// True on both ranks when `mine` is true on both.
bool bothOk(bool mine) {
  int in = mine ? 1 : 0;
  int out = 0;
  MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  return out != 0;
}

// Every rank's bytes, indexed by rank.
std::vector<std::vector<uint8_t>> allGather(const std::vector<uint8_t>& mine) {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int count = static_cast<int>(mine.size());
  std::vector<int> counts(size);
  MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
  std::vector<int> displs(size);
  int total = 0;
  for (int i = 0; i < size; ++i) {
    displs[i] = total;
    total += counts[i];
  }
  std::vector<uint8_t> all(total);
  MPI_Allgatherv(mine.data(), count, MPI_BYTE, all.data(), counts.data(), displs.data(), MPI_BYTE,
                 MPI_COMM_WORLD);
  std::vector<std::vector<uint8_t>> out(size);
  for (int i = 0; i < size; ++i) {
    out[i].assign(all.begin() + displs[i], all.begin() + displs[i] + counts[i]);
  }
  return out;
}

// Deterministic bytes (splitmix64), the same on both ranks for one seed.
std::vector<uint8_t> pattern(size_t bytes, uint64_t seed) {
  std::vector<uint8_t> out(bytes);
  uint64_t x = seed;
  for (size_t i = 0; i < bytes; i += 8) {
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    std::memcpy(out.data() + i, &z, std::min<size_t>(8, bytes - i));
  }
  return out;
}

// One write of the test plan: a 2-D block (rows == 1: a contiguous write), or with planes > 1 a
// 3-D one (planes of that block, plane pitches apart).
struct WriteOp {
  uint64_t dst;
  uint64_t dst_pitch;
  size_t src;
  size_t src_pitch;
  size_t row_bytes;
  size_t rows;
  size_t planes = 1;
  uint64_t dst_plane_pitch = 0;
  size_t src_plane_pitch = 0;
};

WriteOp contiguous(uint64_t dst, size_t src, size_t bytes) {
  return {dst, bytes, src, bytes, bytes, 1};
}

// What the target region must hold after `ops` from `source` landed on a sentinel-filled region.
std::vector<uint8_t> expectedImage(size_t region_bytes, const std::vector<uint8_t>& source,
                                   const std::vector<WriteOp>& ops) {
  std::vector<uint8_t> image(region_bytes, kSentinel);
  for (const WriteOp& op : ops) {
    for (size_t plane = 0; plane < op.planes; ++plane) {
      for (size_t row = 0; row < op.rows; ++row) {
        std::memcpy(image.data() + op.dst + plane * op.dst_plane_pitch + row * op.dst_pitch,
                    source.data() + op.src + plane * op.src_plane_pitch + row * op.src_pitch,
                    op.row_bytes);
      }
    }
  }
  return image;
}

// Posts `ops` from `source` (host or device memory): write() for single rows, write2d() for one
// plane of rows, write3d() for more planes.
Status postAll(WriteTransport& t, RemoteMemoryId remote, const uint8_t* source,
               const std::vector<WriteOp>& ops) {
  for (const WriteOp& op : ops) {
    const uint8_t* src = source + op.src;
    if (op.planes != 1) {
      WSYNC_RETURN_IF_ERROR(t.write3d(remote, op.dst, op.dst_pitch, op.dst_plane_pitch, src,
                                      op.src_pitch, op.src_plane_pitch, op.row_bytes, op.rows,
                                      op.planes));
      continue;
    }
    WSYNC_RETURN_IF_ERROR(op.rows == 1 ? t.write(remote, op.dst, src, op.row_bytes)
                                       : t.write2d(remote, op.dst, op.dst_pitch, src, op.src_pitch,
                                                   op.row_bytes, op.rows));
  }
  return Status::ok();
}

// Lands the bytes `ops` wrote into `memory` when its backend stages writes (needsLanding), as a
// target does once it learned its writers flushed.
void landWritten(ExposedMemory& memory, const std::vector<WriteOp>& ops) {
  if (!memory.needsLanding()) return;
  std::vector<ByteRange> ranges;
  for (const WriteOp& op : ops) {
    for (size_t plane = 0; plane < op.planes; ++plane) {
      for (size_t row = 0; row < op.rows; ++row) {
        const uint64_t at = op.dst + plane * op.dst_plane_pitch + row * op.dst_pitch;
        if (op.row_bytes > 0) ranges.push_back({at, op.row_bytes});
      }
    }
  }
  const Status s = memory.land(ranges, kFlushTimeout);
  EXPECT_TRUE(s.isOk()) << s.toString();
}

// Checks `got` equals `want`, reporting how many bytes differ and where the first does.
void expectBytes(const uint8_t* got, const std::vector<uint8_t>& want, const char* what) {
  size_t mismatches = 0;
  size_t first = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i] && mismatches++ == 0) first = i;
  }
  EXPECT_EQ(mismatches, 0u) << what << ": " << mismatches << " of " << want.size()
                            << " bytes differ; the first at offset " << first << " is 0x"
                            << std::hex << int(got[first]) << ", expected 0x" << int(want[first]);
}

::testing::AssertionResult hasCode(const Status& s, wsync_status_t code) {
  if (s.code() == code) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "expected " << wsync_status_string(code) << ", got " << s.toString();
}

::testing::AssertionResult mentions(const Status& s, const std::string& text) {
  if (s.message().find(text) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "'" << s.message() << "' does not mention '" << text << "'";
}

// ---- backends ----------------------------------------------------------------------------------

// Where a backend's exposed memory (and the test's sources) live.
enum class MemorySide {
  kHost,
  kDevice0,        // CUDA device 0 on every rank (one GPU is enough)
  kDevicePerRank,  // CUDA device `rank` (peer-to-peer between two GPUs)
};

struct BackendFactory {
  std::string name;
  std::function<Result<std::unique_ptr<WriteTransport>>()> create;
  // Whether writes into allocateExposed() memory land with no progress() from the target (on one
  // node). The suite then checks that they do, leaving the target idle in MPI.
  bool allocated_is_one_sided;
  MemorySide memory = MemorySide::kHost;
  // Why this machine cannot run the backend (empty: it can); the tests then skip on both ranks.
  std::function<std::string()> unavailable = [] { return std::string(); };
};

// The CUDA device of this rank's memory for `memory`, or -1 for host memory.
int deviceOf(MemorySide memory) {
  switch (memory) {
    case MemorySide::kHost:
      return -1;
    case MemorySide::kDevice0:
      return 0;
    case MemorySide::kDevicePerRank:
      return rank();
  }
  return -1;
}

#ifdef WSYNC_HAVE_CUDA
int cudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

// Why CUDA device 0 cannot run a device backend here (empty: it can).
std::string deviceZeroMissing() {
  return cudaDeviceAvailable(0) ? std::string() : std::string("no usable CUDA device");
}
#endif

std::vector<BackendFactory> backends() {
  std::vector<BackendFactory> out = {
      {"ucx", [] { return createUcxTransport(); }, /*allocated_is_one_sided=*/true}};
#ifdef WSYNC_HAVE_CUDA
  out.push_back({"cuda_ipc", [] { return createCudaIpcTransport(); },
                 /*allocated_is_one_sided=*/true, MemorySide::kDevice0, deviceZeroMissing});
  // The same, with allocated memory shared through cudaIpcGetMemHandle instead of VMM.
  out.push_back({"cuda_ipc_legacy",
                 [] {
                   CudaIpcTransportOptions options;
                   options.vmm_exports = false;
                   return createCudaIpcTransport(options);
                 },
                 /*allocated_is_one_sided=*/true, MemorySide::kDevice0, deviceZeroMissing});
  // Every write a driver copy (no batched kernel for registered device sources).
  out.push_back({"cuda_ipc_unbatched",
                 [] {
                   CudaIpcTransportOptions options;
                   options.batch_device_copies = false;
                   return createCudaIpcTransport(options);
                 },
                 /*allocated_is_one_sided=*/true, MemorySide::kDevice0, deviceZeroMissing});
  out.push_back({"cuda_ipc_two_gpus",
                 [] {
                   CudaIpcTransportOptions options;
                   options.device = rank();
                   return createCudaIpcTransport(options);
                 },
                 /*allocated_is_one_sided=*/true, MemorySide::kDevicePerRank,
                 [] {
                   const int n = cudaDeviceCount();
                   return n >= 2 ? std::string()
                                 : "needs 2 CUDA devices (one per rank), this machine has " +
                                       std::to_string(n);
                 }});
  // Device memory behind a UCX landing area, written from device memory through pinned chunks
  // (small chunks here, so that writes are split and the ring wraps).
  out.push_back({"ucx_staged",
                 [] {
                   StagedUcxTransportOptions options;
                   options.chunk_bytes = 1 << 20;
                   options.num_chunks = 3;
                   return createStagedUcxTransport(options);
                 },
                 /*allocated_is_one_sided=*/true, MemorySide::kDevice0, deviceZeroMissing});
  // The same with the writer reporting its writes into the target's progress log (early
  // landing): land() then moves nothing itself when every write was reported, so these cases also
  // check that the reports cover exactly the written bytes.
  out.push_back({"ucx_staged_reporting",
                 [] {
                   StagedUcxTransportOptions options;
                   options.chunk_bytes = 1 << 20;
                   options.num_chunks = 3;
                   options.writer_rank = rank();
                   return createStagedUcxTransport(options);
                 },
                 /*allocated_is_one_sided=*/true, MemorySide::kDevice0, deviceZeroMissing});
  // UCX's own device-memory puts (a UCX built with CUDA, e.g. the libucx-cu13 wheel).
  out.push_back({"ucx_cuda",
                 [] {
                   StagedUcxTransportOptions options;
                   options.use_ucx_cuda = true;
                   return createStagedUcxTransport(options);
                 },
                 /*allocated_is_one_sided=*/true, MemorySide::kDevice0,
                 [] {
                   if (!cudaDeviceAvailable(0)) return std::string("no usable CUDA device");
                   return ucxHandlesCudaMemory()
                              ? std::string()
                              : std::string("the UCX loaded does not handle CUDA memory");
                 }});
#endif
  return out;
}

// ---- memory on either side ---------------------------------------------------------------------

// Host memory (device < 0) or device memory of CUDA device `device` (cudaMalloc: the base of an
// allocation, as CudaIpcTransport::expose wants). data() is null when allocation failed (the
// failure is reported).
class Buffer {
 public:
  Buffer() = default;
  Buffer(int device, size_t bytes) : device_(device), size_(bytes) {
    if (device < 0) {
      host_.assign(bytes, 0);
      data_ = host_.data();
      return;
    }
#ifdef WSYNC_HAVE_CUDA
    void* p = nullptr;
    const cudaError_t e =
        cudaSetDevice(device) == cudaSuccess ? cudaMalloc(&p, bytes) : cudaGetLastError();
    EXPECT_EQ(e, cudaSuccess) << "cudaMalloc(" << bytes << ") on device " << device << ": "
                              << cudaGetErrorString(e);
    data_ = static_cast<uint8_t*>(p);
#else
    ADD_FAILURE() << "device memory in a build without CUDA";
#endif
  }
  // A copy of `bytes` on that side.
  Buffer(int device, const std::vector<uint8_t>& bytes) : Buffer(device, bytes.size()) {
    if (data_ == nullptr) return;
    if (device < 0) {
      std::memcpy(data_, bytes.data(), bytes.size());
      return;
    }
#ifdef WSYNC_HAVE_CUDA
    const cudaError_t e = cudaMemcpy(data_, bytes.data(), bytes.size(), cudaMemcpyHostToDevice);
    EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
    // A pageable-to-device cudaMemcpy may return before its DMA finished, and the transport's
    // non-blocking stream does not wait for the legacy stream: complete it here.
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
#endif
  }
  ~Buffer() {
    release();
  }
  Buffer(Buffer&& o) noexcept {
    *this = std::move(o);
  }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      release();
      device_ = o.device_;
      size_ = o.size_;
      host_ = std::move(o.host_);
      data_ = std::exchange(o.data_, nullptr);
    }
    return *this;
  }

  uint8_t* data() const {
    return data_;
  }
  size_t size() const {
    return size_;
  }

 private:
  void release() {
#ifdef WSYNC_HAVE_CUDA
    if (device_ >= 0 && data_ != nullptr) {
      cudaSetDevice(device_);
      cudaFree(data_);
    }
#endif
    data_ = nullptr;
  }
  int device_ = -1;
  size_t size_ = 0;
  std::vector<uint8_t> host_;
  uint8_t* data_ = nullptr;
};

// memset / cudaMemset (completed before returning) of memory on `device` (-1: host).
void fillBytes(int device, void* p, uint8_t value, size_t bytes) {
  if (device < 0) {
    std::memset(p, value, bytes);
    return;
  }
#ifdef WSYNC_HAVE_CUDA
  EXPECT_EQ(cudaSetDevice(device), cudaSuccess);
  EXPECT_EQ(cudaMemset(p, value, bytes), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
#endif
}

// The bytes of memory on `device` (-1: host), read back with cudaMemcpy for device memory.
std::vector<uint8_t> readBytes(int device, const void* p, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  if (device < 0) {
    std::memcpy(out.data(), p, bytes);
    return out;
  }
#ifdef WSYNC_HAVE_CUDA
  EXPECT_EQ(cudaSetDevice(device), cudaSuccess);
  const cudaError_t e = cudaMemcpy(out.data(), p, bytes, cudaMemcpyDeviceToHost);
  EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
#endif
  return out;
}

// True on both ranks when `backend` can run here on both; otherwise prints why (rank 0).
bool backendAvailable(const BackendFactory& backend, std::string& why) {
  why = backend.unavailable();
  const bool ok = bothOk(why.empty());
  if (!ok && why.empty()) why = "not available on the other rank";
  return ok;
}

enum class TargetKind { kAllocated, kUserProvided };

struct ConformanceParam {
  BackendFactory backend;
  TargetKind kind;
};

std::vector<ConformanceParam> conformanceParams() {
  std::vector<ConformanceParam> out;
  for (const BackendFactory& b : backends()) {
    out.push_back({b, TargetKind::kAllocated});
    out.push_back({b, TargetKind::kUserProvided});
  }
  return out;
}

// Calls progress() in a loop on its own thread until stopped (the target side of emulated writes).
class ProgressThread {
 public:
  ~ProgressThread() { stop(); }
  void start(WriteTransport* transport) {
    stop_ = false;
    thread_ = std::thread([this, transport] {
      while (!stop_.load(std::memory_order_relaxed)) {
        transport->progress();
        std::this_thread::yield();
      }
    });
  }
  void stop() {
    if (!thread_.joinable()) return;
    stop_ = true;
    thread_.join();
  }
  bool running() const { return thread_.joinable(); }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// One writer/target pair. open() and close() are collective.
class Session {
 public:
  // Rank 1 exposes `region_bytes` of `kind` filled with kSentinel and, when `target_progress`,
  // progresses its transport on a thread; rank 0 connects and attaches. True on both ranks when
  // all of it worked on both.
  bool open(const BackendFactory& backend, TargetKind kind, size_t region_bytes,
            bool target_progress) {
    region_bytes_ = region_bytes;
    device_ = deviceOf(backend.memory);
    auto created = backend.create();
    EXPECT_TRUE(created.isOk()) << backend.name << ": " << created.status().toString();
    if (!bothOk(created.isOk())) return false;
    transport_ = std::move(created).value();
    const auto addresses = allGather(transport_->localAddress());

    bool ok = true;
    std::vector<uint8_t> descriptor;
    if (rank() == kTarget) {
      Result<std::unique_ptr<ExposedMemory>> mem = Status(WSYNC_ERR_INTERNAL, "unset");
      if (kind == TargetKind::kAllocated) {
        mem = transport_->allocateExposed(region_bytes);
      } else {
        user_buffer_ = Buffer(device_, region_bytes);
        mem = transport_->expose(user_buffer_.data(), region_bytes);
      }
      EXPECT_TRUE(mem.isOk()) << mem.status().toString();
      ok = mem.isOk();
      if (ok) {
        target_ = std::move(mem).value();
        EXPECT_EQ(target_->size(), region_bytes);
        if (kind == TargetKind::kUserProvided) EXPECT_EQ(target_->data(), user_buffer_.data());
        fillBytes(device_, target_->data(), kSentinel, region_bytes);
        descriptor = target_->descriptor();
        if (target_progress) progress_.start(transport_.get());
      }
    } else {
      const Status s = transport_->connect(kTarget, addresses[kTarget]);
      EXPECT_TRUE(s.isOk()) << s.toString();
      ok = s.isOk();
    }
    const auto descriptors = allGather(descriptor);
    if (rank() == kWriter && ok) {
      auto id = transport_->attach(kTarget, descriptors[kTarget]);
      EXPECT_TRUE(id.isOk()) << id.status().toString();
      ok = id.isOk();
      if (ok) remote_ = id.value();
      attached_descriptor_ = descriptors[kTarget];
    }
    return bothOk(ok);
  }

  // Rank 0 tears down first while rank 1 still progresses (closing may need it), then rank 1.
  void close() {
    if (rank() == kWriter) transport_.reset();
    barrier();
    progress_.stop();
    target_.reset();
    transport_.reset();
  }

  WriteTransport& transport() { return *transport_; }
  RemoteMemoryId remote() const { return remote_; }
  // A copy of the target region's bytes (read back from the device for device backends), after
  // `written` landed (staged backends move written bytes into the target memory only then).
  std::vector<uint8_t> targetBytes(const std::vector<WriteOp>& written) const {
    landWritten(*target_, written);
    return readBytes(device_, target_->data(), region_bytes_);
  }
  int device() const { return device_; }  // of this rank's memory; -1: host
  size_t regionBytes() const { return region_bytes_; }
  const std::vector<uint8_t>& attachedDescriptor() const { return attached_descriptor_; }
  ProgressThread& progressThread() { return progress_; }
  ExposedMemory& target() { return *target_; }  // rank 1

 private:
  size_t region_bytes_ = 0;
  int device_ = -1;
  std::unique_ptr<WriteTransport> transport_;
  Buffer user_buffer_;  // outlives target_ (declared before it)
  std::unique_ptr<ExposedMemory> target_;
  ProgressThread progress_;  // stopped before transport_ goes (declared after it)
  RemoteMemoryId remote_ = -1;
  std::vector<uint8_t> attached_descriptor_;  // rank 0: what open() attached
};

// ---- the suite over (backend, target kind) ----------------------------------------------------

class WriteTransportConformance : public ::testing::TestWithParam<ConformanceParam> {
 protected:
  void SetUp() override {
    std::string why;
    if (!backendAvailable(GetParam().backend, why))
      GTEST_SKIP() << GetParam().backend.name << ": " << why;
  }
  void TearDown() override { session_.close(); }

  bool open(size_t region_bytes) {
    const ConformanceParam& p = GetParam();
    const bool progress = p.kind == TargetKind::kUserProvided || !p.backend.allocated_is_one_sided;
    return session_.open(p.backend, p.kind, region_bytes, progress);
  }

  // Rank 0 posts `ops` from a copy of `source` on the backend's side (registered first when
  // `register_source`) and flushes; barrier; rank 1 checks the whole region.
  void writeAndCheck(const std::vector<uint8_t>& source, const std::vector<WriteOp>& ops,
                     const char* what, bool register_source = false) {
    if (rank() == kWriter) {
      const Buffer staged(session_.device(), source);
      std::unique_ptr<SourceRegistration> registration;
      if (register_source) {
        auto reg = session_.transport().registerSource(staged.data(), staged.size());
        EXPECT_TRUE(reg.isOk()) << reg.status().toString();
        if (reg.isOk()) registration = std::move(reg).value();
      }
      const Status posted = postAll(session_.transport(), session_.remote(), staged.data(), ops);
      EXPECT_TRUE(posted.isOk()) << what << ": " << posted.toString();
      const Status flushed = session_.transport().flush(kFlushTimeout);
      EXPECT_TRUE(flushed.isOk()) << what << ": " << flushed.toString();
    }
    barrier();
    if (rank() == kTarget) {
      expectBytes(session_.targetBytes(ops).data(),
                  expectedImage(session_.regionBytes(), source, ops), what);
    }
  }

  Session session_;
};

TEST_P(WriteTransportConformance, FlushWithNothingPostedSucceeds) {
  {  // a fresh transport with no peers (no collectives: failing here desynchronizes nothing)
    auto fresh = GetParam().backend.create();
    EXPECT_TRUE(fresh.isOk()) << fresh.status().toString();
    if (fresh.isOk()) {
      const Status s = fresh.value()->flush(1s);
      EXPECT_TRUE(s.isOk()) << s.toString();
    }
  }
  if (!open(4096)) return;
  const Status s = session_.transport().flush(5s);  // connected and attached, nothing written
  EXPECT_TRUE(s.isOk()) << s.toString();
  const Status again = session_.transport().flush(5s);
  EXPECT_TRUE(again.isOk()) << again.toString();
  barrier();
  if (rank() == kTarget) {
    expectBytes(session_.targetBytes({}).data(), std::vector<uint8_t>(4096, kSentinel),
                "untouched region");
  }
}

TEST_P(WriteTransportConformance, ContiguousWrites) {
  constexpr size_t kRegion = 1 << 20;
  if (!open(kRegion)) return;
  const std::vector<uint8_t> source = pattern(256 << 10, 1);
  const std::vector<WriteOp> ops = {
      contiguous(0, 0, 100),                 // region start
      contiguous(4096, 1000, 65536),         // page-aligned target, unaligned source
      contiguous(200001, 3, 3),              // tiny, odd
      contiguous(300000, 70000, 150000),     // large-ish
      contiguous(kRegion - 17, 250000, 17),  // region end
      contiguous(500000, 0, 0),              // empty: a no-op
  };
  writeAndCheck(source, ops, "contiguous writes", /*register_source=*/true);
}

TEST_P(WriteTransportConformance, StridedWrites) {
  constexpr size_t kRegion = 1 << 20;
  if (!open(kRegion)) return;
  const std::vector<uint8_t> source = pattern(512 << 10, 2);
  const std::vector<WriteOp> ops = {
      {123, 4096, 0, 1500, 1000, 64},                      // both pitches differ from the row
      {300000, 2000, 7, 3000, 2000, 20},                   // target rows packed, source strided
      {400000, 512, 100000, 512, 512, 100},                // both packed: one merged write
      {600001, 777, 200005, 300, 300, 33},                 // source packed, target strided
      {900000, 0, 250000, 0, 50, 1},                       // one row: pitches do not matter
      {950000, 64, 0, 64, 0, 10},                          // empty rows: a no-op
      {960000, 64, 0, 64, 8, 0},                           // no rows: a no-op
      {kRegion - 4096 * 3 - 10, 4096, 300000, 10, 10, 4},  // last row ends at the region end
  };
  writeAndCheck(source, ops, "strided writes", /*register_source=*/true);
}

// write3d(): planes of 2-D blocks, from registered memory (CUDA IPC: the batched kernel), then
// again with unregistered memory (CUDA IPC: driver copies).
TEST_P(WriteTransportConformance, ThreeDimensionalWrites) {
  constexpr size_t kRegion = 1 << 20;
  if (!open(kRegion)) return;
  const std::vector<uint8_t> source = pattern(512 << 10, 12);
  auto op3 = [](uint64_t dst, uint64_t dst_pitch, uint64_t dst_plane_pitch, size_t src,
                size_t src_pitch, size_t src_plane_pitch, size_t row_bytes, size_t rows,
                size_t planes) {
    return WriteOp{
        dst, dst_pitch, src, src_pitch, row_bytes, rows, planes, dst_plane_pitch, src_plane_pitch};
  };
  const std::vector<WriteOp> ops = {
      op3(100, 512, 8 * 512 + 64, 0, 300, 8 * 300 + 16, 256, 8, 5),  // strided everywhere
      op3(30000, 0, 128, 40000, 0, 100, 100, 1, 100),   // one row per plane, source planes packed
      op3(50000, 64, 640, 60000, 64, 640, 64, 10, 10),  // packed: one contiguous run
      op3(100000, 70000, 3 * 70000, 100000, 65600, 3 * 65600 + 8, 65536, 3, 2),  // long rows
      op3(600000, 64, 640, 0, 64, 640, 64, 10, 0),                  // no planes: a no-op
      op3(kRegion - 2300, 200, 1000, 500000, 100, 200, 100, 2, 3),  // ends at the region end
  };
  writeAndCheck(source, ops, "3-D writes from registered memory", /*register_source=*/true);
  writeAndCheck(source, ops, "3-D writes");
}

TEST_P(WriteTransportConformance, ManySmallWrites) {
  constexpr size_t kCount = 20000;
  constexpr size_t kRegion = kCount * 64 + 64;
  if (!open(kRegion)) return;
  const std::vector<uint8_t> source = pattern(kCount * 64, 3);
  std::vector<WriteOp> ops;
  ops.reserve(kCount);
  for (size_t i = 0; i < kCount; ++i) {  // disjoint writes of 8..40 bytes, odd alignments
    ops.push_back(contiguous(i * 64 + (i % 7), i * 64 + (i % 5), 8 + (i % 33)));
  }
  writeAndCheck(source, ops, "20000 small writes", /*register_source=*/true);
}

TEST_P(WriteTransportConformance, LargeWrite64MiB) {
  constexpr size_t kBytes = 64 << 20;
  constexpr size_t kGuard = 4096;
  if (!open(kBytes + 2 * kGuard)) return;
  const std::vector<uint8_t> source = pattern(kBytes, 4);
  writeAndCheck(source, {contiguous(kGuard, 0, kBytes)}, "64 MiB write", /*register_source=*/true);
}

TEST_P(WriteTransportConformance, OutOfRangeWritesAreRejected) {
  constexpr size_t kRegion = 64 << 10;
  if (!open(kRegion)) return;
  const std::vector<uint8_t> source = pattern(4096, 5);
  if (rank() == kWriter) {
    WriteTransport& t = session_.transport();
    const RemoteMemoryId id = session_.remote();
    const std::string names_id = "remote memory " + std::to_string(id);
    const uint8_t* src = source.data();

    Status s = t.write(id, kRegion - 10, src, 11);  // one byte past the end
    EXPECT_TRUE(hasCode(s, WSYNC_ERR_INVALID_ARGUMENT));
    EXPECT_TRUE(mentions(s, "peer 1"));
    EXPECT_TRUE(mentions(s, names_id));
    EXPECT_TRUE(hasCode(t.write(id, kRegion, src, 1), WSYNC_ERR_INVALID_ARGUMENT));
    EXPECT_TRUE(hasCode(t.write(id, std::numeric_limits<uint64_t>::max() - 3, src, 8),
                        WSYNC_ERR_INVALID_ARGUMENT));  // offset + bytes wraps
    // 65 rows with pitch 1024: the last row starts at 65536, past the end.
    s = t.write2d(id, 0, 1024, src, 16, 16, 65);
    EXPECT_TRUE(hasCode(s, WSYNC_ERR_INVALID_ARGUMENT));
    EXPECT_TRUE(mentions(s, names_id));
    // Overlapping rows (pitch smaller than the row).
    EXPECT_TRUE(hasCode(t.write2d(id, 0, 8, src, 16, 16, 4), WSYNC_ERR_INVALID_ARGUMENT));
    EXPECT_TRUE(hasCode(t.write2d(id, 0, 16, src, 8, 16, 4), WSYNC_ERR_INVALID_ARGUMENT));
    EXPECT_TRUE(hasCode(t.write(id, 0, nullptr, 8), WSYNC_ERR_INVALID_ARGUMENT));
    // 3 planes of 16 rows 32 KiB apart: the last plane starts at 65536, past the end.
    s = t.write3d(id, 0, 1024, 32768, src, 16, 256, 16, 16, 3);
    EXPECT_TRUE(hasCode(s, WSYNC_ERR_INVALID_ARGUMENT));
    EXPECT_TRUE(mentions(s, "peer 1"));
    EXPECT_TRUE(mentions(s, names_id));
    // Overlapping planes (a plane pitch smaller than the 256-byte plane), on either side.
    s = t.write3d(id, 0, 64, 100, src, 64, 1000, 64, 4, 2);
    EXPECT_TRUE(hasCode(s, WSYNC_ERR_INVALID_ARGUMENT));
    EXPECT_TRUE(mentions(s, names_id));
    EXPECT_TRUE(
        hasCode(t.write3d(id, 0, 64, 1000, src, 64, 100, 64, 4, 2), WSYNC_ERR_INVALID_ARGUMENT));
    EXPECT_TRUE(hasCode(t.write3d(id, 0, 64, 1000, nullptr, 64, 1000, 64, 4, 2),
                        WSYNC_ERR_INVALID_ARGUMENT));
    s = t.write3d(id + 1, 0, 64, 1000, src, 64, 1000, 64, 4, 2);
    EXPECT_TRUE(hasCode(s, WSYNC_ERR_INVALID_ARGUMENT));
    EXPECT_TRUE(mentions(s, std::to_string(id + 1)));
    // Unknown ids.
    s = t.write(id + 1, 0, src, 8);
    EXPECT_TRUE(hasCode(s, WSYNC_ERR_INVALID_ARGUMENT));
    EXPECT_TRUE(mentions(s, std::to_string(id + 1)));
    EXPECT_TRUE(hasCode(t.write(-1, 0, src, 8), WSYNC_ERR_INVALID_ARGUMENT));
  }
  // Nothing of the rejected writes may land; the one that ends exactly at the end must.
  writeAndCheck(source, {contiguous(kRegion - 11, 100, 11)}, "after rejected writes");
}

TEST_P(WriteTransportConformance, ConnectAndAttachCheckTheirInputs) {
  if (!open(4096)) return;
  if (rank() == kWriter) {
    WriteTransport& t = session_.transport();
    const std::vector<uint8_t> garbage = pattern(64, 6);

    Status s = t.attach(kTarget, garbage).status();
    EXPECT_FALSE(s.isOk());
    EXPECT_TRUE(mentions(s, "peer 1"));
    s = t.attach(kTarget, {}).status();
    EXPECT_FALSE(s.isOk());
    s = t.attach(5, garbage).status();  // never connected
    EXPECT_TRUE(hasCode(s, WSYNC_ERR_INVALID_USAGE));
    EXPECT_TRUE(mentions(s, "peer 5"));
    s = t.connect(7, garbage);
    EXPECT_FALSE(s.isOk());
    EXPECT_TRUE(mentions(s, "peer 7"));
    EXPECT_TRUE(hasCode(t.connect(-2, t.localAddress()), WSYNC_ERR_INVALID_ARGUMENT));
    s = t.connect(kTarget, t.localAddress());  // peer 1 is connected already
    EXPECT_TRUE(hasCode(s, WSYNC_ERR_INVALID_USAGE));
    EXPECT_TRUE(mentions(s, "peer 1"));
  }
  barrier();
  if (rank() == kTarget) {
    expectBytes(session_.targetBytes({}).data(), std::vector<uint8_t>(4096, kSentinel),
                "untouched region");
  }
}

// Every rank writes into memory it exposed itself (connect to its own address); no collectives.
TEST_P(WriteTransportConformance, WritesToItself) {
  constexpr size_t kRegion = 256 << 10;
  const int device = deviceOf(GetParam().backend.memory);
  auto created = GetParam().backend.create();
  EXPECT_TRUE(created.isOk()) << created.status().toString();
  if (!created.isOk()) return;
  WriteTransport& t = *created.value();
  Buffer user_buffer;
  auto mem = GetParam().kind == TargetKind::kAllocated
                 ? t.allocateExposed(kRegion)
                 : (user_buffer = Buffer(device, kRegion), t.expose(user_buffer.data(), kRegion));
  EXPECT_TRUE(mem.isOk()) << mem.status().toString();
  if (!mem.isOk()) return;
  fillBytes(device, mem.value()->data(), kSentinel, kRegion);
  const int me = rank();
  const Status connected = t.connect(me, t.localAddress());
  EXPECT_TRUE(connected.isOk()) << connected.toString();
  if (!connected.isOk()) return;
  auto id = t.attach(me, mem.value()->descriptor());
  EXPECT_TRUE(id.isOk()) << id.status().toString();
  if (!id.isOk()) return;
  const std::vector<uint8_t> source = pattern(kRegion, 11 + me);
  const std::vector<WriteOp> ops = {contiguous(10, 0, 5000), {20000, 300, 9000, 200, 100, 500}};
  const Buffer staged(device, source);
  const Status posted = postAll(t, id.value(), staged.data(), ops);
  EXPECT_TRUE(posted.isOk()) << posted.toString();
  const Status flushed = t.flush(kFlushTimeout);  // progresses this worker: emulated writes land
  EXPECT_TRUE(flushed.isOk()) << flushed.toString();
  landWritten(*mem.value(), ops);
  expectBytes(readBytes(device, mem.value()->data(), kRegion).data(),
              expectedImage(kRegion, source, ops), "writes to itself");
}

// A truncated descriptor is rejected; one region attached twice gives two working ids.
TEST_P(WriteTransportConformance, DescriptorsAreCheckedAndReattachable) {
  constexpr size_t kRegion = 8192;
  if (GetParam().backend.name == "ucx_cuda" && GetParam().kind == TargetKind::kAllocated) {
    // Seen on the H200 with the libucx-cu13 wheel (UCX 1.22): the flush after writing through a
    // second rkey of the same transport-allocated device region stalls until the timeout (the
    // user-memory variant passes). wsync attaches every slot once; kept visible as a skip.
    GTEST_SKIP() << "known UCX 1.22 cuda_ipc stall with two rkeys of one allocated region";
  }
  if (!open(kRegion)) return;
  const std::vector<uint8_t> source = pattern(kRegion, 10);
  std::vector<WriteOp> ops;
  if (rank() == kWriter) {
    WriteTransport& t = session_.transport();
    std::vector<uint8_t> truncated = session_.attachedDescriptor();
    truncated.pop_back();
    const Status s = t.attach(kTarget, truncated).status();
    EXPECT_TRUE(hasCode(s, WSYNC_ERR_PROTOCOL));
    EXPECT_TRUE(mentions(s, "peer 1"));
    auto second = t.attach(kTarget, session_.attachedDescriptor());
    EXPECT_TRUE(second.isOk()) << second.status().toString();
    if (second.isOk()) {
      EXPECT_NE(second.value(), session_.remote());
      EXPECT_TRUE(t.write(second.value(), 4096, source.data() + 4096, 4096).isOk());
    }
  }
  // Through the first id: [0, 4096); through the second (when it worked): [4096, 8192).
  writeAndCheck(source, {contiguous(0, 0, 4096), contiguous(4096, 4096, 4096)},
                "writes through two ids");
}

INSTANTIATE_TEST_SUITE_P(Backends, WriteTransportConformance,
                         ::testing::ValuesIn(conformanceParams()),
                         [](const ::testing::TestParamInfo<ConformanceParam>& info) {
                           return info.param.backend.name +
                                  (info.param.kind == TargetKind::kAllocated ? "_allocated"
                                                                             : "_user_memory");
                         });

// ---- the suite over backends only --------------------------------------------------------------

class WriteTransportBackend : public ::testing::TestWithParam<BackendFactory> {
 protected:
  void SetUp() override {
    std::string why;
    if (!backendAvailable(GetParam(), why)) GTEST_SKIP() << GetParam().name << ": " << why;
  }
  void TearDown() override { session_.close(); }
  Session session_;
};

// A target that does not progress may keep flush() from completing (UCX 1.13's emulated writes
// into caller memory); flush() must then return TIMEOUT on time, and once the target progresses a
// later flush() must complete the same writes. A backend whose writes are one-sided passes the
// first flush instead.
TEST_P(WriteTransportBackend, FlushTimesOutWhileTargetIdlesThenCompletes) {
  constexpr size_t kRegion = 1 << 20;
  if (!session_.open(GetParam(), TargetKind::kUserProvided, kRegion, /*target_progress=*/false)) {
    return;
  }
  const std::vector<uint8_t> source = pattern(kRegion, 7);
  const std::vector<WriteOp> ops = {contiguous(0, 0, kRegion / 2),
                                    {kRegion / 2, 1024, kRegion / 2, 2048, 1000, 256}};
  bool timed_out = false;
  Buffer staged;
  if (rank() == kWriter) {
    staged = Buffer(session_.device(), source);
    const Status posted = postAll(session_.transport(), session_.remote(), staged.data(), ops);
    EXPECT_TRUE(posted.isOk()) << posted.toString();
    const auto start = Clock::now();
    const Status s = session_.transport().flush(300ms);
    const auto elapsed = Clock::now() - start;
    EXPECT_TRUE(s.isOk() || s.code() == WSYNC_ERR_TIMEOUT) << s.toString();
    EXPECT_LT(elapsed, 5s) << "flush(300ms) took "
                           << std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count()
                           << " ms";
    timed_out = s.code() == WSYNC_ERR_TIMEOUT;
    if (timed_out) EXPECT_TRUE(mentions(s, "peer 1"));
    std::printf("[ info ] %s: flush with an idle target %s\n", GetParam().name.c_str(),
                timed_out ? "timed out as allowed" : "completed (one-sided)");
  }
  barrier();  // the target idles in MPI until here
  if (rank() == kTarget) session_.progressThread().start(&session_.transport());
  barrier();
  if (rank() == kWriter) {
    const Status s = session_.transport().flush(kFlushTimeout);
    EXPECT_TRUE(s.isOk()) << s.toString();
  }
  barrier();
  if (rank() == kTarget) {
    expectBytes(session_.targetBytes(ops).data(), expectedImage(kRegion, source, ops),
                "after the retry");
  }
}

// GB/s of a 256 MiB write into allocated target memory, next to a local copy of the same size
// (memcpy for host backends, a device-to-device cudaMemcpy for device backends, whose writes go
// from device memory). Informational: checks the bytes, never the speed.
TEST_P(WriteTransportBackend, Bandwidth256MiB) {
  constexpr size_t kBytes = 256 << 20;
  const bool progress = !GetParam().allocated_is_one_sided;
  if (!session_.open(GetParam(), TargetKind::kAllocated, kBytes, progress)) return;
  const std::vector<uint8_t> source = pattern(kBytes, 8);
  if (rank() == kWriter) {
    WriteTransport& t = session_.transport();
    const int device = session_.device();
    const Buffer staged(device, source);
    double best_put = 0;
    for (int run = 0; run < 3; ++run) {
      const auto start = Clock::now();
      const Status w = t.write(session_.remote(), 0, staged.data(), kBytes);
      const Status f = t.flush(kFlushTimeout);
      const double s = std::chrono::duration<double>(Clock::now() - start).count();
      EXPECT_TRUE(w.isOk()) << w.toString();
      EXPECT_TRUE(f.isOk()) << f.toString();
      best_put = std::max(best_put, kBytes / s / 1e9);
    }
    Buffer local(device, kBytes);
    double best_copy = 0;
    for (int run = 0; run < 3; ++run) {
      const auto start = Clock::now();
      if (device < 0) {
        std::memcpy(local.data(), staged.data(), kBytes);
      } else {
#ifdef WSYNC_HAVE_CUDA
        EXPECT_EQ(cudaMemcpy(local.data(), staged.data(), kBytes, cudaMemcpyDeviceToDevice),
                  cudaSuccess);
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
#endif
      }
      const double s = std::chrono::duration<double>(Clock::now() - start).count();
      best_copy = std::max(best_copy, kBytes / s / 1e9);
    }
    EXPECT_TRUE(readBytes(device, local.data(), kBytes) == source) << "local copy";
    std::printf(
        "[ info ] %s: 256 MiB write+flush into allocated target memory %.2f GB/s; "
        "local %s %.2f GB/s (best of 3)\n",
        GetParam().name.c_str(), best_put, device < 0 ? "memcpy" : "cudaMemcpy D2D", best_copy);
  }
  barrier();
  if (rank() == kTarget) {
    expectBytes(session_.targetBytes({contiguous(0, 0, kBytes)}).data(), source, "256 MiB write");
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, WriteTransportBackend, ::testing::ValuesIn(backends()),
                         [](const ::testing::TestParamInfo<BackendFactory>& info) {
                           return info.param.name;
                         });

// ---- UCX specifics -----------------------------------------------------------------------------

// write() waits at most post_timeout for room among max_in_flight requests; a write that times
// out was not posted, the ones before it land once the target progresses.
// A descriptor extension (what the staged backend appends for its writers) travels with a UCX
// descriptor: plain UCX attaches and writes the memory as if it were absent, descriptorExtension()
// returns it, and bytes after the blob that are no extension are refused. Each rank on its own.
TEST(UcxTransport, DescriptorExtensionsAreCarriedAndIgnored) {
  auto created = createUcxTransport();
  ASSERT_TRUE(created.isOk()) << created.status().toString();
  WriteTransport& t = *created.value();
  auto mem = t.allocateExposed(4096);
  ASSERT_TRUE(mem.isOk()) << mem.status().toString();
  const std::vector<uint8_t> extension = {1, 2, 3, 250};
  const std::vector<uint8_t> extended =
      withDescriptorExtension(mem.value()->descriptor(), extension);
  EXPECT_EQ(descriptorExtension(extended), extension);
  EXPECT_TRUE(descriptorExtension(mem.value()->descriptor()).empty());
  ASSERT_TRUE(t.connect(rank(), t.localAddress()).isOk());
  auto id = t.attach(rank(), extended);
  ASSERT_TRUE(id.isOk()) << id.status().toString();
  EXPECT_EQ(t.attachedSize(id.value()).value(), 4096u);
  const std::vector<uint8_t> bytes(100, 0x3C);
  ASSERT_TRUE(t.write(id.value(), 8, bytes.data(), bytes.size()).isOk());
  ASSERT_TRUE(t.flush(kFlushTimeout).isOk());
  EXPECT_EQ(std::memcmp(static_cast<uint8_t*>(mem.value()->data()) + 8, bytes.data(), 100), 0);
  std::vector<uint8_t> trailing = mem.value()->descriptor();
  trailing.push_back(7);
  const auto refused = t.attach(rank(), trailing);
  EXPECT_TRUE(hasCode(refused.status(), WSYNC_ERR_PROTOCOL));
  EXPECT_TRUE(mentions(refused.status(), "after the blob"));
  EXPECT_TRUE(descriptorExtension(trailing).empty());
}

TEST(UcxTransport, WriteWaitsBoundedForRoom) {
  constexpr size_t kChunk = 64 << 10;
  constexpr size_t kChunks = 256;
  constexpr size_t kRegion = kChunk * kChunks;
  UcxTransportOptions options;
  options.max_in_flight = 4;
  options.post_timeout = 300ms;
  const BackendFactory backend{"ucx_small_window",
                               [options] { return createUcxTransport(options); }, true};
  Session session;
  if (!session.open(backend, TargetKind::kUserProvided, kRegion, /*target_progress=*/false)) {
    session.close();
    return;
  }
  const std::vector<uint8_t> source = pattern(kRegion, 9);
  std::vector<WriteOp> posted_ops;
  if (rank() == kWriter) {
    for (size_t i = 0; i < kChunks; ++i) {
      const auto start = Clock::now();
      const Status s = session.transport().write(session.remote(), i * kChunk,
                                                 source.data() + i * kChunk, kChunk);
      const auto elapsed = Clock::now() - start;
      EXPECT_LT(elapsed, 5s) << "write " << i << " blocked too long";
      if (!s.isOk()) {
        EXPECT_TRUE(hasCode(s, WSYNC_ERR_TIMEOUT));
        EXPECT_TRUE(mentions(s, "peer 1"));
        std::printf("[ info ] write %zu of %zu timed out waiting for room, as allowed: %s\n", i,
                    kChunks, s.message().c_str());
        break;
      }
      posted_ops.push_back(contiguous(i * kChunk, i * kChunk, kChunk));
    }
  }
  barrier();
  if (rank() == kTarget) session.progressThread().start(&session.transport());
  barrier();
  if (rank() == kWriter) {
    const Status s = session.transport().flush(kFlushTimeout);
    EXPECT_TRUE(s.isOk()) << s.toString();
  }
  // The target learns which writes were posted.
  std::vector<uint8_t> count_bytes(8, 0);
  uint64_t count = posted_ops.size();
  std::memcpy(count_bytes.data(), &count, 8);
  std::memcpy(&count, allGather(count_bytes)[kWriter].data(), 8);
  barrier();
  if (rank() == kTarget) {
    for (size_t i = 0; i < count; ++i)
      posted_ops.push_back(contiguous(i * kChunk, i * kChunk, kChunk));
    expectBytes(session.targetBytes(posted_ops).data(), expectedImage(kRegion, source, posted_ops),
                "writes posted before the timeout");
  }
  session.close();
}

#ifdef WSYNC_HAVE_CUDA
// ---- CUDA IPC specifics ------------------------------------------------------------------------

// Skips on both ranks unless both have CUDA device 0.
#define SKIP_WITHOUT_CUDA_DEVICE()                                                           \
  if (!bothOk(cudaDeviceAvailable(0))) {                                                     \
    GTEST_SKIP() << "no usable CUDA device on some rank (CUDA IPC runs on the GPU machine)"; \
  }

// connect() refuses a peer on another node; attach() refuses a descriptor that is not the peer's;
// expose() refuses memory that is not device memory of its device; addresses are checked.
TEST(CudaIpcTransport, RefusesWhatItCannotReach) {
  SKIP_WITHOUT_CUDA_DEVICE();
  auto created = CudaIpcTransport::create({});
  EXPECT_TRUE(created.isOk()) << created.status().toString();
  if (!bothOk(created.isOk())) return;
  CudaIpcTransport& t = *created.value();
  auto mine = t.allocateExposed(4096);
  EXPECT_TRUE(mine.isOk()) << mine.status().toString();
  if (!bothOk(mine.isOk())) return;
  const auto addresses = allGather(t.localAddress());
  const auto descriptors = allGather(mine.value()->descriptor());
  if (rank() == kWriter) {
    auto info = decodeCudaIpcAddress(t.localAddress());
    EXPECT_TRUE(info.isOk()) << info.status().toString();
    CudaIpcProcessInfo elsewhere;
    if (info.isOk()) elsewhere = info.value();
    EXPECT_EQ(elsewhere.host, cudaIpcHostIdentity());
    elsewhere.host = "another-node/00000000-0000-0000-0000-000000000000";
    Status s = t.connect(4, encodeCudaIpcAddress(elsewhere));
    EXPECT_TRUE(hasCode(s, WSYNC_ERR_UNSUPPORTED));
    EXPECT_TRUE(mentions(s, "peer 4"));
    EXPECT_TRUE(mentions(s, elsewhere.host));
    EXPECT_TRUE(mentions(s, cudaIpcHostIdentity()));
    EXPECT_TRUE(hasCode(decodeCudaIpcAddress(pattern(40, 1)).status(), WSYNC_ERR_PROTOCOL));
    std::vector<uint8_t> truncated = t.localAddress();
    truncated.pop_back();
    EXPECT_TRUE(hasCode(decodeCudaIpcAddress(truncated).status(), WSYNC_ERR_PROTOCOL));

    EXPECT_TRUE(t.connect(kTarget, addresses[kTarget]).isOk());
    // This process's own descriptor presented as peer 1's.
    s = t.attach(kTarget, descriptors[kWriter]).status();
    EXPECT_TRUE(hasCode(s, WSYNC_ERR_INVALID_ARGUMENT));
    EXPECT_TRUE(mentions(s, "peer 1"));
    auto id = t.attach(kTarget, descriptors[kTarget]);
    EXPECT_TRUE(id.isOk()) << id.status().toString();
    if (id.isOk()) {
      s = t.remoteAddress(id.value(), 4000, 97).status();
      EXPECT_TRUE(hasCode(s, WSYNC_ERR_INVALID_ARGUMENT));
      EXPECT_TRUE(mentions(s, "peer 1"));
      auto inside = t.remoteAddress(id.value(), 4000, 96);
      EXPECT_TRUE(inside.isOk()) << inside.status().toString();
    }
  }
  std::vector<uint8_t> host(4096);
  Status s = t.expose(host.data(), host.size()).status();
  EXPECT_TRUE(hasCode(s, WSYNC_ERR_INVALID_ARGUMENT));
  EXPECT_TRUE(mentions(s, "host"));
  EXPECT_TRUE(hasCode(t.allocateExposed(0).status(), WSYNC_ERR_INVALID_ARGUMENT));
  EXPECT_TRUE(hasCode(t.expose(nullptr, 16).status(), WSYNC_ERR_INVALID_ARGUMENT));
  barrier();  // rank 1's memory stays until rank 0 is done with it
  if (rank() == kWriter) created = Status(WSYNC_ERR_INTERNAL, "closed");
  barrier();
}

// Writes from pageable host memory, pinned (registerSource) host memory, cudaMallocHost memory and
// device memory, plus a conversion kernel enqueued on the transport's stream that writes
// float32 -> bfloat16 straight into the peer's memory (remoteAddress): one flush completes all.
TEST(CudaIpcTransport, WritesFromEverySourceAndKernelsIntoPeerMemory) {
  SKIP_WITHOUT_CUDA_DEVICE();
  constexpr size_t kPart = 64 << 10;
  constexpr size_t kRegion = 6 * kPart;
  constexpr int64_t kFloats = kPart / 2;  // bfloat16 results filling one part
  auto created = CudaIpcTransport::create({});
  EXPECT_TRUE(created.isOk()) << created.status().toString();
  if (!bothOk(created.isOk())) return;
  CudaIpcTransport& t = *created.value();
  std::unique_ptr<ExposedMemory> target;
  if (rank() == kTarget) {
    auto mem = t.allocateExposed(kRegion);
    EXPECT_TRUE(mem.isOk()) << mem.status().toString();
    if (mem.isOk()) {
      target = std::move(mem).value();
      fillBytes(0, target->data(), kSentinel, kRegion);
    }
  }
  const auto addresses = allGather(t.localAddress());
  const auto descriptors = allGather(target ? target->descriptor() : std::vector<uint8_t>{});
  if (!bothOk(rank() == kWriter || target != nullptr)) return;

  const std::vector<uint8_t> pageable = pattern(kPart, 21);
  const std::vector<uint8_t> to_pin = pattern(kPart, 22);
  const std::vector<uint8_t> pinned_pattern = pattern(2 * kPart, 23);
  const std::vector<uint8_t> device_pattern = pattern(kPart, 24);
  std::vector<float> floats(kFloats);
  for (int64_t i = 0; i < kFloats; ++i)
    floats[i] = static_cast<float>(i % 977) * 0.37f - 150.0f;
  // The image: part 0 pageable, 1 registered, 2 a 2-D write of 256 rows of 200 bytes from
  // cudaMallocHost memory (source pitch 500, target pitch 256), 3 device memory, 4 the kernel's
  // bfloat16 output, 5 untouched.
  std::vector<uint8_t> want(kRegion, kSentinel);
  std::memcpy(want.data(), pageable.data(), kPart);
  std::memcpy(want.data() + kPart, to_pin.data(), kPart);
  for (size_t row = 0; row < 256; ++row)
    std::memcpy(want.data() + 2 * kPart + row * 256, pinned_pattern.data() + row * 500, 200);
  std::memcpy(want.data() + 3 * kPart, device_pattern.data(), kPart);
  for (int64_t i = 0; i < kFloats; ++i) {
    const Eigen::bfloat16 b(floats[i]);
    std::memcpy(want.data() + 4 * kPart + 2 * i, &b, 2);
  }

  if (rank() == kWriter) {
    bool ok = t.connect(kTarget, addresses[kTarget]).isOk();
    auto id = t.attach(kTarget, descriptors[kTarget]);
    EXPECT_TRUE(ok && id.isOk()) << id.status().toString();
    if (id.isOk()) {
      const RemoteMemoryId remote = id.value();
      auto registration = t.registerSource(to_pin.data(), to_pin.size());
      EXPECT_TRUE(registration.isOk()) << registration.status().toString();
      void* pinned = nullptr;
      EXPECT_EQ(cudaMallocHost(&pinned, pinned_pattern.size()), cudaSuccess);
      if (pinned != nullptr) std::memcpy(pinned, pinned_pattern.data(), pinned_pattern.size());
      const Buffer device_source(0, device_pattern);
      const Buffer float_source(
          0, std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(floats.data()),
                                  reinterpret_cast<const uint8_t*>(floats.data() + kFloats)));

      EXPECT_TRUE(t.write(remote, 0, pageable.data(), kPart).isOk());
      EXPECT_TRUE(t.write(remote, kPart, to_pin.data(), kPart).isOk());
      Status s = pinned == nullptr ? Status(WSYNC_ERR_SYSTEM, "no pinned memory")
                                   : t.write2d(remote, 2 * kPart, 256, pinned, 500, 200, 256);
      EXPECT_TRUE(s.isOk()) << s.toString();
      EXPECT_TRUE(t.write(remote, 3 * kPart, device_source.data(), kPart).isOk());
      auto peer_bytes = t.remoteAddress(remote, 4 * kPart, kPart);
      EXPECT_TRUE(peer_bytes.isOk()) << peer_bytes.status().toString();
      if (peer_bytes.isOk()) {
        s = launchConvert(float_source.data(), DType::kFloat32, peer_bytes.value(),
                          DType::kBFloat16, kFloats, 1.0f, t.stream());
        EXPECT_TRUE(s.isOk()) << s.toString();
      }
      s = t.flush(kFlushTimeout);
      EXPECT_TRUE(s.isOk()) << s.toString();
      if (pinned != nullptr) cudaFreeHost(pinned);
    }
  }
  barrier();
  if (rank() == kTarget) {
    expectBytes(readBytes(0, target->data(), kRegion).data(), want, "writes from every source");
  }
  barrier();
  if (rank() == kWriter) created = Status(WSYNC_ERR_INTERNAL, "closed");  // unmaps first
  barrier();
}

// Early landing: writes a staged writer reported reach the target's device memory through
// landArrived() alone, before land() (which then has nothing left to move), over several rounds;
// without reports (writer_rank -1) landArrived() moves nothing and land() moves everything.
TEST(StagedUcxTransport, ReportedWritesLandBeforeLand) {
  SKIP_WITHOUT_CUDA_DEVICE();
  constexpr size_t kRegion = 6 << 20;
  for (const bool reporting : {true, false}) {
    SCOPED_TRACE(reporting ? "writer reports" : "writer does not report");
    BackendFactory backend{"ucx_staged",
                           [reporting] {
                             StagedUcxTransportOptions options;
                             options.chunk_bytes = 1 << 20;  // writes span chunks; the ring wraps
                             options.num_chunks = 2;
                             options.writer_rank = reporting ? rank() : -1;
                             return createStagedUcxTransport(options);
                           },
                           /*allocated_is_one_sided=*/true, MemorySide::kDevice0};
    Session session;
    if (!session.open(backend, TargetKind::kAllocated, kRegion, /*target_progress=*/false)) {
      session.close();
      return;
    }
    for (int round = 0; round < 3; ++round) {
      SCOPED_TRACE("round " + std::to_string(round));
      // A contiguous 2.5 MiB write, 300 rows of 4 KiB at a 8 KiB pitch, and a short one.
      const std::vector<WriteOp> ops = {contiguous(0, 0, (5 << 20) / 2),
                                        {3 << 20, 8 << 10, 3 << 20, 4 << 10, 4 << 10, 300},
                                        contiguous(kRegion - 100, 100, 100)};
      std::vector<uint8_t> source(kRegion);
      for (size_t i = 0; i < source.size(); ++i)
        source[i] = static_cast<uint8_t>((i * 131 + round * 7) % 251);
      if (rank() == kWriter) {
        const Buffer device_source(session.device(), source);
        const Status posted =
            postAll(session.transport(), session.remote(), device_source.data(), ops);
        EXPECT_TRUE(posted.isOk()) << posted.toString();
        const Status flushed = session.transport().flush(kFlushTimeout);
        EXPECT_TRUE(flushed.isOk()) << flushed.toString();
      }
      barrier();
      if (rank() == kTarget) {
        ExposedMemory& target = session.target();
        fillBytes(session.device(), target.data(), kSentinel, kRegion);  // older rounds' bytes
        const Status arrived = target.landArrived();
        EXPECT_TRUE(arrived.isOk()) << arrived.toString();
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const std::vector<uint8_t> want = expectedImage(kRegion, source, ops);
        const std::vector<uint8_t> early = readBytes(session.device(), target.data(), kRegion);
        if (reporting) {
          expectBytes(early.data(), want, "after landArrived()");
        } else {
          EXPECT_EQ(early, std::vector<uint8_t>(kRegion, kSentinel))
              << "landArrived() moved bytes nobody reported";
        }
        expectBytes(session.targetBytes(ops).data(), want, "after land()");
      }
      barrier();
    }
    session.close();
  }
}

#endif  // WSYNC_HAVE_CUDA

// On every rank but 0: print only failures, tagged with the rank, instead of gtest's full output.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::printf("[rank %d] %s:%d: Failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                r.line_number(), r.summary());
    std::fflush(stdout);
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed()) {
      std::printf("[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
      std::fflush(stdout);
    }
  }

 private:
  int rank_;
};

}  // namespace
}  // namespace wsync

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) {
    if (rank == 0) std::fprintf(stderr, "this suite runs with exactly 2 ranks, not %d\n", size);
    MPI_Finalize();
    return 1;
  }
  ::testing::InitGoogleTest(&argc, argv);
  GTEST_FLAG_SET(shuffle, false);  // both ranks must run the tests in the same order
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new wsync::RankFailurePrinter(rank));
  }
  const int result = RUN_ALL_TESTS();
  int worst = 0;
  MPI_Allreduce(&result, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && worst != result) {
    std::printf("[  FAILED  ] on another rank (see its [rank N] lines); exiting with %d\n", worst);
  }
  MPI_Finalize();
  return worst;
}
