# Device broadcast groups through NCCL, end to end under mpirun: the demos with matching layouts
# (every tensor is a broadcast group), one GPU per rank (cuda_device = MPI world rank), every
# version's bytes checked on the rollouts, and --expect-broadcast failing any rank whose plan has
# no broadcast group (so a silent fallback to writes cannot pass). NCCL refuses two ranks on one
# GPU: the demos exit 77 (skipped) when the node has fewer GPUs than the job has ranks.
if(WSYNC_HAVE_CUDA AND TARGET wsync-trainer-demo AND TARGET wsync-rollout-demo)
  set(nccl_e2e_policy --layers 2 --hidden 256 --ffn 512 --vocab 1024)
  # wsync_add_nccl_e2e_test(name trainers rollouts replicas dtype): rollout dtype float32 arrives
  # bit for bit; bfloat16 is converted on the trainers' GPUs before the broadcast.
  function(wsync_add_nccl_e2e_test name trainers rollouts replicas dtype)
    set(common --versions 20 --one-gpu-per-rank --expect-broadcast ${nccl_e2e_policy})
    add_test(NAME ${name}
      COMMAND ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe --mca btl self,vader
              -n ${trainers} $<TARGET_FILE:wsync-trainer-demo> ${common} --quiet
              : -n ${rollouts} $<TARGET_FILE:wsync-rollout-demo> ${common}
                --replicas ${replicas} --layout match --dtype ${dtype})
    set_tests_properties(${name} PROPERTIES
      LABELS "gpu;mp;e2e;multi-gpu" SKIP_RETURN_CODE 77 TIMEOUT 600 PROCESSORS 2
      ENVIRONMENT "NCCL_NVLS_ENABLE=0")  # NVLink multicast stays off on the lent machines
  endfunction()
  wsync_add_nccl_e2e_test(wsync_gpu_e2e_nccl_1x1 1 1 1 float32)        # needs 2 GPUs
  wsync_add_nccl_e2e_test(wsync_gpu_e2e_nccl_2x2 2 2 1 float32)        # needs 4 GPUs
  wsync_add_nccl_e2e_test(wsync_gpu_e2e_nccl_2x4_bf16 2 4 2 bfloat16)  # needs 6 GPUs
endif()
