// A minimal reader and writer of the safetensors format (an 8-byte little-endian header length, a
// JSON header {"name": {"dtype": "BF16", "shape": [...], "data_offsets": [begin, end]}, ...,
// optionally "__metadata__": {...}}, then the raw bytes), for wsync-cold-start-bench's comparison
// of a peer cold start with loading weights from a file. Written here because no C++ library of
// the format is packaged for Debian; it handles what the format holds (the header's JSON subset of
// objects, arrays, strings and integers) and checks every offset against the file.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace wsync_bench {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // "BF16", "F32", ...
  std::vector<int64_t> shape;
  const void* data = nullptr;  // writer: the tensor's bytes
  uint64_t bytes = 0;
};

// Writes `entries` to `path` (truncating it), bytes in order. False with `error` on failure.
bool writeSafetensors(const std::string& path, const std::vector<SafetensorsEntry>& entries,
                      std::string* error);

// An open safetensors file, mapped read-only: its entries (data points into the mapping).
class SafetensorsFile {
 public:
  // Maps and parses `path`; false with `error` (naming the file and what is wrong) otherwise.
  bool open(const std::string& path, std::string* error);
  ~SafetensorsFile();
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  uint64_t fileBytes() const { return size_; }

 private:
  void* map_ = nullptr;
  uint64_t size_ = 0;
  std::vector<SafetensorsEntry> entries_;
};

}  // namespace wsync_bench
