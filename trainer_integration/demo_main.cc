#include "trainer_integration/demo_main.h"

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <exception>

#include "trainer_integration/demo_device.h"

namespace wsync_demo {

int demoMain(const char* role, int argc, char** argv, int (*run)(int argc, char** argv)) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rc = 1;
  try {
    rc = run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[%s] %s\n", role, e.what());
    rc = 1;
  }
  std::fflush(stdout);
  if (rc != 0 && rc != kSkipped) MPI_Abort(MPI_COMM_WORLD, rc);
  MPI_Finalize();
  return rc;
}

int chooseMemory(const char* role, const std::string& memory, bool one_gpu_per_rank,
                 bool skip_without_gpu, int app_index, MemoryChoice* out) {
  const std::string wanted = one_gpu_per_rank ? "device" : memory;
  if (wanted != "auto" && wanted != "host" && wanted != "device") {
    std::fprintf(stderr, "[%s] --memory must be auto, host or device, not '%s'\n", role,
                 wanted.c_str());
    return 2;
  }
  const int gpus = deviceCount();
  if ((wanted == "device" || skip_without_gpu) && gpus == 0) {
    std::fprintf(stderr, "[%s] no usable CUDA device%s; skipping\n", role,
                 builtWithCuda() ? "" : " (built without CUDA)");
    return kSkipped;
  }
  out->device = wanted == "device" || (wanted == "auto" && gpus > 0);
  if (!out->device) {
    out->detail = wanted == "host"  ? "--memory host"
                  : builtWithCuda() ? "no usable GPU found"
                                    : "no GPU: this build has no CUDA";
    return 0;
  }
  out->cuda_device = app_index % std::max(1, gpus);
  if (one_gpu_per_rank) {
    int world_rank = 0, world_size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    if (gpus < world_size) {
      std::fprintf(stderr, "[%s] --one-gpu-per-rank: %d ranks but %d GPUs; skipping\n", role,
                   world_size, gpus);
      return kSkipped;
    }
    out->cuda_device = world_rank;
  }
  if (!selectDevice(out->cuda_device)) {
    std::fprintf(stderr, "[%s] cannot use CUDA device %d\n", role, out->cuda_device);
    return 2;
  }
  out->detail = deviceName(out->cuda_device);
  return 0;
}

}  // namespace wsync_demo
