// wsync-delta-patch-bench: host throughput of delta patches (src/delta/delta_patch.h) against
// memcpy of the same bytes: encode (diff of base against next + patch build) and apply (base +
// patch -> out, validation included), in GB/s of dense bytes, per element size and changed share.
//
//   wsync-delta-patch-bench [--mib 32] [--repeats 7] [--elem-bytes 2,1,4]
//                           [--shares 0.003,0.01,0.03,0.1,0.5] [--kernels all|fastest]
//
// Per row (element size, share, kernel: scalar / avx2 / avx512, each the CPU has; --kernels
// fastest: only the one the library picks) the best of --repeats runs of each, memcpy of the same
// bytes timed in the same row; encode writes into the same vector every run (as the trainer does).
// Changed elements are drawn at random (a distinct element flips one byte), so chunk kinds mix as
// real versions do. The applied version is checked against next.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cxxopts.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "best_seconds.h"
#include "delta/delta_patch.h"

namespace {

using wsync_bench::bestSeconds;

template <typename T>
std::vector<T> parseList(const std::string& s) {
  std::vector<T> v;
  std::stringstream in(s);
  for (std::string x; std::getline(in, x, ',');)
    v.push_back(static_cast<T>(std::stod(x)));
  return v;
}

void fail(const char* what, const wsync::Status& s) {
  std::fprintf(stderr, "delta-patch-bench: %s: %s\n", what, s.toString().c_str());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options options("wsync-delta-patch-bench", "Host throughput of wsync's delta patches");
  options.add_options()("mib", "MiB of dense bytes per version",
                        cxxopts::value<uint64_t>()->default_value("32"))(
      "repeats", "timed repeats (best kept)", cxxopts::value<int>()->default_value("7"))(
      "elem-bytes", "element sizes", cxxopts::value<std::string>()->default_value("2,1,4"))(
      "shares", "changed shares of the elements",
      cxxopts::value<std::string>()->default_value("0.003,0.01,0.03,0.1,0.5"))(
      "kernels", "all (each the CPU has) or fastest",
      cxxopts::value<std::string>()->default_value("all"))("h,help", "this help");
  const auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::printf("%s\n", options.help().c_str());
    return 0;
  }
  const uint64_t bytes = args["mib"].as<uint64_t>() << 20;
  const int repeats = std::max(1, args["repeats"].as<int>());
  std::mt19937_64 rng(22);
  std::vector<uint8_t> base(bytes), next(bytes), out(bytes), copy(bytes), patch;
  for (auto& b : base)
    b = static_cast<uint8_t>(rng());
  using wsync::delta::DeltaKernel;
  std::vector<DeltaKernel> kernels = {wsync::delta::deltaKernel()};
  if (args["kernels"].as<std::string>() == "all") {
    kernels = {DeltaKernel::kScalar};
    if (wsync::delta::deltaKernel() != DeltaKernel::kScalar) kernels.push_back(DeltaKernel::kAvx2);
    if (wsync::delta::deltaKernel() == DeltaKernel::kAvx512)
      kernels.push_back(DeltaKernel::kAvx512);
  }
  std::printf("%-5s %-7s %-8s %-7s %9s %9s %9s %9s %9s   (GB/s of dense bytes; x memcpy)\n", "elem",
              "share%", "patch%", "kernel", "memcpy", "encode", "x", "apply", "x");
  for (int e : parseList<int>(args["elem-bytes"].as<std::string>())) {
    const int64_t n = static_cast<int64_t>(bytes) / e;
    const wsync::delta::PatchShape shape = wsync::delta::shapeFor(n, e);
    for (double share : parseList<double>(args["shares"].as<std::string>())) {
      next = base;
      std::vector<uint8_t> hit(static_cast<size_t>(n), 0);
      const auto changes = static_cast<int64_t>(share * static_cast<double>(n));
      for (int64_t k = 0; k < changes;) {
        const uint64_t i = rng() % static_cast<uint64_t>(n);
        if (hit[i]) continue;
        hit[i] = 1;
        next[i * e + rng() % e] ^= static_cast<uint8_t>(1 + rng() % 255);
        ++k;
      }
      for (DeltaKernel kernel : kernels) {
        const double mcp =
            bestSeconds(repeats, [&] { std::memcpy(copy.data(), next.data(), bytes); });
        wsync::Status s;
        const double enc = bestSeconds(repeats, [&] {
          s = wsync::delta::encodePatch(shape, base.data(), next.data(), &patch, nullptr, kernel);
          if (!s.isOk()) fail("encode", s);
        });
        std::fill(out.begin(), out.end(), 0);
        const double app = bestSeconds(repeats, [&] {
          s = wsync::delta::applyPatch(shape, patch.data(), patch.size(), base.data(), out.data(),
                                       kernel);
          if (!s.isOk()) fail("apply", s);
        });
        if (out != next) {
          std::fprintf(stderr, "delta-patch-bench: applied version differs from next\n");
          return 1;
        }
        const double gb = static_cast<double>(bytes) / 1e9;
        std::printf("%-5d %-7.3f %7.2f%% %-7s %9.2f %9.2f %9.3f %9.2f %9.3f\n", e, 100 * share,
                    100.0 * static_cast<double>(patch.size()) / static_cast<double>(bytes),
                    wsync::delta::deltaKernelName(kernel), gb / mcp, gb / enc, mcp / enc, gb / app,
                    mcp / app);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
