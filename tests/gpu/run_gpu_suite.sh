#!/usr/bin/env bash
# Runs the GPU tests on a machine with a GPU from prebuilt binaries (the GPU machine may lack the
# build dependencies): kernel tests (conversion, batched copy, the CUDA IPC backend's batch, the
# device checksum against the host one), float8 scales through the C API, the device transports'
# conformance suite (CUDA IPC, staged UCX), delta versions with device memory, and the device-memory end-to-end jobs (trainers and rollouts on the same GPU, every read
# checked). CI has no GPU; there the same tests run under ctest and skip.
# Usage: tests/gpu/run_gpu_suite.sh <dir with the binaries and libwsync.so.0> <log file>
set -u
bin=$1
log=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export LD_LIBRARY_PATH="$bin:${LD_LIBRARY_PATH:-}"
mpi="mpirun --oversubscribe --mca btl self,vader"
small="--layers 2 --hidden 256 --ffn 512 --vocab 1024"
large="--layers 2 --hidden 1024 --ffn 4096 --vocab 4096"
failed=0
run() {
  local name=$1
  shift
  local t0=$SECONDS
  echo "=== $name: $*" >>"$log"
  timeout -k 5 240 "$@" >>"$log" 2>&1
  local rc=$?
  echo "=== $name: exit $rc in $((SECONDS - t0)) s" | tee -a "$log"
  [ "$rc" -eq 0 ] || failed=1
}
nvidia-smi -L | tee -a "$log"
run kernels "$bin/wsync_kernels_test"
run batched_copy "$bin/wsync_batched_copy_test"
run cuda_ipc_batch "$bin/wsync_cuda_ipc_batch_test"
run checksum_device "$bin/wsync_checksum_device_test"
run fp8_scale $mpi -np 2 "$bin/wsync_fp8_scale_test"
run transport_conformance $mpi -np 2 "$bin/wsync_write_transport_conformance_test"
run delta_job_device $mpi -np 4 "$bin/wsync_delta_job_device_test"
run e2e_device_differ_100 $mpi -np 2 "$bin/wsync-trainer-demo" --versions 100 --memory device --quiet $small \
  : -np 4 "$bin/wsync-rollout-demo" --replicas 2 --versions 100 --memory device --layout differ $small
run e2e_device_mixed_fused_bf16_100 $mpi -np 2 "$bin/wsync-trainer-demo" --versions 100 --memory device --quiet $small \
  : -np 4 "$bin/wsync-rollout-demo" --replicas 2 --versions 100 --memory device --layout mixed --dtype bfloat16 $small
run e2e_device_copy_flip $mpi -np 2 "$bin/wsync-trainer-demo" --versions 50 --memory device --quiet $small \
  : -np 2 "$bin/wsync-rollout-demo" --replicas 1 --versions 50 --memory device --copy-flip --dtype float16 $small
run e2e_device_snapshot $mpi -np 2 "$bin/wsync-trainer-demo" --versions 50 --memory device --snapshot --quiet $small \
  : -np 2 "$bin/wsync-rollout-demo" --replicas 2 --versions 50 --memory device $small
# Tensors of 1-16 MiB, whole on both sides: long contiguous runs through the batched device copy.
run e2e_device_match_large_100 $mpi -np 2 "$bin/wsync-trainer-demo" --versions 100 --memory device --quiet $large \
  : -np 2 "$bin/wsync-rollout-demo" --replicas 1 --versions 100 --memory device --layout match $large
run e2e_staged_differ_100 env WSYNC_DEVICE_TRANSPORT=staged $mpi -np 2 "$bin/wsync-trainer-demo" --versions 100 --memory device --quiet $small \
  : -np 4 "$bin/wsync-rollout-demo" --replicas 2 --versions 100 --memory device --layout differ $small
run e2e_device_to_host $mpi -np 2 "$bin/wsync-trainer-demo" --versions 50 --memory device --quiet $small \
  : -np 4 "$bin/wsync-rollout-demo" --replicas 2 --versions 50 --memory host --layout mixed --dtype bfloat16 $small
grep -E "^\[rollout|^\[trainer\] done|PASSED|FAILED|SKIPPED|OK \]" "$log" | sort | uniq -c | sort -rn | head -60
exit $failed
