// Device memory for the demos (CUDA runtime API), so the same examples run on the GPU when there
// is one, and the copy limits the demo compares wsync with. Without CUDA in the build,
// deviceCount() is 0 and the device functions are never called.
#pragma once

#include <cstddef>
#include <string>

namespace wsync_demo {

bool builtWithCuda();
int deviceCount();  // 0 without CUDA or without a usable GPU
std::string deviceName(int device);
bool selectDevice(int device);
void* deviceAlloc(size_t bytes);  // nullptr on failure
void deviceFree(void* p);
bool copyToDevice(void* dst, const void* src, size_t bytes);
// On the calling thread's demoStream(), complete on return (does not wait for other streams).
bool copyToHost(void* dst, const void* src, size_t bytes);
// Per-thread default stream of the demo (the "training stream"); nullptr without CUDA.
void* demoStream();
bool syncStream(void* stream);

// The physical limits, GB/s (1e9 bytes copied per second), the best of a few copies of `bytes`
// after one to warm up: one memcpy on this thread; one cudaMemcpy device-to-device on the current
// device (0 when it cannot allocate).
double hostCopyGbps(size_t bytes);
double deviceCopyGbps(size_t bytes);

}  // namespace wsync_demo
