# Delta patches on the device (kernels/delta_kernels.h) against the host encoder: argument checks
# everywhere, byte-equal patches and exact applies on a GPU; the page-locked host buffers the device
# delta paths copy patches through (pinned_memory_test.cc).
if(WSYNC_HAVE_CUDA)
  wsync_add_gpu_test(wsync_delta_device_test ${CMAKE_CURRENT_LIST_DIR}/delta_device_test.cc
                     ${CMAKE_CURRENT_LIST_DIR}/pinned_memory_test.cc)
  target_link_libraries(wsync_delta_device_test PRIVATE CUDA::cudart)
endif()
# Delta versions with device memory through the C API (mpirun -np 4, one GPU): device and host
# trainers and rollouts over the staged path take patches, every element of every version
# checked; a corrupted patch is re-sent dense; CUDA IPC rollouts stay dense.
wsync_add_gpu_capi_mpi_test(wsync_delta_job_device 4 ${CMAKE_CURRENT_LIST_DIR}/delta_job_device_test.cc)
