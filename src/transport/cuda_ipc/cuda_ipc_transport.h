// The CUDA IPC backend of WriteTransport: one-sided copies into device memory that another
// process of the same node exposed (cudaIpcGetMemHandle / cudaIpcOpenMemHandle), run by the copy
// engines on a stream the transport owns. Writes are truly one-sided: the target never needs to
// call progress() (a no-op here).
//
// Within one node only: connect() refuses (UNSUPPORTED) a peer whose address names another host.
// Runtime API only; every entry point makes options.device current on the calling thread
// (cudaUseDevice) and leaves it current.
//
// Sources of write()/write2d() may be device memory (of any device this process can reach) or
// host memory, pageable or pinned (registerSource() pins pageable host memory with
// cudaHostRegister so the copies run asynchronously at full speed; it is a no-op for device
// memory). The stream is non-blocking: it does not wait for the legacy default stream or any
// other, so sources produced by other work must be complete, or ordered before the writes (an
// event on the producing stream that stream() waits on), when write() is called. Note that a
// pageable-to-device cudaMemcpy may return before its DMA landed.
// Completion: flush() waits for an event recorded after every write; once it succeeds the
// bytes are in the target's device memory, visible to any work the target starts afterwards (the
// target learns of it out of band, through a control message).
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "transport/write_transport.h"

namespace wsync {

class FdServer;  // control/fd_exchange.h

struct CudaIpcTransportOptions {
  // CUDA ordinal (as this process numbers its devices) of the stream, the allocations of
  // allocateExposed() and the memory expose() accepts.
  int device = 0;
  // How long write() waits for earlier copies when too many are in flight, how long the
  // destructor waits for copies still running before it unmaps peers' memory, and how long
  // attach() waits for a peer's VMM descriptor.
  std::chrono::milliseconds post_timeout{30000};
  // allocateExposed() makes VMM allocations shared as POSIX file descriptors
  // (transport/cuda_ipc/vmm_memory.h: copies into them run at the local device-copy rate) when
  // the driver and device support it; false: cudaMalloc and cudaIpcGetMemHandle. expose()
  // always shares with cudaIpcGetMemHandle.
  bool vmm_exports = true;
};

// What a CUDA IPC address says about a process (decoded localAddress()).
struct CudaIpcProcessInfo {
  std::string host;    // "<hostname>/<boot_id>"; equal strings mean the same node
  int64_t pid = 0;     // process id on that host
  uint64_t nonce = 0;  // random per process (pid reuse or another pid namespace tells apart)
  int32_t device = 0;  // its options.device (its own numbering)
  std::array<uint8_t, 16> device_uuid{};  // the GPU's UUID, comparable across processes
};

// This node's identity as it appears in addresses: "<hostname>/<boot_id>" (just the hostname
// when /proc/sys/kernel/random/boot_id cannot be read).
std::string cudaIpcHostIdentity();
// The address encoding (tag, version, fields). decode checks the tag and every length:
// PROTOCOL error naming what is wrong otherwise.
std::vector<uint8_t> encodeCudaIpcAddress(const CudaIpcProcessInfo& info);
Result<CudaIpcProcessInfo> decodeCudaIpcAddress(const std::vector<uint8_t>& address);

class CudaIpcTransport final : public WriteTransport {
 public:
  // UNSUPPORTED when CUDA device options.device is not usable (no GPU, no driver).
  static Result<std::unique_ptr<CudaIpcTransport>> create(const CudaIpcTransportOptions& options);

  // Waits (at most post_timeout) for copies in flight, then unmaps peers' memory and frees the
  // stream and events. ExposedMemory objects it made stay valid (they own their memory).
  ~CudaIpcTransport() override;
  CudaIpcTransport(const CudaIpcTransport&) = delete;
  CudaIpcTransport& operator=(const CudaIpcTransport&) = delete;

  const char* name() const override { return "cuda_ipc"; }
  // {tag, version, host identity, pid, nonce, device ordinal, device UUID}.
  const std::vector<uint8_t>& localAddress() const override { return address_; }

  // Device memory on options.device: a VMM allocation whose file descriptor this process's
  // FdServer offers (see options.vmm_exports), else cudaMalloc plus its IPC handle. Descriptor:
  // {tag, version, export kind, IPC handle | (descriptor server, offer id and token, mapped size),
  // size, device pointer, owner pid and nonce, owner device}. The memory is freed when the
  // returned object goes (a peer's VMM mapping keeps the physical memory until it unmaps).
  Result<std::unique_ptr<ExposedMemory>> allocateExposed(size_t bytes) override;

  // `base` MUST be the start of a cudaMalloc allocation on options.device (not an offset into one,
  // not cudaMallocAsync/pool or VMM memory) and `bytes` at most its size: CUDA IPC maps whole
  // allocations, and the runtime API cannot find an allocation's base (that needs the driver
  // API), so an interior pointer would make peers write at the allocation's start. Checked: the
  // pointer is device memory of options.device. Not checked: that it is a base, and the size.
  Result<std::unique_ptr<ExposedMemory>> expose(void* base, size_t bytes) override;

  // Host memory: pinned with cudaHostRegister(portable) until the registration goes (memory that
  // is pinned already, or device memory: a no-op registration).
  Result<std::unique_ptr<SourceRegistration>> registerSource(const void* base,
                                                             size_t bytes) override;

  // UNSUPPORTED (naming the peer and both hosts) when `peer_address` names another node.
  Status connect(int32_t peer, const std::vector<uint8_t>& peer_address) override;

  // Maps the descriptor's memory once per distinct export in this process: opens its IPC handle
  // (cudaIpcOpenMemHandle, lazy peer access), or fetches its VMM file descriptor from the owner's
  // FdServer (at most options.post_timeout) and maps it. Attaching it again, here or from another
  // transport of this process, reuses the mapping (reference counted; unmapped when the last
  // transport using it goes). Memory of this very process (a connection to itself) is used
  // through its device pointer directly. The descriptor must come from `peer` (same pid and
  // nonce as its address): INVALID_ARGUMENT otherwise; malformed: PROTOCOL.
  Result<RemoteMemoryId> attach(int32_t peer, const std::vector<uint8_t>& descriptor) override;
  Result<uint64_t> attachedSize(RemoteMemoryId remote) const override {
    if (remote < 0 || static_cast<size_t>(remote) >= remotes_.size()) {
      return invalidArgument("CUDA IPC: unknown remote memory id " + std::to_string(remote));
    }
    return remotes_[static_cast<size_t>(remote)].size;
  }

  // cudaMemcpyAsync / cudaMemcpy2DAsync (cudaMemcpyDefault) on stream(). Past 1024 copies since
  // the last check, waits (at most post_timeout) until the copies of the check before completed:
  // at most ~2048 copies are in flight.
  Status write(RemoteMemoryId remote, uint64_t remote_offset, const void* src,
               size_t bytes) override;
  Status write2d(RemoteMemoryId remote, uint64_t remote_offset, uint64_t remote_pitch,
                 const void* src, size_t src_pitch, size_t row_bytes, size_t rows) override;

  // Records an event on stream() and polls it until done (success), `timeout` (TIMEOUT, the copies
  // stay queued), or a CUDA error (SYSTEM; sticky errors of the context stay).
  Status flush(std::chrono::milliseconds timeout) override;

  void progress() override {}  // nothing to progress: copies are one-sided

  // ---- beyond WriteTransport ----

  // The non-blocking stream every write is enqueued on. Work the caller enqueues on it (e.g.
  // conversion kernels filling a source buffer) runs in order with the writes, and flush()
  // completes it too. Owned by the transport.
  cudaStream_t stream() const { return stream_.get(); }
  int device() const { return options_.device; }

  // The device address, valid on this transport's device, of bytes [offset, offset + bytes) of
  // `remote`: for kernels enqueued on stream() that write straight into the peer's memory (e.g.
  // launchCopyRegion). Bounds-checked like write() (INVALID_ARGUMENT naming peer and remote id;
  // bytes == 0 is checked as 1, so the address lies inside the exposed memory).
  // The next flush() completes that work like a write.
  Result<void*> remoteAddress(RemoteMemoryId remote, uint64_t offset, uint64_t bytes);

 private:
  struct Remote {
    int32_t peer;
    uint8_t* base;  // mapped (or, for this process, the owner's) device pointer
    uint64_t size;
    std::string handle;  // the IPC handle's bytes; empty when base is this process's own memory
    bool written;        // written since the last successful flush
  };
  struct Peer {
    CudaIpcProcessInfo info;
    bool is_self = false;  // this very process
  };

  struct StreamDeleter {
    void operator()(cudaStream_t stream) const;
  };
  struct EventDeleter {
    void operator()(cudaEvent_t event) const;
  };
  using StreamPtr = std::unique_ptr<std::remove_pointer_t<cudaStream_t>, StreamDeleter>;
  using EventPtr = std::unique_ptr<std::remove_pointer_t<cudaEvent_t>, EventDeleter>;

  CudaIpcTransport(const CudaIpcTransportOptions& options, StreamPtr stream, EventPtr flush_event,
                   EventPtr window_event, size_t max_pitch, std::vector<uint8_t> address);

  Status useDevice() const;
  Result<std::unique_ptr<ExposedMemory>> allocateVmm(size_t bytes, FdServer& server,
                                                     const std::string& what);
  // Checks `remote` and the 2-D extent; on success `r` is the remote.
  Status checkRange(RemoteMemoryId remote, uint64_t offset, uint64_t pitch, size_t row_bytes,
                    size_t rows, size_t src_pitch, const char* what, Remote*& r);
  // Keeps at most ~2 windows of copies in flight; see write().
  Status makeRoom(const Remote& r, RemoteMemoryId id);
  // Polls `event` until it completed (success), `timeout` passed (`timed_out` set; the returned
  // status is then a bare TIMEOUT the caller rewords) or CUDA reports an error.
  Status waitEvent(cudaEvent_t event, std::chrono::milliseconds timeout, bool& timed_out) const;
  std::string unflushedPeers() const;

  CudaIpcTransportOptions options_;
  // Declaration order is destruction order reversed: events, then the stream.
  StreamPtr stream_;
  EventPtr flush_event_;
  EventPtr window_event_;  // recorded every 1024 copies; see write()
  bool window_recorded_ = false;
  size_t copies_in_window_ = 0;
  size_t max_pitch_;  // cudaDevAttrMaxPitch: larger pitches go row by row
  std::vector<uint8_t> address_;
  std::unordered_map<int32_t, Peer> peers_;
  std::vector<Remote> remotes_;                         // index: RemoteMemoryId
  std::unordered_map<std::string, uint8_t*> mappings_;  // handle bytes -> pointer, one ref each
};

// The factory of the WriteTransport interface; see CudaIpcTransport::create.
Result<std::unique_ptr<WriteTransport>> createCudaIpcTransport(
    const CudaIpcTransportOptions& options = {});

}  // namespace wsync
