# wsync-block-fp8-bench as a test: bf16 -> bf16, block fp8 and MXFP8 phases on a tiny policy, the
# last version of each checked on every rollout rank against the host reference quantizer (exit
# 1 on any wrong byte): 1 -> 1, and 2 -> 2 in TP 2 with trainer shards cutting 128-row blocks
# (partial maxima relayed). --kernel: the device quantizer (exit 77 = skipped without a GPU).
if(TARGET wsync-block-fp8-bench)
  wsync_add_mpi_test(wsync_block_fp8_bench_host 2 wsync-block-fp8-bench
    --bytes 1048576 --phases bf16,fp8,mxfp8 --iters 2)
  wsync_add_mpi_test(wsync_block_fp8_bench_tp2_straddle 4 wsync-block-fp8-bench
    --bytes 67108864 --phases bf16,fp8,mxfp8 --iters 2 --cut-offset 64)
  wsync_add_mpi_test(wsync_block_fp8_bench_kernel 1 wsync-block-fp8-bench
    --kernel --bytes 67108864 --kernel-repeats 2)
  set_tests_properties(wsync_block_fp8_bench_kernel PROPERTIES LABELS "gpu;mp" SKIP_RETURN_CODE 77)
endif()
