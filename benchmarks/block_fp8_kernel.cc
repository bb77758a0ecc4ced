// wsync-block-fp8-bench --kernel in a CUDA build (see block_fp8_kernel.h). The weights sit in one
// bf16 input arena (filled with one finite value; the kernels' speed does not depend on it), the
// fp8 output, the maxima and the scales in others, and the copy's destination is a second bf16
// arena, so neither side reads from cache. Each measurement: one untimed round, then the best of
// `repeats` rounds, each round every weight in turn on one stream between two CUDA events.
#include <cuda_runtime_api.h>

#include <cinttypes>
#include <cstdio>
#include <functional>

#include "block_fp8_kernel.h"
#include "block_fp8_model.h"
#include "kernels/block_quant_kernels.h"

namespace wsync_fp8 {
namespace {

struct Weight {
  wsync::Dims shape;
  size_t input = 0;   // byte offsets into the arenas
  size_t output = 0;  // fp8 and copy destination (element offset = output)
  size_t blocks = 0;  // float offset into the maxima / scales
  int64_t num_blocks = 0;
};

bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "[kernel] %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

// Best seconds of `repeats` rounds of `round` (after one untimed), or -1 on failure.
double bestRound(int repeats, cudaStream_t stream, const std::function<bool()>& round) {
  cudaEvent_t start = nullptr, stop = nullptr;
  if (!ok(cudaEventCreate(&start), "cudaEventCreate") ||
      !ok(cudaEventCreate(&stop), "cudaEventCreate")) {
    return -1;
  }
  double best = -1;
  for (int i = 0; i <= repeats; ++i) {
    if (!ok(cudaEventRecord(start, stream), "cudaEventRecord") || !round() ||
        !ok(cudaEventRecord(stop, stream), "cudaEventRecord") ||
        !ok(cudaEventSynchronize(stop), "cudaEventSynchronize")) {
      best = -1;
      break;
    }
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    if (i > 0 && (best < 0 || ms / 1e3 < best)) best = ms / 1e3;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return best;
}

}  // namespace

int runKernelBench(const std::vector<wsync_demo::TensorSpec>& weights, const std::string& model,
                   int device, int repeats, bool mxfp8) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count <= device) {
    std::printf("[kernel] skipped: no CUDA device %d (%s)\n", device,
                e != cudaSuccess ? cudaGetErrorString(e) : "too few devices");
    return kSkipped;
  }
  if (!ok(cudaSetDevice(device), "cudaSetDevice")) return 1;
  const PhaseModel phase = makePhase(weights, mxfp8 ? Format::kMxfp8 : Format::kBlockFp8);
  wsync::BlockScaling s;
  s.format = static_cast<wsync::ScaleFormat>(phase.scaling.format);
  s.block_rows = phase.scaling.block_rows;
  s.block_cols = phase.scaling.block_cols;
  std::vector<Weight> ws;
  size_t elements = 0, blocks = 0;
  for (int i = 0; i < phase.num_weights; ++i) {
    if (phase.scale_of[static_cast<size_t>(i)] < 0) continue;
    const auto& shape = phase.tensors[static_cast<size_t>(i)].shape;
    const auto& sshape =
        phase.tensors[static_cast<size_t>(phase.scale_of[static_cast<size_t>(i)])].shape;
    Weight w;
    w.shape = wsync::Dims{shape[0], shape[1]};
    w.input = 2 * elements;
    w.output = elements;
    w.blocks = blocks;
    w.num_blocks = sshape[0] * sshape[1];
    elements += static_cast<size_t>(shape[0] * shape[1]);
    blocks += static_cast<size_t>(w.num_blocks);
    ws.push_back(w);
  }
  uint8_t *input = nullptr, *copy = nullptr, *fp8 = nullptr;
  float *amax = nullptr, *scales = nullptr;
  cudaStream_t stream = nullptr;
  const bool allocated =
      ok(cudaMalloc(reinterpret_cast<void**>(&input), 2 * elements), "cudaMalloc input") &&
      ok(cudaMalloc(reinterpret_cast<void**>(&copy), 2 * elements), "cudaMalloc copy") &&
      ok(cudaMalloc(reinterpret_cast<void**>(&fp8), elements), "cudaMalloc fp8") &&
      ok(cudaMalloc(reinterpret_cast<void**>(&amax), 4 * blocks), "cudaMalloc amax") &&
      ok(cudaMalloc(reinterpret_cast<void**>(&scales), 4 * blocks), "cudaMalloc scales") &&
      ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream") &&
      ok(cudaMemset(input, 0x3c, 2 * elements), "cudaMemset");  // 0.0115
  int rc = allocated ? 0 : 1;
  const auto view = [&](const Weight& w) {
    return wsync::PieceView{input + w.input, wsync::DType::kBFloat16, wsync::Box::whole(w.shape),
                            wsync::Dims{w.shape[1], 1}};
  };
  const auto launched = [&](const wsync::Status& st) {
    if (!st.isOk()) std::fprintf(stderr, "[kernel] launch: %s\n", st.toString().c_str());
    return st.isOk();
  };
  const auto amaxRound = [&] {
    for (const Weight& w : ws)
      if (!launched(wsync::launchBlockAmax(view(w), w.shape, s, amax + w.blocks, stream)))
        return false;
    return true;
  };
  const auto quantizeRound = [&] {
    for (const Weight& w : ws)
      if (!launched(wsync::launchQuantizeBlocks(view(w), w.shape, s, scales + w.blocks,
                                                fp8 + w.output, stream)))
        return false;
    return true;
  };
  const auto allRound = [&] {
    for (const Weight& w : ws) {
      if (!launched(wsync::launchBlockAmax(view(w), w.shape, s, amax + w.blocks, stream)) ||
          !launched(wsync::launchScalesFromAmax(amax + w.blocks, w.num_blocks, s.format,
                                                scales + w.blocks, stream)) ||
          !launched(wsync::launchQuantizeBlocks(view(w), w.shape, s, scales + w.blocks,
                                                fp8 + w.output, stream)))
        return false;
    }
    return true;
  };
  const auto copyRound = [&] {
    for (const Weight& w : ws)
      if (!ok(cudaMemcpyAsync(copy + w.input, input + w.input,
                              2 * static_cast<size_t>(w.shape.product()), cudaMemcpyDeviceToDevice,
                              stream),
              "cudaMemcpyAsync"))
        return false;
    return true;
  };
  double t_copy = -1, t_amax = -1, t_quant = -1, t_all = -1;
  if (rc == 0) {
    t_copy = bestRound(repeats, stream, copyRound);
    t_all = bestRound(repeats, stream, allRound);  // first, so that quantize reads real scales
    t_amax = bestRound(repeats, stream, amaxRound);
    t_quant = bestRound(repeats, stream, quantizeRound);
    if (t_copy <= 0 || t_amax <= 0 || t_quant <= 0 || t_all <= 0) rc = 1;
  }
  if (rc == 0) {
    const double gb = 2.0 * static_cast<double>(elements) / 1e9;
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, device);
    std::printf("[kernel] %s on %s: %zu weights, %.3f GB bf16 in, %s blocks %" PRId64 "x%" PRId64
                "\n",
                model.c_str(), prop.name, ws.size(), gb, mxfp8 ? "MXFP8" : "fp8", s.block_rows,
                s.block_cols);
    std::printf(
        "[kernel] copy d2d %.4f s %.1f GB/s | amax %.4f s %.1f GB/s | quantize %.4f s "
        "%.1f GB/s | amax+scales+quantize %.4f s %.1f GB/s = %.2f x copy\n",
        t_copy, gb / t_copy, t_amax, gb / t_amax, t_quant, gb / t_quant, t_all, gb / t_all,
        (gb / t_all) / (gb / t_copy));
    std::printf(
        "{\"bench\":\"wsync-block-fp8-bench\",\"mode\":\"kernel\",\"model\":\"%s\","
        "\"gpu\":\"%s\",\"format\":\"%s\",\"weights\":%zu,\"input_bytes\":%zu,"
        "\"copy_s\":%.6f,\"amax_s\":%.6f,\"quantize_s\":%.6f,\"total_s\":%.6f,"
        "\"copy_gbps\":%.2f,\"total_gbps\":%.2f,\"total_vs_copy\":%.3f}\n",
        model.c_str(), prop.name, mxfp8 ? "mxfp8" : "fp8", ws.size(), 2 * elements, t_copy, t_amax,
        t_quant, t_all, gb / t_copy, gb / t_all, t_copy / t_all);
  }
  if (stream) cudaStreamDestroy(stream);
  for (void* p : {static_cast<void*>(input), static_cast<void*>(copy), static_cast<void*>(fp8),
                  static_cast<void*>(amax), static_cast<void*>(scales)})
    if (p) cudaFree(p);
  return rc;
}

}  // namespace wsync_fp8
