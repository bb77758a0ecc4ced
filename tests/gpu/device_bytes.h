// Device memory for GPU tests: cudaMalloc'ed on the current device, freed on scope exit; an
// allocation failure is a test failure (data stays null).
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>

namespace wsync {

struct DeviceBytes {
  explicit DeviceBytes(size_t n) : size(n) { EXPECT_EQ(cudaMalloc(&data, n), cudaSuccess); }
  ~DeviceBytes() {
    if (data != nullptr) cudaFree(data);
  }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  uint8_t* bytes() const { return static_cast<uint8_t*>(data); }
  void* data = nullptr;
  size_t size = 0;
};

}  // namespace wsync
