#include "transport/cuda_ipc/device_sources.h"

#include <algorithm>
#include <limits>

namespace wsync {

uint64_t DeviceSources::add(const void* base, uint64_t bytes) {
  const auto begin = reinterpret_cast<uintptr_t>(base);
  const uintptr_t end = bytes > std::numeric_limits<uintptr_t>::max() - begin
                            ? std::numeric_limits<uintptr_t>::max()
                            : begin + static_cast<uintptr_t>(bytes);
  const uint64_t id = next_id_++;
  ranges_.emplace(id, Span{begin, end});
  dirty_ = true;
  return id;
}

void DeviceSources::remove(uint64_t id) {
  if (ranges_.erase(id) > 0) dirty_ = true;
}

bool DeviceSources::contains(const void* p, uint64_t bytes) {
  if (dirty_) {
    std::vector<Span> spans;
    spans.reserve(ranges_.size());
    for (const auto& [id, span] : ranges_)
      spans.push_back(span);
    std::sort(spans.begin(), spans.end());
    merged_.clear();
    for (const Span& s : spans) {
      if (!merged_.empty() && s.first <= merged_.back().second) {
        merged_.back().second = std::max(merged_.back().second, s.second);
      } else {
        merged_.push_back(s);
      }
    }
    dirty_ = false;
  }
  const auto begin = reinterpret_cast<uintptr_t>(p);
  if (bytes == 0 || bytes > std::numeric_limits<uintptr_t>::max() - begin) return false;
  const uintptr_t end = begin + static_cast<uintptr_t>(bytes);
  // The last span starting at or before `begin`.
  auto it = std::upper_bound(merged_.begin(), merged_.end(), begin,
                             [](uintptr_t value, const Span& s) { return value < s.first; });
  if (it == merged_.begin()) return false;
  --it;
  return end <= it->second;
}

}  // namespace wsync
