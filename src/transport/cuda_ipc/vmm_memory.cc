#include "transport/cuda_ipc/vmm_memory.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <string>
#include <type_traits>

namespace wsync {
namespace {

// The driver entry points VMM sharing needs, resolved through the runtime.
struct DriverApi {
  CUresult (*memCreate)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                        unsigned long long) = nullptr;
  CUresult (*memRelease)(CUmemGenericAllocationHandle) = nullptr;
  CUresult (*memAddressReserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr,
                                unsigned long long) = nullptr;
  CUresult (*memAddressFree)(CUdeviceptr, size_t) = nullptr;
  CUresult (*memMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                     unsigned long long) = nullptr;
  CUresult (*memUnmap)(CUdeviceptr, size_t) = nullptr;
  CUresult (*memSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) = nullptr;
  CUresult (*memGetAllocationGranularity)(size_t*, const CUmemAllocationProp*,
                                          CUmemAllocationGranularity_flags) = nullptr;
  CUresult (*memExportToShareableHandle)(void*, CUmemGenericAllocationHandle,
                                         CUmemAllocationHandleType, unsigned long long) = nullptr;
  CUresult (*memImportFromShareableHandle)(CUmemGenericAllocationHandle*, void*,
                                           CUmemAllocationHandleType) = nullptr;
  CUresult (*deviceGet)(CUdevice*, int) = nullptr;
  CUresult (*deviceGetAttribute)(int*, CUdevice_attribute, CUdevice) = nullptr;
  CUresult (*getErrorName)(CUresult, const char**) = nullptr;
};

// The driver ABI these signatures follow (CUDA 12.0; unchanged since the VMM API appeared).
constexpr unsigned kDriverAbi = 12000;

template <typename Fn>
bool resolve(const char* symbol, Fn& fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t e =
      cudaGetDriverEntryPointByVersion(symbol, &p, kDriverAbi, cudaEnableDefault, &found);
  if (e != cudaSuccess || found != cudaDriverEntryPointSuccess || p == nullptr) {
    (void)cudaGetLastError();
    return false;
  }
  fn = reinterpret_cast<Fn>(p);
  return true;
}

// nullptr when some entry point is missing (an old driver, no driver).
const DriverApi* driverApi() {
  static const DriverApi* api = []() -> const DriverApi* {
    static DriverApi a;
    const bool ok = resolve("cuMemCreate", a.memCreate) && resolve("cuMemRelease", a.memRelease) &&
                    resolve("cuMemAddressReserve", a.memAddressReserve) &&
                    resolve("cuMemAddressFree", a.memAddressFree) &&
                    resolve("cuMemMap", a.memMap) && resolve("cuMemUnmap", a.memUnmap) &&
                    resolve("cuMemSetAccess", a.memSetAccess) &&
                    resolve("cuMemGetAllocationGranularity", a.memGetAllocationGranularity) &&
                    resolve("cuMemExportToShareableHandle", a.memExportToShareableHandle) &&
                    resolve("cuMemImportFromShareableHandle", a.memImportFromShareableHandle) &&
                    resolve("cuDeviceGet", a.deviceGet) &&
                    resolve("cuDeviceGetAttribute", a.deviceGetAttribute) &&
                    resolve("cuGetErrorName", a.getErrorName);
    return ok ? &a : nullptr;
  }();
  return api;
}

Status driverCheck(const DriverApi& api, CUresult r, const std::string& what) {
  if (r == CUDA_SUCCESS) return Status::ok();
  const char* name = nullptr;
  if (api.getErrorName(r, &name) != CUDA_SUCCESS || name == nullptr) name = "unknown CUresult";
  return systemError(what + " failed: " + name + " (" + std::to_string(static_cast<int>(r)) + ")");
}

CUmemAllocationProp allocationProp(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

// Reserves `size` bytes of address space aligned to `granularity`, maps `handle` there and opens
// it read-write to `device`; undoes what it did on failure.
Result<CUdeviceptr> mapReadWrite(const DriverApi& api, CUmemGenericAllocationHandle handle,
                                 size_t size, size_t granularity, int device,
                                 const std::string& what) {
  CUdeviceptr address = 0;
  WSYNC_RETURN_IF_ERROR(driverCheck(api, api.memAddressReserve(&address, size, granularity, 0, 0),
                                    what + ": cuMemAddressReserve"));
  Status s = driverCheck(api, api.memMap(address, size, 0, handle, 0), what + ": cuMemMap");
  if (s.isOk()) {
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    s = driverCheck(api, api.memSetAccess(address, size, &access, 1), what + ": cuMemSetAccess");
    if (!s.isOk()) (void)api.memUnmap(address, size);
  }
  if (!s.isOk()) {
    (void)api.memAddressFree(address, size);
    return s;
  }
  return address;
}

}  // namespace

bool vmmShareable(int device) {
  static std::mutex mu;
  static std::map<int, bool> cache;
  std::lock_guard lock(mu);
  auto it = cache.find(device);
  if (it != cache.end()) return it->second;
  bool shareable = false;
  if (const DriverApi* api = driverApi()) {
    CUdevice dev = 0;
    int vmm = 0;
    int posix_fd = 0;
    shareable =
        api->deviceGet(&dev, device) == CUDA_SUCCESS &&
        api->deviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                                dev) == CUDA_SUCCESS &&
        api->deviceGetAttribute(&posix_fd,
                                CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                                dev) == CUDA_SUCCESS &&
        vmm != 0 && posix_fd != 0;
  }
  cache[device] = shareable;
  return shareable;
}

Result<std::unique_ptr<VmmAllocation>> VmmAllocation::create(int device, size_t bytes) {
  const std::string what =
      "VMM allocation of " + std::to_string(bytes) + " bytes on device " + std::to_string(device);
  const DriverApi* api = driverApi();
  if (api == nullptr) {
    return Status(WSYNC_ERR_UNSUPPORTED, what + ": the CUDA driver lacks the VMM entry points");
  }
  if (bytes == 0) return invalidArgument(what + ": 0 bytes");
  const CUmemAllocationProp prop = allocationProp(device);
  size_t granularity = 0;
  WSYNC_RETURN_IF_ERROR(driverCheck(
      *api,
      api->memGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
      what + ": cuMemGetAllocationGranularity"));
  if (granularity == 0) granularity = size_t{2} << 20;
  const size_t size = (bytes + granularity - 1) / granularity * granularity;
  CUmemGenericAllocationHandle handle = 0;
  WSYNC_RETURN_IF_ERROR(
      driverCheck(*api, api->memCreate(&handle, size, &prop, 0), what + ": cuMemCreate"));
  int fd = -1;
  Status s = driverCheck(
      *api,
      api->memExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
      what + ": cuMemExportToShareableHandle");
  Result<CUdeviceptr> address = s.isOk()
                                    ? mapReadWrite(*api, handle, size, granularity, device, what)
                                    : Result<CUdeviceptr>(s);
  if (!address.isOk()) {
    if (fd >= 0) ::close(fd);
    (void)api->memRelease(handle);
    return address.status();
  }
  return std::unique_ptr<VmmAllocation>(
      new VmmAllocation(device, handle, static_cast<uintptr_t>(*address), size, fd));
}

VmmAllocation::~VmmAllocation() {
  if (const DriverApi* api = driverApi()) {
    (void)api->memUnmap(static_cast<CUdeviceptr>(address_), mapped_size_);
    (void)api->memAddressFree(static_cast<CUdeviceptr>(address_), mapped_size_);
    (void)api->memRelease(static_cast<CUmemGenericAllocationHandle>(handle_));
  }
  if (fd_ >= 0) ::close(fd_);
  (void)device_;
}

Result<std::unique_ptr<VmmMapping>> VmmMapping::import(int fd, size_t mapped_size, int device) {
  const std::string what = "importing a VMM allocation of " + std::to_string(mapped_size) +
                           " bytes on device " + std::to_string(device);
  const DriverApi* api = driverApi();
  if (api == nullptr) {
    return Status(WSYNC_ERR_UNSUPPORTED, what + ": the CUDA driver lacks the VMM entry points");
  }
  const CUmemAllocationProp prop = allocationProp(device);
  size_t granularity = 0;
  WSYNC_RETURN_IF_ERROR(driverCheck(
      *api,
      api->memGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
      what + ": cuMemGetAllocationGranularity"));
  if (granularity == 0 || mapped_size == 0 || mapped_size % granularity != 0) {
    return invalidArgument(what + ": the size is not a multiple of the granularity (" +
                           std::to_string(granularity) + " bytes)");
  }
  CUmemGenericAllocationHandle handle = 0;
  WSYNC_RETURN_IF_ERROR(driverCheck(
      *api,
      api->memImportFromShareableHandle(&handle, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
      what + ": cuMemImportFromShareableHandle"));
  Result<CUdeviceptr> address = mapReadWrite(*api, handle, mapped_size, granularity, device, what);
  if (!address.isOk()) {
    (void)api->memRelease(handle);
    return address.status();
  }
  return std::unique_ptr<VmmMapping>(
      new VmmMapping(handle, static_cast<uintptr_t>(*address), mapped_size));
}

VmmMapping::~VmmMapping() {
  if (const DriverApi* api = driverApi()) {
    (void)api->memUnmap(static_cast<CUdeviceptr>(address_), mapped_size_);
    (void)api->memAddressFree(static_cast<CUdeviceptr>(address_), mapped_size_);
    (void)api->memRelease(static_cast<CUmemGenericAllocationHandle>(handle_));
  }
}

}  // namespace wsync
