// wsync-delta-device-bench: on one GPU, the throughput of building a delta patch of two
// device-resident versions (kernels/delta_kernels.h: the trainer's side) and of applying it to a
// device-resident base (the rollout's side), against a cudaMemcpy device-to-device copy of the same
// bytes timed in the same run (issue 22, docs/delta.md "On the device").
//
//   wsync-delta-device-bench [--mib 1024] [--elem-bytes 2] [--chunk-bytes 4096]
//                            [--shares 0.001,0.01,0.1] [--repeats 10] [--no-verify]
//
// Per changed share, the best of --repeats runs of each (GB/s of dense bytes, and x the copy):
//   copy          cudaMemcpyAsync device -> device of the region
//   encode        encodePatchOnDevice into a device buffer (includes its 48-byte readback)
//   encode+d2h    encode, then the patch's bytes copied to pinned host memory (the staged path)
//   apply         applyPatchOnDevice, base -> another buffer
//   apply-inplace applyPatchOnDevice with out == base (only the changed elements written)
//   h2d+apply     the patch from pinned host memory to the device, then applied in place
// Changed elements are drawn at random (share x elements draws, XOR with a nonzero value), as in
// wsync-delta-patch-bench. Unless --no-verify, the device patch is checked against the host's
// encodePatch byte for byte and the applied region against next (exit 1 on a difference). Exit 77
// without a usable CUDA device.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cxxopts.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "best_seconds.h"
#include "delta/delta_patch.h"
#include "kernels/delta_kernels.h"

namespace {

using wsync_bench::bestSeconds;
namespace delta = wsync::delta;

std::vector<double> parseList(const std::string& s) {
  std::vector<double> v;
  std::stringstream in(s);
  for (std::string x; std::getline(in, x, ',');)
    v.push_back(std::stod(x));
  return v;
}

void fail(const char* what, const std::string& why) {
  std::fprintf(stderr, "delta-device-bench: %s: %s\n", what, why.c_str());
  std::exit(1);
}
void check(const char* what, const wsync::Status& s) {
  if (!s.isOk()) fail(what, s.toString());
}
void check(const char* what, cudaError_t e) {
  if (e != cudaSuccess) fail(what, cudaGetErrorString(e));
}

// Device memory freed at exit of main's scope.
struct Device {
  explicit Device(size_t n) { check("cudaMalloc", cudaMalloc(&p, std::max<size_t>(n, 1))); }
  ~Device() { cudaFree(p); }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  uint8_t* bytes() const { return static_cast<uint8_t*>(p); }
  void* p = nullptr;
};
struct Pinned {
  explicit Pinned(size_t n) { check("cudaMallocHost", cudaMallocHost(&p, std::max<size_t>(n, 1))); }
  ~Pinned() { cudaFreeHost(p); }
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;
  uint8_t* bytes() const { return static_cast<uint8_t*>(p); }
  void* p = nullptr;
};

// `next` = `base` with about share x n random elements changed (a nonzero XOR of each byte).
void makeNext(const std::vector<uint8_t>& base, int e, double share, std::mt19937_64& rng,
              std::vector<uint8_t>* next) {
  *next = base;
  const auto n = static_cast<int64_t>(base.size()) / e;
  const auto draws = static_cast<int64_t>(share * static_cast<double>(n));
  for (int64_t k = 0; k < draws; ++k) {
    const int64_t i = static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
    const uint64_t flip = (rng() | 1) & (e == 8 ? ~0ull : (1ull << (8 * e)) - 1);
    for (int b = 0; b < e; ++b)
      (*next)[i * e + b] = static_cast<uint8_t>(base[i * e + b] ^ (flip >> (8 * b)));
  }
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options options("wsync-delta-device-bench",
                           "Device delta patches (encode, apply) against a device copy");
  options.add_options()("mib", "MiB of dense bytes per version",
                        cxxopts::value<uint64_t>()->default_value("1024"))(
      "elem-bytes", "element size (1, 2, 4, 8)", cxxopts::value<int>()->default_value("2"))(
      "chunk-bytes", "bytes per chunk", cxxopts::value<int64_t>()->default_value("4096"))(
      "shares", "changed shares of the elements",
      cxxopts::value<std::string>()->default_value("0.001,0.01,0.1"))(
      "repeats", "timed repeats (best kept)", cxxopts::value<int>()->default_value("10"))(
      "no-verify", "skip the byte checks against the host")("h,help", "this help");
  const auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::printf("%s\n", options.help().c_str());
    return 0;
  }
  const int e = args["elem-bytes"].as<int>();
  const int repeats = std::max(1, args["repeats"].as<int>());
  const bool verify = args.count("no-verify") == 0;
  const uint64_t bytes = (args["mib"].as<uint64_t>() << 20) / e * e;
  const delta::PatchShape shape =
      delta::shapeFor(static_cast<int64_t>(bytes) / e, e, args["chunk-bytes"].as<int64_t>());
  check("shape", delta::checkPatchShape(shape));
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "delta-device-bench: no usable CUDA device\n");
    return 77;
  }
  check("cudaSetDevice", cudaSetDevice(0));
  cudaDeviceProp prop{};
  check("cudaGetDeviceProperties", cudaGetDeviceProperties(&prop, 0));
  size_t encode_scratch = 0;
  size_t apply_scratch = 0;
  check("encode scratch", delta::deviceEncodeScratchBytes(shape, &encode_scratch));
  check("apply scratch", delta::deviceApplyScratchBytes(shape, &apply_scratch));
  const auto capacity = static_cast<size_t>(delta::maxPatchBytes(shape));
  std::printf(
      "delta-device-bench on %s: %.1f MiB of %d-byte elements, %lld per chunk, scratch "
      "%.1f MiB (encode) / %.1f MiB (apply), best of %d\n",
      prop.name, static_cast<double>(bytes) / (1 << 20), e,
      static_cast<long long>(shape.chunk_elements), static_cast<double>(encode_scratch) / (1 << 20),
      static_cast<double>(apply_scratch) / (1 << 20), repeats);

  Device base(bytes), next(bytes), out(bytes), patch(capacity);
  Device scratch(std::max(encode_scratch, apply_scratch));
  Pinned staged(capacity);
  cudaStream_t stream = nullptr;
  check("cudaStreamCreate", cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::mt19937_64 rng(22);
  std::vector<uint8_t> host_base(bytes), host_next, host_patch, back;
  for (size_t i = 0; i + 8 <= bytes; i += 8) {
    const uint64_t word = rng();
    std::memcpy(host_base.data() + i, &word, 8);
  }
  check("upload base", cudaMemcpy(base.p, host_base.data(), bytes, cudaMemcpyHostToDevice));
  auto sync = [&] { check("stream", cudaStreamSynchronize(stream)); };
  const double gb = static_cast<double>(bytes) / 1e9;

  std::printf("%-7s %-8s %-8s %9s %15s %15s %15s %15s %15s   GB/s (x copy)%s\n", "share%",
              "changed%", "patch%", "copy", "encode", "encode+d2h", "apply", "apply-inplace",
              "h2d+apply", verify ? ", verified" : "");
  bool all_ok = true;
  for (double share : parseList(args["shares"].as<std::string>())) {
    makeNext(host_base, e, share, rng, &host_next);
    check("upload next", cudaMemcpy(next.p, host_next.data(), bytes, cudaMemcpyHostToDevice));
    size_t length = 0;
    delta::PatchStats stats;
    const double copy_s = bestSeconds(repeats, [&] {
      check("copy", cudaMemcpyAsync(out.p, base.p, bytes, cudaMemcpyDeviceToDevice, stream));
      sync();
    });
    const double encode_s = bestSeconds(repeats, [&] {
      check("encode",
            delta::encodePatchOnDevice(shape, base.p, next.p, patch.bytes(), capacity, scratch.p,
                                       encode_scratch, stream, &length, &stats));
    });
    const double encode_d2h_s = bestSeconds(repeats, [&] {
      check("encode", delta::encodePatchOnDevice(shape, base.p, next.p, patch.bytes(), capacity,
                                                 scratch.p, encode_scratch, stream, &length));
      check("d2h", cudaMemcpyAsync(staged.p, patch.p, length, cudaMemcpyDeviceToHost, stream));
      sync();
    });
    const double apply_s = bestSeconds(repeats, [&] {
      check("apply", delta::applyPatchOnDevice(shape, patch.bytes(), length, base.p, out.p,
                                               scratch.p, apply_scratch, stream));
      sync();
    });
    // In place on `out` (a copy of base; the same changed elements are rewritten every repeat).
    check("reset out", cudaMemcpy(out.p, base.p, bytes, cudaMemcpyDeviceToDevice));
    const double inplace_s = bestSeconds(repeats, [&] {
      check("apply in place", delta::applyPatchOnDevice(shape, patch.bytes(), length, out.p, out.p,
                                                        scratch.p, apply_scratch, stream));
      sync();
    });
    const double h2d_apply_s = bestSeconds(repeats, [&] {
      check("h2d", cudaMemcpyAsync(patch.p, staged.p, length, cudaMemcpyHostToDevice, stream));
      check("apply in place", delta::applyPatchOnDevice(shape, patch.bytes(), length, out.p, out.p,
                                                        scratch.p, apply_scratch, stream));
      sync();
    });
    std::string verdict;
    if (verify) {
      check("host encode",
            delta::encodePatch(shape, host_base.data(), host_next.data(), &host_patch));
      back.resize(length);
      check("patch back", cudaMemcpy(back.data(), patch.p, length, cudaMemcpyDeviceToHost));
      const bool patch_ok = back == host_patch;
      back.resize(bytes);
      check("out back", cudaMemcpy(back.data(), out.p, bytes, cudaMemcpyDeviceToHost));
      const bool apply_ok = back == host_next;
      verdict = patch_ok && apply_ok ? "  ok"
                : !patch_ok          ? "  FAIL: the device patch differs from the host's"
                                     : "  FAIL: the applied region differs from next";
      all_ok = all_ok && patch_ok && apply_ok;
    }
    const double copy_gbs = gb / copy_s;
    auto cell = [&](double seconds) {
      char text[32];
      std::snprintf(text, sizeof text, "%7.1f (%.2fx)", gb / seconds, copy_s / seconds);
      return std::string(text);
    };
    std::printf("%-7.3f %-8.3f %-8.3f %9.1f %15s %15s %15s %15s %15s%s\n", share * 100,
                100.0 * static_cast<double>(stats.changed_elements) /
                    static_cast<double>(shape.num_elements),
                100.0 * static_cast<double>(stats.patch_bytes) / static_cast<double>(bytes),
                copy_gbs, cell(encode_s).c_str(), cell(encode_d2h_s).c_str(), cell(apply_s).c_str(),
                cell(inplace_s).c_str(), cell(h2d_apply_s).c_str(), verdict.c_str());
    std::fflush(stdout);
  }
  cudaStreamDestroy(stream);
  return all_ok ? 0 : 1;
}
