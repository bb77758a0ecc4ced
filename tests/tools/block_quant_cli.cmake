# wsync_block_quant_cli: the host block quantizer behind a file interface, for
# tests/python/test_block_quant_vllm.py (vLLM's own quantizers against ours, bit for bit).
add_executable(wsync_block_quant_cli ${CMAKE_CURRENT_LIST_DIR}/wsync_block_quant_cli.cc)
target_link_libraries(wsync_block_quant_cli PRIVATE wsync_core wsync_test_support)
