// Working memory of the planner (private to src/plan): vectors whose large blocks go back to the
// system as soon as they are freed, and transparent huge pages for large arrays.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <new>
#include <type_traits>
#include <vector>

namespace wsync::plan_internal {

// Faults in [data, data + bytes) for writing in one system call (MADV_POPULATE_WRITE, Linux
// 5.14+; a no-op where unsupported): about 25% cheaper than the first touches faulting page by
// page, and for memory that is about to be written in full. Transparent huge pages are not asked
// for: on these VMs (free page reporting) a 2 MiB page is usually memory the host has taken back,
// and first-touching the plan's writes on huge pages cost 0.04-1.0 s of system time, against a
// steady ~0.1 s in 4 KiB pages, which come from recently freed, still-backed memory.
inline void populateForWrite(void* data, size_t bytes) {
  constexpr uintptr_t kPage = 4096;
  constexpr int kPopulateWrite = 23;  // MADV_POPULATE_WRITE, absent from older headers
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + kPage - 1) & ~(kPage - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(kPage - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, kPopulateWrite);
}

// Allocator of the planner's large working arrays. Blocks of kMapBytes and more are mapped and
// unmapped directly, so that what the planner frees is returned to the system at once: the C heap
// keeps freed blocks below its adaptive mmap threshold (up to 32 MiB) resident, and the planner's
// peak memory is its working arrays plus the plan. Mapped blocks are populated at once
// (MAP_POPULATE: the planner's vectors are filled right after they are sized or reserved).
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
      block = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
      if (block == MAP_FAILED) {
        block = nullptr;
      } else {
        mapped = 1;
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

// An array of trivially copyable T that only grows at its end, in its own mapping: growing moves
// the pages (mremap) instead of copying them into a new block, so what it stores is written and
// first-touched once (a growing ScratchVector writes ~2x its final size, and faults in each copy).
// For working lists whose final size is unknown (the balancer's choices: tens of MB for Kimi-K2).
template <typename T>
class MappedArray {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  MappedArray() = default;
  MappedArray(const MappedArray&) = delete;
  MappedArray& operator=(const MappedArray&) = delete;
  ~MappedArray() { freeMemory(); }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T* data() { return data_; }
  const T* data() const { return data_; }
  void push_back(const T& value) {
    if (size_ == capacity_) grow();
    data_[size_++] = value;
  }
  void freeMemory() {
    if (data_ != nullptr) munmap(data_, capacity_ * sizeof(T));
    data_ = nullptr;
    size_ = capacity_ = 0;
  }

 private:
  static constexpr size_t kFirstBytes = size_t{1} << 20;
  void grow() {
    const size_t bytes = capacity_ == 0 ? kFirstBytes : 2 * capacity_ * sizeof(T);
    void* block = data_ == nullptr ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                                          MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                                   : mremap(data_, capacity_ * sizeof(T), bytes, MREMAP_MAYMOVE);
    if (block == MAP_FAILED) throw std::bad_alloc();  // as ScratchAllocator's operator new
    data_ = static_cast<T*>(block);
    capacity_ = bytes / sizeof(T);
  }

  T* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;  // elements; the mapping is capacity_ * sizeof(T) bytes
};

// Frees a vector's storage (`v = {}` would only clear it: it assigns an empty initializer list).
template <typename V>
void release(V& v) {
  V().swap(v);
}

}  // namespace wsync::plan_internal
