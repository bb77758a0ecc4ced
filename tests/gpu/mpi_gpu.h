// GPU tests under mpirun: whether every rank of the world can use a CUDA device (collective), so
// that all ranks skip together or none does.
#pragma once

#include <cuda_runtime_api.h>
#include <mpi.h>

inline bool everyRankHasGpu() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    count = 0;
  }
  int mine = count > 0 ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  return all != 0;
}
