// wsync-block-quant-bench: host throughput of block quantization (src/quant/block_quant.h) per
// code path the CPU has, against memcpy of the same input, for a [rows, cols] bf16 (or fp32)
// weight: amax (blockAmaxHost), scales, quantize (quantizeBlocksHost), and the total.
//
//   wsync-block-quant-bench [--rows 4096] [--cols 7168] [--dtype bfloat16] [--repeats 5]
//
// Prints one line per path and format: input MiB, best seconds of --repeats, GB/s (input bytes /
// s) of amax, quantize and both, and memcpy's GB/s on the same bytes. One thread.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cxxopts.hpp>
#include <random>
#include <vector>

#include "best_seconds.h"
#include "quant/block_quant.h"

namespace {

using wsync_bench::bestSeconds;

}  // namespace

int main(int argc, char** argv) {
  using namespace wsync;
  cxxopts::Options options("wsync-block-quant-bench", "Host throughput of block quantization");
  options.add_options()("rows", "weight rows", cxxopts::value<int64_t>()->default_value("4096"))(
      "cols", "weight columns", cxxopts::value<int64_t>()->default_value("7168"))(
      "dtype", "bfloat16 or float32", cxxopts::value<std::string>()->default_value("bfloat16"))(
      "repeats", "timed repeats (best kept)", cxxopts::value<int>()->default_value("5"))(
      "h,help", "this help");
  const auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::printf("%s\n", options.help().c_str());
    return 0;
  }
  const int64_t rows = args["rows"].as<int64_t>(), cols = args["cols"].as<int64_t>();
  const int repeats = args["repeats"].as<int>();
  const auto dtype = parseDType(args["dtype"].as<std::string>());
  if (!dtype || (*dtype != DType::kBFloat16 && *dtype != DType::kFloat32)) {
    std::fprintf(stderr, "--dtype: bfloat16 or float32\n");
    return 2;
  }
  const Dims shape{rows, cols};
  const size_t bytes = static_cast<size_t>(rows * cols) * dtypeSize(*dtype);
  std::vector<uint8_t> input(bytes), copy(bytes), out(static_cast<size_t>(rows * cols));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (int64_t i = 0; i < rows * cols; ++i) {
    const float f = normal(rng);
    if (*dtype == DType::kFloat32) {
      std::memcpy(input.data() + 4 * i, &f, 4);
    } else {
      uint32_t u;
      std::memcpy(&u, &f, 4);
      const auto h = static_cast<uint16_t>(u >> 16);
      std::memcpy(input.data() + 2 * i, &h, 2);
    }
  }
  const double gb = static_cast<double>(bytes) / 1e9;
  const double memcpy_s =
      bestSeconds(repeats, [&] { std::memcpy(copy.data(), input.data(), bytes); });
  std::printf("input %.1f MiB %s [%lld, %lld]; memcpy %.2f GB/s\n", bytes / 1048576.0,
              dtypeName(*dtype), static_cast<long long>(rows), static_cast<long long>(cols),
              gb / memcpy_s);
  const PieceView piece{input.data(), *dtype, Box::whole(shape), Dims{cols, 1}};
  for (HostQuantKernel k : {HostQuantKernel::kScalar, HostQuantKernel::kAvx512}) {
    if (!hostQuantKernelAvailable(k)) {
      std::printf("%-7s not available on this CPU\n", hostQuantKernelName(k));
      continue;
    }
    for (auto [format, br, bc] :
         {std::tuple{ScaleFormat::kFloat32, 128, 128},
          std::tuple{ScaleFormat::kPow2Float32, 128, 128}, std::tuple{ScaleFormat::kE8M0, 1, 32}}) {
      BlockScaling s;
      s.format = format;
      s.block_rows = br;
      s.block_cols = bc;
      s.scale_tensor = "scales";
      const int64_t blocks = scaleShape(shape, s).product();
      std::vector<float> amax(static_cast<size_t>(blocks));
      std::vector<float> scales(static_cast<size_t>(blocks));
      bool ok = true;
      const double amax_s = bestSeconds(
          repeats, [&] { ok &= blockAmaxHostWith(k, piece, shape, s, amax.data()).isOk(); });
      scalesFromAmax(amax.data(), blocks, format, scales.data());
      const double quant_s = bestSeconds(repeats, [&] {
        ok &= quantizeBlocksHostWith(k, piece, shape, s, scales.data(), out.data()).isOk();
      });
      if (!ok) {
        std::fprintf(stderr, "quantization failed\n");
        return 1;
      }
      std::printf(
          "%-7s %-12s block %3dx%-3d amax %6.2f GB/s  quantize %6.2f GB/s  both %6.2f GB/s"
          "  (memcpy %.2f GB/s)\n",
          hostQuantKernelName(k), scaleFormatName(format), br, bc, gb / amax_s, gb / quant_s,
          gb / (amax_s + quant_s), gb / memcpy_s);
    }
  }
  return 0;
}
