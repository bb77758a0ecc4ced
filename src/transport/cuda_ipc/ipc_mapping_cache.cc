#include "transport/cuda_ipc/ipc_mapping_cache.h"

#include <utility>

#include "common/cuda_check.h"
#include "control/fd_exchange.h"
#include "transport/cuda_ipc/vmm_memory.h"

namespace wsync {

IpcMappingCache& IpcMappingCache::instance() {
  static IpcMappingCache* cache = new IpcMappingCache;
  return *cache;
}

std::string IpcMappingCache::keyOf(const CudaIpcDescriptor& d) {
  if (d.kind == CudaIpcExportKind::kIpcHandle) {
    return "ipc:" + std::string(reinterpret_cast<const char*>(&d.handle), sizeof(d.handle));
  }
  return "vmm:" + d.fd_server + ":" + std::to_string(d.offer_id);
}

Result<uint8_t*> IpcMappingCache::acquire(const std::string& key, const CudaIpcDescriptor& d,
                                          int device, std::chrono::milliseconds timeout,
                                          const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    ++it->second.refs;
    return it->second.base;
  }
  Entry entry{nullptr, device, 1, nullptr};
  if (d.kind == CudaIpcExportKind::kVmm) {
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

void IpcMappingCache::release(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end() || --it->second.refs > 0) return;
  if (cudaUseDevice(it->second.device).isOk() && !it->second.vmm) {
    (void)cudaCheck(cudaIpcCloseMemHandle(it->second.base), "cudaIpcCloseMemHandle");
  }
  entries_.erase(it);  // a VMM mapping unmaps here
}

Result<uint8_t*> TransportMappings::map(const CudaIpcDescriptor& d, int device,
                                        std::chrono::milliseconds timeout,
                                        const std::string& what) {
  std::string key = IpcMappingCache::keyOf(d);
  auto mapped = mapped_.find(key);
  if (mapped != mapped_.end()) return mapped->second;
  WSYNC_ASSIGN_OR_RETURN(uint8_t * base,
                         IpcMappingCache::instance().acquire(key, d, device, timeout, what));
  mapped_.emplace(std::move(key), base);
  return base;
}

void TransportMappings::releaseAll(bool unmap) {
  if (unmap) {
    for (const auto& [key, base] : mapped_)
      IpcMappingCache::instance().release(key);
  }
  mapped_.clear();
}

}  // namespace wsync
