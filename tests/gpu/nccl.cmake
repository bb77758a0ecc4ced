# NcclBroadcaster under mpirun: real NCCL broadcasts between GPUs (skip without 2+ GPUs, one per
# rank); its argument checks run everywhere.
if(WSYNC_HAVE_CUDA)
  add_executable(wsync_nccl_broadcaster_test ${CMAKE_CURRENT_LIST_DIR}/nccl_broadcaster_test.cc)
  target_link_libraries(wsync_nccl_broadcaster_test
    PRIVATE wsync_core wsync_test_support GTest::gtest)
  wsync_add_gpu_mpi_test(wsync_nccl_broadcaster_np2 2 wsync_nccl_broadcaster_test)
  wsync_add_gpu_mpi_test(wsync_nccl_broadcaster_np4 4 wsync_nccl_broadcaster_test)
endif()
