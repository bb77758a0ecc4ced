# wsync-sync-bench as a test: the host mode on a small policy (every element verified), and the
# device mode (CUDA IPC on one GPU, verified by kernels; exit 77 = skipped without a GPU).
if(TARGET wsync-sync-bench)
  wsync_add_mpi_test(wsync_sync_bench_host 4 wsync-sync-bench
    --bytes 16777216 --layout mixed --dtype bfloat16 --iters 2 --baseline-iters 1)
  wsync_add_mpi_test(wsync_sync_bench_device 4 wsync-sync-bench
    --memory device --bytes 268435456 --layout mixed --snapshot --copy-flip --iters 2)
  set_tests_properties(wsync_sync_bench_device PROPERTIES LABELS "gpu;mp" SKIP_RETURN_CODE 77)
endif()
