// WriteTransport: one-sided writes from this process into memory that other processes exposed.
// Backends: UCX (host memory: shared memory within a node, the network across nodes; see
// transport/ucx/ucx_transport.h), CUDA IPC (device memory within a node) and staged UCX (device
// memory across nodes through pinned host memory).
//
// Typical use (plan time, once):
//   target: mem = allocateExposed(n) or expose(p, n); send localAddress() and mem->descriptor()
//   writer: connect(target_rank, its address); id = attach(target_rank, its descriptor)
// and every step: write()/write2d()/write3d() ... flush(timeout); then tell the target (out of
// band).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace wsync {

// [offset, offset + bytes) of some memory.
struct ByteRange {
  uint64_t offset = 0;
  uint64_t bytes = 0;
  bool operator==(const ByteRange&) const = default;
};

// Memory this process lets peers write into. descriptor() is the bytes a peer passes to
// WriteTransport::attach(): the backend's name, base address, size and remote key. Owned by the
// caller; it must outlive every write into it (the caller learns that writers are done out of
// band, after their flush()). It may outlive the transport that made it.
class ExposedMemory {
 public:
  virtual ~ExposedMemory() = default;
  virtual void* data() const = 0;
  virtual size_t size() const = 0;  // bytes peers may write, as asked for
  virtual const std::vector<uint8_t>& descriptor() const = 0;

  // True for backends whose writes land in a staging area rather than in data() (the staged UCX
  // backend: device memory behind a pinned host landing area). Their written bytes reach data()
  // only through land(), which the owner calls once it learned (out of band) that the writers
  // flushed, and before anything reads those bytes.
  virtual bool needsLanding() const { return false; }
  // Moves `ranges` (byte offsets into this memory; in bounds, not overlapping) from the landing
  // area into data(), waiting up to `timeout` (TIMEOUT then). A no-op where needsLanding() is
  // false.
  virtual Status land(const std::vector<ByteRange>& ranges, std::chrono::milliseconds timeout) {
    (void)ranges;
    (void)timeout;
    return Status::ok();
  }

  // Early landing, where writers report what they delivered (the staged UCX backend's progress
  // logs): the owner calls beginLanding() before writers start a round of writes (and after the
  // previous round's land() returned), may call landArrived() any number of times while they
  // write, to start moving what they reported so far (never blocks), and calls land() once they
  // flushed, which then moves only what was not reported. No-ops where needsLanding() is false.
  virtual Status beginLanding() { return Status::ok(); }
  virtual Status landArrived() { return Status::ok(); }
};

// Local memory registered as a write source, so posting writes from it costs no registration
// (and backends learn what memory it is once, not per write: CUDA IPC batches the copies from
// registered device memory into one kernel). Optional (writes from unregistered memory work) and
// may be a no-op for some backends. Release it only after the writes from it have been flushed.
class SourceRegistration {
 public:
  virtual ~SourceRegistration() = default;
};

// Handle of a peer's exposed memory, returned by attach(); valid for the transport's lifetime.
using RemoteMemoryId = int32_t;

// Contract: one-sided writes from this process into memory other processes exposed.
// Threads: every method is called from one thread (the owner), except progress(), which a
// background thread may call concurrently with any of them but the destructor (stop that thread
// before destroying the transport).
// Ordering and completion: writes are not ordered among themselves. A write's source bytes must
// stay unchanged until a later flush() returns success. flush() completes all writes posted so
// far at their targets: once it returns success their bytes are visible there. Errors of posted
// writes are reported by the next flush().
// Targets: memory from allocateExposed() may need no help from its owner (UCX over shared memory
// or RDMA is truly one-sided). Memory from expose(), and any memory reached over transports
// without remote-write support, may need the owner to call progress() while writes land (UCX 1.13
// emulates such writes with messages the target handles in progress()). A target that cannot
// know should run a progress thread until its writers report that they are done.
class WriteTransport {
 public:
  virtual ~WriteTransport() = default;

  // A short static name: "ucx", "cuda_ipc".
  virtual const char* name() const = 0;

  // The bytes a peer passes to connect() to reach this process.
  virtual const std::vector<uint8_t>& localAddress() const = 0;

  // Memory allocated and registered by the transport (truly one-sided where the backend can be;
  // preferred for targets). `bytes` > 0; contents are unspecified.
  virtual Result<std::unique_ptr<ExposedMemory>> allocateExposed(size_t bytes) = 0;

  // Caller-owned memory [base, base + bytes) exposed to peers; it must outlive the returned
  // object. `base` non-null, `bytes` > 0.
  virtual Result<std::unique_ptr<ExposedMemory>> expose(void* base, size_t bytes) = 0;

  // Host memory allocated and registered as allocateExposed() does, that the owner reads on the
  // host (data(); needsLanding() false) whatever memory the backend's targets are: a device
  // target's area for small bytes it checks before use, such as delta patches. UNSUPPORTED where
  // the backend cannot expose host memory (the default).
  virtual Result<std::unique_ptr<ExposedMemory>> allocateExposedHost(size_t bytes);

  // Registers [base, base + bytes) as a source of writes; see SourceRegistration.
  virtual Result<std::unique_ptr<SourceRegistration>> registerSource(const void* base,
                                                                     size_t bytes) = 0;

  // Opens the path to `peer` (a caller-chosen id >= 0, usually its rank) whose localAddress() is
  // `peer_address`. Once per peer; connecting to this process itself is allowed.
  virtual Status connect(int32_t peer, const std::vector<uint8_t>& peer_address) = 0;

  // Makes memory that `peer` (connected) exposed writable from here; `descriptor` is its
  // ExposedMemory::descriptor(). A descriptor from another backend or a malformed one is an error.
  virtual Result<RemoteMemoryId> attach(int32_t peer, const std::vector<uint8_t>& descriptor) = 0;

  // The size of attached memory `remote` (its ExposedMemory::size()); INVALID_ARGUMENT for an id
  // attach() did not return.
  virtual Result<uint64_t> attachedSize(RemoteMemoryId remote) const = 0;

  // Posts a write of `bytes` from `src` to [remote_offset, remote_offset + bytes) of `remote`.
  // Non-blocking, except that it waits (bounded by the backend's post timeout) while too many
  // writes are in flight; WSYNC_ERR_TIMEOUT then, and nothing was posted. A range outside the
  // exposed size, or an unknown `remote`, is INVALID_ARGUMENT and posts nothing; messages name
  // the peer and the remote id. bytes == 0 does nothing.
  virtual Status write(RemoteMemoryId remote, uint64_t remote_offset, const void* src,
                       size_t bytes) = 0;

  // 2-D write: `rows` rows of `row_bytes`, source rows `src_pitch` bytes apart starting at `src`,
  // target rows `remote_pitch` bytes apart starting at `remote_offset`. Pitches are at least
  // row_bytes when rows > 1 (rows never overlap). Checked like write(), all rows before any is
  // posted; on WSYNC_ERR_TIMEOUT a prefix of the rows may have been posted (a later successful
  // flush() completes them).
  virtual Status write2d(RemoteMemoryId remote, uint64_t remote_offset, uint64_t remote_pitch,
                         const void* src, size_t src_pitch, size_t row_bytes, size_t rows) = 0;

  // 3-D write: `planes` planes, each a 2-D block of `rows` rows of `row_bytes` as in write2d();
  // source planes `src_plane_pitch` bytes apart starting at `src`, target planes
  // `remote_plane_pitch` bytes apart starting at `remote_offset` (row pitches as in write2d()).
  // Plane pitches are at least one plane's extent, (rows - 1) * pitch + row_bytes, on each side
  // when planes > 1 (planes never overlap); unused pitches (rows == 1, planes == 1) may be
  // anything. Checked like write2d(), every plane before any is posted; on WSYNC_ERR_TIMEOUT
  // some of the planes may have been posted (a later successful flush() completes them). Nothing
  // to write (row_bytes, rows or planes 0) does nothing.
  // Default: checks the pitches, then posts plane by plane through write2d(), the last plane first
  // (write2d() checks it against the exposed size; once it fits, so do the planes below it).
  virtual Status write3d(RemoteMemoryId remote, uint64_t remote_offset, uint64_t remote_pitch,
                         uint64_t remote_plane_pitch, const void* src, size_t src_pitch,
                         size_t src_plane_pitch, size_t row_bytes, size_t rows, size_t planes);

  // Backends that map peers' memory into this process's device address space (CUDA IPC): the
  // device address of bytes [offset, offset + bytes) of `remote`, for kernels the caller runs that
  // write the peer's memory in place (a write without a source). The caller completes that work
  // (synchronizes its stream) before the next flush(), which then counts it among the writes it
  // completed. Bounds-checked like write() (bytes == 0 as 1). UNSUPPORTED where writes go through
  // a network or a staging area (the default).
  virtual Result<void*> remoteAddress(RemoteMemoryId remote, uint64_t offset, uint64_t bytes) {
    (void)remote;
    (void)offset;
    (void)bytes;
    return Status(WSYNC_ERR_UNSUPPORTED, std::string(name()) + ": no mapped remote memory");
  }

  // Completes every write posted so far (see the class comment). Returns WSYNC_ERR_TIMEOUT when
  // that takes longer than `timeout` (writes stay posted; a later flush() may complete them), or
  // the first error of a posted write.
  virtual Status flush(std::chrono::milliseconds timeout) = 0;

  // Orders writes without waiting for them: every write posted before fence() is visible at its
  // target before any write posted after it. UNSUPPORTED for backends that cannot (the default).
  virtual Status fence() {
    return Status(WSYNC_ERR_UNSUPPORTED, std::string(name()) + ": no fence");
  }

  // Advances the transport's communication (incoming emulated writes, completions). Cheap when
  // idle; safe to call from a background thread concurrently with the owner's calls.
  virtual void progress() = 0;
};

}  // namespace wsync
