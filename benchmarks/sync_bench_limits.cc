// wsync-sync-bench: the physical limits and the baseline (see the header).
#include "sync_bench_limits.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "sync_bench_common.h"

namespace wsync_bench {

using wsync_demo::BufferSpec;
using wsync_demo::PieceSpec;
using wsync_demo::TensorSpec;

namespace {

constexpr size_t kMemcpyChunkBytes = size_t{512} << 20;  // memcpy reference buffer cap

// Copies the elements of piece `p` (see PieceSpec) out of `full`, the whole tensor row-major, into
// `dst`, one memcpy per innermost run.
void copyPieceFromTensor(const TensorSpec& t, const PieceSpec& p, const float* full, float* dst) {
  const size_t rank = t.shape.size();
  if (rank == 0) {
    dst[p.local_offset] = full[0];
    return;
  }
  for (int64_t e : p.extent) {
    if (e == 0) return;
  }
  std::vector<int64_t> global(rank, 1);
  for (int d = static_cast<int>(rank) - 2; d >= 0; --d)
    global[d] = global[d + 1] * t.shape[d + 1];
  std::vector<int64_t> idx(rank, 0);
  const size_t run_bytes = static_cast<size_t>(p.extent[rank - 1]) * sizeof(float);
  while (true) {
    int64_t local = p.local_offset;
    int64_t flat = 0;
    for (size_t d = 0; d < rank; ++d) {
      local += idx[d] * p.strides[d];
      flat += (p.offset[d] + idx[d]) * global[d];
    }
    std::memcpy(dst + local, full + flat, run_bytes);
    int d = static_cast<int>(rank) - 2;
    while (d >= 0 && ++idx[static_cast<size_t>(d)] == p.extent[static_cast<size_t>(d)]) {
      idx[static_cast<size_t>(d)] = 0;
      --d;
    }
    if (d < 0) return;
  }
}

// The baseline's buffers on this rank: where every trainer's Shard(0) piece of each tensor sits
// in the flattened tensor (one contiguous range), the full tensor on the broadcast ranks, and a
// rollout's float32 buffers of its layout with the pieces each tensor feeds.
struct BaselineBuffers {
  std::vector<std::vector<int>> counts;  // [tensor][trainer]: elements
  std::vector<std::vector<int>> displs;  // [tensor][trainer]: first element in the tensor
  std::vector<float> full;               // the largest tensor (broadcast ranks)
  std::vector<BufferSpec> layout;        // rollouts
  std::vector<std::vector<float>> buffers;
  std::vector<std::vector<std::pair<size_t, size_t>>> pieces_of;  // [tensor]: (buffer, piece)
};

BaselineBuffers baselineBuffers(const Options& opt, const Roles& roles, bool in_bcast,
                                const std::vector<TensorSpec>& tensors) {
  BaselineBuffers out;
  out.counts.assign(tensors.size(), std::vector<int>(static_cast<size_t>(roles.trainers)));
  out.displs = out.counts;
  for (int tr = 0; tr < roles.trainers; ++tr) {
    const auto layout = wsync_demo::trainerLayout(tensors, roles.trainers, tr);
    for (size_t t = 0; t < tensors.size(); ++t) {
      const PieceSpec& p = layout[t].pieces[0];
      int64_t row = 1;
      for (size_t d = 1; d < tensors[t].shape.size(); ++d)
        row *= tensors[t].shape[d];
      out.counts[t][static_cast<size_t>(tr)] = static_cast<int>(layout[t].num_elements);
      out.displs[t][static_cast<size_t>(tr)] =
          static_cast<int>(tensors[t].shape.empty() ? 0 : p.offset[0] * row);
    }
  }
  int64_t max_elements = 1;
  for (const TensorSpec& t : tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape)
      n *= d;
    max_elements = std::max(max_elements, n);
  }
  out.full.resize(in_bcast ? static_cast<size_t>(max_elements) : 0);
  out.pieces_of.resize(tensors.size());
  if (!roles.trainer) {
    out.layout = wsync_demo::rolloutLayout(tensors, opt.layout, roles.tp, roles.tp_rank);
    for (size_t b = 0; b < out.layout.size(); ++b) {
      out.buffers.emplace_back(
          static_cast<size_t>(std::max<int64_t>(1, out.layout[b].num_elements)), 0.0f);
      for (size_t p = 0; p < out.layout[b].pieces.size(); ++p) {
        out.pieces_of[static_cast<size_t>(out.layout[b].pieces[p].tensor)].push_back({b, p});
      }
    }
  }
  return out;
}

// One baseline version: for each tensor in order, MPI_Gatherv of the trainers' pieces to trainer
// rank 0, MPI_Bcast from there to every rollout rank, and each rollout copies out its pieces.
// Seconds from a sleeping barrier to the end of a final one.
double baselineVersion(const Roles& roles, const Comms& comms,
                       const std::vector<TensorSpec>& tensors,
                       const std::vector<std::vector<float>>& trainer_data, BaselineBuffers& bb) {
  sleepingBarrier(comms.bench);
  const auto t0 = Clock::now();
  for (size_t t = 0; t < tensors.size(); ++t) {
    int n = 1;
    for (int64_t d : tensors[t].shape)
      n *= static_cast<int>(d);
    if (roles.trainer) {
      const int me = bb.counts[t][static_cast<size_t>(roles.role_rank)];
      MPI_Gatherv(trainer_data[t].data(), me, MPI_FLOAT, bb.full.data(), bb.counts[t].data(),
                  bb.displs[t].data(), MPI_FLOAT, 0, comms.trainer);
    }
    if (comms.bcast != MPI_COMM_NULL) MPI_Bcast(bb.full.data(), n, MPI_FLOAT, 0, comms.bcast);
    if (!roles.trainer) {
      for (const auto& [b, p] : bb.pieces_of[t]) {
        copyPieceFromTensor(tensors[t], bb.layout[b].pieces[p], bb.full.data(),
                            bb.buffers[b].data());
      }
    }
  }
  sleepingBarrier(comms.bench);
  return secondsSince(t0);
}

}  // namespace

double memcpyGbps(uint64_t total, int repeats) {
  const size_t chunk =
      static_cast<size_t>(std::min<uint64_t>(std::max<uint64_t>(total, 1), kMemcpyChunkBytes));
  std::vector<char> src(chunk, 1), dst(chunk, 2);  // both touched before timing
  std::memcpy(dst.data(), src.data(), chunk);
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    for (uint64_t done = 0; done < total;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk, total - done));
      std::memcpy(dst.data(), src.data(), n);
      done += n;
    }
    const double s = secondsSince(t0);
    best = std::max(best, static_cast<double>(total) / s / 1e9);
  }
  return best;
}

BaselineResult runBaseline(const Options& opt, const Roles& roles, const Comms& comms,
                           const std::vector<TensorSpec>& tensors,
                           const std::vector<std::vector<float>>& trainer_data, uint64_t version) {
  BaselineBuffers bb = baselineBuffers(opt, roles, comms.bcast != MPI_COMM_NULL, tensors);
  BaselineResult out;
  const int iters = opt.baseline_iters >= 0 ? opt.baseline_iters : opt.iters;
  for (int i = 0; i < opt.warmup + iters; ++i) {
    const double sec = baselineVersion(roles, comms, tensors, trainer_data, bb);
    if (roles.world_rank == 0) {
      if (i < opt.warmup) {
        std::printf("[baseline] warmup %d: %.4f s\n", i + 1, sec);
      } else {
        std::printf("[baseline] iteration %d: %.4f s\n", i - opt.warmup + 1, sec);
        out.seconds.push_back(sec);
      }
      std::fflush(stdout);
    }
  }
  int64_t bad = 0;
  if (!roles.trainer) {
    std::string first;
    for (size_t b = 0; b < bb.layout.size(); ++b) {
      bad += wsync_demo::countMismatches(tensors, bb.layout[b], WSYNC_DTYPE_FLOAT32,
                                         bb.buffers[b].data(), version,
                                         first.empty() ? &first : nullptr);
    }
    if (bad > 0) {
      std::fprintf(stderr, "[baseline] rollout %d: %" PRId64 " wrong elements; first: %s\n",
                   roles.role_rank, bad, first.c_str());
    }
  }
  MPI_Allreduce(&bad, &out.mismatches, 1, MPI_INT64_T, MPI_SUM, comms.bench);
  return out;
}

void measureDeviceCopies(const LayoutSizes& sizes, const DeviceStream& stream, int world_rank,
                         DeviceLimits* out) {
  std::string error;
  const size_t ref = static_cast<size_t>(std::max(sizes.params_bytes, sizes.slot_bytes));
  auto src = DeviceMemory::allocate(ref, "the copy reference source", &error);
  auto dst = src ? DeviceMemory::allocate(ref, "the copy reference target", &error) : nullptr;
  size_t free_bytes = 0;
  if (!dst || !stream.memsetAsync(src->data(), 1, ref, &error) ||
      !stream.memsetAsync(dst->data(), 2, ref, &error) || !stream.synchronize(&error) ||
      !timeDeviceCopy(dst->data(), src->data(), ref, sizes.delivered, kReferenceRepeats,
                      &out->copy_delivered_s, &error) ||
      !timeDeviceCopy(dst->data(), src->data(), ref, sizes.slot_bytes, kReferenceRepeats,
                      &out->copy_slot_s, &error) ||
      !timeDeviceCopy(dst->data(), src->data(), ref, sizes.params_bytes, kReferenceRepeats,
                      &out->copy_params_s, &error) ||
      !deviceMemoryInfo(&free_bytes, &out->device_total, &error)) {
    dieBench(world_rank, "device copy reference: " + error);
  }
  if (!timePinnedCopies(kPinnedReferenceBytes, kReferenceRepeats, &out->pinned_h2d_s,
                        &out->pinned_d2h_s, &error)) {
    dieBench(world_rank, "pinned host copy reference: " + error);
  }
  out->used_max = out->device_total - free_bytes;
  std::printf("[bench] device copy (cudaMemcpy D2D, one process, best of %d): %" PRIu64
              " bytes delivered per version in %.6f s = %.1f GB/s; one slot (%" PRIu64
              " bytes) %.6f s; one trainer's parameters (%" PRIu64 " bytes) %.6f s\n",
              kReferenceRepeats, sizes.delivered, out->copy_delivered_s,
              static_cast<double>(sizes.delivered) / out->copy_delivered_s / 1e9, sizes.slot_bytes,
              out->copy_slot_s, sizes.params_bytes, out->copy_params_s);
  std::printf(
      "[bench] pinned host copies (%zu bytes, best of %d): host to device %.1f GB/s, "
      "device to host %.1f GB/s\n",
      kPinnedReferenceBytes, kReferenceRepeats,
      static_cast<double>(kPinnedReferenceBytes) / out->pinned_h2d_s / 1e9,
      static_cast<double>(kPinnedReferenceBytes) / out->pinned_d2h_s / 1e9);
  std::fflush(stdout);
}

void measureConcurrentCopy(const LayoutSizes& sizes, const Roles& roles, MPI_Comm comm,
                           const DeviceMemory* params, DeviceLimits* out) {
  std::string error;
  const uint64_t share = sizes.delivered / static_cast<uint64_t>(roles.trainers);
  std::unique_ptr<DeviceMemory> target;
  if (roles.trainer) {
    target = DeviceMemory::allocate(sizes.mine, "the concurrent copy target", &error);
    if (!target) dieBench(roles.world_rank, "concurrent device copy reference: " + error);
  }
  auto copyShare = [&]() {
    for (uint64_t done = 0; done < share;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(sizes.mine, share - done));
      if (!copyOnDevice(target->data(), params->data(), n, &error)) {
        dieBench(roles.world_rank, "concurrent device copy reference: " + error);
      }
      done += n;
    }
  };
  double best = std::numeric_limits<double>::infinity();
  for (int round = 0; round <= kReferenceRepeats; ++round) {  // round 0 is not timed
    MPI_Barrier(comm);
    const auto t0 = Clock::now();
    if (roles.trainer) copyShare();
    const double mine_s = roles.trainer ? secondsSince(t0) : 0.0;
    double slowest = 0;
    MPI_Allreduce(&mine_s, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm);
    if (round > 0) best = std::min(best, slowest);
  }
  out->copy_concurrent_s = best;
  if (roles.world_rank == 0) {
    std::printf(
        "[bench] device copy of the delivered bytes by all %d trainer processes at once "
        "(cudaMemcpy D2D, an equal share each, best of %d): %.6f s = %.1f GB/s\n",
        roles.trainers, kReferenceRepeats, out->copy_concurrent_s,
        static_cast<double>(sizes.delivered) / out->copy_concurrent_s / 1e9);
    std::fflush(stdout);
  }
}

size_t noteDeviceMemoryUse(int world_rank, DeviceLimits* out) {
  std::string error;
  size_t free_bytes = 0;
  if (!deviceMemoryInfo(&free_bytes, &out->device_total, &error)) dieBench(world_rank, error);
  const size_t used = out->device_total - free_bytes;
  out->used_max = std::max(out->used_max, used);
  return used;
}

}  // namespace wsync_bench
