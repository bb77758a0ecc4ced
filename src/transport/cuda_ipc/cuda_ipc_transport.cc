#include "transport/cuda_ipc/cuda_ipc_transport.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <utility>

#include "common/cuda_check.h"
#include "control/fd_exchange.h"
#include "transport/cuda_ipc/device_sources.h"
#include "transport/cuda_ipc/vmm_memory.h"
#include "transport/write_checks.h"

namespace wsync {
namespace {

// Driver copies posted between two checks of the in-flight window (see CudaIpcTransport::write).
constexpr size_t kWindow = 1024;

std::string peerLabel(int32_t peer) {
  return "peer " + std::to_string(peer);
}

class CudaIpcExposedMemory final : public ExposedMemory {
 public:
  // `owned_device` >= 0: the memory was cudaMalloc'ed on that device and is freed here.
  CudaIpcExposedMemory(void* data, size_t size, int owned_device)
      : data_(data), size_(size), owned_device_(owned_device) {}
  // A VMM allocation offered by `server` under `offer_id`; the offer ends before the memory goes.
  CudaIpcExposedMemory(std::unique_ptr<VmmAllocation> vmm, size_t size, FdServer* server,
                       uint64_t offer_id)
      : data_(vmm->data()),
        size_(size),
        owned_device_(-1),
        vmm_(std::move(vmm)),
        server_(server),
        offer_id_(offer_id) {}
  ~CudaIpcExposedMemory() override {
    if (server_ != nullptr) server_->withdraw(offer_id_);
    if (owned_device_ >= 0 && cudaUseDevice(owned_device_).isOk()) {
      (void)cudaCheck(cudaFree(data_), "cudaFree");
    }
  }
  void* data() const override { return data_; }
  size_t size() const override { return size_; }
  const std::vector<uint8_t>& descriptor() const override { return descriptor_; }
  void setDescriptor(std::vector<uint8_t> descriptor) { descriptor_ = std::move(descriptor); }

 private:
  void* data_;
  size_t size_;
  std::vector<uint8_t> descriptor_;
  int owned_device_;
  std::unique_ptr<VmmAllocation> vmm_;  // owned VMM memory (else null)
  FdServer* server_ = nullptr;          // offers vmm_'s descriptor (else null)
  uint64_t offer_id_ = 0;
};

// A cudaHostRegister'ed range, unregistered when it goes; or a range of device memory recorded in
// `sources`, removed when it goes; or nothing.
class CudaIpcSourceRegistration final : public SourceRegistration {
 public:
  CudaIpcSourceRegistration() = default;
  explicit CudaIpcSourceRegistration(void* pinned) : pinned_(pinned) {}
  CudaIpcSourceRegistration(std::shared_ptr<DeviceSources> sources, uint64_t id)
      : sources_(std::move(sources)), id_(id) {}
  ~CudaIpcSourceRegistration() override {
    if (pinned_ != nullptr) (void)cudaCheck(cudaHostUnregister(pinned_), "cudaHostUnregister");
    if (sources_) sources_->remove(id_);
  }

 private:
  void* pinned_ = nullptr;
  std::shared_ptr<DeviceSources> sources_;
  uint64_t id_ = 0;
};

}  // namespace

Result<std::unique_ptr<CudaIpcTransport>> CudaIpcTransport::create(
    const CudaIpcTransportOptions& options) {
  const std::string what = "CUDA IPC transport on device " + std::to_string(options.device);
  if (!cudaDeviceAvailable(options.device)) {
    int count = 0;
    const cudaError_t error = cudaGetDeviceCount(&count);
    (void)cudaGetLastError();
    return Status(
        WSYNC_ERR_UNSUPPORTED,
        what + ": no such usable CUDA device (" +
            (error != cudaSuccess ? std::string("cudaGetDeviceCount: ") + cudaGetErrorName(error) +
                                        ", " + cudaGetErrorString(error)
                                  : std::to_string(count) + " devices") +
            ")");
  }
  WSYNC_RETURN_IF_ERROR(cudaUseDevice(options.device).withContext(what));
  cudaDeviceProp prop{};
  WSYNC_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, options.device),
                             what + ": cudaGetDeviceProperties");
  int max_pitch = 0;
  WSYNC_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&max_pitch, cudaDevAttrMaxPitch, options.device),
      what + ": cudaDeviceGetAttribute(cudaDevAttrMaxPitch)");
  WSYNC_ASSIGN_OR_RETURN(CudaStreamPtr stream, makeCudaStream(what));
  WSYNC_ASSIGN_OR_RETURN(CudaEventPtr flush_event, makeCudaEvent(/*timing=*/false, what));
  WSYNC_ASSIGN_OR_RETURN(CudaEventPtr window_event, makeCudaEvent(/*timing=*/false, what));
  std::unique_ptr<CopyBatch> batch;
  if (options.batch_device_copies) {
    Result<std::unique_ptr<CopyBatch>> made = CopyBatch::create(options.time_batches);
    if (!made.isOk()) return made.status().withContext(what);
    batch = std::move(made).value();
  }

  CudaIpcProcessInfo me;
  me.host = cudaIpcHostIdentity();
  me.pid = cudaIpcProcessId();
  me.nonce = cudaIpcProcessNonce();
  me.device = options.device;
  static_assert(sizeof(prop.uuid.bytes) == 16);
  std::memcpy(me.device_uuid.data(), prop.uuid.bytes, 16);
  return std::unique_ptr<CudaIpcTransport>(new CudaIpcTransport(
      options, std::move(stream), std::move(flush_event), std::move(window_event), std::move(batch),
      static_cast<size_t>(max_pitch > 0 ? max_pitch : std::numeric_limits<int>::max()),
      encodeCudaIpcAddress(me)));
}

CudaIpcTransport::CudaIpcTransport(const CudaIpcTransportOptions& options, CudaStreamPtr stream,
                                   CudaEventPtr flush_event, CudaEventPtr window_event,
                                   std::unique_ptr<CopyBatch> batch, size_t max_pitch,
                                   std::vector<uint8_t> address)
    : options_(options),
      stream_(std::move(stream)),
      flush_event_(std::move(flush_event)),
      window_event_(std::move(window_event)),
      batch_(std::move(batch)),
      device_sources_(std::make_shared<DeviceSources>()),
      max_pitch_(max_pitch),
      address_(std::move(address)) {}

CudaIpcTransport::~CudaIpcTransport() {
  bool idle = false;
  if (useDevice().isOk()) {
    if (cudaEventRecord(flush_event_.get(), stream_.get()) == cudaSuccess) {
      // A CUDA error (a sticky one breaks the context) also ends the wait: nothing runs anymore.
      const Status s = waitCudaEvent(flush_event_.get(), options_.post_timeout);
      idle = s.code() != WSYNC_ERR_TIMEOUT;
    } else {
      (void)cudaGetLastError();
    }
  }
  // Copies still running may write through the mappings: then keep them (leak) rather than unmap
  // memory under the copy engines. The stream and events are released either way (CUDA defers
  // that until their work completes); so is the batch's table unless its kernel still runs.
  mappings_.releaseAll(/*unmap=*/idle);
}

Status CudaIpcTransport::useDevice() const {
  return cudaUseDevice(options_.device);
}

Result<std::unique_ptr<ExposedMemory>> CudaIpcTransport::allocateExposed(size_t bytes) {
  const std::string what = "CUDA IPC allocateExposed(" + std::to_string(bytes) +
                           " bytes) on device " + std::to_string(options_.device);
  if (bytes == 0) return invalidArgument(what + ": 0 bytes asked for");
  WSYNC_RETURN_IF_ERROR(useDevice().withContext(what));
  if (options_.vmm_exports && vmmShareable(options_.device)) {
    Result<FdServer*> server = FdServer::processServer();
    if (server.isOk()) return allocateVmm(bytes, **server, what);
  }
  void* data = nullptr;
  WSYNC_CUDA_RETURN_IF_ERROR(cudaMalloc(&data, bytes), what + ": cudaMalloc");
  // Owns (and frees) `data` from here, whatever fails below.
  auto memory = std::make_unique<CudaIpcExposedMemory>(data, bytes, options_.device);
  CudaIpcDescriptor d;
  WSYNC_CUDA_RETURN_IF_ERROR(cudaIpcGetMemHandle(&d.handle, data), what + ": cudaIpcGetMemHandle");
  d.size = bytes;
  d.base = reinterpret_cast<uint64_t>(data);
  d.pid = cudaIpcProcessId();
  d.nonce = cudaIpcProcessNonce();
  d.device = options_.device;
  memory->setDescriptor(encodeCudaIpcDescriptor(d));
  return std::unique_ptr<ExposedMemory>(std::move(memory));
}

Result<std::unique_ptr<ExposedMemory>> CudaIpcTransport::allocateVmm(size_t bytes, FdServer& server,
                                                                     const std::string& what) {
  Result<std::unique_ptr<VmmAllocation>> allocated = VmmAllocation::create(options_.device, bytes);
  if (!allocated.isOk()) return allocated.status().withContext(what);
  std::unique_ptr<VmmAllocation> vmm = std::move(allocated).value();
  CudaIpcDescriptor d;
  d.kind = CudaIpcExportKind::kVmm;
  const FdServer::Offer offer = server.offer(vmm->fd());
  d.fd_server = server.name();
  d.offer_id = offer.id;
  d.offer_token = offer.token;
  d.mapped_size = vmm->mappedSize();
  d.size = bytes;
  d.base = reinterpret_cast<uint64_t>(vmm->data());
  d.pid = cudaIpcProcessId();
  d.nonce = cudaIpcProcessNonce();
  d.device = options_.device;
  auto memory = std::make_unique<CudaIpcExposedMemory>(std::move(vmm), bytes, &server, offer.id);
  memory->setDescriptor(encodeCudaIpcDescriptor(d));
  return std::unique_ptr<ExposedMemory>(std::move(memory));
}

Result<std::unique_ptr<ExposedMemory>> CudaIpcTransport::expose(void* base, size_t bytes) {
  const std::string what = "CUDA IPC expose(" + std::to_string(bytes) + " bytes) on device " +
                           std::to_string(options_.device);
  if (base == nullptr || bytes == 0) return invalidArgument(what + ": null base or 0 bytes");
  WSYNC_RETURN_IF_ERROR(useDevice().withContext(what));
  cudaPointerAttributes attr{};
  const cudaError_t error = cudaPointerGetAttributes(&attr, base);
  if (error != cudaSuccess) {
    return invalidArgument(what + ": not a CUDA pointer (" + cudaCheck(error, "").message() + ")");
  }
  if (attr.type != cudaMemoryTypeDevice) {
    return invalidArgument(what + ": the memory is " +
                           (attr.type == cudaMemoryTypeManaged ? "managed (unified)"
                            : attr.type == cudaMemoryTypeHost  ? "pinned host"
                                                               : "pageable host") +
                           " memory; CUDA IPC exposes cudaMalloc device memory only");
  }
  if (attr.device != options_.device) {
    return invalidArgument(what + ": the memory is on CUDA device " + std::to_string(attr.device));
  }
  CudaIpcDescriptor d;
  WSYNC_CUDA_RETURN_IF_ERROR(
      cudaIpcGetMemHandle(&d.handle, base),
      what + ": cudaIpcGetMemHandle (is it the base of a plain cudaMalloc allocation?)");
  d.size = bytes;
  d.base = reinterpret_cast<uint64_t>(base);
  d.pid = cudaIpcProcessId();
  d.nonce = cudaIpcProcessNonce();
  d.device = options_.device;
  auto memory = std::make_unique<CudaIpcExposedMemory>(base, bytes, /*owned_device=*/-1);
  memory->setDescriptor(encodeCudaIpcDescriptor(d));
  return std::unique_ptr<ExposedMemory>(std::move(memory));
}

Result<std::unique_ptr<SourceRegistration>> CudaIpcTransport::registerSource(const void* base,
                                                                             size_t bytes) {
  const std::string what = "CUDA IPC registerSource(" + std::to_string(bytes) + " bytes)";
  if (base == nullptr || bytes == 0) return invalidArgument(what + ": null base or 0 bytes");
  WSYNC_RETURN_IF_ERROR(useDevice().withContext(what));
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, base) != cudaSuccess) {
    (void)cudaGetLastError();
    attr.type = cudaMemoryTypeUnregistered;
  }
  if (attr.type == cudaMemoryTypeDevice && attr.device == options_.device && batch_) {
    const uint64_t id = device_sources_->add(base, bytes);
    return std::unique_ptr<SourceRegistration>(new CudaIpcSourceRegistration(device_sources_, id));
  }
  if (attr.type != cudaMemoryTypeUnregistered) {  // device, managed or pinned already
    return std::unique_ptr<SourceRegistration>(new CudaIpcSourceRegistration());
  }
  void* p = const_cast<void*>(base);  // only read, as a copy source
  const cudaError_t error = cudaHostRegister(p, bytes, cudaHostRegisterPortable);
  if (error == cudaErrorHostMemoryAlreadyRegistered) {  // overlaps another registration
    (void)cudaGetLastError();
    return std::unique_ptr<SourceRegistration>(new CudaIpcSourceRegistration());
  }
  WSYNC_CUDA_RETURN_IF_ERROR(error, what + ": cudaHostRegister");
  return std::unique_ptr<SourceRegistration>(new CudaIpcSourceRegistration(p));
}

Status CudaIpcTransport::connect(int32_t peer, const std::vector<uint8_t>& peer_address) {
  const std::string what = "CUDA IPC connect to " + peerLabel(peer);
  if (peer < 0) return invalidArgument(what + ": peer ids are >= 0");
  if (peers_.count(peer) != 0) return invalidUsage(what + ": already connected");
  Result<CudaIpcProcessInfo> info = decodeCudaIpcAddress(peer_address);
  if (!info.isOk()) return invalidArgument(what + ": bad peer address: " + info.status().message());
  const std::string& mine = cudaIpcHostIdentity();
  if (info->host != mine) {
    return Status(WSYNC_ERR_UNSUPPORTED,
                  what + ": the peer runs on host '" + info->host + "' and this process on host '" +
                      mine +
                      "'; CUDA IPC reaches processes of one node only (use the UCX transport "
                      "across nodes)");
  }
  const bool is_self = info->pid == cudaIpcProcessId() && info->nonce == cudaIpcProcessNonce();
  peers_.emplace(peer, Peer{std::move(info).value(), is_self});
  return Status::ok();
}

Result<RemoteMemoryId> CudaIpcTransport::attach(int32_t peer,
                                                const std::vector<uint8_t>& descriptor) {
  const std::string what = "CUDA IPC attach for " + peerLabel(peer);
  auto it = peers_.find(peer);
  if (it == peers_.end()) return invalidUsage(what + ": not connected (connect() first)");
  if (remotes_.size() >= static_cast<size_t>(std::numeric_limits<RemoteMemoryId>::max())) {
    return invalidUsage(what + ": too many attached regions");
  }
  CudaIpcDescriptor d;
  const std::string bad = decodeCudaIpcDescriptor(descriptor, d);
  if (!bad.empty()) return protocolError(what + ": bad memory descriptor: " + bad);
  const Peer& p = it->second;
  if (d.pid != p.info.pid || d.nonce != p.info.nonce) {
    return invalidArgument(what + ": the descriptor is memory of process " + std::to_string(d.pid) +
                           ", not of the peer (process " + std::to_string(p.info.pid) + " on " +
                           p.info.host + ")");
  }
  Remote remote{peer, nullptr, d.size, false};
  if (p.is_self) {
    remote.base = reinterpret_cast<uint8_t*>(d.base);  // own handles cannot be opened
  } else {
    WSYNC_RETURN_IF_ERROR(useDevice().withContext(what));
    WSYNC_ASSIGN_OR_RETURN(
        remote.base, mappings_.map(d, options_.device, options_.post_timeout,
                                   what + " (" + std::to_string(d.size) + " bytes of process " +
                                       std::to_string(d.pid) + ")"));
  }
  const auto id = static_cast<RemoteMemoryId>(remotes_.size());
  remotes_.push_back(remote);
  return id;
}

Status CudaIpcTransport::write(RemoteMemoryId remote, uint64_t remote_offset, const void* src,
                               size_t bytes) {
  return write3d(remote, remote_offset, bytes, bytes, src, bytes, bytes, bytes, 1, 1);
}

Status CudaIpcTransport::write2d(RemoteMemoryId remote, uint64_t remote_offset,
                                 uint64_t remote_pitch, const void* src, size_t src_pitch,
                                 size_t row_bytes, size_t rows) {
  return write3d(remote, remote_offset, remote_pitch, 0, src, src_pitch, 0, row_bytes, rows, 1);
}

Status CudaIpcTransport::write3d(RemoteMemoryId remote, uint64_t remote_offset,
                                 uint64_t remote_pitch, uint64_t remote_plane_pitch,
                                 const void* src, size_t src_pitch, size_t src_plane_pitch,
                                 size_t row_bytes, size_t rows, size_t planes) {
  if (remote < 0 || static_cast<size_t>(remote) >= remotes_.size()) {
    return unknownRemoteError("CUDA IPC", "write", remote, remotes_.size());
  }
  Remote& r = remotes_[static_cast<size_t>(remote)];
  const WriteShape shape{remote_offset, remote_pitch,    remote_plane_pitch,
                         src_pitch,     src_plane_pitch, row_bytes,
                         rows,          planes};
  uint64_t src_extent = 0;
  WSYNC_RETURN_IF_ERROR(checkWrite({"CUDA IPC", r.peer, remote, r.size}, shape, src, &src_extent));
  if (shape.empty()) return Status::ok();
  const auto* s = static_cast<const uint8_t*>(src);
  if (batch_ && device_sources_->contains(s, src_extent)) {
    CopyTask task;
    task.src = s;
    task.dst = r.base + remote_offset;
    task.row_bytes = row_bytes;
    task.rows = rows;
    task.planes = planes;
    task.src_pitch = src_pitch;
    task.dst_pitch = remote_pitch;
    task.src_plane_pitch = src_plane_pitch;
    task.dst_plane_pitch = remote_plane_pitch;
    batch_->add(task);
    r.written = true;
    return Status::ok();
  }
  WSYNC_RETURN_IF_ERROR(useDevice());
  for (size_t plane = 0; plane < planes; ++plane) {
    WSYNC_RETURN_IF_ERROR(copyPlane(r, remote, remote_offset + plane * remote_plane_pitch,
                                    remote_pitch, s + plane * src_plane_pitch, src_pitch, row_bytes,
                                    rows));
  }
  return Status::ok();
}

Status CudaIpcTransport::copyPlane(Remote& r, RemoteMemoryId id, uint64_t offset, uint64_t pitch,
                                   const uint8_t* src, size_t src_pitch, size_t row_bytes,
                                   size_t rows) {
  auto fail = [&](cudaError_t error, const std::string& why) {
    return cudaCheck(error, "CUDA IPC write to " + peerLabel(r.peer) + ", remote memory " +
                                std::to_string(id) + ": " + why);
  };
  uint8_t* dst = r.base + offset;
  const bool packed = rows == 1 || (pitch == row_bytes && src_pitch == row_bytes);
  if (packed || (pitch <= max_pitch_ && src_pitch <= max_pitch_)) {
    WSYNC_RETURN_IF_ERROR(makeRoom(r, id));
    r.written = true;
    const cudaError_t error =
        packed ? cudaMemcpyAsync(dst, src, rows * row_bytes, cudaMemcpyDefault, stream_.get())
               : cudaMemcpy2DAsync(dst, pitch, src, src_pitch, row_bytes, rows, cudaMemcpyDefault,
                                   stream_.get());
    ++copies_in_window_;
    if (error == cudaSuccess) return Status::ok();
    return fail(error, (packed ? "cudaMemcpyAsync of " : "cudaMemcpy2DAsync of ") +
                           std::to_string(rows) + " x " + std::to_string(row_bytes) +
                           " bytes at offset " + std::to_string(offset));
  }
  // Pitches past what 2-D copies take: row by row.
  for (size_t i = 0; i < rows; ++i) {
    WSYNC_RETURN_IF_ERROR(makeRoom(r, id));
    r.written = true;
    const cudaError_t error = cudaMemcpyAsync(dst + i * pitch, src + i * src_pitch, row_bytes,
                                              cudaMemcpyDefault, stream_.get());
    ++copies_in_window_;
    if (error != cudaSuccess) {
      return fail(error, "cudaMemcpyAsync of row " + std::to_string(i) + " (" +
                             std::to_string(row_bytes) + " bytes)");
    }
  }
  return Status::ok();
}

Result<void*> CudaIpcTransport::remoteAddress(RemoteMemoryId remote, uint64_t offset,
                                              uint64_t bytes) {
  if (remote < 0 || static_cast<size_t>(remote) >= remotes_.size()) {
    return unknownRemoteError("CUDA IPC", "remoteAddress", remote, remotes_.size());
  }
  Remote& r = remotes_[static_cast<size_t>(remote)];
  // At least one byte is checked, so the address itself lies inside the exposed memory.
  const uint64_t checked = std::max<uint64_t>(bytes, 1);
  if (offset > r.size || checked > r.size - offset) {
    return invalidArgument("CUDA IPC remoteAddress of " + peerLabel(r.peer) + ", remote memory " +
                           std::to_string(remote) + ": " + std::to_string(bytes) +
                           " bytes at offset " + std::to_string(offset) +
                           " do not fit the exposed size " + std::to_string(r.size));
  }
  r.written = true;
  return static_cast<void*>(r.base + offset);
}

Status CudaIpcTransport::makeRoom(const Remote& r, RemoteMemoryId id) {
  if (copies_in_window_ < kWindow) return Status::ok();
  if (window_recorded_) {
    const Status s = waitCudaEvent(window_event_.get(), options_.post_timeout);
    if (s.code() == WSYNC_ERR_TIMEOUT) {
      return timeoutError("CUDA IPC write to " + peerLabel(r.peer) + ", remote memory " +
                          std::to_string(id) + ": copies posted " + std::to_string(kWindow) +
                          "+ writes ago still not done after " +
                          std::to_string(options_.post_timeout.count()) +
                          " ms (a hung kernel on the transport's stream?); this one was not "
                          "posted");
    }
    if (!s.isOk()) {
      return s.withContext("CUDA IPC write to " + peerLabel(r.peer) + ", remote memory " +
                           std::to_string(id) + ": earlier copies failed");
    }
  }
  WSYNC_CUDA_RETURN_IF_ERROR(cudaEventRecord(window_event_.get(), stream_.get()),
                             "CUDA IPC write: cudaEventRecord");
  window_recorded_ = true;
  copies_in_window_ = 0;
  return Status::ok();
}

Status CudaIpcTransport::flush(std::chrono::milliseconds timeout) {
  WSYNC_RETURN_IF_ERROR(useDevice().withContext("CUDA IPC flush"));
  const bool batched = batch_ && !batch_->empty();
  if (batched) {
    const Status launched = batch_->launch(stream_.get(), options_.post_timeout);
    batch_ran_ = true;
    if (!launched.isOk()) {
      return launched.withContext("CUDA IPC flush of writes to " + unflushedPeers(remotes_));
    }
  }
  WSYNC_CUDA_RETURN_IF_ERROR(
      cudaEventRecord(flush_event_.get(), stream_.get()),
      "CUDA IPC flush of writes to " + unflushedPeers(remotes_) + ": cudaEventRecord");
  const Status s = waitCudaEvent(flush_event_.get(), timeout);
  if (s.code() == WSYNC_ERR_TIMEOUT) {
    return timeoutError("CUDA IPC flush: writes to " + unflushedPeers(remotes_) +
                        " not complete after " + std::to_string(timeout.count()) +
                        " ms (they stay queued)");
  }
  if (!s.isOk()) return s.withContext("CUDA IPC flush of writes to " + unflushedPeers(remotes_));
  for (Remote& r : remotes_)
    r.written = false;
  window_recorded_ = false;  // everything before is done
  copies_in_window_ = 0;
  if (batched && options_.time_batches) printBatchTiming();
  return Status::ok();
}

CopyBatch::Timing CudaIpcTransport::lastBatch() const {
  if (!batch_ || !batch_ran_) return {};
  return batch_->lastLaunch();
}

void CudaIpcTransport::printBatchTiming() const {
  const CopyBatch::Timing t = lastBatch();
  if (t.device_ms <= 0) return;
  std::fprintf(stderr,
               "[wsync cuda_ipc device %d] batched copy kernel: %llu copies, %llu bytes in %.3f "
               "ms (%.1f GB/s)\n",
               options_.device, static_cast<unsigned long long>(t.copies),
               static_cast<unsigned long long>(t.bytes), t.device_ms,
               static_cast<double>(t.bytes) / t.device_ms / 1e6);
}

Result<std::unique_ptr<WriteTransport>> createCudaIpcTransport(
    const CudaIpcTransportOptions& options) {
  WSYNC_ASSIGN_OR_RETURN(std::unique_ptr<CudaIpcTransport> transport,
                         CudaIpcTransport::create(options));
  return std::unique_ptr<WriteTransport>(std::move(transport));
}

}  // namespace wsync
