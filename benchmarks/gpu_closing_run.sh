#!/usr/bin/env bash
# One device call that checks and measures a build on a GPU machine: the GPU suite, the block quant and
# delta device tests, the delta device bench, the A/B of the library against a baseline bundle
# (.carry/new) and the fp8 end-to-end. Expects .carry/pack/*.tar.xz holding the bundles `final` (this build:
# tests/gpu/make_bundle.sh plus the two device tests and the fp8 / delta benches) and, optionally, `new` (the baseline of an A/B),
# and $OUT (the device tool's output folder). Usage on the device: bash benchmarks/gpu_closing_run.sh
set -u
for f in .carry/pack/*.tar.xz; do tar -C .carry -xJf "$f"; done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
F=$PWD/.carry/final
nvidia-smi -L | tee $OUT/device.txt
echo "== gpu suite"; bash tests/gpu/run_gpu_suite.sh "$F" $OUT/gpu_suite.log 2>&1 | grep -E "exit|GPU"
echo "== block quant device"; timeout 100 "$F/wsync_block_quant_device_test" 2>&1 | tail -3 | tee $OUT/block_quant_device_test.txt
echo "== delta device test"; timeout 200 "$F/wsync_delta_device_test" > $OUT/delta_device_test.txt 2>&1; echo "rc=$?"
grep -c "delta-device PASS" $OUT/delta_device_test.txt; grep "FAIL" $OUT/delta_device_test.txt | head -8; tail -3 $OUT/delta_device_test.txt
echo "== delta device bench"; LD_LIBRARY_PATH=$F timeout 150 "$F/wsync-delta-device-bench" --mib 1024 --elem-bytes 2 --shares 0.001,0.01,0.028,0.067,0.1 --repeats 10 > $OUT/delta_device_bench.txt 2>&1; echo "rc=$?"; tail -30 $OUT/delta_device_bench.txt
echo "== delta end to end on the device (delta against dense in one job pair per share)"
M="mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -x LD_LIBRARY_PATH"
for t in staged ucx_cuda; do  # cuda_ipc stays dense (measured in the first run of this session)
  LD_LIBRARY_PATH=$F timeout 150 $M -np 2 "$F/wsync-delta-bench" --memory device --transport $t --elements 67108864 \
    --versions 8 > $OUT/delta_bench_device_$t.txt 2>&1; echo "$t rc=$?"; grep -v "^ *delta\|^ *dense" $OUT/delta_bench_device_$t.txt | tail -12
done
echo "== fp8 e2e"; M="mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -x LD_LIBRARY_PATH -x WSYNC_LOG=1"
LD_LIBRARY_PATH=$F timeout 150 $M -np 2 "$F/wsync-block-fp8-bench" --memory device --model llama3-8b --phases bf16,fp8,mxfp8 --iters 10 --threads 8 --check-every 4 2>&1 | grep -v coordinator | tail -14 > $OUT/e2e_fp8.txt; grep -E "median|checked" $OUT/e2e_fp8.txt
echo "== fp8 2 -> 2 (TP 2), blocks cut by the trainers' boundaries"
LD_LIBRARY_PATH=$F timeout 150 $M -np 4 "$F/wsync-block-fp8-bench" --memory device --model llama3-8b --phases bf16,fp8 --iters 10 --threads 8 --check-every 4 --cut-offset 64 2>&1 | grep -v coordinator | tail -12 > $OUT/e2e_fp8_2to2.txt; grep -E "median|checked" $OUT/e2e_fp8_2to2.txt
echo "== quantize kernels against a device copy"
LD_LIBRARY_PATH=$F timeout 120 "$F/wsync-block-fp8-bench" --kernel --model llama3-8b --kernel-repeats 5 > $OUT/kernel_fp8.txt 2>&1; echo "rc=$?"; grep -v "^{" $OUT/kernel_fp8.txt | tail -12
LD_LIBRARY_PATH=$F timeout 120 "$F/wsync-block-fp8-bench" --kernel --model llama3-8b --kernel-repeats 5 --kernel-mxfp8 > $OUT/kernel_mxfp8.txt 2>&1; echo "rc=$?"; grep -v "^{" $OUT/kernel_mxfp8.txt | tail -8
if [ -d .carry/new ]; then
  echo "== A/B"; mkdir -p /tmp/ab; ROUNDS=1 NPS="2 4" timeout 300 bash benchmarks/ab_library_bench.sh "$PWD/.carry/new" "$F" /tmp/ab > $OUT/ab_library.txt 2>&1; cat $OUT/ab_library.txt
fi
