// Device memory for the demos (CUDA runtime API), so the same examples run on the GPU when there
// is one. Without CUDA in the build, deviceCount() is 0 and the rest is never called.
#pragma once

#include <cstddef>

namespace wsync_demo {

int deviceCount();  // 0 without CUDA or without a usable GPU
bool selectDevice(int device);
void* deviceAlloc(size_t bytes);  // nullptr on failure
void deviceFree(void* p);
bool copyToDevice(void* dst, const void* src, size_t bytes);
bool copyToHost(void* dst, const void* src, size_t bytes);
// Per-thread default stream of the demo (the "training stream"); nullptr without CUDA.
void* demoStream();
bool syncStream(void* stream);

}  // namespace wsync_demo
