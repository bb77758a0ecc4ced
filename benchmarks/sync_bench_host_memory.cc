// wsync-sync-bench: host memory (see sync_bench_memory.h).
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <string>

#include "sync_bench_memory.h"

namespace wsync_bench {

HostMemory::HostMemory(const Options& opt, const Roles& roles, const Comms& comms,
                       const std::vector<wsync_demo::TensorSpec>& tensors)
    : opt_(opt), roles_(roles), comms_(comms), tensors_(tensors) {
  layout_ = rankLayout(tensors, opt, roles);
  if (!roles.trainer) return;  // rollouts: wsync allocates the slots
  for (const wsync_demo::BufferSpec& b : layout_) {
    // Zero-filled, so every page is touched before the first version.
    trainer_data_.emplace_back(static_cast<size_t>(std::max<int64_t>(1, b.num_elements)), 0.0f);
    registered_.push_back(trainer_data_.back().data());
  }
}

wsync_dtype_t HostMemory::dtype() const {
  return roles_.trainer ? WSYNC_DTYPE_FLOAT32 : opt_.dtype;
}

void HostMemory::fillVersion(uint64_t version, bool checkable) {
  if (!checkable) return;  // the versions timed carry whatever the buffers hold
  for (size_t b = 0; b < layout_.size(); ++b)
    wsync_demo::fillTrainerBuffer(tensors_, layout_[b], version, trainer_data_[b].data());
}

int64_t HostMemory::countWrong(const std::vector<void*>& data, uint64_t version, const char*) {
  int64_t bad = 0;
  std::string first;
  for (size_t b = 0; b < layout_.size(); ++b) {
    bad += wsync_demo::countMismatches(tensors_, layout_[b], opt_.dtype, data[b], version,
                                       first.empty() ? &first : nullptr);
  }
  if (bad > 0) {
    std::fprintf(stderr,
                 "[wsync] rollout %d: %" PRId64 " elements of version %" PRIu64
                 " are wrong; first: %s\n",
                 roles_.role_rank, bad, version, first.c_str());
  }
  return bad;
}

// The physical limit, on world rank 0 while every other rank sleeps in the barrier.
void HostMemory::beforeTimedVersions(const PlanSummary& plan) {
  bytes_per_version_ = plan.bytes_per_version;
  if (roles_.world_rank == 0) {
    limits_.before_gbps = memcpyGbps(plan.bytes_per_version, 3);
    std::printf(
        "[bench] %d trainers -> %d rollout ranks (%d replicas of TP %d), layout %s, dtype %s: %zu "
        "tensors, %" PRIu64 " bytes delivered per version; %" PRId64 " broadcast groups, %" PRId64
        " writes; commit %.3f s; memcpy %.2f GB/s\n",
        roles_.trainers, roles_.rollouts, plan.num_replicas, roles_.tp, opt_.layout_name.c_str(),
        opt_.dtype_name.c_str(), tensors_.size(), plan.bytes_per_version, plan.broadcast_groups,
        plan.write_ops, plan.commit_seconds, limits_.before_gbps);
    std::fflush(stdout);
  }
  sleepingBarrier(comms_.bench);
}

void HostMemory::afterTimedVersions() {
  if (roles_.world_rank == 0) {
    limits_.after_gbps = memcpyGbps(bytes_per_version_, 3);
    std::printf("[bench] memcpy %.2f GB/s before, %.2f GB/s after the timed versions\n",
                limits_.before_gbps, limits_.after_gbps);
  }
  sleepingBarrier(comms_.bench);
}

void HostMemory::printWarmup(int iteration, double seconds) const {
  std::printf("[wsync] warmup %d: %.4f s\n", iteration, seconds);
  std::fflush(stdout);
}

void HostMemory::printTimedVersion(const TimedVersion& v) const {
  const double gbps = static_cast<double>(v.bytes) / v.seconds / 1e9;
  std::printf("[wsync] iteration %d (version %" PRIu64 "): %" PRIu64
              " bytes in %.4f s, %.2f GB/s, %.2f x memcpy\n",
              v.iteration, v.version, v.bytes, v.seconds, gbps, gbps / limits_.before_gbps);
  std::fflush(stdout);
}

}  // namespace wsync_bench
