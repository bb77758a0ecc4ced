// Private to the staged UCX backend: the transport (staged_ucx_transport.h states its contract).
// Its WriteTransport methods and the exposed memory it creates are in staged_ucx_transport.cc; the
// writer side's ring of pinned chunks (staging device sources, posting their puts, reporting into
// the targets' progress logs) is in staged_chunk_ring.cc.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "transport/ucx_staged/progress_log.h"
#include "transport/ucx_staged/staged_cuda.h"
#include "transport/ucx_staged/staged_ucx_transport.h"
#include "transport/write_transport.h"

namespace wsync::staged_internal {

class StagedUcxTransport final : public WriteTransport {
 public:
  StagedUcxTransport(const StagedUcxTransportOptions& options, std::unique_ptr<WriteTransport> ucx,
                     StreamPtr stream, bool direct)
      : options_(options), ucx_(std::move(ucx)), stream_(std::move(stream)), direct_(direct) {}

  // Pinned chunks: page-locked memory for the device copies, registered with UCX as put sources.
  Status allocateChunks();

  ~StagedUcxTransport() override;
  StagedUcxTransport(const StagedUcxTransport&) = delete;
  StagedUcxTransport& operator=(const StagedUcxTransport&) = delete;

  const char* name() const override { return direct_ ? "ucx_cuda" : "ucx_staged"; }
  const std::vector<uint8_t>& localAddress() const override { return ucx_->localAddress(); }

  Result<std::unique_ptr<ExposedMemory>> allocateExposed(size_t bytes) override;

  Result<std::unique_ptr<ExposedMemory>> expose(void* base, size_t bytes) override;

  // Plain UCX memory (the landing areas' kind), read on the host.
  Result<std::unique_ptr<ExposedMemory>> allocateExposedHost(size_t bytes) override {
    return ucx_->allocateExposed(bytes);
  }

  Result<std::unique_ptr<SourceRegistration>> registerSource(const void* base,
                                                             size_t bytes) override;

  Status connect(int32_t peer, const std::vector<uint8_t>& peer_address) override {
    return ucx_->connect(peer, peer_address);
  }

  // This transport's ids index attached_; each names the inner UCX transport's id, so that the
  // progress logs it attaches as well stay out of the caller's id space.
  Result<RemoteMemoryId> attach(int32_t peer, const std::vector<uint8_t>& descriptor) override;

  Result<uint64_t> attachedSize(RemoteMemoryId remote) const override;

  Status write(RemoteMemoryId remote, uint64_t remote_offset, const void* src,
               size_t bytes) override {
    return write2d(remote, remote_offset, bytes, src, bytes, bytes, 1);
  }

  Status write2d(RemoteMemoryId remote, uint64_t remote_offset, uint64_t remote_pitch,
                 const void* src, size_t src_pitch, size_t row_bytes, size_t rows) override;

  Status flush(std::chrono::milliseconds timeout) override;

  void progress() override { ucx_->progress(); }

 private:
  // Device memory registered with a UCX that handles CUDA: writes land in it directly.
  Result<std::unique_ptr<ExposedMemory>> exposeDirect(uint8_t* device_data, size_t bytes,
                                                      bool owns);

  // `device_data` (`bytes`) paired with a landing area UCX allocates and CUDA pins. When pinning
  // fails (some kernels refuse shared-memory mappings), land() still works, from pageable memory.
  Result<std::unique_ptr<ExposedMemory>> pairWithLanding(uint8_t* device_data, size_t bytes,
                                                         bool owns, const std::string& what);

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
  Result<const Attached*> attachedAt(RemoteMemoryId remote, const std::string& what) const;
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
  Result<Chunk*> chunkWithRoom(size_t bytes);

  // Copies `p.rows` rows from device memory into chunk `c` at p.chunk_offset and queues the put.
  Status stage(Chunk& c, const Put& p, const uint8_t* src, size_t src_pitch);

  // Ends the filling chunk: its copies are enqueued; an event marks when they are done.
  void seal();

  // Posts the oldest copying chunk's puts once its copies completed (waiting up to `timeout`).
  Status postOldest(std::chrono::milliseconds timeout);

  // Posts every copying chunk whose copies already completed, oldest first; never blocks.
  Status postCopied();

  Status postChunk(Chunk& c);

  // Appends `reports` to their targets' progress logs: the records after a fence (so they arrive
  // after the bytes they describe), then each touched log's new count after another.
  Status report(const std::vector<Report>& reports);

  // After a successful UCX flush: posted chunks' sources may be reused.
  void releasePosted();

  StagedUcxTransportOptions options_;
  std::unique_ptr<WriteTransport> ucx_;
  StreamPtr stream_;
  const bool direct_;  // the UCX in use reads and writes CUDA memory: no staging at all
  std::vector<Chunk> chunks_;
  int filling_ = -1;
  std::deque<ptrdiff_t> copying_;   // chunk indices, oldest first
  std::vector<Attached> attached_;  // by this transport's RemoteMemoryId
};

}  // namespace wsync::staged_internal
