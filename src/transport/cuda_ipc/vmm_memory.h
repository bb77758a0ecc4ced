// Device memory made with CUDA's virtual memory management (VMM) API and shared between processes
// of one node as a POSIX file descriptor: how the CUDA IPC backend exposes the memory it
// allocates. Why not cudaIpcGetMemHandle: on the H200, copies of 16 GB into memory imported with
// cudaIpcOpenMemHandle ran at 1.4-1.6 TB/s, into a VMM import (mapped at the allocation's 2 MiB
// granularity) at the local device-copy rate, 1.9-2.1 TB/s (benchmarks/README.md).
//
// The driver API is reached through cudaGetDriverEntryPointByVersion: wsync never links libcuda.
// Callers make the device current first (cudaUseDevice). Not thread-safe per object.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/status.h"

namespace wsync {

// Whether VMM allocations on `device` can be made and shared: the driver entry points resolve and
// the device supports VMM and POSIX file descriptor handles. Cached per device.
bool vmmShareable(int device);

// An allocation of this process: physical memory, mapped read-write for `device` in this
// process, and its exported file descriptor (what FdServer offers to importers).
class VmmAllocation {
 public:
  // At least `bytes` (> 0), rounded up to the allocation granularity.
  static Result<std::unique_ptr<VmmAllocation>> create(int device, size_t bytes);
  // Unmaps, frees the address range, releases the memory (importers keep their own reference:
  // the physical memory lives until the last mapping goes) and closes the descriptor.
  ~VmmAllocation();
  VmmAllocation(const VmmAllocation&) = delete;
  VmmAllocation& operator=(const VmmAllocation&) = delete;

  void* data() const { return reinterpret_cast<void*>(address_); }
  size_t mappedSize() const { return mapped_size_; }  // bytes, a multiple of the granularity
  int fd() const { return fd_; }                      // owned

 private:
  VmmAllocation(int device, uint64_t handle, uintptr_t address, size_t mapped_size, int fd)
      : device_(device), handle_(handle), address_(address), mapped_size_(mapped_size), fd_(fd) {}
  int device_;
  uint64_t handle_;  // CUmemGenericAllocationHandle
  uintptr_t address_;
  size_t mapped_size_;
  int fd_;
};

// Another process's VMM allocation, imported from its file descriptor and mapped read-write for
// `device` in this process.
class VmmMapping {
 public:
  // `fd` is only read (the caller closes it); `mapped_size` is the exporter's mappedSize().
  static Result<std::unique_ptr<VmmMapping>> import(int fd, size_t mapped_size, int device);
  // Unmaps and releases this process's reference.
  ~VmmMapping();
  VmmMapping(const VmmMapping&) = delete;
  VmmMapping& operator=(const VmmMapping&) = delete;

  uint8_t* data() const { return reinterpret_cast<uint8_t*>(address_); }

 private:
  VmmMapping(uint64_t handle, uintptr_t address, size_t mapped_size)
      : handle_(handle), address_(address), mapped_size_(mapped_size) {}
  uint64_t handle_;
  uintptr_t address_;
  size_t mapped_size_;
};

}  // namespace wsync
