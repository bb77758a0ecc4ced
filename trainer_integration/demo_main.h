// What the demo programs (wsync-trainer-demo, wsync-rollout-demo) share around their own work:
// main() (MPI with thread support for wsync's threads, an exception guard, the exit codes mpirun
// and ctest expect) and the choice of host or device memory.
#pragma once

#include <string>

namespace wsync_demo {

// ctest's SKIP_RETURN_CODE: the job needs a GPU (or GPUs) this machine lacks.
constexpr int kSkipped = 77;

// Calls run(argc, argv) between MPI_Init_thread (MPI_THREAD_MULTIPLE) and MPI_Finalize and returns
// its exit code. 0 and kSkipped finalize MPI normally (every rank of a skipped job skips); any
// other code, or an exception (printed as "[role] what"), aborts the whole MPI job, so a failing
// rank cannot leave its peers waiting.
int demoMain(const char* role, int argc, char** argv, int (*run)(int argc, char** argv));

struct MemoryChoice {
  bool device = false;
  int cuda_device = -1;  // wsync_config_t::cuda_device
  std::string detail;    // the GPU's name, or why host memory
};

// Chooses the memory of this process from --memory (auto | host | device; auto: device when a GPU
// is usable), --one-gpu-per-rank (device memory on the GPU numbered by the MPI world rank) and
// --skip-without-gpu, and selects the device. `app_index`: this process's index in its MPMD app
// (processes share the GPUs round robin). Returns 0, kSkipped (the job needs a GPU this machine
// lacks; printed) or 2 (bad flag, or the device cannot be selected; printed).
int chooseMemory(const char* role, const std::string& memory, bool one_gpu_per_rank,
                 bool skip_without_gpu, int app_index, MemoryChoice* out);

}  // namespace wsync_demo
