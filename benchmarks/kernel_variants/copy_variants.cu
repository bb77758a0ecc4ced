// Batched copy kernel variants on the Llama-3-8B shapes (bf16, 16.06 GB, 291 tensors whole and
// 517 TP-2 column halves), each against one cudaMemcpy of the same bytes: block size, blocks per
// SM, loads in flight, tile size, how a block finds its tile's task, TMA bulk copies, the driver's
// batched and per-tensor copies. The measurements behind src/kernels/batched_copy.cu's choice
// (benchmarks/README.md, session 7). Not part of the build:
//   nvcc -O3 -std=c++17 -arch=sm_90 -o copy_variants copy_variants.cu && ./copy_variants
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <vector>

struct Task {
  const uint8_t* src;
  uint8_t* dst;
  uint64_t row_bytes, rows, src_pitch, dst_pitch, first_tile;
};

template <uint32_t Tile>
__host__ __device__ inline void shape(const Task& t, uint64_t& segs, uint64_t& rpt) {
  segs = (t.row_bytes + Tile - 1) / Tile;
  rpt = t.row_bytes >= Tile ? 1 : Tile / t.row_bytes;
}

template <uint32_t Tile>
uint64_t number(std::vector<Task>& ts) {
  uint64_t total = 0;
  for (Task& t : ts) {
    uint64_t s, r;
    shape<Tile>(t, s, r);
    t.first_tile = total;
    total += s * ((t.rows + r - 1) / r);
  }
  return total;
}

__device__ int64_t owner(const Task* ts, int64_t n, uint64_t tile) {
  int64_t lo = 0, hi = n - 1;
  while (lo < hi) {
    int64_t mid = (lo + hi + 1) / 2;
    if (ts[mid].first_tile <= tile)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

template <int Threads, int Unroll>
__device__ void run(const uint8_t* __restrict__ src, uint8_t* __restrict__ dst, uint32_t bytes) {
  const uint4* __restrict__ s = reinterpret_cast<const uint4*>(src);
  uint4* __restrict__ d = reinterpret_cast<uint4*>(dst);
  const uint32_t units = bytes / 16;
  uint32_t u = threadIdx.x;
  for (; u + (Unroll - 1) * Threads < units; u += Unroll * Threads) {
    uint4 v[Unroll];
#pragma unroll
    for (int k = 0; k < Unroll; ++k)
      v[k] = s[u + k * Threads];
#pragma unroll
    for (int k = 0; k < Unroll; ++k)
      d[u + k * Threads] = v[k];
  }
  for (; u < units; u += Threads)
    d[u] = s[u];
}

template <int Threads, int Unroll>
__device__ void rowsCopy(const uint8_t* src, uint64_t sp, uint8_t* dst, uint64_t dp, uint32_t bytes,
                         uint32_t rows) {
  const uint32_t per_row = bytes / 16, units = per_row * rows;
  auto at = [&](uint32_t u, uint64_t pitch) {
    const uint32_t row = u / per_row;
    return row * pitch + (u - row * per_row) * 16;
  };
  uint32_t u = threadIdx.x;
  for (; u + (Unroll - 1) * Threads < units; u += Unroll * Threads) {
    uint4 v[Unroll];
#pragma unroll
    for (int k = 0; k < Unroll; ++k)
      v[k] = *reinterpret_cast<const uint4*>(src + at(u + k * Threads, sp));
#pragma unroll
    for (int k = 0; k < Unroll; ++k)
      *reinterpret_cast<uint4*>(dst + at(u + k * Threads, dp)) = v[k];
  }
  for (; u < units; u += Threads)
    *reinterpret_cast<uint4*>(dst + at(u, dp)) = *reinterpret_cast<const uint4*>(src + at(u, sp));
}

template <int Threads, int Unroll, uint32_t Tile>
__device__ void doTile(const Task& t, uint64_t tile) {
  uint64_t segs, rpt;
  shape<Tile>(t, segs, rpt);
  const uint64_t local = tile - t.first_tile;
  const uint64_t row_tile = local / segs, seg = local % segs;
  const uint64_t first_row = row_tile * rpt;
  const uint64_t rows = min(rpt, t.rows - first_row);
  const uint64_t begin = seg * Tile;
  const uint64_t bytes = min(static_cast<uint64_t>(Tile), t.row_bytes - begin);
  const uint8_t* s = t.src + first_row * t.src_pitch + begin;
  uint8_t* d = t.dst + first_row * t.dst_pitch + begin;
  if (rows == 1 || (t.src_pitch == bytes && t.dst_pitch == bytes))
    run<Threads, Unroll>(s, d, static_cast<uint32_t>(bytes * rows));
  else
    rowsCopy<Threads, Unroll>(s, t.src_pitch, d, t.dst_pitch, static_cast<uint32_t>(bytes),
                              static_cast<uint32_t>(rows));
}

// Search 0: binary search per tile (today). 1: forward scan from the previous owner (grid stride).
// 2: each block a contiguous range of tiles, forward scan.
template <int Threads, int MinBlocks, int Unroll, uint32_t Tile, int Search>
__global__ void __launch_bounds__(Threads, MinBlocks)
    kern(const Task* __restrict__ ts, int64_t n, uint64_t total) {
  if (Search == 2) {
    const uint64_t per = (total + gridDim.x - 1) / gridDim.x;
    const uint64_t begin = blockIdx.x * per, end = min(total, begin + per);
    int64_t o = begin < total ? owner(ts, n, begin) : 0;
    for (uint64_t tile = begin; tile < end; ++tile) {
      while (o + 1 < n && ts[o + 1].first_tile <= tile)
        ++o;
      doTile<Threads, Unroll, Tile>(ts[o], tile);
    }
    return;
  }
  int64_t o = 0;
  for (uint64_t tile = blockIdx.x; tile < total; tile += gridDim.x) {
    if (Search == 0) {
      o = owner(ts, n, tile);
    } else {
      if (o + 1 < n && ts[o + 1].first_tile <= tile) {
        if (o + 2 < n && ts[o + 2].first_tile <= tile)
          o = owner(ts, n, tile);
        else
          ++o;
      }
    }
    doTile<Threads, Unroll, Tile>(ts[o], tile);
  }
}

static float best(const std::function<void()>& f);

__device__ __forceinline__ uint32_t sa(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void tmaLoad(uint32_t smem, const uint8_t* g, uint32_t bytes,
                                        uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(smem),
      "l"(g), "r"(bytes), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void tmaStore(uint8_t* g, uint32_t smem, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(g), "r"(smem),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void expectTx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void waitParity(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred P1;\nLAB_WAIT:\nmbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n@P1 "
      "bra DONE;\nbra LAB_WAIT;\nDONE:\n}" ::"r"(bar),
      "r"(parity)
      : "memory");
}

struct Chunk {
  const uint8_t* src;
  uint8_t* dst;
  uint64_t sp, dp;
  uint32_t bytes, rows;
};

template <uint32_t C>
__device__ Chunk chunkOf(const Task* ts, int64_t n, int64_t& o, uint64_t tile) {
  if (o + 1 < n && ts[o + 1].first_tile <= tile) {
    if (o + 2 < n && ts[o + 2].first_tile <= tile)
      o = owner(ts, n, tile);
    else
      ++o;
  }
  const Task& t = ts[o];
  uint64_t segs, rpt;
  shape<C>(t, segs, rpt);
  const uint64_t local = tile - t.first_tile;
  const uint64_t first_row = (local / segs) * rpt, seg = local % segs;
  const uint64_t begin = seg * C;
  Chunk c;
  c.rows = static_cast<uint32_t>(min(rpt, t.rows - first_row));
  c.bytes = static_cast<uint32_t>(min(static_cast<uint64_t>(C), t.row_bytes - begin));
  c.src = t.src + first_row * t.src_pitch + begin;
  c.dst = t.dst + first_row * t.dst_pitch + begin;
  c.sp = t.src_pitch;
  c.dp = t.dst_pitch;
  if (c.rows > 1 && c.sp == c.bytes && c.dp == c.bytes) {
    c.bytes *= c.rows;
    c.rows = 1;
  }
  return c;
}

template <int S, uint32_t C>
__global__ void __launch_bounds__(32)
    tmaKern(const Task* __restrict__ ts, int64_t n, uint64_t total) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ __align__(8) uint64_t bar[S];
  if (threadIdx.x != 0 || blockIdx.x >= total) return;
  for (int s = 0; s < S; ++s)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(sa(&bar[s])), "r"(1));
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  const uint64_t count = (total - blockIdx.x + gridDim.x - 1) / gridDim.x;
  Chunk staged[S];
  int64_t o = 0;
  auto load = [&](uint64_t k) {
    const int s = static_cast<int>(k % S);
    Chunk c = chunkOf<C>(ts, n, o, blockIdx.x + k * gridDim.x);
    staged[s] = c;
    const uint32_t b = sa(&bar[s]);
    expectTx(b, c.bytes * c.rows);
    for (uint32_t r = 0; r < c.rows; ++r)
      tmaLoad(sa(smem + s * C + r * c.bytes), c.src + r * c.sp, c.bytes, b);
  };
  for (uint64_t k = 0; k < count && k < S; ++k)
    load(k);
  for (uint64_t k = 0; k < count; ++k) {
    const int s = static_cast<int>(k % S);
    waitParity(sa(&bar[s]), static_cast<uint32_t>((k / S) & 1));
    const Chunk& c = staged[s];
    for (uint32_t r = 0; r < c.rows; ++r)
      tmaStore(c.dst + r * c.dp, sa(smem + s * C + r * c.bytes), c.bytes);
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    if (k >= 1 && k - 1 + S < count) {
      asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
      load(k - 1 + S);
    }
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

template <int S, uint32_t C>
void tmaVariant(const char* name, std::vector<Task> ts, double total_bytes, float memcpy_ms,
                const char* set) {
  const uint64_t tiles = number<C>(ts);
  Task* d = nullptr;
  cudaMalloc(&d, ts.size() * sizeof(Task));
  cudaMemcpy(d, ts.data(), ts.size() * sizeof(Task), cudaMemcpyHostToDevice);
  auto k = tmaKern<S, C>;
  const int smem = S * C;
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  int sms = 0, res = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&res, k, 32, smem);
  for (int per : {1, 2, 4}) {
    if (per > res) continue;
    const unsigned blocks = static_cast<unsigned>(std::min<uint64_t>(tiles, uint64_t(sms) * per));
    const float ms =
        best([&] { k<<<blocks, 32, smem>>>(d, static_cast<int64_t>(ts.size()), tiles); });
    cudaError_t e = cudaGetLastError();
    std::printf("%-8s %-34s blocks/SM %d (res %d): %.3f ms %.1f GB/s %.4f x memcpy %s\n", set, name,
                per, res, ms, total_bytes / ms / 1e6, memcpy_ms / ms,
                e == cudaSuccess ? "" : cudaGetErrorString(e));
  }
  cudaFree(d);
}

static float best(const std::function<void()>& f) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  f();
  cudaDeviceSynchronize();
  float bestms = 1e9;
  for (int i = 0; i < 5; ++i) {
    cudaEventRecord(a);
    f();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    bestms = std::min(bestms, ms);
  }
  return bestms;
}

template <int Threads, int MinBlocks, int Unroll, uint32_t Tile, int Search>
void variant(const char* name, std::vector<Task> ts, double total_bytes, float memcpy_ms,
             const char* set) {
  const uint64_t tiles = number<Tile>(ts);
  Task* d = nullptr;
  cudaMalloc(&d, ts.size() * sizeof(Task));
  cudaMemcpy(d, ts.data(), ts.size() * sizeof(Task), cudaMemcpyHostToDevice);
  auto k = kern<Threads, MinBlocks, Unroll, Tile, Search>;
  int sms = 0, res = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&res, k, Threads, 0);
  for (int waves : {1, 2}) {
    const unsigned blocks =
        static_cast<unsigned>(std::min<uint64_t>(tiles, uint64_t(sms) * res * waves));
    const float ms =
        best([&] { k<<<blocks, Threads>>>(d, static_cast<int64_t>(ts.size()), tiles); });
    cudaError_t e = cudaGetLastError();
    std::printf("%-8s %-34s waves %d res %d: %.3f ms %.1f GB/s %.4f x memcpy %s\n", set, name,
                waves, res, ms, total_bytes / ms / 1e6, memcpy_ms / ms,
                e == cudaSuccess ? "" : cudaGetErrorString(e));
  }
  cudaFree(d);
}

int main() {
  struct M {
    uint64_t r, c;
  };
  std::vector<M> ms = {{128256, 4096}};
  for (int l = 0; l < 32; ++l)
    for (M m : {M{4096, 4096}, M{1024, 4096}, M{1024, 4096}, M{4096, 4096}, M{14336, 4096},
                M{14336, 4096}, M{4096, 14336}, M{1, 4096}, M{1, 4096}})
      ms.push_back(m);
  ms.push_back({1, 4096});
  ms.push_back({128256, 4096});
  uint64_t total = 0;
  for (M m : ms)
    total += m.r * m.c * 2;
  uint8_t *src, *dst;
  cudaMalloc(&src, total);
  cudaMalloc(&dst, total);
  cudaMemset(src, 3, total);
  cudaMemset(dst, 0, total);
  std::vector<Task> whole, halves;
  uint64_t off = 0;
  for (M m : ms) {
    const uint64_t bytes = m.r * m.c * 2;
    whole.push_back({src + off, dst + off, bytes, 1, bytes, bytes, 0});
    if (m.r == 1) {
      halves.push_back(whole.back());
    } else {
      const uint64_t hr = m.c;  // half a row of bf16
      for (int h = 0; h < 2; ++h)
        halves.push_back({src + off + h * hr, dst + off + h * (bytes / 2), hr, m.r, 2 * hr, hr, 0});
    }
    off += bytes;
  }
  const float memcpy_ms = best([&] { cudaMemcpyAsync(dst, src, total, cudaMemcpyDeviceToDevice); });
  std::printf("total %.3f GB, cudaMemcpy %.3f ms %.1f GB/s\n", total / 1e9, memcpy_ms,
              total / memcpy_ms / 1e6);
  {
    const float per = best([&] {
      for (const Task& t : whole)
        cudaMemcpyAsync(t.dst, const_cast<uint8_t*>(t.src), t.row_bytes, cudaMemcpyDeviceToDevice);
    });
    std::printf("whole    per-tensor cudaMemcpyAsync: %.3f ms %.4f x memcpy\n", per,
                memcpy_ms / per);
    std::vector<void*> d;
    std::vector<const void*> s;
    std::vector<size_t> z;
    for (const Task& t : whole) {
      d.push_back(t.dst);
      s.push_back(t.src);
      z.push_back(t.row_bytes);
    }
    cudaStream_t st;
    cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    for (unsigned flags : {0u, 1u}) {
      cudaMemcpyAttributes attr{};
      attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
      attr.flags = flags;
      size_t idx = 0;
      cudaEvent_t a, b;
      cudaEventCreate(&a);
      cudaEventCreate(&b);
      float bestms = 1e9;
      cudaError_t e = cudaSuccess;
      for (int i = 0; i < 6; ++i) {
        cudaEventRecord(a, st);
        e = cudaMemcpyBatchAsync(d.data(), s.data(), z.data(), d.size(), &attr, &idx, 1, st);
        cudaEventRecord(b, st);
        cudaEventSynchronize(b);
        float msv;
        cudaEventElapsedTime(&msv, a, b);
        if (i > 0) bestms = std::min(bestms, msv);
      }
      std::printf("whole    cudaMemcpyBatchAsync flags %u: %.3f ms %.4f x memcpy (%s)\n", flags,
                  bestms, memcpy_ms / bestms, cudaGetErrorString(e));
    }
  }
  for (int set = 0; set < 2; ++set) {
    const auto& ts = set == 0 ? whole : halves;
    const char* nm = set == 0 ? "whole" : "halves";

    tmaVariant<4, 16384>("tma 4x16K", ts, total, memcpy_ms, nm);
    tmaVariant<4, 32768>("tma 4x32K", ts, total, memcpy_ms, nm);
    tmaVariant<3, 65536>("tma 3x64K", ts, total, memcpy_ms, nm);
    tmaVariant<2, 65536>("tma 2x64K", ts, total, memcpy_ms, nm);
    variant<64, 32, 4, 32768, 1>("64x32 u4 32K forward", ts, total, memcpy_ms, nm);
    variant<64, 32, 4, 16384, 1>("64x32 u4 16K forward", ts, total, memcpy_ms, nm);
    variant<64, 32, 4, 65536, 1>("64x32 u4 64K forward", ts, total, memcpy_ms, nm);
    variant<64, 32, 2, 32768, 1>("64x32 u2 32K forward", ts, total, memcpy_ms, nm);
    variant<32, 32, 4, 16384, 1>("32x32 u4 16K forward", ts, total, memcpy_ms, nm);
    variant<64, 24, 4, 32768, 1>("64x24 u4 32K forward", ts, total, memcpy_ms, nm);
    variant<96, 21, 4, 32768, 1>("96x21 u4 32K forward", ts, total, memcpy_ms, nm);
  }
  // correctness of one variant
  cudaMemset(dst, 0, total);
  tmaVariant<4, 32768>("check", whole, total, memcpy_ms, "whole");
  {
    std::vector<uint8_t> all(total);
    cudaMemcpy(all.data(), dst, total, cudaMemcpyDeviceToHost);
    size_t bad = 0;
    for (uint8_t x : all)
      bad += x != 3;
    std::printf("tma whole check: %zu wrong bytes\n", bad);
    cudaMemset(dst, 0, total);
    tmaVariant<4, 32768>("check", halves, total, memcpy_ms, "halves");
    cudaMemcpy(all.data(), dst, total, cudaMemcpyDeviceToHost);
    bad = 0;
    for (uint8_t x : all)
      bad += x != 3;
    std::printf("tma halves check: %zu wrong bytes\n", bad);
  }
  std::vector<uint8_t> h(1 << 20);
  cudaMemcpy(h.data(), dst + total - h.size(), h.size(), cudaMemcpyDeviceToHost);
  std::printf("check last MiB all 3: %d\n",
              static_cast<int>(std::all_of(h.begin(), h.end(), [](uint8_t x) { return x == 3; })));
  return 0;
}
