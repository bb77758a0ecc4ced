# Delta versions (docs/delta.md) in real jobs under mpirun, host memory over UCX: 2 trainers
# (column halves of one tensor) -> replica 0 (2 ranks, row halves) and replica 1 (1 rank, whole
# tensor), every element of every version checked on every rollout rank.
if(TARGET wsync)
  add_executable(wsync_delta_test ${CMAKE_CURRENT_LIST_DIR}/delta_test.cc)
  target_link_libraries(wsync_delta_test PRIVATE wsync wsync_test_support GTest::gtest wsync_mpi)
  wsync_add_mpi_test(wsync_delta 5 wsync_delta_test)
endif()
