// wsync-cold-start-bench (cold_start_bench.cc): the safetensors side of the comparison,
// cold_start_bench_load.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "models/demo_policy.h"

namespace wsync_bench {

struct LoadResult {
  bool ok = false;
  std::string error;
  uint64_t file_bytes = 0;
  double first_s = 0;  // the first timed load
  double best_s = 0;   // the best of the timed loads
  int64_t wrong = 0;   // elements of the loaded copy that differ from version 1
};

// Writes the version in `version_data` (bfloat16 buffers of `layout`, device memory when `device`;
// every piece a whole tensor) to `file`, one entry per tensor; then loads it `repeats` times after
// one untimed load (warm page cache) into preallocated, prefaulted memory of the same kind, and
// counts the wrong elements of the result with `count_wrong` (-1: it failed).
LoadResult timeSafetensorsLoad(
    const std::vector<wsync_demo::TensorSpec>& tensors,
    const std::vector<wsync_demo::BufferSpec>& layout, const std::vector<void*>& version_data,
    bool device, const std::string& file, int repeats,
    const std::function<int64_t(const std::vector<void*>&, std::string*)>& count_wrong);

}  // namespace wsync_bench
