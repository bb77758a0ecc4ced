#!/usr/bin/env bash
# One device call for block quantization on the GPU (docs/block_fp8.md): the GPU suite and the
# block quant device test on this build; Llama-3-8B-shaped bf16 trainers -> block fp8 and MXFP8
# rollouts over CUDA IPC, 1 -> 1 and 2 -> 2 (TP 2), each with in-place quantization and without it
# (WSYNC_DEBUG_NO_IN_PLACE_QUANT=0 or 1) on the same machine, every 4th version checked against
# the reference quantizer; the quantize kernels against a device copy, 128 x 128 and MXFP8; and,
# when a baseline bundle is there, the same kernels and 1 -> 1 run from it (`old`: an earlier
# build's bundle, same layout) and the A/B of the library (`base`: benchmarks/ab_library_bench.sh).
# Expects .carry/pack/*.tar.xz holding the bundle `final` (tests/gpu/make_bundle.sh plus
# wsync_block_quant_device_test, wsync-block-fp8-bench and the delta kernel unit tests) and,
# optionally, `old` and `base`; writes into $OUT (the device tool's output folder). PARTS (default
# "tests cpu kernel bench ab") picks what runs, so that one device call's time limit holds.
# Usage on the device: bash benchmarks/gpu_in_place_run.sh
set -u
for f in .carry/pack/*.tar.xz; do tar -C .carry -xJf "$f"; done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
F=$PWD/.carry/final
nvidia-smi -L | tee "$OUT/device.txt"
PARTS=${PARTS:-tests cpu kernel bench ab}
O=$PWD/.carry/old
part() { [[ " $PARTS " == *" $1 "* ]]; }
if part tests; then
  echo "== gpu suite"
  bash tests/gpu/run_gpu_suite.sh "$F" "$OUT/gpu_suite.log" 2>&1 | grep -E "exit|GPU"
  echo "== block quant device"
  timeout 100 "$F/wsync_block_quant_device_test" 2>&1 | tail -3 | tee "$OUT/block_quant_device_test.txt"
fi
M="mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -x LD_LIBRARY_PATH -x WSYNC_LOG=1 -x WSYNC_DEBUG_NO_IN_PLACE_QUANT"
bench() {  # [B=<bundle dir>] bench <name> <np> <in place: 1|0> <bench arguments...>
  local name=$1 np=$2 in_place=$3 b=${B:-$F}
  shift 3
  WSYNC_DEBUG_NO_IN_PLACE_QUANT=$((1 - in_place)) LD_LIBRARY_PATH=$b timeout "${T:-150}" $M -np "$np" \
    "$b/wsync-block-fp8-bench" --memory device --model llama3-8b --iters 10 --threads 8 \
    --check-every 4 "$@" > "$OUT/$name.txt" 2>&1
  echo "-- $name (in place $in_place): rc=$?"
  grep -v coordinator "$OUT/$name.txt" | grep -E "median|checked|wrong|error|Error" | tail -8
}
if part cpu; then  # the AVX-512 delta kernels on this machine's CPU (the CI VM lacks VBMI2)
  echo "== delta kernels on the host CPU: avx512_vbmi2 $(grep -c -m1 avx512_vbmi2 /proc/cpuinfo)"
  for t in wsync_delta_patch_kernels_test wsync_delta_patch_test; do
    [ -x "$F/$t" ] && timeout 120 "$F/$t" 2>&1 | tail -1
  done
fi
kernel() {  # <bundle dir> <name> <bench arguments...>: the quantize kernels against a device copy
  local b=$1 name=$2
  shift 2
  LD_LIBRARY_PATH=$b timeout 120 "$b/wsync-block-fp8-bench" --kernel --model llama3-8b \
    --kernel-repeats 5 "$@" > "$OUT/$name.txt" 2>&1
  echo "-- $name: rc=$?"
  grep -E "copy d2d|batched|per-piece" "$OUT/$name.txt"
}
if part kernel; then  # this build's kernels, then the baseline's, in the same call
  echo "== quantize kernels, 128 x 128 and MXFP8"
  kernel "$F" kernel_fp8
  kernel "$F" kernel_mxfp8 --kernel-mxfp8
  if [ -d "$O" ]; then
    kernel "$O" kernel_fp8_old
    kernel "$O" kernel_mxfp8_old --kernel-mxfp8
  fi
fi
if part e2e; then  # in place only, this build then the baseline's: 1 -> 1 and 2 -> 2
  echo "== fp8 end to end, in place"
  T=${T:-300} bench e2e_1to1_in_place 2 1 --phases bf16,fp8,mxfp8
  [ -d "$O" ] && T=${T:-300} B=$O bench e2e_1to1_in_place_old 2 1 --phases bf16,fp8,mxfp8
  bench e2e_2to2_in_place 4 1 --phases bf16,fp8 --cut-offset 64
fi
if part e2e1; then  # this build's 1 -> 1 alone (a long MXFP8 check: 300 s)
  T=${T:-300} bench e2e_1to1_in_place 2 1 --phases bf16,fp8,mxfp8
fi
if part bench; then
  echo "== fp8 end to end 1 -> 1"
  bench e2e_1to1_in_place 2 1 --phases bf16,fp8,mxfp8
  bench e2e_1to1_copied 2 0 --phases bf16,fp8,mxfp8
  echo "== fp8 end to end 2 -> 2 (TP 2), blocks cut by the trainers' boundaries"
  bench e2e_2to2_in_place 4 1 --phases bf16,fp8 --cut-offset 64
  bench e2e_2to2_copied 4 0 --phases bf16,fp8 --cut-offset 64
  echo "== quantize kernels against a device copy"
  LD_LIBRARY_PATH=$F timeout 120 "$F/wsync-block-fp8-bench" --kernel --model llama3-8b \
    --kernel-repeats 5 > "$OUT/kernel_fp8.txt" 2>&1
  echo "rc=$?"
  grep -v "^{" "$OUT/kernel_fp8.txt" | tail -6
fi
if part ab && [ -d .carry/base ]; then
  echo "== A/B of the library (base -> final)"
  mkdir -p /tmp/ab
  ROUNDS=1 NPS="2 4" timeout 300 bash benchmarks/ab_library_bench.sh "$PWD/.carry/base" "$F" /tmp/ab \
    > "$OUT/ab_library.txt" 2>&1
  cat "$OUT/ab_library.txt"
fi
