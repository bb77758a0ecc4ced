#include "transport/ucx_staged/staged_ucx_transport.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <deque>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/cuda_check.h"
#include "transport/ucx/ucx_handles.h"
#include "transport/ucx/ucx_transport.h"

namespace wsync {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kChunkAlign = 256;  // bytes; every staged piece starts aligned in its chunk

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

// Device memory (owned, or the caller's) behind a UCX landing area of the same size.
class StagedExposedMemory final : public ExposedMemory {
 public:
  StagedExposedMemory(int device, std::unique_ptr<ExposedMemory> landing, uint8_t* device_data,
                      bool owns_device_data, bool pinned, StreamPtr stream, EventPtr event)
      : device_(device),
        landing_(std::move(landing)),
        device_data_(device_data),
        owns_device_data_(owns_device_data),
        pinned_(pinned),
        stream_(std::move(stream)),
        event_(std::move(event)) {}

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
  const std::vector<uint8_t>& descriptor() const override { return landing_->descriptor(); }
  bool needsLanding() const override { return true; }

  Status land(const std::vector<ByteRange>& ranges, std::chrono::milliseconds timeout) override {
    const std::string what = "staged UCX landing";
    WSYNC_RETURN_IF_ERROR(cudaUseDevice(device_));
    const auto* from = static_cast<const uint8_t*>(landing_->data());
    for (const ByteRange& r : ranges) {
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
  int device_;
  std::unique_ptr<ExposedMemory> landing_;
  uint8_t* device_data_;
  bool owns_device_data_;
  bool pinned_;  // the landing area is page-locked for CUDA (cudaHostRegister)
  StreamPtr stream_;
  EventPtr event_;
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

  Result<RemoteMemoryId> attach(int32_t peer, const std::vector<uint8_t>& descriptor) override {
    WSYNC_ASSIGN_OR_RETURN(const RemoteMemoryId id, ucx_->attach(peer, descriptor));
    if (static_cast<size_t>(id) >= peer_of_remote_.size()) {
      peer_of_remote_.resize(static_cast<size_t>(id) + 1, -1);
    }
    peer_of_remote_[static_cast<size_t>(id)] = peer;
    return id;
  }

  Result<uint64_t> attachedSize(RemoteMemoryId remote) const override {
    return ucx_->attachedSize(remote);
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
    if (direct_ || src == nullptr || !isDeviceMemory(src)) {
      return ucx_->write2d(remote, remote_offset, remote_pitch, src, src_pitch, row_bytes, rows);
    }
    // Checks the target range the way UCX would, before any piece is staged: a zero-row dry run
    // costs nothing and posts nothing.
    WSYNC_RETURN_IF_ERROR(
        checkRange(remote, remote_offset, remote_pitch, src_pitch, row_bytes, rows));
    const auto* s = static_cast<const uint8_t*>(src);
    for (size_t row = 0; row < rows;) {
      if (row_bytes <= options_.chunk_bytes) {  // whole rows, as many as the chunk holds
        WSYNC_ASSIGN_OR_RETURN(Chunk * c, chunkWithRoom(row_bytes));
        const size_t n = std::min(rows - row, (options_.chunk_bytes - c->used) / row_bytes);
        WSYNC_RETURN_IF_ERROR(stage(
            *c, {remote, remote_offset + row * remote_pitch, remote_pitch, c->used, row_bytes, n},
            s + row * src_pitch, src_pitch));
        row += n;
        continue;
      }
      for (size_t col = 0; col < row_bytes;) {  // a row larger than a chunk goes in pieces
        WSYNC_ASSIGN_OR_RETURN(Chunk * c, chunkWithRoom(1));
        const size_t n = std::min(row_bytes - col, options_.chunk_bytes - c->used);
        WSYNC_RETURN_IF_ERROR(
            stage(*c, {remote, remote_offset + row * remote_pitch + col, n, c->used, n, 1},
                  s + row * src_pitch + col, n));
        col += n;
      }
      ++row;
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
    return std::unique_ptr<ExposedMemory>(
        new StagedExposedMemory(options_.device, std::move(landing), device_data, owns, pinned,
                                std::move(stream).value(), std::move(event).value()));
  }

  // One UCX put of a staged piece: `rows` rows of `row_bytes` packed at `chunk_offset`.
  struct Put {
    RemoteMemoryId remote;
    uint64_t remote_offset;
    uint64_t remote_pitch;
    size_t chunk_offset;
    size_t row_bytes;
    size_t rows;
  };
  enum class ChunkState { kFree, kFilling, kCopying, kPosted };
  struct Chunk {
    uint8_t* host = nullptr;
    size_t used = 0;
    ChunkState state = ChunkState::kFree;
    std::vector<Put> puts;
    EventPtr copied;  // recorded after the chunk's device copies
    std::unique_ptr<SourceRegistration> registration;
  };

  // The checks UCX makes before posting (ids, pitches, bounds), made before anything is staged,
  // so a bad write posts nothing; messages name the peer and the remote id as UCX's do.
  Status checkRange(RemoteMemoryId remote, uint64_t remote_offset, uint64_t remote_pitch,
                    size_t src_pitch, size_t row_bytes, size_t rows) const {
    if (remote < 0 || static_cast<size_t>(remote) >= peer_of_remote_.size()) {
      return invalidArgument("staged UCX write: unknown remote memory id " +
                             std::to_string(remote) + " (" +
                             std::to_string(peer_of_remote_.size()) + " attached)");
    }
    const std::string where = "staged UCX write to peer " +
                              std::to_string(peer_of_remote_[static_cast<size_t>(remote)]) +
                              ", remote memory " + std::to_string(remote) + ": ";
    if (rows > 1 && (remote_pitch < row_bytes || src_pitch < row_bytes)) {
      return invalidArgument(where + "pitches (remote " + std::to_string(remote_pitch) +
                             ", source " + std::to_string(src_pitch) + ") smaller than the row (" +
                             std::to_string(row_bytes) + " bytes) of a " + std::to_string(rows) +
                             "-row write");
    }
    WSYNC_ASSIGN_OR_RETURN(const uint64_t size, ucx_->attachedSize(remote));
    uint64_t extent = 0;
    uint64_t end = 0;
    if (__builtin_mul_overflow(rows - 1, remote_pitch, &extent) ||
        __builtin_add_overflow(extent, row_bytes, &extent) ||
        __builtin_add_overflow(remote_offset, extent, &end) || end > size) {
      return invalidArgument(
          where + std::to_string(rows) + " rows of " + std::to_string(row_bytes) +
          " bytes at offset " + std::to_string(remote_offset) + ", pitch " +
          std::to_string(remote_pitch) + " do not fit the exposed size " + std::to_string(size));
    }
    return Status::ok();
  }

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
  std::deque<ptrdiff_t> copying_;        // chunk indices, oldest first
  std::vector<int32_t> peer_of_remote_;  // RemoteMemoryId -> peer, for messages
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
