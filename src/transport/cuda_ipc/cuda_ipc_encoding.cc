#include "transport/cuda_ipc/cuda_ipc_encoding.h"

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <random>

#include "common/field_codec.h"

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

namespace {

// The address's fields, in wire order (common/field_codec.h): A is CudaIpcProcessInfo, const when
// encoding. The tag and the version come first and are checked before anything else is read.
template <class V, class A>
void addressFields(V& v, A& info) {
  uint32_t tag = kAddressTag;
  v.fixed32(tag);
  v.check(
      [&] { return tag == kAddressTag; },
      [] {
        return protocolError("not a CUDA IPC address (wrong tag; another backend's, or garbage)");
      });
  uint8_t version = kWireVersion;
  v.u8(version);
  v.check([&] { return version == kWireVersion; },
          [&] {
            return protocolError("CUDA IPC address of wire version " + std::to_string(version) +
                                 ", expected " + std::to_string(kWireVersion));
          });
  v.str(info.host, kMaxHostBytes);
  v.i64(info.pid);
  v.fixed64(info.nonce);
  v.i32(info.device);
  v.raw(info.device_uuid.data(), info.device_uuid.size());
}

// The descriptor's fields (D: CudaIpcDescriptor); what follows the export kind depends on it.
template <class V, class D>
void descriptorFields(V& v, D& d) {
  uint32_t tag = kDescriptorTag;
  v.fixed32(tag);
  v.check([&] { return tag == kDescriptorTag; },
          [] {
            return protocolError(
                "not a CUDA IPC memory descriptor (wrong tag; another backend's, or garbage)");
          });
  uint8_t version = kDescriptorVersion;
  v.u8(version);
  v.check([&] { return version == kDescriptorVersion; },
          [&] {
            return protocolError("wire version " + std::to_string(version) + ", expected " +
                                 std::to_string(kDescriptorVersion));
          });
  v.enum8(d.kind, static_cast<uint8_t>(CudaIpcExportKind::kVmm));
  v.check(
      [&] { return d.kind == CudaIpcExportKind::kIpcHandle || d.kind == CudaIpcExportKind::kVmm; },
      [&] {
        return protocolError("unknown export kind " + std::to_string(static_cast<int>(d.kind)));
      });
  if (d.kind == CudaIpcExportKind::kIpcHandle) {
    v.raw(&d.handle, kHandleBytes);
  } else {
    v.str(d.fd_server, kMaxServerNameBytes);
    v.fixed64(d.offer_id);
    v.fixed64(d.offer_token);
    v.u64(d.mapped_size);
  }
  v.u64(d.size);
  v.fixed64(d.base);
  v.i64(d.pid);
  v.fixed64(d.nonce);
  v.i64(d.device);
}

}  // namespace

std::vector<uint8_t> encodeCudaIpcAddress(const CudaIpcProcessInfo& info) {
  FieldWriter w;
  addressFields(w, info);
  return w.take();
}

Result<CudaIpcProcessInfo> decodeCudaIpcAddress(const std::vector<uint8_t>& address) {
  FieldReader r(address);
  CudaIpcProcessInfo info;
  addressFields(r, info);
  WSYNC_RETURN_IF_ERROR(
      r.finish("CUDA IPC address (" + std::to_string(address.size()) + " bytes)"));
  if (info.host.empty() || info.pid <= 0 || info.device < 0) {
    return protocolError("CUDA IPC address with an empty host, pid " + std::to_string(info.pid) +
                         " or device " + std::to_string(info.device));
  }
  return info;
}

std::vector<uint8_t> encodeCudaIpcDescriptor(const CudaIpcDescriptor& d) {
  FieldWriter w;
  descriptorFields(w, d);
  return w.take();
}

std::string decodeCudaIpcDescriptor(const std::vector<uint8_t>& bytes, CudaIpcDescriptor& d) {
  FieldReader r(bytes);
  descriptorFields(r, d);
  const Status s = r.finish("descriptor (" + std::to_string(bytes.size()) + " bytes)");
  if (!s.isOk()) return s.message();
  if (d.size == 0 || d.base == 0 || d.base + d.size < d.base) {
    return "empty, null or wrapping region";
  }
  if (d.kind == CudaIpcExportKind::kVmm && (d.fd_server.empty() || d.mapped_size < d.size)) {
    return "VMM export without a descriptor server, or mapped smaller than its size";
  }
  return {};
}

}  // namespace wsync
