// The device memory a CUDA IPC transport was told about (registerSource() of device memory of its
// device): where write() may take its copies into the batched kernel (copy_batch.h), decided by a
// lookup instead of a cudaPointerGetAttributes per write. Shared (shared_ptr) by the transport and
// its source registrations, which may outlive it. One thread (the transport's owner).
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace wsync {

class DeviceSources {
 public:
  // Records [base, base + bytes) (bytes > 0; ranges may overlap); returns the id remove() takes.
  uint64_t add(const void* base, uint64_t bytes);
  void remove(uint64_t id);

  // Whether [p, p + bytes) (bytes > 0) lies inside recorded memory (one range, or ranges that
  // overlap or touch). O(log ranges) after a change rebuilt the merged table.
  bool contains(const void* p, uint64_t bytes);

 private:
  using Span = std::pair<uintptr_t, uintptr_t>;  // [begin, end)
  std::map<uint64_t, Span> ranges_;              // by id
  std::vector<Span> merged_;                     // disjoint, ascending; valid unless dirty_
  bool dirty_ = false;
  uint64_t next_id_ = 0;
};

}  // namespace wsync
