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
# float8 e4m3 with a per-tensor scale through the C API (device trainer -> device rollout, one GPU).
wsync_add_gpu_capi_mpi_test(wsync_fp8_scale 2 ${CMAKE_CURRENT_LIST_DIR}/fp8_scale_test.cc)
# The CUDA IPC backend's batched copies (which writes go into the flush's kernel, bytes equal):
# the registered-range lookup everywhere, the transport on a GPU.
if(WSYNC_HAVE_CUDA)
  wsync_add_gpu_test(wsync_cuda_ipc_batch_test ${CMAKE_CURRENT_LIST_DIR}/cuda_ipc_batch_test.cc)
  target_link_libraries(wsync_cuda_ipc_batch_test PRIVATE CUDA::cudart)
endif()
# The device shard checksum (kernels/checksum_kernels.h through runtime/version_checksums.h)
# against the host one: tiling everywhere, equal sums for random spans on a GPU.
if(WSYNC_HAVE_CUDA)
  wsync_add_gpu_test(wsync_checksum_device_test ${CMAKE_CURRENT_LIST_DIR}/checksum_device_test.cc)
  target_link_libraries(wsync_checksum_device_test PRIVATE CUDA::cudart)
endif()
