// Peers' exposed memory mapped into this process, for the CUDA IPC backend: legacy IPC handles
// opened with cudaIpcOpenMemHandle, VMM allocations imported from the file descriptor their
// owner's FdServer hands out (transport/cuda_ipc/vmm_memory.h).
//
// cudaIpcOpenMemHandle fails when one handle is opened twice in one process, so the process holds
// each distinct export once, reference counted across all its transports (IpcMappingCache), and
// each transport holds one reference per export it attached, however often (TransportMappings).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "common/status.h"
#include "transport/cuda_ipc/cuda_ipc_encoding.h"

namespace wsync {

class VmmMapping;  // transport/cuda_ipc/vmm_memory.h

// The process-wide mappings. Never destroyed (closing handles during static destruction would race
// the CUDA runtime's own teardown; the process exit unmaps everything). Thread-safe.
class IpcMappingCache {
 public:
  static IpcMappingCache& instance();

  // The key under which `d`'s mapping is shared: its IPC handle, or its server and offer id.
  static std::string keyOf(const CudaIpcDescriptor& d);

  // A reference to the mapping of `d`'s memory (under `key`), made on `device` (current) when it
  // is new: the IPC handle opened, or the VMM descriptor fetched from its owner (waiting at most
  // `timeout`) and imported. Errors are prefixed with `what`.
  Result<uint8_t*> acquire(const std::string& key, const CudaIpcDescriptor& d, int device,
                           std::chrono::milliseconds timeout, const std::string& what);
  // Drops a reference; the last one unmaps (closes the handle on its device, or unmaps the VMM
  // import).
  void release(const std::string& key);

 private:
  IpcMappingCache() = default;
  struct Entry {
    uint8_t* base;
    int device;
    int refs;
    std::unique_ptr<VmmMapping> vmm;  // set for VMM imports
  };
  std::mutex mu_;
  std::unordered_map<std::string, Entry> entries_;
};

// One transport's references: one per distinct export it mapped. One thread (the transport's
// owner).
class TransportMappings {
 public:
  // The mapped base of `d`'s memory; maps it (IpcMappingCache::acquire) the first time.
  Result<uint8_t*> map(const CudaIpcDescriptor& d, int device, std::chrono::milliseconds timeout,
                       const std::string& what);
  // Drops every reference (unmapping what no other transport holds) when `unmap`; otherwise
  // forgets them, leaking the mappings (copies may still be writing through them).
  void releaseAll(bool unmap);

 private:
  std::unordered_map<std::string, uint8_t*> mapped_;  // key -> base, one reference each
};

}  // namespace wsync
