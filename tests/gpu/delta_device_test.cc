// Delta patches on the device (kernels/delta_kernels.h) against the host's (delta/delta_patch.h):
// argument checks everywhere; on a GPU, for element sizes 1/2/4/8, chunks of 4096 bytes, of the
// most elements (65536) and of an odd 77 elements, regions with an uneven last chunk and 0 %,
// 0.1 %, 1 %, 10 %, 60 %, 100 % or a per-chunk mix of changed elements, plus chunks whose change
// counts sit on and beside the form-choice ties:
//   - the device patch equals encodePatch's bytes (and stats), and passes validatePatch;
//   - applying it on the device (out != base, and in place) gives `next` bit for bit;
//   - encoding with advance leaves base == next and gives the same patch;
//   - the same with the patch at an odd address and the regions off 16-byte alignment.
// Every case prints one "delta-device PASS|FAIL <case>: ..." line with the first difference.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/cuda_check.h"
#include "delta/delta_patch.h"
#include "gpu/device_bytes.h"
#include "kernels/delta_kernels.h"

namespace wsync::delta {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!cudaDeviceAvailable(0)) GTEST_SKIP() << "no usable CUDA device"

// Every check below happens before anything touches the device, so it runs without a GPU.
TEST(DeltaDeviceArguments, RefusedBeforeAnyLaunch) {
  auto* fake = reinterpret_cast<uint8_t*>(uintptr_t{0x10000});  // never dereferenced
  size_t length = 0;
  size_t scratch = 0;
  PatchShape shape = shapeFor(1000, 2);
  PatchShape bad = shape;
  bad.elem_bytes = 3;
  auto encodeCode = [&](const PatchShape& s, const void* base, const void* next, uint8_t* patch,
                        size_t capacity) {
    return encodePatchOnDevice(s, base, next, patch, capacity, fake, 1 << 20, nullptr, &length)
        .code();
  };
  const auto capacity = static_cast<size_t>(maxPatchBytes(shape));
  EXPECT_EQ(encodeCode(bad, fake, fake, fake, capacity), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(encodeCode(shape, fake + 1, fake, fake, capacity), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(encodeCode(shape, fake, nullptr, fake, capacity), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(encodeCode(shape, fake, fake, nullptr, capacity), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(encodeCode(shape, fake, fake, fake, capacity - 1), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(
      encodePatchOnDevice(shape, fake, fake, fake, capacity, fake + 8, 1 << 20, nullptr, &length)
          .code(),
      WSYNC_ERR_INVALID_ARGUMENT);  // scratch not 256-byte aligned
  EXPECT_EQ(
      applyPatchOnDevice(shape, fake, capacity, fake, fake, fake + 8, 1 << 20, nullptr).code(),
      WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(deviceEncodeScratchBytes(bad, &scratch).code(), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(deviceApplyScratchBytes(bad, &scratch).code(), WSYNC_ERR_INVALID_ARGUMENT);
  auto applyCode = [&](const PatchShape& s, size_t patch_bytes, const void* base, void* out) {
    return applyPatchOnDevice(s, fake, patch_bytes, base, out, fake, 1 << 20, nullptr).code();
  };
  EXPECT_EQ(applyCode(bad, capacity, fake, fake), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(applyCode(shape, kPatchHeaderBytes, fake, fake), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(applyCode(shape, capacity, fake, fake + 1), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(applyCode(shape, capacity, nullptr, fake), WSYNC_ERR_INVALID_ARGUMENT);
}

// One region's base and next on the host.
struct Versions {
  PatchShape shape;
  std::vector<uint8_t> base;
  std::vector<uint8_t> next;
};

// Element i of `next` made different from base (a nonzero XOR, every byte may change).
void change(Versions& v, int64_t i, std::mt19937_64& rng) {
  const int e = v.shape.elem_bytes;
  uint64_t flip = 0;
  while (flip == 0)
    flip = rng() & (e == 8 ? ~0ull : (1ull << (8 * e)) - 1);
  for (int b = 0; b < e; ++b)
    v.next[i * e + b] = static_cast<uint8_t>(v.base[i * e + b] ^ (flip >> (8 * b)));
}

Versions randomBase(const PatchShape& shape, std::mt19937_64& rng) {
  Versions v;
  v.shape = shape;
  v.base.resize(static_cast<size_t>(shape.num_elements * shape.elem_bytes));
  for (auto& b : v.base)
    b = static_cast<uint8_t>(rng());
  v.next = v.base;
  return v;
}

// Each element changed with probability `share`; share < 0: each chunk draws its own share from
// {0, 0.001, 0.05, 0.5, 0.95, 1} (every form in one patch).
Versions randomVersions(const PatchShape& shape, double share, std::mt19937_64& rng) {
  Versions v = randomBase(shape, rng);
  const double mix[] = {0, 0.001, 0.05, 0.5, 0.95, 1};
  std::uniform_real_distribution<double> uniform(0, 1);
  double p = share;
  for (int64_t i = 0; i < shape.num_elements; ++i) {
    if (share < 0 && i % shape.chunk_elements == 0) p = mix[rng() % 6];
    if (p >= 1 || (p > 0 && uniform(rng) < p)) change(v, i, rng);
  }
  return v;
}

// Chunk c gets exactly counts[c] changes (clamped to its length) at random places.
Versions countedVersions(const PatchShape& shape, const std::vector<int64_t>& counts,
                         std::mt19937_64& rng) {
  Versions v = randomBase(shape, rng);
  for (int64_t c = 0; c < shape.numChunks(); ++c) {
    const int64_t first = c * shape.chunk_elements;
    const int64_t len = std::min(shape.chunk_elements, shape.num_elements - first);
    std::vector<int64_t> order(static_cast<size_t>(len));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    const int64_t count = std::min(len, counts[static_cast<size_t>(c) % counts.size()]);
    for (int64_t k = 0; k < count; ++k)
      change(v, first + order[static_cast<size_t>(k)], rng);
  }
  return v;
}

// Where byte `at` of a patch of `shape` lies, for messages.
std::string patchPlace(const PatchShape& shape, size_t at) {
  if (at < kPatchHeaderBytes) return "header byte " + std::to_string(at);
  const size_t table_end = kPatchHeaderBytes + 4 * static_cast<size_t>(shape.numChunks());
  if (at < table_end) return "table entry of chunk " + std::to_string((at - kPatchHeaderBytes) / 4);
  return "payload byte " + std::to_string(at - table_end);
}

// "" when `got` == `want` (patches), else the first difference.
std::string patchDifference(const PatchShape& shape, const std::vector<uint8_t>& got,
                            const std::vector<uint8_t>& want) {
  const size_t n = std::min(got.size(), want.size());
  for (size_t i = 0; i < n; ++i)
    if (got[i] != want[i])
      return "patch differs at " + patchPlace(shape, i) + " (device " + std::to_string(got[i]) +
             ", host " + std::to_string(want[i]) + "); lengths " + std::to_string(got.size()) +
             " / " + std::to_string(want.size());
  if (got.size() != want.size())
    return "patch length " + std::to_string(got.size()) + " on the device, " +
           std::to_string(want.size()) + " on the host (equal up to the shorter)";
  return "";
}

// "" when the device bytes at `device` equal `want`, else how many elements differ and the first.
std::string regionDifference(const char* what, const Versions& v, const void* device,
                             const std::vector<uint8_t>& want) {
  std::vector<uint8_t> got(want.size());
  if (cudaMemcpy(got.data(), device, got.size(), cudaMemcpyDeviceToHost) != cudaSuccess)
    return std::string(what) + ": copy back failed";
  const int e = v.shape.elem_bytes;
  int64_t wrong = 0;
  int64_t first = -1;
  for (int64_t i = 0; i < v.shape.num_elements; ++i) {
    if (std::memcmp(got.data() + i * e, want.data() + i * e, e) == 0) continue;
    if (wrong++ == 0) first = i;
  }
  if (wrong == 0) return "";
  return std::string(what) + ": " + std::to_string(wrong) + " wrong elements, first " +
         std::to_string(first) + " (chunk " + std::to_string(first / v.shape.chunk_elements) + ")";
}

// Encodes on the host and the device, applies on the device three ways; "" when all agree. The
// patch sits `patch_shift` bytes into its allocation and base / next / out `region_shift` bytes
// (a multiple of the element size) into theirs, so unaligned addresses take their paths too.
std::string runCase(const Versions& v, size_t patch_shift, size_t region_shift) {
  const PatchShape& shape = v.shape;
  std::vector<uint8_t> host_patch;
  PatchStats host_stats;
  Status st = encodePatch(shape, v.base.data(), v.next.data(), &host_patch, &host_stats);
  if (!st.isOk()) return "host encode: " + st.message();
  const size_t bytes = v.base.size();
  const auto capacity = static_cast<size_t>(maxPatchBytes(shape));
  size_t encode_scratch = 0;
  size_t apply_scratch = 0;
  st = deviceEncodeScratchBytes(shape, &encode_scratch);
  if (st.isOk()) st = deviceApplyScratchBytes(shape, &apply_scratch);
  if (!st.isOk()) return "scratch size: " + st.message();
  DeviceBytes base_memory(bytes + region_shift + 1), next_memory(bytes + region_shift + 1);
  DeviceBytes out_memory(bytes + region_shift + 1), patch_memory(capacity + patch_shift);
  DeviceBytes scratch(std::max(encode_scratch, apply_scratch));
  if (!base_memory.data || !next_memory.data || !out_memory.data || !patch_memory.data ||
      !scratch.data)
    return "device allocation failed";
  uint8_t* base = base_memory.bytes() + region_shift;
  uint8_t* next = next_memory.bytes() + region_shift;
  uint8_t* out = out_memory.bytes() + region_shift;
  uint8_t* patch = patch_memory.bytes() + patch_shift;
  cudaMemcpy(base, v.base.data(), bytes, cudaMemcpyHostToDevice);
  cudaMemcpy(next, v.next.data(), bytes, cudaMemcpyHostToDevice);
  cudaMemset(patch, 0xEE, capacity);  // stale bytes must not leak into the patch

  // Encode.
  size_t length = 0;
  PatchStats stats;
  st = encodePatchOnDevice(shape, base, next, patch, capacity, scratch.data, scratch.size, nullptr,
                           &length, &stats);
  if (!st.isOk()) return "device encode: " + st.message();
  std::vector<uint8_t> device_patch(std::min(length, capacity));
  cudaMemcpy(device_patch.data(), patch, device_patch.size(), cudaMemcpyDeviceToHost);
  std::string diff = patchDifference(shape, device_patch, host_patch);
  if (!diff.empty()) return diff;
  if (stats.patch_bytes != host_stats.patch_bytes || stats.dense_bytes != host_stats.dense_bytes ||
      stats.changed_elements != host_stats.changed_elements ||
      !std::equal(stats.chunks, stats.chunks + 4, host_stats.chunks))
    return "stats differ: changed " + std::to_string(stats.changed_elements) + " / " +
           std::to_string(host_stats.changed_elements);
  st = validatePatch(shape, device_patch.data(), device_patch.size());
  if (!st.isOk()) return "the device patch fails validatePatch: " + st.message();

  // Apply into another buffer (pre-filled with garbage), then in place.
  cudaMemset(out, 0xAB, bytes);
  st = applyPatchOnDevice(shape, patch, length, base, out, scratch.data, scratch.size, nullptr);
  if (st.isOk()) st = cudaCheck(cudaDeviceSynchronize(), "apply");
  if (!st.isOk()) return "device apply: " + st.message();
  diff = regionDifference("apply (out != base)", v, out, v.next);
  if (!diff.empty()) return diff;
  cudaMemcpy(out, base, bytes, cudaMemcpyDeviceToDevice);
  st = applyPatchOnDevice(shape, patch, length, out, out, scratch.data, scratch.size, nullptr);
  if (st.isOk()) st = cudaCheck(cudaDeviceSynchronize(), "apply in place");
  if (!st.isOk()) return "device apply in place: " + st.message();
  diff = regionDifference("apply in place", v, out, v.next);
  if (!diff.empty()) return diff;

  // Encode with advance: the same patch, and the kept base becomes next.
  cudaMemset(patch, 0xEE, capacity);
  st = encodePatchAndAdvanceOnDevice(shape, base, next, patch, capacity, scratch.data, scratch.size,
                                     nullptr, &length);
  if (!st.isOk()) return "device encode with advance: " + st.message();
  device_patch.assign(std::min(length, capacity), 0);
  cudaMemcpy(device_patch.data(), patch, device_patch.size(), cudaMemcpyDeviceToHost);
  diff = patchDifference(shape, device_patch, host_patch);
  if (!diff.empty()) return "with advance: " + diff;
  return regionDifference("advanced base", v, base, v.next);
}

// Runs `v`, prints its PASS / FAIL line and fails the test on a difference.
void expectCase(const std::string& name, const Versions& v, size_t patch_shift = 0,
                size_t region_shift = 0) {
  const std::string diff = runCase(v, patch_shift, region_shift);
  std::vector<uint8_t> patch;
  PatchStats s;
  (void)encodePatch(v.shape, v.base.data(), v.next.data(), &patch, &s);
  std::printf(
      "delta-device %s %s: %lld elements of %d B, %lld per chunk, %lld changed, patch %lld "
      "B (same/dense/bitmap/index chunks %lld/%lld/%lld/%lld)%s%s\n",
      diff.empty() ? "PASS" : "FAIL", name.c_str(), static_cast<long long>(v.shape.num_elements),
      v.shape.elem_bytes, static_cast<long long>(v.shape.chunk_elements),
      static_cast<long long>(s.changed_elements), static_cast<long long>(s.patch_bytes),
      static_cast<long long>(s.chunks[0]), static_cast<long long>(s.chunks[1]),
      static_cast<long long>(s.chunks[2]), static_cast<long long>(s.chunks[3]),
      diff.empty() ? "" : ": ", diff.c_str());
  std::fflush(stdout);
  EXPECT_TRUE(diff.empty()) << name << ": " << diff;
}

// Chunks of `chunk_elements` (4096 bytes' worth, the most, or an odd 77): several whole chunks and
// an uneven last one.
PatchShape caseShape(int e, int64_t chunk_elements) {
  PatchShape s = shapeFor(0, e, chunk_elements * e);
  const int64_t whole = chunk_elements >= 16384 ? 3 : chunk_elements < 100 ? 300 : 37;
  s.num_elements = whole * s.chunk_elements + s.chunk_elements / 3 + 1;
  return s;
}

TEST(DeltaDevice, MatchesTheHostForEverySizeAndShare) {
  SKIP_WITHOUT_GPU();
  ASSERT_TRUE(cudaUseDevice(0).isOk());
  std::mt19937_64 rng(22);
  for (int e : {1, 2, 4, 8}) {
    for (int64_t chunk_elements :
         {4096 / static_cast<int64_t>(e), kMaxChunkElements, int64_t{77}}) {
      for (double share : {0.0, 0.001, 0.01, 0.1, 0.6, 1.0, -1.0}) {
        const PatchShape shape = caseShape(e, chunk_elements);
        const std::string name =
            "e=" + std::to_string(e) + " chunk=" + std::to_string(shape.chunk_elements) +
            " share=" + (share < 0 ? std::string("mixed") : std::to_string(share));
        expectCase(name, randomVersions(shape, share, rng));
      }
    }
  }
}

// Counts around the ties of the form choice (dense vs index vs bitmap; delta::smallestKind).
std::vector<int64_t> tieCounts(int64_t len, int e) {
  const int64_t bitmap = (len + 7) / 8;
  std::vector<int64_t> ties = {bitmap / 2,                  // index == bitmap
                               (len * e - bitmap) / e,      // bitmap == dense
                               len * e / (2 + e), 1, len};  // index == dense; one; all
  std::vector<int64_t> counts;
  for (int64_t t : ties)
    for (int64_t d : {-1, 0, 1})
      if (t + d >= 0 && t + d <= len) counts.push_back(t + d);
  return counts;
}

TEST(DeltaDevice, TiesPickTheHostsForm) {
  SKIP_WITHOUT_GPU();
  ASSERT_TRUE(cudaUseDevice(0).isOk());
  std::mt19937_64 rng(7);
  for (int e : {1, 2, 4, 8}) {
    for (int64_t chunk_elements : {4096 / static_cast<int64_t>(e), int64_t{64}, int64_t{77}}) {
      PatchShape shape = shapeFor(0, e, chunk_elements * e);
      const std::vector<int64_t> counts = tieCounts(shape.chunk_elements, e);
      shape.num_elements = static_cast<int64_t>(counts.size()) * shape.chunk_elements;
      expectCase("ties e=" + std::to_string(e) + " chunk=" + std::to_string(chunk_elements),
                 countedVersions(shape, counts, rng));
    }
  }
}

TEST(DeltaDevice, UnalignedPatchAndRegions) {
  SKIP_WITHOUT_GPU();
  ASSERT_TRUE(cudaUseDevice(0).isOk());
  std::mt19937_64 rng(5);
  for (int e : {1, 2, 4, 8}) {
    for (double share : {0.01, 0.3, 1.0, -1.0}) {
      const PatchShape shape = caseShape(e, 4096 / e);
      expectCase("unaligned e=" + std::to_string(e) + " share=" + std::to_string(share),
                 randomVersions(shape, share, rng), /*patch_shift=*/3, /*region_shift=*/e);
    }
  }
}

TEST(DeltaDevice, EmptyAndTinyRegions) {
  SKIP_WITHOUT_GPU();
  ASSERT_TRUE(cudaUseDevice(0).isOk());
  std::mt19937_64 rng(3);
  for (int64_t n : {0, 1, 31, 33}) {
    for (int64_t chunk_elements : {1, 2, 32}) {
      const PatchShape shape = shapeFor(n, 2, chunk_elements * 2);
      expectCase("tiny n=" + std::to_string(n) + " chunk=" + std::to_string(chunk_elements),
                 randomVersions(shape, 0.5, rng));
    }
  }
}

}  // namespace
}  // namespace wsync::delta
