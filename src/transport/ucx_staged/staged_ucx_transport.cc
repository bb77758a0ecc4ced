#include "transport/ucx_staged/staged_ucx_transport.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/cuda_check.h"
#include "common/wire.h"
#include "transport/ucx/ucx_handles.h"
#include "transport/ucx/ucx_transport.h"
#include "transport/write_checks.h"

namespace wsync {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kChunkAlign = 256;  // bytes; every staged piece starts aligned in its chunk

// Progress logs (early landing). A staged target exposes, next to each landing area, one log per
// writer rank below the log count: a header whose first word is the writer's sealed record count,
// then records of the writes it delivered since the round began. A writer appends the records of
// its completed writes after a fence that orders them behind those writes' bytes, then (after a
// second fence) the new count; the target moves each reported write to the device as soon as it
// reads the count. Writers that cannot log (rank beyond the log count, a full log) are landed by
// land() as before.
constexpr uint64_t kLogHeaderBytes = 64;
constexpr uint64_t kRecordWords = 4;  // remote offset, remote pitch, row bytes, rows
constexpr uint64_t kRecordBytes = kRecordWords * sizeof(uint64_t);
constexpr uint8_t kProgressVersion = 1;

uint64_t logBytes(uint32_t records) {
  return kLogHeaderBytes + records * kRecordBytes;
}

// A record count as written into a log header: the count in the low word, its complement in the
// high word, so that a header read while it changes (or zeroed) never passes as a count.
uint64_t sealCount(uint32_t count) {
  return (static_cast<uint64_t>(~count) << 32) | count;
}
bool unsealCount(uint64_t word, uint32_t& count) {
  count = static_cast<uint32_t>(word);
  return static_cast<uint32_t>(word >> 32) == ~count;
}

// The descriptor extension of a staged target with progress logs: layout and the logs' UCX
// descriptor.
struct ProgressLayout {
  uint32_t writers = 0;
  uint32_t records = 0;
  std::vector<uint8_t> log_descriptor;
};

std::vector<uint8_t> encodeProgressLayout(const ProgressLayout& p) {
  ByteWriter w;
  w.u8(kProgressVersion);
  w.varu(p.writers);
  w.varu(p.records);
  w.varu(p.log_descriptor.size());
  w.bytes(p.log_descriptor.data(), p.log_descriptor.size());
  return w.take();
}

// False for an absent or malformed extension (the target is then landed by land() only).
bool decodeProgressLayout(const std::vector<uint8_t>& bytes, ProgressLayout& p) {
  if (bytes.empty()) return false;
  ByteReader r(bytes.data(), bytes.size());
  uint8_t version = 0;
  uint64_t writers = 0;
  uint64_t records = 0;
  uint64_t descriptor_bytes = 0;
  if (!r.u8(version) || version != kProgressVersion || !r.varuMax(writers, 1u << 16) ||
      !r.varuMax(records, 1u << 24) || !r.varuMax(descriptor_bytes, 1u << 20) ||
      r.remaining() != descriptor_bytes || writers == 0 || records == 0) {
    return false;
  }
  p.writers = static_cast<uint32_t>(writers);
  p.records = static_cast<uint32_t>(records);
  p.log_descriptor.resize(descriptor_bytes);
  return r.bytes(p.log_descriptor.data(), descriptor_bytes);
}

size_t alignUp(size_t n) {
  return (n + kChunkAlign - 1) / kChunkAlign * kChunkAlign;
}

struct StreamDeleter {
  void operator()(cudaStream_t s) const { (void)cudaStreamDestroy(s); }
};
using StreamPtr = std::unique_ptr<CUstream_st, StreamDeleter>;
struct EventDeleter {
  void operator()(cudaEvent_t e) const { (void)cudaEventDestroy(e); }
};
using EventPtr = std::unique_ptr<CUevent_st, EventDeleter>;

Result<StreamPtr> makeStream(const std::string& what) {
  cudaStream_t s = nullptr;
  WSYNC_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                             what + ": cudaStreamCreateWithFlags");
  return StreamPtr(s);
}

Result<EventPtr> makeEvent(const std::string& what) {
  cudaEvent_t e = nullptr;
  WSYNC_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
                             what + ": cudaEventCreateWithFlags");
  return EventPtr(e);
}

// Polls `event` until it completed or `timeout` passed (the host thread yields in between).
Status waitEvent(cudaEvent_t event, std::chrono::milliseconds timeout, const std::string& what) {
  const Clock::time_point deadline = Clock::now() + timeout;
  while (true) {
    const cudaError_t error = cudaEventQuery(event);
    if (error == cudaSuccess) return Status::ok();
    if (error != cudaErrorNotReady) return cudaCheck(error, what + ": cudaEventQuery");
    if (Clock::now() >= deadline) {
      return timeoutError(what + ": device copies not complete after " +
                          std::to_string(timeout.count()) + " ms");
    }
    std::this_thread::yield();
  }
}

// Whether `p` is memory the device copies must read (device or managed memory).
bool isDeviceMemory(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

// Device memory (owned, or the caller's) behind a UCX landing area of the same size, with the
// writers' progress logs when `logs` is set (`writers` logs of `records` records).
class StagedExposedMemory final : public ExposedMemory {
 public:
  StagedExposedMemory(int device, std::unique_ptr<ExposedMemory> landing, uint8_t* device_data,
                      bool owns_device_data, bool pinned, StreamPtr stream, EventPtr event,
                      std::unique_ptr<ExposedMemory> logs, uint32_t writers, uint32_t records)
      : device_(device),
        landing_(std::move(landing)),
        device_data_(device_data),
        owns_device_data_(owns_device_data),
        pinned_(pinned),
        stream_(std::move(stream)),
        event_(std::move(event)),
        logs_(std::move(logs)),
        writers_(logs_ ? writers : 0),
        records_(records),
        consumed_(writers_, 0) {
    descriptor_ = landing_->descriptor();
    if (logs_) {
      std::memset(logs_->data(), 0, logs_->size());
      descriptor_ = withDescriptorExtension(
          descriptor_, encodeProgressLayout({writers_, records_, logs_->descriptor()}));
    }
  }

  ~StagedExposedMemory() override {
    (void)cudaUseDevice(device_);
    (void)cudaStreamSynchronize(stream_.get());
    if (pinned_) (void)cudaHostUnregister(landing_->data());
    if (owns_device_data_) (void)cudaFree(device_data_);
    (void)cudaGetLastError();
  }
  StagedExposedMemory(const StagedExposedMemory&) = delete;
  StagedExposedMemory& operator=(const StagedExposedMemory&) = delete;

  void* data() const override { return device_data_; }
  size_t size() const override { return landing_->size(); }
  const std::vector<uint8_t>& descriptor() const override { return descriptor_; }
  bool needsLanding() const override { return true; }

  Status beginLanding() override {
    resetLogs();
    return Status::ok();
  }

  Status landArrived() override {
    if (writers_ == 0) return Status::ok();
    WSYNC_RETURN_IF_ERROR(cudaUseDevice(device_));
    auto* logs = static_cast<uint8_t*>(logs_->data());
    for (uint32_t w = 0; w < writers_; ++w) {
      uint8_t* log = logs + w * logBytes(records_);
      uint32_t count = 0;
      const uint64_t header = std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(log))
                                  .load(std::memory_order_acquire);
      if (!unsealCount(header, count) || count <= consumed_[w]) continue;
      if (count > records_) {  // not a count this log can hold: land() moves everything
        complete_ = false;
        consumed_[w] = count;
        continue;
      }
      for (uint32_t i = consumed_[w]; i < count; ++i) {
        uint64_t rec[kRecordWords];
        std::memcpy(rec, log + kLogHeaderBytes + i * kRecordBytes, kRecordBytes);
        WSYNC_RETURN_IF_ERROR(landRecord(rec[0], rec[1], rec[2], rec[3]));
      }
      consumed_[w] = count;
    }
    return Status::ok();
  }

  Status land(const std::vector<ByteRange>& ranges, std::chrono::milliseconds timeout) override {
    const std::string what = "staged UCX landing";
    WSYNC_RETURN_IF_ERROR(cudaUseDevice(device_));
    // What the writers reported is (being) moved already; when it is all of `ranges`, only the
    // wait is left. Otherwise every range is moved (again): correct whatever was reported.
    WSYNC_RETURN_IF_ERROR(landArrived());
    uint64_t expected = 0;
    for (const ByteRange& r : ranges)
      expected += r.bytes;
    const bool all_reported = complete_ && writers_ > 0 && early_bytes_ == expected;
    resetLogs();
    const auto* from = static_cast<const uint8_t*>(landing_->data());
    for (const ByteRange& r : all_reported ? std::vector<ByteRange>{} : ranges) {
      if (r.bytes == 0) continue;
      if (r.offset > size() || r.bytes > size() - r.offset) {
        return invalidArgument(what + ": range [" + std::to_string(r.offset) + ", +" +
                               std::to_string(r.bytes) + ") outside the " + std::to_string(size()) +
                               " bytes exposed");
      }
      WSYNC_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(device_data_ + r.offset, from + r.offset, r.bytes, cudaMemcpyHostToDevice,
                          stream_.get()),
          what + ": cudaMemcpyAsync of " + std::to_string(r.bytes) + " bytes");
    }
    WSYNC_CUDA_RETURN_IF_ERROR(cudaEventRecord(event_.get(), stream_.get()),
                               what + ": cudaEventRecord");
    return waitEvent(event_.get(), timeout, what);
  }

 private:
  // Starts moving one reported write (rows of the landing area to the same place in data()). A
  // record outside the memory (a writer bug) is not moved and makes land() move everything.
  Status landRecord(uint64_t offset, uint64_t pitch, uint64_t row_bytes, uint64_t rows) {
    uint64_t extent = 0;
    uint64_t end = 0;
    if (row_bytes == 0 || rows == 0 || (rows > 1 && pitch < row_bytes) ||
        __builtin_mul_overflow(rows - 1, pitch, &extent) ||
        __builtin_add_overflow(extent, row_bytes, &extent) ||
        __builtin_add_overflow(offset, extent, &end) || end > size()) {
      complete_ = false;
      return Status::ok();
    }
    const auto* from = static_cast<const uint8_t*>(landing_->data());
    const size_t p = rows > 1 ? pitch : row_bytes;
    WSYNC_CUDA_RETURN_IF_ERROR(
        cudaMemcpy2DAsync(device_data_ + offset, p, from + offset, p, row_bytes, rows,
                          cudaMemcpyHostToDevice, stream_.get()),
        "staged UCX early landing: cudaMemcpy2DAsync of " + std::to_string(rows) + " rows of " +
            std::to_string(row_bytes) + " bytes");
    early_bytes_ += row_bytes * rows;
    return Status::ok();
  }

  // A new round: empty logs (their headers zeroed), nothing reported.
  void resetLogs() {
    auto* logs = static_cast<uint8_t*>(writers_ > 0 ? logs_->data() : nullptr);
    for (uint32_t w = 0; w < writers_; ++w) {
      std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(logs + w * logBytes(records_)))
          .store(0, std::memory_order_release);
      consumed_[w] = 0;
    }
    early_bytes_ = 0;
    complete_ = true;
  }

  int device_;
  std::unique_ptr<ExposedMemory> landing_;
  uint8_t* device_data_;
  bool owns_device_data_;
  bool pinned_;  // the landing area is page-locked for CUDA (cudaHostRegister)
  StreamPtr stream_;
  EventPtr event_;
  std::unique_ptr<ExposedMemory> logs_;  // UCX memory of the progress logs, or null
  uint32_t writers_;                     // logs (0 without logs)
  uint32_t records_;                     // records per log
  std::vector<uint32_t> consumed_;       // records of each log already moved this round
  uint64_t early_bytes_ = 0;             // bytes moved from reports this round
  bool complete_ = true;                 // no report this round was unusable
  std::vector<uint8_t> descriptor_;
};

// Device memory that a CUDA-capable UCX registered itself (writes land in data() directly); owns
// the cudaMalloc allocation when `owns`.
class DirectExposedMemory final : public ExposedMemory {
 public:
  DirectExposedMemory(int device, std::unique_ptr<ExposedMemory> registered, bool owns)
      : device_(device), registered_(std::move(registered)), owns_(owns) {}
  ~DirectExposedMemory() override {
    void* data = registered_->data();
    registered_.reset();  // the UCX registration goes before the memory it covers
    if (owns_) {
      (void)cudaUseDevice(device_);
      (void)cudaFree(data);
      (void)cudaGetLastError();
    }
  }
  DirectExposedMemory(const DirectExposedMemory&) = delete;
  DirectExposedMemory& operator=(const DirectExposedMemory&) = delete;
  void* data() const override { return registered_->data(); }
  size_t size() const override { return registered_->size(); }
  const std::vector<uint8_t>& descriptor() const override { return registered_->descriptor(); }

 private:
  int device_;
  std::unique_ptr<ExposedMemory> registered_;
  bool owns_;
};

// Device memory is copied by cudaMemcpy, never registered with UCX: nothing to hold.
class NoSourceRegistration final : public SourceRegistration {};

class StagedUcxTransport final : public WriteTransport {
 public:
  StagedUcxTransport(const StagedUcxTransportOptions& options, std::unique_ptr<WriteTransport> ucx,
                     StreamPtr stream, bool direct)
      : options_(options), ucx_(std::move(ucx)), stream_(std::move(stream)), direct_(direct) {}

  // Pinned chunks: page-locked memory for the device copies, registered with UCX as put sources.
  Status allocateChunks() {
    for (int i = 0; i < options_.num_chunks; ++i) {
      Chunk c;
      void* host = nullptr;
      WSYNC_CUDA_RETURN_IF_ERROR(
          cudaHostAlloc(&host, options_.chunk_bytes, cudaHostAllocDefault),
          "staged UCX: cudaHostAlloc of a " + std::to_string(options_.chunk_bytes) + "-byte chunk");
      c.host = static_cast<uint8_t*>(host);
      chunks_.push_back(std::move(c));
      WSYNC_ASSIGN_OR_RETURN(chunks_.back().registration,
                             ucx_->registerSource(host, options_.chunk_bytes));
      WSYNC_ASSIGN_OR_RETURN(chunks_.back().copied, makeEvent("staged UCX chunk"));
    }
    return Status::ok();
  }

  ~StagedUcxTransport() override {
    (void)cudaUseDevice(options_.device);
    (void)cudaStreamSynchronize(stream_.get());
    (void)ucx_->flush(std::chrono::milliseconds(5000));
    for (Chunk& c : chunks_) {
      c.registration.reset();  // the UCX registration goes before the memory it covers
      if (c.host != nullptr) (void)cudaFreeHost(c.host);
    }
    (void)cudaGetLastError();
  }
  StagedUcxTransport(const StagedUcxTransport&) = delete;
  StagedUcxTransport& operator=(const StagedUcxTransport&) = delete;

  const char* name() const override { return direct_ ? "ucx_cuda" : "ucx_staged"; }
  const std::vector<uint8_t>& localAddress() const override { return ucx_->localAddress(); }

  Result<std::unique_ptr<ExposedMemory>> allocateExposed(size_t bytes) override {
    const std::string what = "staged UCX allocateExposed(" + std::to_string(bytes) + " bytes)";
    if (bytes == 0) return invalidArgument(what + ": 0 bytes asked for");
    WSYNC_RETURN_IF_ERROR(cudaUseDevice(options_.device));
    void* device_data = nullptr;
    WSYNC_CUDA_RETURN_IF_ERROR(cudaMalloc(&device_data, bytes), what + ": cudaMalloc");
    auto memory = direct_ ? exposeDirect(static_cast<uint8_t*>(device_data), bytes, true)
                          : pairWithLanding(static_cast<uint8_t*>(device_data), bytes, true, what);
    if (!memory.isOk()) (void)cudaFree(device_data);
    return memory;
  }

  Result<std::unique_ptr<ExposedMemory>> expose(void* base, size_t bytes) override {
    const std::string what = "staged UCX expose(" + std::to_string(bytes) + " bytes)";
    if (base == nullptr || bytes == 0) return invalidArgument(what + ": null base or 0 bytes");
    WSYNC_RETURN_IF_ERROR(cudaUseDevice(options_.device));
    if (!isDeviceMemory(base)) return invalidArgument(what + ": the memory is not device memory");
    if (direct_) return exposeDirect(static_cast<uint8_t*>(base), bytes, false);
    return pairWithLanding(static_cast<uint8_t*>(base), bytes, false, what);
  }

  Result<std::unique_ptr<SourceRegistration>> registerSource(const void* base,
                                                             size_t bytes) override {
    if (base == nullptr || bytes == 0) {
      return invalidArgument("staged UCX registerSource: null base or 0 bytes");
    }
    WSYNC_RETURN_IF_ERROR(cudaUseDevice(options_.device));
    if (isDeviceMemory(base) && !direct_) {
      return std::unique_ptr<SourceRegistration>(new NoSourceRegistration);
    }
    return ucx_->registerSource(base, bytes);
  }

  Status connect(int32_t peer, const std::vector<uint8_t>& peer_address) override {
    return ucx_->connect(peer, peer_address);
  }

  // This transport's ids index attached_; each names the inner UCX transport's id, so that the
  // progress logs it attaches as well stay out of the caller's id space.
  Result<RemoteMemoryId> attach(int32_t peer, const std::vector<uint8_t>& descriptor) override {
    WSYNC_ASSIGN_OR_RETURN(const RemoteMemoryId inner, ucx_->attach(peer, descriptor));
    Attached a;
    a.peer = peer;
    a.inner = inner;
    // This writer reports into the target's progress log of its rank, when the target has one.
    ProgressLayout layout;
    if (!direct_ && options_.writer_rank >= 0 &&
        decodeProgressLayout(descriptorExtension(descriptor), layout) &&
        static_cast<uint32_t>(options_.writer_rank) < layout.writers) {
      WSYNC_ASSIGN_OR_RETURN(const RemoteMemoryId log_remote,
                             ucx_->attach(peer, layout.log_descriptor));
      auto log = std::make_unique<ProgressLog>();
      log->remote = log_remote;
      log->offset = static_cast<uint64_t>(options_.writer_rank) * logBytes(layout.records);
      log->capacity = layout.records;
      // Sources of the log writes: each record and each count has its own words, unchanged
      // until the flush that ends the round.
      log->records.assign(static_cast<size_t>(layout.records) * kRecordWords, 0);
      log->counts.assign(layout.records, 0);
      WSYNC_ASSIGN_OR_RETURN(
          log->records_registration,
          ucx_->registerSource(log->records.data(), log->records.size() * sizeof(uint64_t)));
      WSYNC_ASSIGN_OR_RETURN(
          log->counts_registration,
          ucx_->registerSource(log->counts.data(), log->counts.size() * sizeof(uint64_t)));
      a.log = std::move(log);
    }
    attached_.push_back(std::move(a));
    return static_cast<RemoteMemoryId>(attached_.size() - 1);
  }

  Result<uint64_t> attachedSize(RemoteMemoryId remote) const override {
    WSYNC_ASSIGN_OR_RETURN(const Attached* a, attachedAt(remote, "staged UCX"));
    return ucx_->attachedSize(a->inner);
  }

  Status write(RemoteMemoryId remote, uint64_t remote_offset, const void* src,
               size_t bytes) override {
    return write2d(remote, remote_offset, bytes, src, bytes, bytes, 1);
  }

  Status write2d(RemoteMemoryId remote, uint64_t remote_offset, uint64_t remote_pitch,
                 const void* src, size_t src_pitch, size_t row_bytes, size_t rows) override {
    if (rows == 0 || row_bytes == 0) return Status::ok();
    WSYNC_RETURN_IF_ERROR(cudaUseDevice(options_.device));
    // Host sources (and bad input) go to UCX as is; so do device sources when UCX handles CUDA.
    WSYNC_ASSIGN_OR_RETURN(const Attached* target, attachedAt(remote, "staged UCX write"));
    if (direct_ || src == nullptr || !isDeviceMemory(src)) {
      return ucx_->write2d(target->inner, remote_offset, remote_pitch, src, src_pitch, row_bytes,
                           rows);
    }
    // Checks the write the way UCX would, before any piece is staged, so a bad write posts
    // nothing; messages name the peer and this transport's remote id.
    WSYNC_ASSIGN_OR_RETURN(const uint64_t size, ucx_->attachedSize(target->inner));
    const WriteShape shape{remote_offset, remote_pitch, 0, src_pitch, 0, row_bytes, rows, 1};
    WSYNC_RETURN_IF_ERROR(checkWrite({"staged UCX", target->peer, remote, size}, shape, src));
    const RemoteMemoryId inner = target->inner;
    const auto* s = static_cast<const uint8_t*>(src);
    Chunk* last = nullptr;  // holds the write's last piece
    for (size_t row = 0; row < rows;) {
      if (row_bytes <= options_.chunk_bytes) {  // whole rows, as many as the chunk holds
        WSYNC_ASSIGN_OR_RETURN(last, chunkWithRoom(row_bytes));
        const size_t n = std::min(rows - row, (options_.chunk_bytes - last->used) / row_bytes);
        WSYNC_RETURN_IF_ERROR(stage(
            *last,
            {inner, remote_offset + row * remote_pitch, remote_pitch, last->used, row_bytes, n},
            s + row * src_pitch, src_pitch));
        row += n;
        continue;
      }
      for (size_t col = 0; col < row_bytes;) {  // a row larger than a chunk goes in pieces
        WSYNC_ASSIGN_OR_RETURN(last, chunkWithRoom(1));
        const size_t n = std::min(row_bytes - col, options_.chunk_bytes - last->used);
        WSYNC_RETURN_IF_ERROR(
            stage(*last, {inner, remote_offset + row * remote_pitch + col, n, last->used, n, 1},
                  s + row * src_pitch + col, n));
        col += n;
      }
      ++row;
    }
    // Reported once the chunk with its last piece is posted (the earlier pieces went before).
    if (target->log) {
      last->reports.push_back({remote, {remote_offset, remote_pitch, row_bytes, rows}});
    }
    return postCopied();
  }

  Status flush(std::chrono::milliseconds timeout) override {
    WSYNC_RETURN_IF_ERROR(cudaUseDevice(options_.device));
    seal();
    const Clock::time_point deadline = Clock::now() + timeout;
    while (!copying_.empty()) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      WSYNC_RETURN_IF_ERROR(postOldest(std::max(left, std::chrono::milliseconds(0))));
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    WSYNC_RETURN_IF_ERROR(ucx_->flush(std::max(left, std::chrono::milliseconds(1))));
    releasePosted();
    // A round ends: every log write completed, the next round starts its logs afresh.
    for (Attached& a : attached_) {
      if (a.log) a.log->count = 0;
    }
    return Status::ok();
  }

  void progress() override { ucx_->progress(); }

 private:
  // Device memory registered with a UCX that handles CUDA: writes land in it directly.
  Result<std::unique_ptr<ExposedMemory>> exposeDirect(uint8_t* device_data, size_t bytes,
                                                      bool owns) {
    WSYNC_ASSIGN_OR_RETURN(std::unique_ptr<ExposedMemory> registered,
                           ucx_->expose(device_data, bytes));
    return std::unique_ptr<ExposedMemory>(
        new DirectExposedMemory(options_.device, std::move(registered), owns));
  }

  // `device_data` (`bytes`) paired with a landing area UCX allocates and CUDA pins. When pinning
  // fails (some kernels refuse shared-memory mappings), land() still works, from pageable memory.
  Result<std::unique_ptr<ExposedMemory>> pairWithLanding(uint8_t* device_data, size_t bytes,
                                                         bool owns, const std::string& what) {
    WSYNC_ASSIGN_OR_RETURN(std::unique_ptr<ExposedMemory> landing, ucx_->allocateExposed(bytes));
    const bool pinned =
        cudaHostRegister(landing->data(), landing->size(), cudaHostRegisterDefault) == cudaSuccess;
    if (!pinned) (void)cudaGetLastError();
    auto stream = makeStream(what);
    auto event = makeEvent(what);
    if (!stream.isOk() || !event.isOk()) {
      if (pinned) (void)cudaHostUnregister(landing->data());
      return stream.isOk() ? event.status() : stream.status();
    }
    // Progress logs: without them (options, or UCX refusing the memory) land() moves everything.
    std::unique_ptr<ExposedMemory> logs;
    if (options_.progress_writers > 0 && options_.progress_records > 0) {
      auto allocated =
          ucx_->allocateExposed(options_.progress_writers * logBytes(options_.progress_records));
      if (allocated.isOk()) logs = std::move(allocated).value();
    }
    return std::unique_ptr<ExposedMemory>(new StagedExposedMemory(
        options_.device, std::move(landing), device_data, owns, pinned, std::move(stream).value(),
        std::move(event).value(), std::move(logs), options_.progress_writers,
        options_.progress_records));
  }

  // One UCX put of a staged piece: `rows` rows of `row_bytes` packed at `chunk_offset`.
  struct Put {
    RemoteMemoryId remote;  // the UCX transport's id
    uint64_t remote_offset;
    uint64_t remote_pitch;
    size_t chunk_offset;
    size_t row_bytes;
    size_t rows;
  };
  // A whole write2d() to report in the target's progress log (see kRecordWords).
  struct Report {
    RemoteMemoryId remote;  // this transport's id
    uint64_t words[kRecordWords];
  };
  // This writer's progress log at one target (attach()).
  struct ProgressLog {
    RemoteMemoryId remote = -1;     // the target's logs, attached
    uint64_t offset = 0;            // of this writer's log in them
    uint32_t capacity = 0;          // records
    uint32_t count = 0;             // records written this round
    std::vector<uint64_t> records;  // sources of the record writes
    std::vector<uint64_t> counts;   // sources of the header writes: counts[n - 1] = sealCount(n)
    std::unique_ptr<SourceRegistration> records_registration;
    std::unique_ptr<SourceRegistration> counts_registration;
  };
  // Memory attach() attached.
  struct Attached {
    int32_t peer = -1;
    RemoteMemoryId inner = -1;         // the UCX transport's id of it
    std::unique_ptr<ProgressLog> log;  // this writer's log there, when it reports
  };
  // INVALID_ARGUMENT naming `remote` when attach() did not return it.
  Result<const Attached*> attachedAt(RemoteMemoryId remote, const std::string& what) const {
    if (remote < 0 || static_cast<size_t>(remote) >= attached_.size()) {
      return invalidArgument(what + ": unknown remote memory id " + std::to_string(remote) + " (" +
                             std::to_string(attached_.size()) + " attached)");
    }
    return &attached_[static_cast<size_t>(remote)];
  }
  enum class ChunkState { kFree, kFilling, kCopying, kPosted };
  struct Chunk {
    uint8_t* host = nullptr;
    size_t used = 0;
    ChunkState state = ChunkState::kFree;
    std::vector<Put> puts;
    std::vector<Report> reports;  // writes whose last piece is in this chunk
    EventPtr copied;              // recorded after the chunk's device copies
    std::unique_ptr<SourceRegistration> registration;
  };

  // The filling chunk when it has `bytes` free (aligned), else a fresh one (sealing the current
  // chunk, posting completed copies and flushing UCX as needed to free one).
  Result<Chunk*> chunkWithRoom(size_t bytes) {
    if (filling_ >= 0) {
      Chunk& c = chunks_[static_cast<size_t>(filling_)];
      if (options_.chunk_bytes - c.used >= bytes) return &c;
      seal();
    }
    const Clock::time_point deadline = Clock::now() + options_.post_timeout;
    while (true) {
      for (size_t i = 0; i < chunks_.size(); ++i) {
        if (chunks_[i].state == ChunkState::kFree) {
          chunks_[i].state = ChunkState::kFilling;
          chunks_[i].used = 0;
          chunks_[i].puts.clear();
          filling_ = static_cast<int>(i);
          return &chunks_[i];
        }
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) {
        return timeoutError("staged UCX write: no free chunk after " +
                            std::to_string(options_.post_timeout.count()) + " ms");
      }
      if (!copying_.empty()) {
        WSYNC_RETURN_IF_ERROR(postOldest(left));  // its put runs while later copies continue
      } else {
        WSYNC_RETURN_IF_ERROR(ucx_->flush(left));  // frees every posted chunk
        releasePosted();
      }
    }
  }

  // Copies `p.rows` rows from device memory into chunk `c` at p.chunk_offset and queues the put.
  Status stage(Chunk& c, const Put& p, const uint8_t* src, size_t src_pitch) {
    WSYNC_CUDA_RETURN_IF_ERROR(
        cudaMemcpy2DAsync(c.host + p.chunk_offset, p.row_bytes, src, src_pitch, p.row_bytes, p.rows,
                          cudaMemcpyDeviceToHost, stream_.get()),
        "staged UCX write: device-to-host copy of " + std::to_string(p.rows) + " rows of " +
            std::to_string(p.row_bytes) + " bytes");
    c.puts.push_back(p);
    c.used = std::min(options_.chunk_bytes, alignUp(p.chunk_offset + p.rows * p.row_bytes));
    return Status::ok();
  }

  // Ends the filling chunk: its copies are enqueued; an event marks when they are done.
  void seal() {
    if (filling_ < 0) return;
    Chunk& c = chunks_[static_cast<size_t>(filling_)];
    filling_ = -1;
    if (c.puts.empty()) {
      c.state = ChunkState::kFree;
      return;
    }
    c.state = ChunkState::kCopying;
    copying_.push_back(&c - chunks_.data());
    if (cudaEventRecord(c.copied.get(), stream_.get()) != cudaSuccess) {
      // Without the event, wait for the stream itself before posting (rare; keeps order).
      (void)cudaGetLastError();
      (void)cudaStreamSynchronize(stream_.get());
      (void)cudaEventRecord(c.copied.get(), nullptr);
    }
  }

  // Posts the oldest copying chunk's puts once its copies completed (waiting up to `timeout`).
  Status postOldest(std::chrono::milliseconds timeout) {
    Chunk& c = chunks_[static_cast<size_t>(copying_.front())];
    WSYNC_RETURN_IF_ERROR(waitEvent(c.copied.get(), timeout, "staged UCX write"));
    copying_.pop_front();
    return postChunk(c);
  }

  // Posts every copying chunk whose copies already completed, oldest first; never blocks.
  Status postCopied() {
    while (!copying_.empty()) {
      Chunk& c = chunks_[static_cast<size_t>(copying_.front())];
      const cudaError_t e = cudaEventQuery(c.copied.get());
      if (e == cudaErrorNotReady) break;
      if (e != cudaSuccess) return cudaCheck(e, "staged UCX write: cudaEventQuery");
      copying_.pop_front();
      WSYNC_RETURN_IF_ERROR(postChunk(c));
    }
    return Status::ok();
  }

  Status postChunk(Chunk& c) {
    c.state = ChunkState::kPosted;
    for (const Put& p : c.puts) {
      WSYNC_RETURN_IF_ERROR(ucx_->write2d(p.remote, p.remote_offset, p.remote_pitch,
                                          c.host + p.chunk_offset, p.row_bytes, p.row_bytes,
                                          p.rows));
    }
    std::vector<Report> reports;
    reports.swap(c.reports);
    return report(reports);
  }

  // Appends `reports` to their targets' progress logs: the records after a fence (so they arrive
  // after the bytes they describe), then each touched log's new count after another.
  Status report(const std::vector<Report>& reports) {
    if (reports.empty()) return Status::ok();
    WSYNC_RETURN_IF_ERROR(ucx_->fence());
    std::vector<RemoteMemoryId> touched;
    for (const Report& r : reports) {
      ProgressLog& log = *attached_[static_cast<size_t>(r.remote)].log;
      if (log.count == log.capacity) continue;  // full: land() moves the rest
      uint64_t* words = log.records.data() + static_cast<size_t>(log.count) * kRecordWords;
      std::copy(r.words, r.words + kRecordWords, words);
      WSYNC_RETURN_IF_ERROR(ucx_->write(log.remote,
                                        log.offset + kLogHeaderBytes + log.count * kRecordBytes,
                                        words, kRecordBytes));
      ++log.count;
      if (std::find(touched.begin(), touched.end(), r.remote) == touched.end())
        touched.push_back(r.remote);
    }
    if (touched.empty()) return Status::ok();
    WSYNC_RETURN_IF_ERROR(ucx_->fence());
    for (const RemoteMemoryId remote : touched) {
      ProgressLog& log = *attached_[static_cast<size_t>(remote)].log;
      uint64_t& sealed = log.counts[log.count - 1];
      sealed = sealCount(log.count);
      WSYNC_RETURN_IF_ERROR(ucx_->write(log.remote, log.offset, &sealed, sizeof(sealed)));
    }
    return Status::ok();
  }

  // After a successful UCX flush: posted chunks' sources may be reused.
  void releasePosted() {
    for (Chunk& c : chunks_) {
      if (c.state == ChunkState::kPosted) c.state = ChunkState::kFree;
    }
  }

  StagedUcxTransportOptions options_;
  std::unique_ptr<WriteTransport> ucx_;
  StreamPtr stream_;
  const bool direct_;  // the UCX in use reads and writes CUDA memory: no staging at all
  std::vector<Chunk> chunks_;
  int filling_ = -1;
  std::deque<ptrdiff_t> copying_;   // chunk indices, oldest first
  std::vector<Attached> attached_;  // by this transport's RemoteMemoryId
};

}  // namespace

Result<std::unique_ptr<WriteTransport>> createStagedUcxTransport(
    const StagedUcxTransportOptions& options) {
  const std::string what = "staged UCX transport on CUDA device " + std::to_string(options.device);
  if (options.chunk_bytes < kChunkAlign || options.num_chunks < 1) {
    return invalidArgument(what + ": chunk_bytes must be >= " + std::to_string(kChunkAlign) +
                           " and num_chunks >= 1");
  }
  if (!cudaDeviceAvailable(options.device)) {
    return Status(WSYNC_ERR_UNSUPPORTED, what + ": no such usable device");
  }
  WSYNC_RETURN_IF_ERROR(cudaUseDevice(options.device));
  const bool direct = options.use_ucx_cuda && ucxHandlesCudaMemory();
  UcxTransportOptions ucx_options;
  ucx_options.host_memory_only = !direct;  // direct: device sources and targets, puts only
  WSYNC_ASSIGN_OR_RETURN(std::unique_ptr<WriteTransport> ucx, createUcxTransport(ucx_options));
  WSYNC_ASSIGN_OR_RETURN(StreamPtr stream, makeStream(what));
  auto transport =
      std::make_unique<StagedUcxTransport>(options, std::move(ucx), std::move(stream), direct);
  if (!direct) WSYNC_RETURN_IF_ERROR(transport->allocateChunks());
  return std::unique_ptr<WriteTransport>(std::move(transport));
}

bool ucxHandlesCudaMemory() {
  auto context = ucx::createContext();
  if (!context.isOk()) return false;
  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  if (ucp_context_query(context.value().get(), &attr) != UCS_OK) return false;
  return (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
}

}  // namespace wsync
