#!/usr/bin/env bash
# Copies what tests/gpu/run_gpu_suite.sh, the A/B and sync benchmarks and the Python GPU proofs run
# on the GPU machine (which lacks the build dependencies) from a CUDA build into one folder,
# debug info stripped so that it fits a device call's carry limit (64 MiB).
# Usage: tests/gpu/make_bundle.sh <build dir> <out dir>
set -euo pipefail
build=$1
out=$2
mkdir -p "$out"
for t in wsync_kernels_test wsync_batched_copy_test wsync_cuda_ipc_batch_test wsync_checksum_device_test \
         wsync_fp8_scale_test wsync_write_transport_conformance_test wsync_delta_job_device_test; do
  cp "$build/tests/$t" "$out/"
done
cp "$build/trainer_integration/wsync-trainer-demo" "$build/rollout_integration/wsync-rollout-demo" \
   "$build/benchmarks/wsync-sync-bench" "$build/benchmarks/wsync-cold-start-bench" "$out/"
coordinator=$(find "$build/src" -name wsync-coordinator -type f | head -1)
cp "$coordinator" "$out/"
cp -L "$build/src/capi/libwsync.so.0" "$out/"
# wsync-coordinator's /metrics server links cpp-httplib, which the GPU machine lacks.
httplib=$(ldd "$coordinator" | awk '/libcpp-httplib/ {print $3}')
[ -n "$httplib" ] && cp -L "$httplib" "$out/"
ln -sf libwsync.so.0 "$out/libwsync.so"
for f in "$out"/*; do
  [ -L "$f" ] || strip --strip-debug "$f"
done
du -sh "$out"
