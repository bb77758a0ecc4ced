# Conversion and pack kernels against a host reference (label "gpu"): device tests skip without a
# usable CUDA device; the reference and argument checks run everywhere.
if(WSYNC_HAVE_CUDA)
  wsync_add_gpu_test(wsync_kernels_test ${CMAKE_CURRENT_LIST_DIR}/kernels_test.cc)
  target_link_libraries(wsync_kernels_test PRIVATE CUDA::cudart)
endif()
