#include "transport/cuda_ipc/cuda_ipc_encoding.h"

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <limits>
#include <random>

#include "common/wire.h"

namespace wsync {
namespace {

constexpr uint32_t kAddressTag = 0x41435357;     // "WSCA"
constexpr uint32_t kDescriptorTag = 0x44435357;  // "WSCD"
constexpr uint8_t kWireVersion = 1;              // addresses
constexpr uint8_t kDescriptorVersion = 2;        // 2: the export kind (legacy IPC handle or VMM)
constexpr size_t kMaxServerNameBytes = 107;      // an abstract unix socket name
constexpr size_t kMaxHostBytes = 1024;
constexpr size_t kHandleBytes = sizeof(cudaIpcMemHandle_t);
static_assert(kHandleBytes == CUDA_IPC_HANDLE_SIZE);

}  // namespace

int64_t cudaIpcProcessId() {
  return static_cast<int64_t>(::getpid());
}

uint64_t cudaIpcProcessNonce() {
  static const uint64_t nonce = [] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(cudaIpcProcessId());
  }();
  return nonce;
}

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

std::vector<uint8_t> encodeCudaIpcDescriptor(const CudaIpcDescriptor& d) {
  ByteWriter w;
  w.fixed32(kDescriptorTag);
  w.u8(kDescriptorVersion);
  w.u8(static_cast<uint8_t>(d.kind));
  if (d.kind == CudaIpcExportKind::kIpcHandle) {
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

std::string decodeCudaIpcDescriptor(const std::vector<uint8_t>& bytes, CudaIpcDescriptor& d) {
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
  d.kind = static_cast<CudaIpcExportKind>(kind);
  bool complete = false;
  if (d.kind == CudaIpcExportKind::kIpcHandle) {
    complete = r.bytes(&d.handle, kHandleBytes);
  } else if (d.kind == CudaIpcExportKind::kVmm) {
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
  if (d.kind == CudaIpcExportKind::kVmm && (d.fd_server.empty() || d.mapped_size < d.size)) {
    return "VMM export without a descriptor server, or mapped smaller than its size";
  }
  return {};
}

}  // namespace wsync
