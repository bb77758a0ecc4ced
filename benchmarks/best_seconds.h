// The benchmarks' timing rule on a shared machine: the best (least disturbed) of `repeats` runs.
#pragma once

#include <algorithm>
#include <chrono>

namespace wsync_bench {

// Seconds of the fastest of `repeats` calls of `body`.
template <typename F>
double bestSeconds(int repeats, F&& body) {
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    body();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace wsync_bench
