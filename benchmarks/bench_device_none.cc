// wsync-sync-bench's device helpers in a build without CUDA: no device, every call fails saying so.
#include "bench_device.h"

namespace wsync_bench {
namespace {
constexpr const char* kNoCuda = "this build has no CUDA (configure with -DWSYNC_CUDA=ON)";

bool noCuda(std::string* error) {
  if (error) *error = kNoCuda;
  return false;
}
}  // namespace

int deviceCount(std::string* why) {
  if (why) *why = kNoCuda;
  return 0;
}

bool setDevice(int, std::string* error) {
  return noCuda(error);
}

bool deviceMemoryInfo(size_t*, size_t*, std::string* error) {
  return noCuda(error);
}

bool copyToHost(void*, const void*, size_t, std::string* error) {
  return noCuda(error);
}

bool copyToDevice(void*, const void*, size_t, std::string* error) {
  return noCuda(error);
}

bool copyOnDevice(void*, const void*, size_t, std::string* error) {
  return noCuda(error);
}

std::unique_ptr<DeviceMemory> DeviceMemory::allocate(size_t, const std::string&,
                                                     std::string* error) {
  noCuda(error);
  return nullptr;
}

DeviceMemory::~DeviceMemory() = default;

std::unique_ptr<DeviceStream> DeviceStream::create(std::string* error) {
  noCuda(error);
  return nullptr;
}

DeviceStream::~DeviceStream() = default;

bool DeviceStream::synchronize(std::string* error) const {
  return noCuda(error);
}

bool DeviceStream::memsetAsync(void*, int, size_t, std::string* error) const {
  return noCuda(error);
}

bool timeDeviceCopy(void*, const void*, size_t, uint64_t, int, double*, std::string* error) {
  return noCuda(error);
}

bool timePinnedCopies(size_t, int, double*, double*, std::string* error) {
  return noCuda(error);
}

bool fillExpected(const std::vector<PatternPiece>&, wsync_dtype_t, uint64_t, const DeviceStream&,
                  std::string* error) {
  return noCuda(error);
}

bool countMismatches(const std::vector<PatternPiece>&, wsync_dtype_t, uint64_t, const DeviceStream&,
                     int64_t*, Mismatch*, std::string* error) {
  return noCuda(error);
}

}  // namespace wsync_bench
