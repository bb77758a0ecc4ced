// wsync-sync-bench: device memory (see sync_bench_memory.h).
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <string>

#include "bench_pattern.h"
#include "sync_bench_memory.h"

namespace wsync_bench {

using wsync_demo::BufferSpec;
using wsync_demo::PieceSpec;
using wsync_demo::TensorSpec;

namespace {

constexpr size_t kArenaAlignment = 256;  // bytes; every buffer starts aligned in its arena

// patternPieces (bench_pattern.h), ending the benchmark on a layout it cannot check.
std::vector<PatternPiece> patternPieces(const std::vector<TensorSpec>& tensors,
                                        const std::vector<BufferSpec>& layout,
                                        const std::vector<void*>& data,
                                        std::vector<size_t>* buffer_of, int world_rank) {
  std::vector<PatternPiece> out;
  std::string error;
  if (!wsync_bench::patternPieces(tensors, layout, data, buffer_of, &out, &error))
    dieBench(world_rank, error);
  return out;
}

// The row-major index in its tensor of element `element` (r * cols + c) of piece `p`.
int64_t flatIndex(const PatternPiece& p, int64_t element) {
  const int64_t cols = std::max<int64_t>(p.cols, 1);
  return p.flat_base + element / cols * p.global_row_stride + element % cols;
}

// Checks the pattern kernels against wsync_demo::expectedValue and the mismatch counter against
// one corrupted element, on a box [2:5, 300:1300] of a [10, 1500] tensor (index 5), in `dtype`.
void selfTestPattern(wsync_dtype_t dtype, const DeviceStream& stream, int world_rank) {
  std::vector<TensorSpec> tensors(6, TensorSpec{"unused", {1}});
  tensors[5] = TensorSpec{"self_test", {10, 1500}};
  BufferSpec buffer;
  buffer.name = "self_test";
  buffer.num_elements = 3000;
  buffer.pieces.push_back(PieceSpec{5, {2, 300}, {3, 1000}, 0, {1000, 1}});
  const size_t esz = wsync_demo::dtypeBytes(dtype);
  constexpr uint64_t kVersion = 7;
  constexpr int64_t kCorrupted = 1234;
  std::string error;
  auto memory = DeviceMemory::allocate(3000 * esz, "the pattern self-test", &error);
  if (!memory) dieBench(world_rank, error);
  std::vector<size_t> buffer_of;
  const auto pieces = patternPieces(tensors, {buffer}, {memory->data()}, &buffer_of, world_rank);
  std::vector<uint8_t> host(3000 * esz);
  int64_t device_bad = -1;
  Mismatch first;
  if (!fillExpected(pieces, dtype, kVersion, stream, &error) || !stream.synchronize(&error) ||
      !copyToHost(host.data(), memory->data(), host.size(), &error) ||
      !countMismatches(pieces, dtype, kVersion, stream, &device_bad, nullptr, &error)) {
    dieBench(world_rank, "pattern self-test: " + error);
  }
  std::string host_first;
  const int64_t host_bad =
      wsync_demo::countMismatches(tensors, buffer, dtype, host.data(), kVersion, &host_first);
  if (host_bad != 0 || device_bad != 0) {
    dieBench(world_rank, "pattern self-test: the fill kernel disagrees with expectedValue in " +
                             std::to_string(host_bad) + " elements (first: " + host_first +
                             "), the count kernel finds " + std::to_string(device_bad));
  }
  if (!stream.memsetAsync(memory->data() + kCorrupted * esz, 0x7f, esz, &error) ||
      !countMismatches(pieces, dtype, kVersion, stream, &device_bad, &first, &error)) {
    dieBench(world_rank, "pattern self-test: " + error);
  }
  if (device_bad != 1 || first.element != kCorrupted) {
    dieBench(world_rank,
             "pattern self-test: one corrupted element (1234), but the count kernel "
             "finds " +
                 std::to_string(device_bad) + " (first at " + std::to_string(first.element) + ")");
  }
}

}  // namespace

bool DeviceMemoryKind::everyRankHasDevice(const Options& opt, const Roles& roles, MPI_Comm comm) {
  std::string why;
  const int devices = deviceCount(&why);
  int usable = devices > opt.cuda_device ? 1 : 0;
  if (devices > 0 && !usable) {
    why = std::to_string(devices) + " CUDA device(s), so no device " +
          std::to_string(opt.cuda_device);
  }
  int all_usable = 0;
  MPI_Allreduce(&usable, &all_usable, 1, MPI_INT, MPI_MIN, comm);
  if (!all_usable && roles.world_rank == 0) {
    std::fprintf(stderr,
                 "wsync-sync-bench: --memory device needs CUDA device %d on every rank: %s; "
                 "nothing measured (exit %d)\n",
                 opt.cuda_device, usable ? "another rank has none" : why.c_str(), kNoDevice);
  }
  return all_usable != 0;
}

DeviceMemoryKind::DeviceMemoryKind(const Options& opt, const Roles& roles, const Comms& comms,
                                   const std::vector<TensorSpec>& tensors, PhaseClock& phases)
    : opt_(opt), roles_(roles), tensors_(tensors) {
  std::string error;
  if (!setDevice(opt.cuda_device, &error)) dieBench(roles.world_rank, error);
  stream_ = DeviceStream::create(&error);
  if (!stream_) dieBench(roles.world_rank, error);
  if (roles.world_rank == 0) selfTestPattern(opt.dtype, *stream_, roles.world_rank);
  layout_ = rankLayout(tensors, opt, roles);
  allocateBuffers();
  std::vector<size_t> buffer_of;
  if (roles.trainer)
    trainer_pieces_ = patternPieces(tensors, layout_, registered_, &buffer_of, roles.world_rank);
  const uint64_t my_bytes = layoutBytes(layout_, wsync_demo::dtypeBytes(opt.dtype));
  sizes_ = exchangeLayoutSizes(my_bytes, roles.trainer, comms.bench);
  phases.mark("setup");
  // The one-process copies on rank 0 while every other rank sleeps in the barrier.
  if (roles.world_rank == 0) measureDeviceCopies(sizes_, *stream_, roles.world_rank, &limits_);
  measureConcurrentCopy(sizes_, roles, comms.bench, arena_.get(), &limits_);
  phases.mark("reference");
}

// Trainers: the parameters. Rollouts with --copy-flip: the engine's live buffers. Zeroed.
void DeviceMemoryKind::allocateBuffers() {
  if (!roles_.trainer && !opt_.copy_flip) return;
  const size_t esz = wsync_demo::dtypeBytes(opt_.dtype);
  std::vector<size_t> offsets;
  size_t total = 0;
  for (const BufferSpec& b : layout_) {
    offsets.push_back(total);
    const size_t bytes = static_cast<size_t>(b.num_elements) * esz;
    total += (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
  }
  std::string error;
  arena_ =
      DeviceMemory::allocate(total, roles_.trainer ? "trainer parameters" : "live buffers", &error);
  if (!arena_) dieBench(roles_.world_rank, error);
  for (size_t offset : offsets)
    registered_.push_back(arena_->data() + offset);
  if (!stream_->memsetAsync(arena_->data(), 0, arena_->size(), &error) ||
      !stream_->synchronize(&error)) {
    dieBench(roles_.world_rank, error);
  }
}

void DeviceMemoryKind::configure(wsync_config_t* cfg) const {
  cfg->snapshot = roles_.trainer && opt_.snapshot ? 1 : 0;
  cfg->cuda_device = opt_.cuda_device;
}

void DeviceMemoryKind::synchronizeStream() {
  std::string error;
  if (!stream_->synchronize(&error)) dieBench(roles_.world_rank, error);
}

void DeviceMemoryKind::fillVersion(uint64_t version, bool checkable) {
  std::string error;
  const bool filled = checkable
                          ? fillExpected(trainer_pieces_, opt_.dtype, version, *stream_, &error)
                          : stream_->memsetAsync(arena_->data(), static_cast<int>(version & 0xff),
                                                 arena_->size(), &error);
  if (!filled || !stream_->synchronize(&error))
    dieBench(roles_.world_rank, "filling version: " + error);
}

int64_t DeviceMemoryKind::countWrong(const std::vector<void*>& data, uint64_t version,
                                     const char* where) {
  std::vector<size_t> buffer_of;
  const auto pieces = patternPieces(tensors_, layout_, data, &buffer_of, roles_.world_rank);
  int64_t n = 0;
  Mismatch first;
  std::string error;
  if (!countMismatches(pieces, opt_.dtype, version, *stream_, &n, &first, &error)) {
    dieBench(roles_.world_rank, std::string("verification of ") + where + ": " + error);
  }
  if (n > 0) {
    const PatternPiece& p = pieces[first.piece];
    const int64_t flat = flatIndex(p, first.element);
    std::fprintf(stderr,
                 "[wsync] rollout %d, %s: %" PRId64 " elements of version %" PRIu64
                 " are wrong; first: buffer '%s' tensor '%s' element %" PRId64
                 ": got %g, want %g\n",
                 roles_.role_rank, where, n, version, layout_[buffer_of[first.piece]].name.c_str(),
                 tensors_[static_cast<size_t>(p.tensor)].name.c_str(), flat, first.got,
                 static_cast<double>(wsync_demo::expectedValue(p.tensor, flat, version)));
  }
  return n;
}

void DeviceMemoryKind::beforeTimedVersions(const PlanSummary& plan) {
  if (roles_.world_rank != 0) return;
  const size_t in_use = noteDeviceMemoryUse(roles_.world_rank, &limits_);
  std::printf(
      "[bench] device %d: %d trainers -> %d rollout ranks (%d replicas of TP %d), layout %s, "
      "dtype %s, model %s: %zu tensors, %" PRIu64 " bytes delivered per version; %" PRId64
      " broadcast groups, %" PRId64
      " writes; snapshot %s, copy flip %s; commit %.3f s; device "
      "memory in use %.2f of %.2f GB\n",
      opt_.cuda_device, roles_.trainers, roles_.rollouts, plan.num_replicas, roles_.tp,
      opt_.layout_name.c_str(), opt_.dtype_name.c_str(), opt_.model.c_str(), tensors_.size(),
      plan.bytes_per_version, plan.broadcast_groups, plan.write_ops, opt_.snapshot ? "on" : "off",
      opt_.copy_flip ? "on" : "off", plan.commit_seconds, static_cast<double>(in_use) / 1e9,
      static_cast<double>(limits_.device_total) / 1e9);
  if (plan.bytes_per_version != sizes_.delivered) {
    std::printf("[bench] note: the plan delivers %" PRIu64
                " bytes per version, the layouts add up to %" PRIu64 "\n",
                plan.bytes_per_version, sizes_.delivered);
  }
  std::fflush(stdout);
}

void DeviceMemoryKind::printWarmup(int iteration, double seconds) const {
  std::printf("[wsync] warmup %d: %.6f s\n", iteration, seconds);
  std::fflush(stdout);
}

void DeviceMemoryKind::printTimedVersion(const TimedVersion& v) const {
  const double gbps = static_cast<double>(v.bytes) / v.seconds / 1e9;
  const std::string held =
      opt_.snapshot ? ", training stream held " + std::to_string(v.stream_held_s * 1e3) + " ms"
                    : "";
  std::printf("[wsync] iteration %d (version %" PRIu64 "): %" PRIu64
              " bytes in %.6f s, %.1f GB/s, %.3f x device copy; publish blocked %.1f us%s\n",
              v.iteration, v.version, v.bytes, v.seconds, gbps,
              gbps * limits_.copy_delivered_s / static_cast<double>(sizes_.delivered) * 1e9,
              v.publish_blocked_s * 1e6, held.c_str());
  std::fflush(stdout);
}

}  // namespace wsync_bench
