# Delta patches on the device (kernels/delta_kernels.h) against the host encoder: argument checks
# everywhere, byte-equal patches and exact applies on a GPU.
if(WSYNC_HAVE_CUDA)
  wsync_add_gpu_test(wsync_delta_device_test ${CMAKE_CURRENT_LIST_DIR}/delta_device_test.cc)
  target_link_libraries(wsync_delta_device_test PRIVATE CUDA::cudart)
endif()
