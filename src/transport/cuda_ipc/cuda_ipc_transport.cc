#include "transport/cuda_ipc/cuda_ipc_transport.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <mutex>
#include <random>
#include <thread>
#include <utility>

#include "common/cuda_check.h"
#include "common/wire.h"
#include "control/fd_exchange.h"
#include "transport/cuda_ipc/vmm_memory.h"

namespace wsync {
namespace {

using Clock = std::chrono::steady_clock;

// Wire formats: a tag, a version, then the fields. Tags keep another backend's bytes (or garbage)
// from being taken for ours.
constexpr uint32_t kAddressTag = 0x41435357;     // "WSCA"
constexpr uint32_t kDescriptorTag = 0x44435357;  // "WSCD"
constexpr uint8_t kWireVersion = 1;              // addresses
constexpr uint8_t kDescriptorVersion = 2;        // 2: the export kind (legacy IPC handle or VMM)
constexpr size_t kMaxServerNameBytes = 107;      // an abstract unix socket name
constexpr size_t kMaxHostBytes = 1024;
constexpr size_t kHandleBytes = sizeof(cudaIpcMemHandle_t);
static_assert(kHandleBytes == CUDA_IPC_HANDLE_SIZE);

// Copies posted between two checks of the in-flight window (see CudaIpcTransport::write).
constexpr size_t kWindow = 1024;

int64_t thisPid() {
  return static_cast<int64_t>(::getpid());
}

uint64_t processNonce() {
  static const uint64_t nonce = [] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(thisPid());
  }();
  return nonce;
}

std::string peerLabel(int32_t peer) {
  return "peer " + std::to_string(peer);
}

// How exposed memory is shared: a cudaIpcGetMemHandle handle, or a VMM allocation whose file
// descriptor the owner's FdServer hands out.
enum class ExportKind : uint8_t { kIpcHandle = 1, kVmm = 2 };

// What a memory descriptor carries.
struct Descriptor {
  ExportKind kind = ExportKind::kIpcHandle;
  cudaIpcMemHandle_t handle{};  // kIpcHandle
  std::string fd_server;        // kVmm: FdServer::name() of the owner
  uint64_t offer_id = 0;        // kVmm: the offer and its token
  uint64_t offer_token = 0;
  uint64_t mapped_size = 0;  // kVmm: VmmAllocation::mappedSize()
  uint64_t size = 0;
  uint64_t base = 0;  // the device pointer in the owner's process
  int64_t pid = 0;
  uint64_t nonce = 0;
  int64_t device = 0;
};

std::vector<uint8_t> encodeDescriptor(const Descriptor& d) {
  ByteWriter w;
  w.fixed32(kDescriptorTag);
  w.u8(kDescriptorVersion);
  w.u8(static_cast<uint8_t>(d.kind));
  if (d.kind == ExportKind::kIpcHandle) {
    w.bytes(&d.handle, kHandleBytes);
  } else {
    w.str(d.fd_server);
    w.fixed64(d.offer_id);
    w.fixed64(d.offer_token);
    w.varu(d.mapped_size);
  }
  w.varu(d.size);
  w.fixed64(d.base);
  w.vari(d.pid);
  w.fixed64(d.nonce);
  w.vari(d.device);
  return w.take();
}

// Returns an explanation when `bytes` is not a well-formed descriptor.
std::string decodeDescriptor(const std::vector<uint8_t>& bytes, Descriptor& d) {
  ByteReader r(bytes);
  uint32_t tag = 0;
  uint8_t version = 0;
  if (!r.fixed32(tag) || tag != kDescriptorTag) {
    return "not a CUDA IPC memory descriptor (wrong tag; another backend's, or garbage)";
  }
  if (!r.u8(version) || version != kDescriptorVersion) {
    return "wire version " + std::to_string(version) + ", expected " +
           std::to_string(kDescriptorVersion);
  }
  uint8_t kind = 0;
  if (!r.u8(kind)) return "truncated (" + std::to_string(bytes.size()) + " bytes)";
  d.kind = static_cast<ExportKind>(kind);
  bool complete = false;
  if (d.kind == ExportKind::kIpcHandle) {
    complete = r.bytes(&d.handle, kHandleBytes);
  } else if (d.kind == ExportKind::kVmm) {
    complete = r.str(d.fd_server, kMaxServerNameBytes) && r.fixed64(d.offer_id) &&
               r.fixed64(d.offer_token) && r.varu(d.mapped_size);
  } else {
    return "unknown export kind " + std::to_string(kind);
  }
  if (!complete || !r.varu(d.size) || !r.fixed64(d.base) || !r.vari(d.pid) || !r.fixed64(d.nonce) ||
      !r.vari(d.device)) {
    return "truncated (" + std::to_string(bytes.size()) + " bytes)";
  }
  if (!r.atEnd()) return std::to_string(r.remaining()) + " unexpected bytes at the end";
  if (d.size == 0 || d.base == 0 || d.base + d.size < d.base) {
    return "empty, null or wrapping region";
  }
  if (d.kind == ExportKind::kVmm && (d.fd_server.empty() || d.mapped_size < d.size)) {
    return "VMM export without a descriptor server, or mapped smaller than its size";
  }
  return {};
}

// IPC mappings of this process, shared by all its transports: cudaIpcOpenMemHandle fails when
// the same handle is opened twice in one process, so each distinct handle is opened once and
// reference counted. Never destroyed (closing handles during static destruction would race the
// CUDA runtime's own teardown; the process exit unmaps everything).
class IpcMappings {
 public:
  static IpcMappings& instance() {
    static IpcMappings* mappings = new IpcMappings;
    return *mappings;
  }

  // The key under which `d`'s mapping is shared.
  static std::string keyOf(const Descriptor& d) {
    if (d.kind == ExportKind::kIpcHandle) {
      return "ipc:" + std::string(reinterpret_cast<const char*>(&d.handle), kHandleBytes);
    }
    return "vmm:" + d.fd_server + ":" + std::to_string(d.offer_id);
  }

  // The mapping of `d`'s memory, made on `device` (current) when it is new: an IPC handle opened,
  // or a VMM allocation's descriptor fetched from its owner (waiting at most `timeout`) and
  // imported.
  Result<uint8_t*> acquire(const std::string& key, const Descriptor& d, int device,
                           std::chrono::milliseconds timeout, const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      ++it->second.refs;
      return it->second.base;
    }
    Entry entry{nullptr, device, 1, nullptr};
    if (d.kind == ExportKind::kVmm) {
      Result<Fd> fd = fetchFd(d.fd_server, d.offer_id, d.offer_token, timeout);
      if (!fd.isOk()) return fd.status().withContext(what + ": fetching the VMM descriptor");
      Result<std::unique_ptr<VmmMapping>> mapping =
          VmmMapping::import(fd->get(), d.mapped_size, device);
      if (!mapping.isOk()) return mapping.status().withContext(what);
      entry.vmm = std::move(mapping).value();
      entry.base = entry.vmm->data();
    } else {
      void* base = nullptr;
      WSYNC_CUDA_RETURN_IF_ERROR(
          cudaIpcOpenMemHandle(&base, d.handle, cudaIpcMemLazyEnablePeerAccess),
          what +
              ": cudaIpcOpenMemHandle failed (is the owner alive, on this node, and its memory "
              "plain cudaMalloc memory?)");
      entry.base = static_cast<uint8_t*>(base);
    }
    uint8_t* base = entry.base;
    entries_.emplace(key, std::move(entry));
    return base;
  }

  void release(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(key);
    if (it == entries_.end() || --it->second.refs > 0) return;
    if (cudaUseDevice(it->second.device).isOk() && !it->second.vmm) {
      (void)cudaCheck(cudaIpcCloseMemHandle(it->second.base), "cudaIpcCloseMemHandle");
    }
    entries_.erase(it);  // a VMM mapping unmaps here
  }

 private:
  struct Entry {
    uint8_t* base;
    int device;
    int refs;
    std::unique_ptr<VmmMapping> vmm;  // set for VMM imports
  };
  std::mutex mu_;
  std::unordered_map<std::string, Entry> entries_;
};

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

// A cudaHostRegister'ed range, unregistered when it goes; or nothing (base null).
class CudaIpcSourceRegistration final : public SourceRegistration {
 public:
  explicit CudaIpcSourceRegistration(void* pinned) : pinned_(pinned) {}
  ~CudaIpcSourceRegistration() override {
    if (pinned_ != nullptr) (void)cudaCheck(cudaHostUnregister(pinned_), "cudaHostUnregister");
  }

 private:
  void* pinned_;
};

}  // namespace

// ---- addresses ----------------------------------------------------------------------------------

std::string cudaIpcHostIdentity() {
  static const std::string identity = [] {
    char host[256] = {};
    if (::gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "unknown-host");
    std::string id = host;
    std::ifstream boot("/proc/sys/kernel/random/boot_id");
    std::string boot_id;
    if (boot && std::getline(boot, boot_id) && !boot_id.empty()) id += "/" + boot_id;
    return id;
  }();
  return identity;
}

std::vector<uint8_t> encodeCudaIpcAddress(const CudaIpcProcessInfo& info) {
  ByteWriter w;
  w.fixed32(kAddressTag);
  w.u8(kWireVersion);
  w.str(info.host);
  w.vari(info.pid);
  w.fixed64(info.nonce);
  w.vari(info.device);
  w.bytes(info.device_uuid.data(), info.device_uuid.size());
  return w.take();
}

Result<CudaIpcProcessInfo> decodeCudaIpcAddress(const std::vector<uint8_t>& address) {
  ByteReader r(address);
  uint32_t tag = 0;
  uint8_t version = 0;
  if (!r.fixed32(tag) || tag != kAddressTag) {
    return protocolError("not a CUDA IPC address (wrong tag; another backend's, or garbage)");
  }
  if (!r.u8(version) || version != kWireVersion) {
    return protocolError("CUDA IPC address of wire version " + std::to_string(version) +
                         ", expected " + std::to_string(kWireVersion));
  }
  CudaIpcProcessInfo info;
  int64_t device = 0;
  if (!r.str(info.host, kMaxHostBytes) || !r.vari(info.pid) || !r.fixed64(info.nonce) ||
      !r.vari(device) || !r.bytes(info.device_uuid.data(), info.device_uuid.size())) {
    return protocolError("truncated CUDA IPC address (" + std::to_string(address.size()) +
                         " bytes)");
  }
  if (!r.atEnd()) {
    return protocolError("CUDA IPC address with " + std::to_string(r.remaining()) +
                         " unexpected bytes at the end");
  }
  if (info.host.empty() || info.pid <= 0 || device < 0 ||
      device > std::numeric_limits<int32_t>::max()) {
    return protocolError("CUDA IPC address with an empty host, pid " + std::to_string(info.pid) +
                         " or device " + std::to_string(device));
  }
  info.device = static_cast<int32_t>(device);
  return info;
}

// ---- the transport ------------------------------------------------------------------------------

void CudaIpcTransport::StreamDeleter::operator()(cudaStream_t stream) const {
  (void)cudaCheck(cudaStreamDestroy(stream), "cudaStreamDestroy");
}
void CudaIpcTransport::EventDeleter::operator()(cudaEvent_t event) const {
  (void)cudaCheck(cudaEventDestroy(event), "cudaEventDestroy");
}

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
  cudaStream_t raw_stream = nullptr;
  WSYNC_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&raw_stream, cudaStreamNonBlocking),
                             what + ": cudaStreamCreateWithFlags");
  StreamPtr stream(raw_stream);
  cudaEvent_t raw_event = nullptr;
  WSYNC_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&raw_event, cudaEventDisableTiming),
                             what + ": cudaEventCreateWithFlags");
  EventPtr flush_event(raw_event);
  WSYNC_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&raw_event, cudaEventDisableTiming),
                             what + ": cudaEventCreateWithFlags");
  EventPtr window_event(raw_event);

  CudaIpcProcessInfo me;
  me.host = cudaIpcHostIdentity();
  me.pid = thisPid();
  me.nonce = processNonce();
  me.device = options.device;
  static_assert(sizeof(prop.uuid.bytes) == 16);
  std::memcpy(me.device_uuid.data(), prop.uuid.bytes, 16);
  return std::unique_ptr<CudaIpcTransport>(new CudaIpcTransport(
      options, std::move(stream), std::move(flush_event), std::move(window_event),
      static_cast<size_t>(max_pitch > 0 ? max_pitch : std::numeric_limits<int>::max()),
      encodeCudaIpcAddress(me)));
}

CudaIpcTransport::CudaIpcTransport(const CudaIpcTransportOptions& options, StreamPtr stream,
                                   EventPtr flush_event, EventPtr window_event, size_t max_pitch,
                                   std::vector<uint8_t> address)
    : options_(options),
      stream_(std::move(stream)),
      flush_event_(std::move(flush_event)),
      window_event_(std::move(window_event)),
      max_pitch_(max_pitch),
      address_(std::move(address)) {}

CudaIpcTransport::~CudaIpcTransport() {
  bool idle = false;
  if (useDevice().isOk()) {
    bool timed_out = false;
    if (cudaEventRecord(flush_event_.get(), stream_.get()) == cudaSuccess) {
      // A CUDA error (a sticky one breaks the context) also ends the wait: nothing runs anymore.
      idle = waitEvent(flush_event_.get(), options_.post_timeout, timed_out).isOk() || !timed_out;
    } else {
      (void)cudaGetLastError();
    }
  }
  // Copies still running may write through the mappings: then keep them (leak) rather than unmap
  // memory under the copy engines. The stream and events are released either way (CUDA defers
  // that until their work completes).
  if (idle) {
    for (const auto& [key, base] : mappings_)
      IpcMappings::instance().release(key);
  }
  mappings_.clear();
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
  Descriptor d;
  WSYNC_CUDA_RETURN_IF_ERROR(cudaIpcGetMemHandle(&d.handle, data), what + ": cudaIpcGetMemHandle");
  d.size = bytes;
  d.base = reinterpret_cast<uint64_t>(data);
  d.pid = thisPid();
  d.nonce = processNonce();
  d.device = options_.device;
  memory->setDescriptor(encodeDescriptor(d));
  return std::unique_ptr<ExposedMemory>(std::move(memory));
}

Result<std::unique_ptr<ExposedMemory>> CudaIpcTransport::allocateVmm(size_t bytes, FdServer& server,
                                                                     const std::string& what) {
  Result<std::unique_ptr<VmmAllocation>> allocated = VmmAllocation::create(options_.device, bytes);
  if (!allocated.isOk()) return allocated.status().withContext(what);
  std::unique_ptr<VmmAllocation> vmm = std::move(allocated).value();
  Descriptor d;
  d.kind = ExportKind::kVmm;
  const FdServer::Offer offer = server.offer(vmm->fd());
  d.fd_server = server.name();
  d.offer_id = offer.id;
  d.offer_token = offer.token;
  d.mapped_size = vmm->mappedSize();
  d.size = bytes;
  d.base = reinterpret_cast<uint64_t>(vmm->data());
  d.pid = thisPid();
  d.nonce = processNonce();
  d.device = options_.device;
  auto memory = std::make_unique<CudaIpcExposedMemory>(std::move(vmm), bytes, &server, offer.id);
  memory->setDescriptor(encodeDescriptor(d));
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
  Descriptor d;
  WSYNC_CUDA_RETURN_IF_ERROR(
      cudaIpcGetMemHandle(&d.handle, base),
      what + ": cudaIpcGetMemHandle (is it the base of a plain cudaMalloc allocation?)");
  d.size = bytes;
  d.base = reinterpret_cast<uint64_t>(base);
  d.pid = thisPid();
  d.nonce = processNonce();
  d.device = options_.device;
  auto memory = std::make_unique<CudaIpcExposedMemory>(base, bytes, /*owned_device=*/-1);
  memory->setDescriptor(encodeDescriptor(d));
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
  if (attr.type != cudaMemoryTypeUnregistered) {  // device, managed or pinned already
    return std::unique_ptr<SourceRegistration>(new CudaIpcSourceRegistration(nullptr));
  }
  void* p = const_cast<void*>(base);  // only read, as a copy source
  const cudaError_t error = cudaHostRegister(p, bytes, cudaHostRegisterPortable);
  if (error == cudaErrorHostMemoryAlreadyRegistered) {  // overlaps another registration
    (void)cudaGetLastError();
    return std::unique_ptr<SourceRegistration>(new CudaIpcSourceRegistration(nullptr));
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
  const bool is_self = info->pid == thisPid() && info->nonce == processNonce();
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
  Descriptor d;
  const std::string bad = decodeDescriptor(descriptor, d);
  if (!bad.empty()) return protocolError(what + ": bad memory descriptor: " + bad);
  const Peer& p = it->second;
  if (d.pid != p.info.pid || d.nonce != p.info.nonce) {
    return invalidArgument(what + ": the descriptor is memory of process " + std::to_string(d.pid) +
                           ", not of the peer (process " + std::to_string(p.info.pid) + " on " +
                           p.info.host + ")");
  }
  Remote remote{peer, nullptr, d.size, {}, false};
  if (p.is_self) {
    remote.base = reinterpret_cast<uint8_t*>(d.base);  // own handles cannot be opened
  } else {
    WSYNC_RETURN_IF_ERROR(useDevice().withContext(what));
    std::string key = IpcMappings::keyOf(d);
    auto mapped = mappings_.find(key);
    if (mapped == mappings_.end()) {
      WSYNC_ASSIGN_OR_RETURN(
          uint8_t * base,
          IpcMappings::instance().acquire(key, d, options_.device, options_.post_timeout,
                                          what + " (" + std::to_string(d.size) +
                                              " bytes of process " + std::to_string(d.pid) + ")"));
      mapped = mappings_.emplace(key, base).first;
    }
    remote.base = mapped->second;
    remote.handle = std::move(key);
  }
  const auto id = static_cast<RemoteMemoryId>(remotes_.size());
  remotes_.push_back(std::move(remote));
  return id;
}

Status CudaIpcTransport::checkRange(RemoteMemoryId remote, uint64_t offset, uint64_t pitch,
                                    size_t row_bytes, size_t rows, size_t src_pitch,
                                    const char* what, Remote*& r) {
  if (remote < 0 || static_cast<size_t>(remote) >= remotes_.size()) {
    return invalidArgument(std::string("CUDA IPC ") + what + ": unknown remote memory id " +
                           std::to_string(remote) + " (" + std::to_string(remotes_.size()) +
                           " attached)");
  }
  r = &remotes_[static_cast<size_t>(remote)];
  if (rows == 0 || row_bytes == 0) return Status::ok();  // nothing lands: any offset will do
  auto fail = [&](const std::string& why) {
    return invalidArgument(std::string("CUDA IPC ") + what + " to " + peerLabel(r->peer) +
                           ", remote memory " + std::to_string(remote) + ": " + why);
  };
  if (rows > 1 && (pitch < row_bytes || src_pitch < row_bytes)) {
    return fail("pitches (remote " + std::to_string(pitch) + ", source " +
                std::to_string(src_pitch) + ") smaller than the row (" + std::to_string(row_bytes) +
                " bytes) of a " + std::to_string(rows) + "-row write");
  }
  // Target extent (rows - 1) * pitch + row_bytes must end inside the exposed size.
  uint64_t extent = 0;
  uint64_t end = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(rows) - 1, pitch, &extent) ||
      __builtin_add_overflow(extent, row_bytes, &extent) ||
      __builtin_add_overflow(offset, extent, &end) || end > r->size) {
    std::string shape = std::to_string(row_bytes) + " bytes at offset " + std::to_string(offset);
    if (rows > 1) {
      shape = std::to_string(rows) + " rows of " + shape + ", pitch " + std::to_string(pitch) +
              " (source pitch " + std::to_string(src_pitch) + ")";
    }
    return fail(shape + " do not fit the exposed size " + std::to_string(r->size));
  }
  return Status::ok();
}

Status CudaIpcTransport::write(RemoteMemoryId remote, uint64_t remote_offset, const void* src,
                               size_t bytes) {
  return write2d(remote, remote_offset, bytes, src, bytes, bytes, 1);
}

Status CudaIpcTransport::write2d(RemoteMemoryId remote, uint64_t remote_offset,
                                 uint64_t remote_pitch, const void* src, size_t src_pitch,
                                 size_t row_bytes, size_t rows) {
  Remote* r = nullptr;
  WSYNC_RETURN_IF_ERROR(
      checkRange(remote, remote_offset, remote_pitch, row_bytes, rows, src_pitch, "write", r));
  if (rows == 0 || row_bytes == 0) return Status::ok();
  auto fail = [&](const std::string& why) {
    return "CUDA IPC write to " + peerLabel(r->peer) + ", remote memory " + std::to_string(remote) +
           ": " + why;
  };
  if (src == nullptr) return invalidArgument(fail("null source"));
  WSYNC_RETURN_IF_ERROR(useDevice());
  const auto* s = static_cast<const uint8_t*>(src);
  uint8_t* dst = r->base + remote_offset;
  const bool packed = rows == 1 || (remote_pitch == row_bytes && src_pitch == row_bytes);
  if (packed || (remote_pitch <= max_pitch_ && src_pitch <= max_pitch_)) {
    WSYNC_RETURN_IF_ERROR(makeRoom(*r, remote));
    r->written = true;
    const cudaError_t error =
        packed ? cudaMemcpyAsync(dst, s, rows * row_bytes, cudaMemcpyDefault, stream_.get())
               : cudaMemcpy2DAsync(dst, remote_pitch, s, src_pitch, row_bytes, rows,
                                   cudaMemcpyDefault, stream_.get());
    ++copies_in_window_;
    if (error != cudaSuccess) {
      return cudaCheck(error, fail((packed ? "cudaMemcpyAsync of " : "cudaMemcpy2DAsync of ") +
                                   std::to_string(rows) + " x " + std::to_string(row_bytes) +
                                   " bytes at offset " + std::to_string(remote_offset)));
    }
    return Status::ok();
  }
  // Pitches past what 2-D copies take: row by row.
  for (size_t i = 0; i < rows; ++i) {
    WSYNC_RETURN_IF_ERROR(makeRoom(*r, remote));
    r->written = true;
    const cudaError_t error = cudaMemcpyAsync(dst + i * remote_pitch, s + i * src_pitch, row_bytes,
                                              cudaMemcpyDefault, stream_.get());
    ++copies_in_window_;
    if (error != cudaSuccess) {
      return cudaCheck(error, fail("cudaMemcpyAsync of row " + std::to_string(i) + " (" +
                                   std::to_string(row_bytes) + " bytes)"));
    }
  }
  return Status::ok();
}

Result<void*> CudaIpcTransport::remoteAddress(RemoteMemoryId remote, uint64_t offset,
                                              uint64_t bytes) {
  Remote* r = nullptr;
  // At least one byte is checked, so the address itself lies inside the exposed memory.
  const uint64_t checked = std::max<uint64_t>(bytes, 1);
  WSYNC_RETURN_IF_ERROR(
      checkRange(remote, offset, checked, checked, 1, checked, "remoteAddress", r));
  r->written = true;
  return static_cast<void*>(r->base + offset);
}

Status CudaIpcTransport::makeRoom(const Remote& r, RemoteMemoryId id) {
  if (copies_in_window_ < kWindow) return Status::ok();
  if (window_recorded_) {
    bool timed_out = false;
    const Status s = waitEvent(window_event_.get(), options_.post_timeout, timed_out);
    if (timed_out) {
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

Status CudaIpcTransport::waitEvent(cudaEvent_t event, std::chrono::milliseconds timeout,
                                   bool& timed_out) const {
  timed_out = false;
  const Clock::time_point deadline = Clock::now() + timeout;
  for (int polls = 0;; ++polls) {
    const cudaError_t error = cudaEventQuery(event);
    if (error == cudaSuccess) return Status::ok();
    if (error != cudaErrorNotReady) return cudaCheck(error, "cudaEventQuery");
    if (Clock::now() >= deadline) {
      timed_out = true;
      return timeoutError("event not complete");
    }
    // Spin briefly (copies of a step usually finish within microseconds), then back off.
    if (polls < 2000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

Status CudaIpcTransport::flush(std::chrono::milliseconds timeout) {
  WSYNC_RETURN_IF_ERROR(useDevice().withContext("CUDA IPC flush"));
  WSYNC_CUDA_RETURN_IF_ERROR(
      cudaEventRecord(flush_event_.get(), stream_.get()),
      "CUDA IPC flush of writes to " + unflushedPeers() + ": cudaEventRecord");
  bool timed_out = false;
  const Status s = waitEvent(flush_event_.get(), timeout, timed_out);
  if (timed_out) {
    return timeoutError("CUDA IPC flush: writes to " + unflushedPeers() + " not complete after " +
                        std::to_string(timeout.count()) + " ms (they stay queued)");
  }
  if (!s.isOk()) return s.withContext("CUDA IPC flush of writes to " + unflushedPeers());
  for (Remote& r : remotes_)
    r.written = false;
  window_recorded_ = false;  // everything before is done
  copies_in_window_ = 0;
  return Status::ok();
}

std::string CudaIpcTransport::unflushedPeers() const {
  std::vector<int32_t> peers;
  for (const Remote& r : remotes_) {
    if (r.written) peers.push_back(r.peer);
  }
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  if (peers.empty()) return "no peer";
  std::string out = peers.size() == 1 ? "peer " : "peers ";
  for (size_t i = 0; i < peers.size(); ++i)
    out += (i ? ", " : "") + std::to_string(peers[i]);
  return out;
}

Result<std::unique_ptr<WriteTransport>> createCudaIpcTransport(
    const CudaIpcTransportOptions& options) {
  WSYNC_ASSIGN_OR_RETURN(std::unique_ptr<CudaIpcTransport> transport,
                         CudaIpcTransport::create(options));
  return std::unique_ptr<WriteTransport>(std::move(transport));
}

}  // namespace wsync
