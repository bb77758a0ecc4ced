// The CUDA IPC backend of WriteTransport: one-sided copies into device memory that another
// process of the same node exposed (VMM allocations shared as file descriptors, or
// cudaIpcGetMemHandle), on a stream the transport owns. Writes are truly one-sided: the target
// never needs to call progress() (a no-op here).
//
// Within one node only: connect() refuses (UNSUPPORTED) a peer whose address names another host.
// Runtime API only; every entry point makes options.device current on the calling thread
// (cudaUseDevice) and leaves it current.
//
// Sources of writes may be device memory (of any device this process can reach) or host memory,
// pageable or pinned. Two ways a write runs:
//  - batched: a source inside device memory of options.device that registerSource() was given
//    (options.batch_device_copies) is queued at write() and copied at flush() by one kernel for
//    all such writes (transport/cuda_ipc/copy_batch.h);
//  - a driver copy (cudaMemcpyAsync / cudaMemcpy2DAsync, copy engines) enqueued at write():
//    every other source. registerSource() pins pageable host memory with cudaHostRegister so
//    these copies run asynchronously at full speed.
// The stream is non-blocking: it does not wait for the legacy default stream or any other, so
// sources produced by other work must be complete, or ordered before the writes (an event on the
// producing stream that stream() waits on), when write() is called. Note that a pageable-to-device
// cudaMemcpy may return before its DMA landed.
// Completion: flush() launches the batched copies, then waits for an event recorded after them
// and every driver copy; once it succeeds the bytes are in the target's device memory, visible to
// any work the target starts afterwards (the target learns of it out of band, through a control
// message).
//
// Files: cuda_ipc_encoding (addresses, descriptors), ipc_mapping_cache (peers' memory mapped
// here), vmm_memory (VMM allocations), device_sources and copy_batch (the batched copies),
// cuda_handles (streams, events), this transport.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "transport/cuda_ipc/copy_batch.h"
#include "transport/cuda_ipc/cuda_handles.h"
#include "transport/cuda_ipc/cuda_ipc_encoding.h"
#include "transport/cuda_ipc/ipc_mapping_cache.h"
#include "transport/write_transport.h"

namespace wsync {

class FdServer;       // control/fd_exchange.h
class DeviceSources;  // transport/cuda_ipc/device_sources.h

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
  // Writes from device memory of `device` that registerSource() was given are queued and copied
  // at flush() by one kernel (see the file comment); false: every write is a driver copy
  // (WSYNC_DEBUG_NO_COPY_BATCH=1, for A/B runs).
  bool batch_device_copies = true;
  // Times each flush's batched kernel with CUDA events: lastBatch() returns it, and every flush
  // that ran one prints its copies, bytes, device time and rate to stderr (WSYNC_DEBUG_TIMING=1).
  bool time_batches = false;
};

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

  // Device memory of options.device: recorded (until the registration goes) as a source of
  // batched copies (options.batch_device_copies; else a no-op). Pageable host memory: pinned with
  // cudaHostRegister(portable) until the registration goes. Anything else (pinned already, other
  // devices, managed memory): a no-op registration. The registration may outlive the transport.
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

  // Checked (every plane before anything is queued or enqueued); then queued for the batched
  // kernel when the whole source extent lies in registered device memory of options.device (see
  // registerSource), else enqueued as driver copies on stream(): cudaMemcpyAsync /
  // cudaMemcpy2DAsync (cudaMemcpyDefault) per plane, row by row past cudaDevAttrMaxPitch. Past
  // 1024 driver copies since the last check, waits (at most post_timeout) until the copies of the
  // check before completed: at most ~2048 are in flight.
  Status write(RemoteMemoryId remote, uint64_t remote_offset, const void* src,
               size_t bytes) override;
  Status write2d(RemoteMemoryId remote, uint64_t remote_offset, uint64_t remote_pitch,
                 const void* src, size_t src_pitch, size_t row_bytes, size_t rows) override;
  Status write3d(RemoteMemoryId remote, uint64_t remote_offset, uint64_t remote_pitch,
                 uint64_t remote_plane_pitch, const void* src, size_t src_pitch,
                 size_t src_plane_pitch, size_t row_bytes, size_t rows, size_t planes) override;

  // Launches the queued batched copies (one kernel; the queue empties also when that fails), then
  // records an event on stream() and polls it until done (success), `timeout` (TIMEOUT, the copies
  // stay queued on the stream), or a CUDA error (SYSTEM; sticky errors of the context stay).
  Status flush(std::chrono::milliseconds timeout) override;

  void progress() override {}  // nothing to progress: copies are one-sided

  // ---- beyond WriteTransport ----

  // The non-blocking stream every copy runs on. Work the caller enqueues on it (e.g. conversion
  // kernels filling a source buffer) runs in order with the driver copies; batched copies run at
  // flush(), after everything enqueued before it. flush() completes that work too. Owned by the
  // transport.
  cudaStream_t stream() const { return stream_.get(); }
  int device() const { return options_.device; }

  // WriteTransport::remoteAddress: valid on this transport's device. Kernels enqueued on stream()
  // (e.g. launchCopyRegion) need no synchronization of their own: the next flush() completes them
  // like a write. INVALID_ARGUMENT names the peer and remote id.
  Result<void*> remoteAddress(RemoteMemoryId remote, uint64_t offset, uint64_t bytes) override;

  // The batched kernel of the last flush that ran one (copies, bytes, device ms once complete when
  // options.time_batches; see CopyBatch::lastLaunch); all zero (-1 ms) when none ran.
  CopyBatch::Timing lastBatch() const;

 private:
  struct Remote {
    int32_t peer;
    uint8_t* base;  // mapped (or, for this process, the owner's) device pointer
    uint64_t size;
    bool written;  // written since the last successful flush
  };
  struct Peer {
    CudaIpcProcessInfo info;
    bool is_self = false;  // this very process
  };

  CudaIpcTransport(const CudaIpcTransportOptions& options, CudaStreamPtr stream,
                   CudaEventPtr flush_event, CudaEventPtr window_event,
                   std::unique_ptr<CopyBatch> batch, size_t max_pitch,
                   std::vector<uint8_t> address);

  Status useDevice() const;
  Result<std::unique_ptr<ExposedMemory>> allocateVmm(size_t bytes, FdServer& server,
                                                     const std::string& what);
  // Driver copies of one plane of a checked, non-empty write.
  Status copyPlane(Remote& r, RemoteMemoryId id, uint64_t offset, uint64_t pitch,
                   const uint8_t* src, size_t src_pitch, size_t row_bytes, size_t rows);
  // Keeps at most ~2 windows of driver copies in flight; see write().
  Status makeRoom(const Remote& r, RemoteMemoryId id);
  // After a successful flush that ran a batched kernel, when options.time_batches.
  void printBatchTiming() const;

  CudaIpcTransportOptions options_;
  // Declaration order is destruction order reversed: the batch (its tables), the events, then the
  // stream.
  CudaStreamPtr stream_;
  CudaEventPtr flush_event_;
  CudaEventPtr window_event_;                      // recorded every 1024 driver copies; see write()
  std::unique_ptr<CopyBatch> batch_;               // null unless options.batch_device_copies
  std::shared_ptr<DeviceSources> device_sources_;  // registered device memory of options.device
  bool window_recorded_ = false;
  size_t copies_in_window_ = 0;
  bool batch_ran_ = false;  // a flush launched batch_ (lastBatch())
  size_t max_pitch_;        // cudaDevAttrMaxPitch: larger pitches go row by row
  std::vector<uint8_t> address_;
  std::unordered_map<int32_t, Peer> peers_;
  std::vector<Remote> remotes_;  // index: RemoteMemoryId
  TransportMappings mappings_;   // of peers' memory
};

// The factory of the WriteTransport interface; see CudaIpcTransport::create.
Result<std::unique_ptr<WriteTransport>> createCudaIpcTransport(
    const CudaIpcTransportOptions& options = {});

}  // namespace wsync
