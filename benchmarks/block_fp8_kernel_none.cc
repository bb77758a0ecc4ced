// wsync-block-fp8-bench --kernel in a build without CUDA: says so and skips.
#include <cstdio>

#include "block_fp8_kernel.h"

namespace wsync_fp8 {

int runKernelBench(const std::vector<wsync_demo::TensorSpec>&, const std::string&, int, int, bool) {
  std::printf("[kernel] skipped: this build has no CUDA (WSYNC_HAVE_CUDA off)\n");
  return kSkipped;
}

}  // namespace wsync_fp8
