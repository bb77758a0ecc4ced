// Telling ThreadSanitizer about memory it cannot see being allocated. No-ops in other builds.
#pragma once

#include <cstddef>

#if defined(__SANITIZE_THREAD__)
#define WSYNC_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define WSYNC_TSAN 1
#endif
#endif

#ifdef WSYNC_TSAN
// TSan's dynamic annotation (libtsan): forget every access it recorded in the range.
extern "C" void AnnotateNewMemory(const char* file, int line, const volatile void* mem,
                                  size_t size);
#endif

namespace wsync {

// `size` bytes at `data` are new memory. A library that maps memory behind TSan's back (UCX's own
// mmap) may hand out pages another thread used and unmapped before; without this, the first
// writes to them read as a race with that thread's.
inline void annotateNewMemory(const void* data, size_t size) {
#ifdef WSYNC_TSAN
  AnnotateNewMemory(__FILE__, __LINE__, data, size);
#else
  (void)data;
  (void)size;
#endif
}

}  // namespace wsync
