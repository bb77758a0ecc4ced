// The CUDA IPC backend's wire formats: process addresses (WriteTransport::localAddress) and
// descriptors of exposed memory (ExposedMemory::descriptor), each a tag, a version, then the
// fields. Tags keep another backend's bytes (or garbage) from being taken for these. Decoders
// check the tag and every length and bound the sizes they accept. Thread-safe.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace wsync {

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
// This process's id and its random nonce (fixed for the process's life), as addresses and
// descriptors carry them.
int64_t cudaIpcProcessId();
uint64_t cudaIpcProcessNonce();

// The address encoding: {tag, version, host identity, pid, nonce, device ordinal, device UUID}.
// decode: PROTOCOL error naming what is wrong.
std::vector<uint8_t> encodeCudaIpcAddress(const CudaIpcProcessInfo& info);
Result<CudaIpcProcessInfo> decodeCudaIpcAddress(const std::vector<uint8_t>& address);

// How exposed memory is shared: a cudaIpcGetMemHandle handle, or a VMM allocation whose file
// descriptor the owner's FdServer (control/fd_exchange.h) hands out.
enum class CudaIpcExportKind : uint8_t { kIpcHandle = 1, kVmm = 2 };

// What a memory descriptor carries: {tag, version, export kind, IPC handle | (descriptor server,
// offer id and token, mapped size), size, device pointer, owner pid and nonce, owner device}.
struct CudaIpcDescriptor {
  CudaIpcExportKind kind = CudaIpcExportKind::kIpcHandle;
  cudaIpcMemHandle_t handle{};  // kIpcHandle
  std::string fd_server;        // kVmm: FdServer::name() of the owner
  uint64_t offer_id = 0;        // kVmm: the offer and its token
  uint64_t offer_token = 0;
  uint64_t mapped_size = 0;  // kVmm: VmmAllocation::mappedSize()
  uint64_t size = 0;         // bytes peers may write
  uint64_t base = 0;         // the device pointer in the owner's process
  int64_t pid = 0;
  uint64_t nonce = 0;
  int64_t device = 0;
};

std::vector<uint8_t> encodeCudaIpcDescriptor(const CudaIpcDescriptor& d);
// Returns an explanation when `bytes` is not a well-formed descriptor (then `d` is unspecified),
// empty on success.
std::string decodeCudaIpcDescriptor(const std::vector<uint8_t>& bytes, CudaIpcDescriptor& d);

}  // namespace wsync
