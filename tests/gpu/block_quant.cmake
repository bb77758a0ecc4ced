# Block quantization kernels (kernels/block_quant_kernels.h) against the host quantizer (label
# "gpu"): argument checks everywhere, bytes on a GPU (the layouts of the block-parallel kernels:
# block_quant_layout_device_test.cc); skips without a usable CUDA device.
if(WSYNC_HAVE_CUDA)
  wsync_add_gpu_test(wsync_block_quant_device_test ${CMAKE_CURRENT_LIST_DIR}/block_quant_device_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/block_quant_layout_device_test.cc)
  target_link_libraries(wsync_block_quant_device_test PRIVATE CUDA::cudart)
endif()
