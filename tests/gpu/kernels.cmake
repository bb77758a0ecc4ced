# Conversion and pack kernels against a host reference (label "gpu"): device tests skip without a
# usable CUDA device; the reference and argument checks run everywhere.
if(WSYNC_HAVE_CUDA)
  wsync_add_gpu_test(wsync_kernels_test ${CMAKE_CURRENT_LIST_DIR}/kernels_test.cc)
  target_link_libraries(wsync_kernels_test PRIVATE CUDA::cudart)
endif()
# The batched region copy (one launch for many regions): tiling checks everywhere, copies on a GPU.
if(WSYNC_HAVE_CUDA)
  wsync_add_gpu_test(wsync_batched_copy_test ${CMAKE_CURRENT_LIST_DIR}/batched_copy_test.cc)
  target_link_libraries(wsync_batched_copy_test PRIVATE CUDA::cudart)
endif()
