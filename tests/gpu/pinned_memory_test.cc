// The runtime's page-locked host memory (runtime/device_ops.h: PinnedHostBuffer, HostRegistration),
// which the device delta paths copy patches through: bytes round-trip host -> device -> host
// through both kinds, an empty registration pins nothing, and registering a range twice is refused
// with CUDA's reason. Part of wsync_delta_device_test; skips without a usable CUDA device.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "common/cuda_check.h"
#include "runtime/device_ops.h"

namespace wsync {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!cudaDeviceAvailable(0)) GTEST_SKIP() << "no usable CUDA device"

TEST(PinnedHostMemory, BytesRoundTripThroughTheDevice) {
  SKIP_WITHOUT_GPU();
  constexpr size_t kBytes = (4 << 20) + 13;  // not a whole page
  Result<PinnedHostBuffer> pinned = PinnedHostBuffer::allocate(kBytes);
  ASSERT_TRUE(pinned.isOk()) << pinned.status().toString();
  ASSERT_EQ(pinned->size(), kBytes);
  std::iota(pinned->data(), pinned->data() + kBytes, uint8_t{7});
  Result<DeviceBuffer> device = DeviceBuffer::allocate(kBytes, 0);
  ASSERT_TRUE(device.isOk()) << device.status().toString();
  Result<DeviceStream> stream = DeviceStream::create(0);
  ASSERT_TRUE(stream.isOk()) << stream.status().toString();

  std::vector<uint8_t> back(kBytes, 0);
  Result<HostRegistration> registered = HostRegistration::pin(back.data(), back.size());
  ASSERT_TRUE(registered.isOk()) << registered.status().toString();
  EXPECT_TRUE(registered->pinned());
  ASSERT_TRUE(copyAsync(device->data(), pinned->data(), kBytes, stream->get()).isOk());
  ASSERT_TRUE(copyAsync(back.data(), device->data(), kBytes, stream->get()).isOk());
  ASSERT_TRUE(streamSync(stream->get(), std::chrono::seconds(30)).isOk());
  EXPECT_TRUE(std::equal(back.begin(), back.end(), pinned->data()));

  // moved, the registration is released once (by its new owner)
  HostRegistration moved = std::move(*registered);
  EXPECT_TRUE(moved.pinned());
  EXPECT_FALSE(registered->pinned());  // NOLINT(bugprone-use-after-move): moved-from is empty
}

TEST(PinnedHostMemory, EmptyAndRepeatedRegistrations) {
  SKIP_WITHOUT_GPU();
  std::vector<uint8_t> bytes(1 << 16, 1);
  Result<HostRegistration> none = HostRegistration::pin(bytes.data(), 0);
  ASSERT_TRUE(none.isOk());
  EXPECT_FALSE(none->pinned());
  Result<HostRegistration> first = HostRegistration::pin(bytes.data(), bytes.size());
  ASSERT_TRUE(first.isOk()) << first.status().toString();
  Result<HostRegistration> again = HostRegistration::pin(bytes.data(), bytes.size());
  ASSERT_FALSE(again.isOk());
  EXPECT_NE(again.status().message().find("cudaHostRegister"), std::string::npos)
      << again.status().toString();
}

}  // namespace
}  // namespace wsync
