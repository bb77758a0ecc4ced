#include "transport/ucx/ucx_transport.h"

#include <ucp/api/ucp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/fast_copy.h"
#include "common/sanitizer_annotations.h"
#include "common/wire.h"
#include "transport/ucx/ucx_handles.h"
#include "transport/write_checks.h"

namespace wsync {
namespace ucx {

Status ucxError(ucs_status_t status, const std::string& what) {
  std::string message = what + ": " + ucs_status_string(status);
  switch (status) {
    case UCS_ERR_TIMED_OUT:
      return timeoutError(std::move(message));
    case UCS_ERR_UNSUPPORTED:
      return {WSYNC_ERR_UNSUPPORTED, std::move(message)};
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_INVALID_ADDR:
      return invalidArgument(std::move(message));
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_REJECTED:
    case UCS_ERR_CANCELED:
      return remoteError(std::move(message));
    default:
      return systemError(std::move(message));
  }
}

ucs_status_t waitRequest(ucp_worker_h worker, ucs_status_ptr_t request,
                         std::chrono::steady_clock::time_point deadline) {
  if (request == nullptr) return UCS_OK;
  if (UCS_PTR_IS_ERR(request)) return UCS_PTR_STATUS(request);
  ucs_status_t status = ucp_request_check_status(request);
  while (status == UCS_INPROGRESS) {
    if (std::chrono::steady_clock::now() >= deadline) {
      ucp_request_free(request);  // UCX finishes it internally
      return UCS_ERR_TIMED_OUT;
    }
    ucp_worker_progress(worker);
    status = ucp_request_check_status(request);
  }
  ucp_request_free(request);
  return status;
}

void EndpointCloser::operator()(ucp_ep_h endpoint) const {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = 0;  // flush mode: pending operations complete first
  waitRequest(worker, ucp_ep_close_nbx(endpoint, &param), std::chrono::steady_clock::now() + bound);
}

Result<ContextRef> createContext() {
  ucp_config_t* config = nullptr;
  ucs_status_t status = ucp_config_read(nullptr, nullptr, &config);
  if (status != UCS_OK) return ucxError(status, "UCX: ucp_config_read failed");
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_RMA;
  params.name = "wsync";
  ucp_context_h context = nullptr;
  status = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (status != UCS_OK) return ucxError(status, "UCX: ucp_init (feature RMA) failed");
  return ContextRef(context, ContextDeleter{});
}

Result<WorkerPtr> createWorker(ucp_context_h context) {
  ucp_worker_params_t params{};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  params.thread_mode = UCS_THREAD_MODE_MULTI;
  ucp_worker_h raw = nullptr;
  ucs_status_t status = ucp_worker_create(context, &params, &raw);
  if (status != UCS_OK) return ucxError(status, "UCX: ucp_worker_create failed");
  WorkerPtr worker(raw);
  ucp_worker_attr_t attr{};
  attr.field_mask = UCP_WORKER_ATTR_FIELD_THREAD_MODE;
  status = ucp_worker_query(worker.get(), &attr);
  if (status != UCS_OK) return ucxError(status, "UCX: ucp_worker_query failed");
  if (attr.thread_mode != UCS_THREAD_MODE_MULTI) {
    return Status(WSYNC_ERR_UNSUPPORTED,
                  "UCX: this UCX build gives no UCS_THREAD_MODE_MULTI worker (built without "
                  "--enable-mt?); wsync's progress threads need it");
  }
  return worker;
}

}  // namespace ucx

namespace {

using Clock = std::chrono::steady_clock;

// Wire formats: a tag, a version, then the fields. Tags keep another backend's bytes (or garbage)
// from reaching UCX's own parsers.
constexpr uint32_t kAddressTag = 0x41555357;     // "WSUA"
constexpr uint32_t kDescriptorTag = 0x44555357;  // "WSUD"
constexpr uint32_t kExtensionTag = 0x58555357;   // "WSUX"
constexpr uint8_t kWireVersion = 3;
// Descriptor flags: the region is host memory, which a writer that maps it may copy into with the
// CPU (device memory registered with a CUDA-capable UCX must only be written with puts).
constexpr uint8_t kCpuMappable = 1;
constexpr uint64_t kMaxUcxBlobBytes = 1 << 20;  // bound on a worker address or packed rkey
constexpr size_t kMaxDeferred = 1 << 16;        // deferred mapped writes before they run anyway

std::vector<uint8_t> encodeBlob(uint32_t tag, const void* blob, size_t blob_bytes,
                                uint64_t base = 0, uint64_t size = 0, uint8_t flags = 0) {
  ByteWriter w;
  w.fixed32(tag);
  w.u8(kWireVersion);
  if (tag == kDescriptorTag) {
    w.fixed64(base);
    w.varu(size);
    w.u8(flags);
  }
  w.varu(blob_bytes);
  w.bytes(blob, blob_bytes);
  return w.take();
}

// Checks tag and version, reads base and size for descriptors, and returns the offset of the UCX
// blob in `blob_offset`; a descriptor's blob may be followed by an extension (see
// withDescriptorExtension), whose bytes go to `extension` when given. Returns an explanation on
// failure.
std::string decodeBlob(const std::vector<uint8_t>& bytes, uint32_t tag, size_t& blob_offset,
                       uint64_t* base = nullptr, uint64_t* size = nullptr, uint8_t* flags = nullptr,
                       std::vector<uint8_t>* extension = nullptr) {
  ByteReader r(bytes);
  uint32_t got_tag = 0;
  uint8_t version = 0;
  if (!r.fixed32(got_tag) || got_tag != tag) {
    return "not a UCX " + std::string(tag == kDescriptorTag ? "memory descriptor" : "address") +
           " (wrong tag; another backend's, or garbage)";
  }
  if (!r.u8(version) || version != kWireVersion) {
    return "wire version " + std::to_string(version) + ", expected " + std::to_string(kWireVersion);
  }
  if (tag == kDescriptorTag) {
    if (!r.fixed64(*base) || !r.varu(*size) || !r.u8(*flags)) {
      return "truncated before base, size and flags";
    }
    if (*size == 0 || *base + *size < *base) return "empty or wrapping region";
  }
  uint64_t blob_bytes = 0;
  const bool may_extend = tag == kDescriptorTag;
  if (!r.varuMax(blob_bytes, kMaxUcxBlobBytes) || blob_bytes == 0 || r.remaining() < blob_bytes ||
      (!may_extend && r.remaining() != blob_bytes)) {
    return "blob length does not match the " + std::to_string(bytes.size()) + " bytes given";
  }
  blob_offset = bytes.size() - r.remaining();
  if (r.remaining() == blob_bytes) return {};
  ByteReader ext(bytes.data() + blob_offset + blob_bytes, r.remaining() - blob_bytes);
  uint32_t ext_tag = 0;
  uint64_t ext_bytes = 0;
  if (!ext.fixed32(ext_tag) || ext_tag != kExtensionTag || !ext.varu(ext_bytes) ||
      ext.remaining() != ext_bytes) {
    return "malformed bytes after the blob (not a descriptor extension)";
  }
  if (extension != nullptr) {
    extension->assign(bytes.end() - static_cast<ptrdiff_t>(ext_bytes), bytes.end());
  }
  return {};
}

class UcxExposedMemory final : public ExposedMemory {
 public:
  UcxExposedMemory(ucx::MemPtr mem, void* data, size_t size, std::vector<uint8_t> descriptor)
      : mem_(std::move(mem)), data_(data), size_(size), descriptor_(std::move(descriptor)) {}
  void* data() const override { return data_; }
  size_t size() const override { return size_; }
  const std::vector<uint8_t>& descriptor() const override { return descriptor_; }

 private:
  ucx::MemPtr mem_;
  void* data_;
  size_t size_;
  std::vector<uint8_t> descriptor_;
};

class UcxSourceRegistration final : public SourceRegistration {
 public:
  explicit UcxSourceRegistration(ucx::MemPtr mem) : mem_(std::move(mem)) {}

 private:
  ucx::MemPtr mem_;
};

class UcxTransport final : public WriteTransport {
 public:
  UcxTransport(const UcxTransportOptions& options, ucx::ContextRef context, ucx::WorkerPtr worker,
               std::vector<uint8_t> address)
      : options_(options),
        context_(std::move(context)),
        worker_(std::move(worker)),
        address_(std::move(address)) {
    options_.max_in_flight = std::max<size_t>(options_.max_in_flight, 2);
  }

  // Flushes unflushed writes and closes the endpoints, each bounded by close_timeout. A peer
  // that does not respond costs that bound once, not once per endpoint.
  ~UcxTransport() override {
    if (!pending_.empty() || unflushed_ || !deferred_.empty()) (void)flush(options_.close_timeout);
    for (const Pending& p : pending_)
      ucp_request_free(p.request);
    pending_.clear();
    remotes_.clear();  // rkeys before their endpoints
    std::vector<ucs_status_ptr_t> closing;
    for (auto& [peer, ep] : endpoints_) {
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = 0;  // flush mode
      closing.push_back(ucp_ep_close_nbx(ep.release(), &param));
    }
    endpoints_.clear();
    const Clock::time_point deadline = Clock::now() + options_.close_timeout;
    for (ucs_status_ptr_t request : closing)
      ucx::waitRequest(worker_.get(), request, deadline);
    // Member order does the rest: the worker, then the context once no memory map holds it.
  }

  const char* name() const override { return "ucx"; }
  const std::vector<uint8_t>& localAddress() const override { return address_; }

  Result<std::unique_ptr<ExposedMemory>> allocateExposed(size_t bytes) override {
    if (bytes == 0) return invalidArgument("UCX allocateExposed: 0 bytes asked for");
    ucp_mem_map_params_t params{};
    params.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    params.length = bytes;
    params.flags = UCP_MEM_MAP_ALLOCATE;
    auto memory =
        mapAndPack(params, nullptr, "UCX allocateExposed(" + std::to_string(bytes) + " bytes)");
    if (memory.isOk()) annotateNewMemory((*memory)->data(), (*memory)->size());  // UCX's own mmap
    return memory;
  }

  Result<std::unique_ptr<ExposedMemory>> allocateExposedHost(size_t bytes) override {
    return allocateExposed(bytes);  // its targets are host memory
  }

  Result<std::unique_ptr<ExposedMemory>> expose(void* base, size_t bytes) override {
    const std::string what = "UCX expose(" + std::to_string(bytes) + " bytes)";
    if (base == nullptr || bytes == 0) return invalidArgument(what + ": null base or 0 bytes");
    ucp_mem_map_params_t params{};
    params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    params.address = base;
    params.length = bytes;
    return mapAndPack(params, base, what);
  }

  Result<std::unique_ptr<SourceRegistration>> registerSource(const void* base,
                                                             size_t bytes) override {
    const std::string what = "UCX registerSource(" + std::to_string(bytes) + " bytes)";
    if (base == nullptr || bytes == 0) return invalidArgument(what + ": null base or 0 bytes");
    ucp_mem_map_params_t params{};
    params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    params.address = const_cast<void*>(base);  // UCX only reads it as a source
    params.length = bytes;
    ucp_mem_h mem = nullptr;
    ucs_status_t status = ucp_mem_map(context_.get(), &params, &mem);
    if (status != UCS_OK) return ucx::ucxError(status, what + ": ucp_mem_map failed");
    return std::unique_ptr<SourceRegistration>(
        new UcxSourceRegistration(ucx::MemPtr(mem, ucx::MemUnmapper{context_})));
  }

  Status connect(int32_t peer, const std::vector<uint8_t>& peer_address) override {
    const std::string what = "UCX connect to peer " + std::to_string(peer);
    if (peer < 0) return invalidArgument(what + ": peer ids are >= 0");
    if (endpoints_.count(peer) != 0) return invalidUsage(what + ": already connected");
    size_t blob_offset = 0;
    const std::string bad = decodeBlob(peer_address, kAddressTag, blob_offset);
    if (!bad.empty()) return invalidArgument(what + ": bad peer address: " + bad);
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    params.address = reinterpret_cast<const ucp_address_t*>(peer_address.data() + blob_offset);
    ucp_ep_h ep = nullptr;
    ucs_status_t status = ucp_ep_create(worker_.get(), &params, &ep);
    if (status != UCS_OK) return ucx::ucxError(status, what + ": ucp_ep_create failed");
    endpoints_.emplace(
        peer, ucx::EndpointPtr(ep, ucx::EndpointCloser{worker_.get(), options_.close_timeout}));
    return Status::ok();
  }

  Result<RemoteMemoryId> attach(int32_t peer, const std::vector<uint8_t>& descriptor) override {
    const std::string what = "UCX attach for peer " + std::to_string(peer);
    auto it = endpoints_.find(peer);
    if (it == endpoints_.end()) return invalidUsage(what + ": not connected (connect() first)");
    if (remotes_.size() >= static_cast<size_t>(std::numeric_limits<RemoteMemoryId>::max())) {
      return invalidUsage(what + ": too many attached regions");
    }
    size_t blob_offset = 0;
    uint64_t base = 0;
    uint64_t size = 0;
    uint8_t flags = 0;
    const std::string bad =
        decodeBlob(descriptor, kDescriptorTag, blob_offset, &base, &size, &flags);
    if (!bad.empty()) return protocolError(what + ": bad memory descriptor: " + bad);
    ucp_rkey_h rkey = nullptr;
    ucs_status_t status =
        ucp_ep_rkey_unpack(it->second.get(), descriptor.data() + blob_offset, &rkey);
    if (status != UCS_OK) return ucx::ucxError(status, what + ": ucp_ep_rkey_unpack failed");
    // Memory the peer shares with this process (UCX's shared-memory transports) is written with
    // plain CPU copies through the pointer UCX maps for it: no request per row, no worker lock.
    // Only host memory on both sides: a CUDA-capable UCX may map device memory too.
    void* mapped = nullptr;
    if (!options_.host_memory_only || (flags & kCpuMappable) == 0 ||
        ucp_rkey_ptr(rkey, base, &mapped) != UCS_OK) {
      mapped = nullptr;
    }
    const auto id = static_cast<RemoteMemoryId>(remotes_.size());
    remotes_.push_back({peer, base, size, ucx::RkeyPtr(rkey), it->second.get(), false,
                        static_cast<uint8_t*>(mapped)});
    return id;
  }

  Result<uint64_t> attachedSize(RemoteMemoryId remote) const override {
    if (remote < 0 || static_cast<size_t>(remote) >= remotes_.size()) {
      return invalidArgument("UCX: unknown remote memory id " + std::to_string(remote));
    }
    return remotes_[static_cast<size_t>(remote)].size;
  }

  Status write(RemoteMemoryId remote, uint64_t remote_offset, const void* src,
               size_t bytes) override {
    return write2d(remote, remote_offset, bytes, src, bytes, bytes, 1);
  }

  Status write2d(RemoteMemoryId remote, uint64_t remote_offset, uint64_t remote_pitch,
                 const void* src, size_t src_pitch, size_t row_bytes, size_t rows) override {
    if (remote < 0 || static_cast<size_t>(remote) >= remotes_.size()) {
      return unknownRemoteError("UCX", "write", remote, remotes_.size());
    }
    Remote& r = remotes_[remote];
    const WriteShape shape{remote_offset, remote_pitch, 0, src_pitch, 0, row_bytes, rows, 1};
    WSYNC_RETURN_IF_ERROR(checkWrite({"UCX", r.peer, remote, r.size}, shape, src));
    if (shape.empty()) return Status::ok();
    const auto* s = static_cast<const uint8_t*>(src);
    if (r.mapped != nullptr) {
      if (rows == 1 || (remote_pitch == row_bytes && src_pitch == row_bytes)) {
        // Streaming stores for large regions (nothing here reads the target again); complete
        // and fenced on return.
        copy2d(r.mapped + remote_offset, remote_pitch, s, src_pitch, row_bytes, rows);
        return Status::ok();
      }
      // Strided: copied at flush(), together with the writes from the same source rows.
      deferred_.push_back({r.mapped + remote_offset, remote_pitch, s, src_pitch, row_bytes, rows});
      if (deferred_.size() >= kMaxDeferred) runDeferred();
      return Status::ok();
    }
    if (rows == 1 || (remote_pitch == row_bytes && src_pitch == row_bytes)) {
      return post(remote, r, remote_offset, s, shape.bytes());
    }
    for (size_t i = 0; i < rows; ++i) {
      WSYNC_RETURN_IF_ERROR(
          post(remote, r, remote_offset + i * remote_pitch, s + i * src_pitch, row_bytes));
    }
    return Status::ok();
  }

  Status fence() override {
    runDeferred();
    // Copies through mapped pointers (streaming stores included) are ordered before later ones.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    const ucs_status_t status = ucp_worker_fence(worker_.get());
    if (status != UCS_OK) return ucx::ucxError(status, "UCX fence (ucp_worker_fence)");
    return Status::ok();
  }

  Status flush(std::chrono::milliseconds timeout) override {
    runDeferred();
    // Copies through mapped pointers are complete; order them before whatever tells the target.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    const Clock::time_point deadline = Clock::now() + timeout;
    ucp_request_param_t param{};
    const ucs_status_t status =
        ucx::waitRequest(worker_.get(), ucp_worker_flush_nbx(worker_.get(), &param), deadline);
    if (status == UCS_ERR_TIMED_OUT) {
      return timeoutError("UCX flush: writes to " + unflushedPeers(remotes_) +
                          " not complete after " + std::to_string(timeout.count()) +
                          " ms (is the target progressing?)");
    }
    if (status != UCS_OK) {
      return ucx::ucxError(status,
                           "UCX flush of writes to " + unflushedPeers(remotes_) + " failed");
    }
    // The worker flush completed every put; collect their requests and errors.
    while (!pending_.empty()) {
      reapCompleted();
      if (pending_.empty()) break;
      if (Clock::now() >= deadline) {
        return timeoutError("UCX flush: " + std::to_string(pending_.size()) +
                            " write requests still open after the worker flush");
      }
      ucp_worker_progress(worker_.get());
    }
    Status result = std::exchange(deferred_error_, Status::ok());
    if (result.isOk()) {
      for (Remote& r : remotes_)
        r.written = false;
      unflushed_ = false;
    }
    return result;
  }

  void progress() override { ucp_worker_progress(worker_.get()); }

 private:
  struct Remote {
    int32_t peer;
    uint64_t base;  // address in the peer's process
    uint64_t size;
    ucx::RkeyPtr rkey;
    ucp_ep_h ep;      // owned by endpoints_
    bool written;     // written since the last successful flush
    uint8_t* mapped;  // the region mapped into this process (ucp_rkey_ptr), or null
  };
  struct Pending {
    void* request;
    RemoteMemoryId remote;
  };

  // Maps (registers, or allocates when `base` is null) and packs the descriptor of [base, +length).
  Result<std::unique_ptr<ExposedMemory>> mapAndPack(const ucp_mem_map_params_t& params, void* base,
                                                    const std::string& what) {
    ucp_mem_h raw = nullptr;
    ucs_status_t status = ucp_mem_map(context_.get(), &params, &raw);
    if (status != UCS_OK) return ucx::ucxError(status, what + ": ucp_mem_map failed");
    ucx::MemPtr mem(raw, ucx::MemUnmapper{context_});
    ucp_mem_attr_t attr{};
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
    status = ucp_mem_query(mem.get(), &attr);
    if (status != UCS_OK) return ucx::ucxError(status, what + ": ucp_mem_query failed");
    if (base == nullptr) base = attr.address;
    const auto* mapped = static_cast<const uint8_t*>(attr.address);
    const auto* wanted = static_cast<const uint8_t*>(base);
    if (wanted < mapped || wanted + params.length > mapped + attr.length) {
      return internalError(what + ": UCX mapped [" + std::to_string(attr.length) + " bytes at " +
                           std::to_string(reinterpret_cast<uintptr_t>(mapped)) +
                           "), which does not cover the region");
    }
    void* rkey_buffer = nullptr;
    size_t rkey_bytes = 0;
    status = ucp_rkey_pack(context_.get(), mem.get(), &rkey_buffer, &rkey_bytes);
    if (status != UCS_OK) return ucx::ucxError(status, what + ": ucp_rkey_pack failed");
    std::vector<uint8_t> descriptor =
        encodeBlob(kDescriptorTag, rkey_buffer, rkey_bytes, reinterpret_cast<uint64_t>(base),
                   params.length, options_.host_memory_only ? kCpuMappable : 0);
    ucp_rkey_buffer_release(rkey_buffer);
    return std::unique_ptr<ExposedMemory>(
        new UcxExposedMemory(std::move(mem), base, params.length, std::move(descriptor)));
  }

  // Posts one put and keeps its request when it did not complete at once. When max_in_flight
  // requests are kept, first progresses until half of them completed; past post_timeout it
  // returns WSYNC_ERR_TIMEOUT and posts nothing.
  Status post(RemoteMemoryId id, Remote& r, uint64_t offset, const uint8_t* src, size_t bytes) {
    if (pending_.size() >= options_.max_in_flight) {
      const Clock::time_point deadline = Clock::now() + options_.post_timeout;
      while (true) {
        ucp_worker_progress(worker_.get());
        reapCompleted();
        if (pending_.size() <= options_.max_in_flight / 2) break;
        if (Clock::now() >= deadline) {
          return timeoutError("UCX write to peer " + std::to_string(r.peer) + ", remote memory " +
                              std::to_string(id) + ": " + std::to_string(pending_.size()) +
                              " writes still in flight after " +
                              std::to_string(options_.post_timeout.count()) +
                              " ms (is the target progressing?); this one was not posted");
        }
      }
    }
    r.written = true;
    unflushed_ = true;
    ucp_request_param_t param{};
    ucs_status_ptr_t request = ucp_put_nbx(r.ep, src, bytes, r.base + offset, r.rkey.get(), &param);
    if (request == nullptr) return Status::ok();
    if (UCS_PTR_IS_ERR(request)) {
      return ucx::ucxError(UCS_PTR_STATUS(request),
                           "UCX write to peer " + std::to_string(r.peer) + ", remote memory " +
                               std::to_string(id) + ": ucp_put_nbx of " + std::to_string(bytes) +
                               " bytes at offset " + std::to_string(offset) + " failed");
    }
    pending_.push_back({request, id});
    return Status::ok();
  }

  // Copies the deferred strided writes. Writes with the same rows and source pitch whose source
  // columns adjoin (the column blocks of one row-major tensor, bound for different ranks) run
  // interleaved row by row, so the source is read once, in order.
  void runDeferred() {
    if (deferred_.empty()) return;
    std::sort(deferred_.begin(), deferred_.end(), [](const Copy2d& a, const Copy2d& b) {
      return std::less<const void*>()(a.src, b.src);
    });
    size_t begin = 0;
    while (begin < deferred_.size()) {
      size_t end = begin + 1;
      while (end < deferred_.size()) {
        const Copy2d& prev = deferred_[end - 1];
        const Copy2d& next = deferred_[end];
        if (next.rows != prev.rows || next.src_pitch != prev.src_pitch ||
            next.src != static_cast<const uint8_t*>(prev.src) + prev.row_bytes) {
          break;
        }
        ++end;
      }
      copy2dInterleaved(deferred_.data() + begin, end - begin);
      begin = end;
    }
    deferred_.clear();
  }

  // Releases the requests that completed; keeps the first error for flush().
  void reapCompleted() {
    size_t kept = 0;
    for (const Pending& p : pending_) {
      const ucs_status_t status = ucp_request_check_status(p.request);
      if (status == UCS_INPROGRESS) {
        pending_[kept++] = p;
        continue;
      }
      ucp_request_free(p.request);
      if (status != UCS_OK && deferred_error_.isOk()) {
        const Remote& r = remotes_[p.remote];
        deferred_error_ =
            ucx::ucxError(status, "UCX write to peer " + std::to_string(r.peer) +
                                      ", remote memory " + std::to_string(p.remote) + " failed");
      }
    }
    pending_.resize(kept);
  }

  UcxTransportOptions options_;
  // Declaration order is destruction order reversed: rkeys, endpoints, worker, context.
  ucx::ContextRef context_;
  ucx::WorkerPtr worker_;
  std::vector<uint8_t> address_;
  std::unordered_map<int32_t, ucx::EndpointPtr> endpoints_;
  std::vector<Remote> remotes_;  // index: RemoteMemoryId
  std::vector<Pending> pending_;
  Status deferred_error_;
  bool unflushed_ = false;
  // Strided writes through mapped pointers, copied at the next flush() (or when kMaxDeferred).
  std::vector<Copy2d> deferred_;
};

}  // namespace

Result<std::unique_ptr<WriteTransport>> createUcxTransport(const UcxTransportOptions& options) {
  WSYNC_ASSIGN_OR_RETURN(ucx::ContextRef context, ucx::createContext());
  WSYNC_ASSIGN_OR_RETURN(ucx::WorkerPtr worker, ucx::createWorker(context.get()));
  ucp_address_t* raw_address = nullptr;
  size_t address_bytes = 0;
  ucs_status_t status = ucp_worker_get_address(worker.get(), &raw_address, &address_bytes);
  if (status != UCS_OK) return ucx::ucxError(status, "UCX: ucp_worker_get_address failed");
  std::vector<uint8_t> address = encodeBlob(kAddressTag, raw_address, address_bytes);
  ucp_worker_release_address(worker.get(), raw_address);
  return std::unique_ptr<WriteTransport>(
      new UcxTransport(options, std::move(context), std::move(worker), std::move(address)));
}

std::vector<uint8_t> withDescriptorExtension(const std::vector<uint8_t>& descriptor,
                                             const std::vector<uint8_t>& extension) {
  ByteWriter w;
  w.bytes(descriptor.data(), descriptor.size());
  w.fixed32(kExtensionTag);
  w.varu(extension.size());
  w.bytes(extension.data(), extension.size());
  return w.take();
}

std::vector<uint8_t> descriptorExtension(const std::vector<uint8_t>& descriptor) {
  size_t blob_offset = 0;
  uint64_t base = 0;
  uint64_t size = 0;
  uint8_t flags = 0;
  std::vector<uint8_t> extension;
  if (!decodeBlob(descriptor, kDescriptorTag, blob_offset, &base, &size, &flags, &extension)
           .empty()) {
    return {};
  }
  return extension;
}

}  // namespace wsync
