// A gtest main for tests that run under mpirun: initializes MPI (MPI_THREAD_MULTIPLE), runs the
// tests on every rank, and makes every rank exit non-zero when any rank failed, so ctest sees a
// failure whichever rank hit it.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

inline int worldRank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

inline int worldSize() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

#define WSYNC_MPI_GTEST_MAIN()                                                           \
  int main(int argc, char** argv) {                                                      \
    int provided = 0;                                                                    \
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);                       \
    ::testing::InitGoogleTest(&argc, argv);                                              \
    int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;                                           \
    int any_failed = 0;                                                                  \
    MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);            \
    if (failed) std::fprintf(stderr, "world rank %d: some tests failed\n", worldRank()); \
    MPI_Finalize();                                                                      \
    return any_failed;                                                                   \
  }
