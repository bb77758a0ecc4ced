// wsync-cold-start-bench: the safetensors side of the comparison (see cold_start_bench.cc). The
// joiner's weights go to a file, one entry per tensor; the timed part maps and parses the file and
// copies every tensor into preallocated, prefaulted memory of the rollout's kind.
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench_device.h"
#include "cold_start_bench.h"
#include "models/demo_policy.h"
#include "safetensors_io.h"

namespace wsync_bench {

using wsync_demo::BufferSpec;
using wsync_demo::TensorSpec;

namespace {

constexpr size_t kElementBytes = 2;  // bfloat16

struct Place {
  size_t buffer = 0;
  uint64_t byte_offset = 0;
};

// Every piece of `layout` must be a whole tensor, row-major (one-rank replicas): its bytes are one
// run of the buffer, which is what a checkpoint entry holds.
bool wholeTensorPlaces(const std::vector<TensorSpec>& tensors,
                       const std::vector<BufferSpec>& layout, std::map<std::string, Place>* places,
                       std::string* error) {
  for (size_t b = 0; b < layout.size(); ++b) {
    for (const wsync_demo::PieceSpec& p : layout[b].pieces) {
      const TensorSpec& t = tensors[static_cast<size_t>(p.tensor)];
      int64_t stride = 1;
      bool whole = p.extent == t.shape;
      for (size_t d = t.shape.size(); d-- > 0 && whole;) {
        whole = p.offset[d] == 0 && p.strides[d] == stride;
        stride *= t.shape[d];
      }
      if (!whole) {
        *error =
            "tensor '" + t.name + "' is not whole and row-major in buffer '" + layout[b].name + "'";
        return false;
      }
      (*places)[t.name] = {b, static_cast<uint64_t>(p.local_offset) * kElementBytes};
    }
  }
  return true;
}

uint64_t numElements(const TensorSpec& t) {
  uint64_t n = 1;
  for (int64_t d : t.shape)
    n *= static_cast<uint64_t>(d);
  return n;
}

// The version's bytes, tensor by tensor, written to `file` (device memory through host copies).
bool writeFile(const std::vector<TensorSpec>& tensors, const std::map<std::string, Place>& places,
               const std::vector<void*>& data, bool device, const std::string& file,
               std::string* error) {
  std::vector<SafetensorsEntry> entries;
  std::vector<std::vector<uint8_t>> host_copies;
  for (const TensorSpec& t : tensors) {
    const Place& at = places.at(t.name);
    SafetensorsEntry e{t.name, "BF16", t.shape, nullptr, numElements(t) * kElementBytes};
    const uint8_t* src = static_cast<const uint8_t*>(data[at.buffer]) + at.byte_offset;
    if (device) {
      host_copies.emplace_back(e.bytes);
      if (!copyToHost(host_copies.back().data(), src, e.bytes, error)) return false;
      src = host_copies.back().data();
    }
    e.data = src;
    entries.push_back(e);
  }
  return writeSafetensors(file, entries, error);
}

// One load: map and parse the file, copy every entry to its place.
bool loadOnce(const std::string& file, const std::map<std::string, Place>& places,
              const std::vector<void*>& dest, bool device, uint64_t* file_bytes,
              std::string* error) {
  SafetensorsFile f;
  if (!f.open(file, error)) return false;
  *file_bytes = f.fileBytes();
  for (const SafetensorsEntry& e : f.entries()) {
    auto it = places.find(e.name);
    if (it == places.end() || e.dtype != "BF16") {
      *error = file + ": unexpected entry '" + e.name + "' (" + e.dtype + ")";
      return false;
    }
    void* to = static_cast<uint8_t*>(dest[it->second.buffer]) + it->second.byte_offset;
    if (device) {
      if (!copyToDevice(to, e.data, e.bytes, error)) return false;
    } else {
      std::memcpy(to, e.data, e.bytes);
    }
  }
  return true;
}

}  // namespace

LoadResult timeSafetensorsLoad(
    const std::vector<TensorSpec>& tensors, const std::vector<BufferSpec>& layout,
    const std::vector<void*>& version_data, bool device, const std::string& file, int repeats,
    const std::function<int64_t(const std::vector<void*>&, std::string*)>& count_wrong) {
  using Clock = std::chrono::steady_clock;
  LoadResult r;
  std::map<std::string, Place> places;
  if (!wholeTensorPlaces(tensors, layout, &places, &r.error) ||
      !writeFile(tensors, places, version_data, device, file, &r.error)) {
    return r;
  }
  // The rollout's memory, allocated and faulted in before timing.
  std::vector<std::vector<uint8_t>> host(layout.size());
  std::vector<std::unique_ptr<DeviceMemory>> gpu;
  std::vector<void*> dest;
  for (size_t b = 0; b < layout.size(); ++b) {
    const size_t bytes =
        static_cast<size_t>(std::max<int64_t>(1, layout[b].num_elements)) * kElementBytes;
    if (device) {
      gpu.push_back(DeviceMemory::allocate(bytes, layout[b].name, &r.error));
      if (!gpu.back()) return r;
      dest.push_back(gpu.back()->data());
    } else {
      host[b].assign(bytes, 0);
      dest.push_back(host[b].data());
    }
  }
  // Warm page cache: one untimed load.
  if (!loadOnce(file, places, dest, device, &r.file_bytes, &r.error)) return r;
  for (int i = 0; i < repeats; ++i) {
    const Clock::time_point t0 = Clock::now();
    if (!loadOnce(file, places, dest, device, &r.file_bytes, &r.error)) return r;
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (i == 0) r.first_s = s;
    r.best_s = i == 0 ? s : std::min(r.best_s, s);
  }
  r.wrong = count_wrong(dest, &r.error);
  r.ok = r.wrong >= 0;
  return r;
}

}  // namespace wsync_bench
