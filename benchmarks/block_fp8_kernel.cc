// wsync-block-fp8-bench --kernel in a CUDA build (see block_fp8_kernel.h). The weights sit in one
// bf16 input arena (filled with one finite value; the kernels' speed does not depend on it), the
// fp8 output, the maxima and the scales in others, and the copy's destination is a second bf16
// arena, so neither side reads from cache. Each measurement: one untimed round, then the best of
// `repeats` rounds, each round on one stream between two CUDA events. Measured in one run:
//   copy: cudaMemcpyAsync per weight (the physical limit: 2 bytes read + 2 written per element);
//   legacy: the first kernels, 3 launches per weight (amax, scales, quantize; 2 reads of bf16);
//   per-piece fused: launchQuantizeFused per weight (1 read of bf16, 1 byte written);
//   batched: one launch for every weight (launchBlockQuantBatch): amax only, quantize with given
//   scales, and fused (amax + scale + bytes: what TrainerQuantizer runs per version), the fused
//   pass also with each other group size (1, 4, 32, 256 threads a block).
// GB/s are bf16 input bytes per second; "x copy" is the copy's time over the path's.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "block_fp8_kernel.h"
#include "block_fp8_model.h"
#include "kernels/block_quant_kernels.h"
#include "quant/block_quant_geometry.h"

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
  namespace bk = wsync::block_quant_kernels;
  const auto scalesAt = [&](const Weight& w) {
    return reinterpret_cast<uint8_t*>(scales) +
           w.blocks * (s.format == wsync::ScaleFormat::kE8M0 ? 1 : 4);
  };
  std::vector<bk::QuantTask> tasks;
  for (const Weight& w : ws) {
    bk::QuantTask t = bk::quantTaskOf(view(w), s);
    t.amax_out = amax + w.blocks;
    t.scales = scalesAt(w);
    t.dst = fp8 + w.output;
    tasks.push_back(t);
  }
  const uint64_t total_blocks = bk::numberQuantTasks(tasks);
  const int group = bk::groupSizeFor(s.block_rows, s.block_cols, 1);
  bk::QuantTask* device_tasks = nullptr;
  if (rc == 0 && (!ok(cudaMalloc(reinterpret_cast<void**>(&device_tasks),
                                 tasks.size() * sizeof(bk::QuantTask)),
                      "cudaMalloc tasks") ||
                  !ok(cudaMemcpy(device_tasks, tasks.data(), tasks.size() * sizeof(bk::QuantTask),
                                 cudaMemcpyHostToDevice),
                      "cudaMemcpy tasks")))
    rc = 1;
  const auto legacyAmaxRound = [&] {
    for (const Weight& w : ws)
      if (!launched(wsync::launchBlockAmaxLegacy(view(w), w.shape, s, amax + w.blocks, stream)))
        return false;
    return true;
  };
  const auto legacyQuantizeRound = [&] {
    for (const Weight& w : ws)
      if (!launched(wsync::launchQuantizeBlocksLegacy(view(w), w.shape, s, scalesAt(w),
                                                      fp8 + w.output, stream)))
        return false;
    return true;
  };
  const auto legacyRound = [&] {
    for (const Weight& w : ws) {
      if (!launched(wsync::launchBlockAmaxLegacy(view(w), w.shape, s, amax + w.blocks, stream)) ||
          !launched(wsync::launchScalesFromAmax(amax + w.blocks, w.num_blocks, s.format,
                                                scalesAt(w), stream)) ||
          !launched(wsync::launchQuantizeBlocksLegacy(view(w), w.shape, s, scalesAt(w),
                                                      fp8 + w.output, stream)))
        return false;
    }
    return true;
  };
  const auto pieceFusedRound = [&] {
    for (const Weight& w : ws)
      if (!launched(wsync::launchQuantizeFused(view(w), w.shape, s, nullptr, scalesAt(w),
                                               fp8 + w.output, stream)))
        return false;
    return true;
  };
  const auto batchWith = [&](bk::QuantMode mode, int g) {
    return [&, mode, g] {
      return launched(wsync::launchBlockQuantBatch(tasks.data(), device_tasks,
                                                   static_cast<int64_t>(tasks.size()), total_blocks,
                                                   g, mode, nullptr, 0, nullptr, stream));
    };
  };
  const auto batch = [&](bk::QuantMode mode) { return batchWith(mode, group); };
  const auto copyRound = [&] {
    for (const Weight& w : ws)
      if (!ok(cudaMemcpyAsync(copy + w.input, input + w.input,
                              2 * static_cast<size_t>(w.shape.product()), cudaMemcpyDeviceToDevice,
                              stream),
              "cudaMemcpyAsync"))
        return false;
    return true;
  };
  std::vector<std::pair<int, double>> fused_groups;  // (group, seconds)
  double t_copy = -1, t_legacy_amax = -1, t_legacy_quant = -1, t_legacy = -1, t_piece = -1,
         t_amax = -1, t_quant = -1, t_fused = -1;
  if (rc == 0) {
    t_copy = bestRound(repeats, stream, copyRound);
    t_legacy = bestRound(repeats, stream, legacyRound);  // first: quantize reads real scales
    t_legacy_amax = bestRound(repeats, stream, legacyAmaxRound);
    t_legacy_quant = bestRound(repeats, stream, legacyQuantizeRound);
    t_piece = bestRound(repeats, stream, pieceFusedRound);
    t_amax = bestRound(repeats, stream, batch(bk::QuantMode::kAmax));
    t_quant = bestRound(repeats, stream, batch(bk::QuantMode::kQuantizeWithScales));
    t_fused = bestRound(repeats, stream, batch(bk::QuantMode::kFused));
    // the fused pass with every other group size (the kernel each takes: whole-width or general)
    for (int g : {1, 4, 32, 256}) {
      if (g == group) continue;
      const double t = bestRound(repeats, stream, batchWith(bk::QuantMode::kFused, g));
      if (t <= 0) rc = 1;
      fused_groups.emplace_back(g, t);
    }
    for (double t :
         {t_copy, t_legacy, t_legacy_amax, t_legacy_quant, t_piece, t_amax, t_quant, t_fused})
      if (t <= 0) rc = 1;
  }
  if (rc == 0) {
    const double gb = 2.0 * static_cast<double>(elements) / 1e9;
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, device);
    std::printf("[kernel] %s on %s: %zu weights, %.3f GB bf16 in, %s blocks %" PRId64 "x%" PRId64
                ", %" PRIu64 " blocks, group %d\n",
                model.c_str(), prop.name, ws.size(), gb, mxfp8 ? "MXFP8" : "fp8", s.block_rows,
                s.block_cols, total_blocks, group);
    const auto line = [&](const char* what, double t, size_t launches) {
      std::printf("[kernel] %-34s %.5f s %7.1f GB/s = %.3f x copy (%zu launches)\n", what, t,
                  gb / t, t_copy / t, launches);
    };
    line("copy d2d", t_copy, ws.size());
    line("legacy amax", t_legacy_amax, ws.size());
    line("legacy quantize", t_legacy_quant, ws.size());
    line("legacy amax+scales+quantize", t_legacy, 3 * ws.size());
    line("per-piece fused", t_piece, ws.size());
    line("batched amax", t_amax, 1);
    line("batched quantize (given scales)", t_quant, 1);
    line("batched fused amax+scale+quantize", t_fused, 1);
    for (const auto& [g, t] : fused_groups) {
      const bool whole = std::all_of(tasks.begin(), tasks.end(), [g = g](const bk::QuantTask& x) {
        return bk::holdsWholeWidthBlocks(x.g, g, reinterpret_cast<uint64_t>(x.g.data),
                                         reinterpret_cast<uint64_t>(x.dst));
      });
      const std::string what =
          "  fused, group " + std::to_string(g) + (whole ? " (whole-width)" : " (general)");
      line(what.c_str(), t, 1);
    }
    std::printf("[kernel] fused batched vs legacy: %.2fx faster\n", t_legacy / t_fused);
    std::printf(
        "{\"bench\":\"wsync-block-fp8-bench\",\"mode\":\"kernel\",\"model\":\"%s\","
        "\"gpu\":\"%s\",\"format\":\"%s\",\"weights\":%zu,\"input_bytes\":%zu,"
        "\"copy_s\":%.6f,\"amax_s\":%.6f,\"quantize_s\":%.6f,\"total_s\":%.6f,"
        "\"copy_gbps\":%.2f,\"total_gbps\":%.2f,\"total_vs_copy\":%.3f,"
        "\"per_piece_fused_s\":%.6f,\"legacy_amax_s\":%.6f,\"legacy_quantize_s\":%.6f,"
        "\"legacy_total_s\":%.6f,\"legacy_total_vs_copy\":%.3f,\"launches_legacy\":%zu,"
        "\"launches_total\":1}\n",
        model.c_str(), prop.name, mxfp8 ? "mxfp8" : "fp8", ws.size(), 2 * elements, t_copy, t_amax,
        t_quant, t_fused, gb / t_copy, gb / t_fused, t_copy / t_fused, t_piece, t_legacy_amax,
        t_legacy_quant, t_legacy, t_copy / t_legacy, 3 * ws.size());
  }
  if (device_tasks) cudaFree(device_tasks);
  if (stream) cudaStreamDestroy(stream);
  for (void* p : {static_cast<void*>(input), static_cast<void*>(copy), static_cast<void*>(fp8),
                  static_cast<void*>(amax), static_cast<void*>(scales)})
    if (p) cudaFree(p);
  return rc;
}

}  // namespace wsync_fp8
