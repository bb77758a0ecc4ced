// wsync-block-fp8-bench --kernel: the device block quantizer's throughput (kernels/
// block_quant_kernels.h: the legacy kernels, the fused one per weight and batched) over every
// quantized weight of the model in bf16, against cudaMemcpyAsync device to device of the same
// bf16 input (the physical limit), both timed with CUDA events. One process, one GPU.
// block_fp8_kernel.cc in a CUDA build; block_fp8_kernel_none.cc otherwise (says so, skips).
#pragma once

#include <string>
#include <vector>

#include "models/demo_policy.h"

namespace wsync_fp8 {

constexpr int kSkipped = 77;  // no usable GPU (or no CUDA in the build): nothing measured

// Prints one line per measurement and, last, one JSON line. `weights`: the model's tensors (the
// 2-D linear ones are quantized); `model` names it in the output. Returns 0, kSkipped, or 1 on
// a CUDA or launch failure.
int runKernelBench(const std::vector<wsync_demo::TensorSpec>& weights, const std::string& model,
                   int device, int repeats, bool mxfp8);

}  // namespace wsync_fp8
