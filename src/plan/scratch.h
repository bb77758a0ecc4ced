// Working memory of the planner (private to src/plan): vectors whose large blocks go back to the
// system as soon as they are freed, and transparent huge pages for large arrays.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

namespace wsync::plan_internal {

// Asks the kernel to back [data, data + bytes) with transparent huge pages before it is first
// touched: first-touching the plan's writes (hundreds of MB for large MoE models) otherwise takes
// one page fault per 4 KiB. Best effort (ignored where THP is off); Linux only.
inline void adviseHugePages(void* data, size_t bytes) {
#ifdef MADV_HUGEPAGE
  constexpr uintptr_t kHugePage = uintptr_t{2} << 20;
  if (bytes < 2 * kHugePage) return;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(kHugePage - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)data;
  (void)bytes;
#endif
}

// Allocator of the planner's large working arrays. Blocks of kMapBytes and more are mapped and
// unmapped directly, so that what the planner frees is returned to the system at once: the C heap
// keeps freed blocks below its adaptive mmap threshold (up to 32 MiB) resident, and the planner's
// peak memory is its working arrays plus the plan. Mapped blocks of 4 MiB and more get huge pages
// (adviseHugePages): a cold Kimi-K2 plan first-touches ~160 MB of them, 4 KiB at a time otherwise.
// Each block starts with a header saying how it was obtained.
template <typename T>
struct ScratchAllocator {
  using value_type = T;
  static constexpr size_t kHeader = 64;  // keeps the alignment of every type the planner stores
  static constexpr size_t kMapBytes = size_t{1} << 20;
  static_assert(alignof(T) <= kHeader);

  ScratchAllocator() = default;
  template <typename U>
  ScratchAllocator(const ScratchAllocator<U>&) {}  // NOLINT(google-explicit-constructor)

  T* allocate(size_t n) {
    const size_t bytes = kHeader + n * sizeof(T);
    void* block = nullptr;
    uint64_t mapped = 0;
    if (bytes >= kMapBytes) {
      block = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (block == MAP_FAILED) {
        block = nullptr;
      } else {
        mapped = 1;
        adviseHugePages(block, bytes);
      }
    }
    if (block == nullptr) block = ::operator new(bytes);  // throws std::bad_alloc on failure
    *static_cast<uint64_t*>(block) = mapped;
    return reinterpret_cast<T*>(static_cast<char*>(block) + kHeader);
  }
  void deallocate(T* p, size_t n) {
    void* block = reinterpret_cast<char*>(p) - kHeader;
    if (*static_cast<uint64_t*>(block) != 0) {
      munmap(block, kHeader + n * sizeof(T));
    } else {
      ::operator delete(block);
    }
  }
  template <typename U>
  bool operator==(const ScratchAllocator<U>&) const {
    return true;
  }
};

template <typename T>
using ScratchVector = std::vector<T, ScratchAllocator<T>>;

// Frees a vector's storage (`v = {}` would only clear it: it assigns an empty initializer list).
template <typename V>
void release(V& v) {
  V().swap(v);
}

}  // namespace wsync::plan_internal
