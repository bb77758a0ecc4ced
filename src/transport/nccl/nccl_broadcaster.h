// Broadcast groups on device memory: NCCL broadcasts on communicators split once, at commit, from
// one NCCL world communicator (one split per member set). The device-memory counterpart of
// HostBroadcaster (src/transport/mpi/host_broadcast.h).
//
// Contract: every member of a communicator posts the same broadcasts on it, in the same order,
// with the same sizes and root (the plan order), between two launch() calls; data pointers differ
// per rank. Posts on other communicators may interleave differently on each rank: launch() orders
// the work by communicator (the order of create()'s list) and then by post, which every member
// computes alike, so no two ranks disagree on what a broadcast carries or wait on each other in a
// cycle.
//
// Every NCCL communicator is non-blocking (ncclConfig_t::blocking = 0): init, splits, launches and
// waits are polled with a deadline, and on a timeout or an error every communicator is aborted
// (ncclCommAbort) and the broadcaster stays unusable (recreate it to go on).
//
// Thread-safety: one thread at a time uses an instance. The planning part (planBuckets) is pure
// host logic with no CUDA or NCCL dependency, so CPU-only builds can test it.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <numeric>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "plan/broadcast_comm.h"

// The CUDA runtime's stream handle, declared exactly as in CUDA's driver_types.h so this header
// (and planBuckets) builds without the CUDA headers; the two declarations name the same type.
typedef struct CUstream_st* cudaStream_t;
struct ncclComm;

namespace wsync {

// ---- bucketing (pure, host only) -------------------------------------------------------------

// Items packed into one staging buffer start at multiples of this many bytes.
inline constexpr size_t kNcclBucketItemAlign = 16;
// Packed buckets start at multiples of this many bytes in the staging buffer.
inline constexpr size_t kNcclStagingAlign = 256;

// One queued broadcast. Only (comm, root, bytes) enter the plan: data pointers are per rank.
struct PostedBroadcast {
  int32_t comm = -1;  // index of the communicator in create()'s list (the same on every rank)
  int32_t root = -1;  // NCCL world rank of the sender
  void* data = nullptr;
  size_t bytes = 0;
};

struct BucketItem {
  size_t post = 0;    // index into the posts given to planBuckets
  size_t offset = 0;  // bytes from the start of the bucket (0 for an unpacked bucket)
  size_t bytes = 0;
};

// One ncclBroadcast. Unpacked: exactly one post, broadcast in place from its own memory. Packed:
// two or more small posts on the same communicator from the same root; the root copies them into
// the staging buffer at staging_offset + item.offset, one broadcast carries `bytes`, and the
// receivers copy each item out.
struct Bucket {
  int32_t comm = -1;
  int32_t root = -1;
  bool packed = false;
  size_t bytes = 0;           // bytes the broadcast carries (packed: includes alignment gaps)
  size_t staging_offset = 0;  // packed only: where the bucket starts in this rank's staging buffer
  std::vector<BucketItem> items;  // in post order
};

struct BucketPlan {
  std::vector<Bucket> buckets;  // launch order: by comm, then by first post
  size_t staging_bytes = 0;     // staging buffer size this rank needs (0 when nothing is packed)
};

// Groups `posts` into broadcasts. Zero-byte posts are dropped (they move nothing). A post of
// bytes >= bucket_bytes is a bucket of its own; otherwise consecutive posts of one communicator's
// sequence (posts on other communicators in between do not break a run) with the same root are
// packed greedily while the packed size stays <= bucket_bytes. A bucket's shape (comm, root, bytes,
// packed, item offsets and sizes) depends only on its communicator's own sequence of
// (root, bytes), so every member computes the same buckets for that communicator; staging offsets
// are local to the rank. Deterministic.
inline BucketPlan planBuckets(const std::vector<PostedBroadcast>& posts, size_t bucket_bytes) {
  const auto align_up = [](size_t v, size_t a) { return (v + a - 1) / a * a; };
  std::vector<size_t> order(posts.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return posts[a].comm < posts[b].comm; });

  BucketPlan plan;
  constexpr size_t kNone = ~size_t{0};
  size_t open = kNone;  // index of the bucket still accepting small posts
  for (const size_t i : order) {
    const PostedBroadcast& p = posts[i];
    if (p.bytes == 0) continue;
    if (p.bytes >= bucket_bytes) {
      open = kNone;
      plan.buckets.push_back({p.comm, p.root, false, p.bytes, 0, {{i, 0, p.bytes}}});
      continue;
    }
    if (open != kNone) {
      Bucket& b = plan.buckets[open];
      const size_t offset = align_up(b.bytes, kNcclBucketItemAlign);
      if (b.comm == p.comm && b.root == p.root && offset + p.bytes <= bucket_bytes) {
        b.items.push_back({i, offset, p.bytes});
        b.bytes = offset + p.bytes;
        continue;
      }
    }
    open = plan.buckets.size();
    plan.buckets.push_back({p.comm, p.root, false, p.bytes, 0, {{i, 0, p.bytes}}});
  }
  for (Bucket& b : plan.buckets) {
    if (b.items.size() < 2) continue;
    b.packed = true;
    b.staging_offset = align_up(plan.staging_bytes, kNcclStagingAlign);
    plan.staging_bytes = b.staging_offset + b.bytes;
  }
  return plan;
}

// ---- the broadcaster -------------------------------------------------------------------------

// Makes the bytes of an NCCL unique id (ncclGetUniqueId): one rank makes it, the coordinator hands
// it to every rank of the NCCL world. Needs no GPU.
Result<std::vector<uint8_t>> makeNcclUniqueId();

struct NcclBroadcasterOptions {
  int device = 0;  // CUDA device of this rank; one NCCL rank per device (NCCL refuses two)
  // Bound on each collective step (init, each split, each launch's hand-off to the stream) and on
  // finalizing at destruction.
  std::chrono::milliseconds timeout{60000};
  size_t bucket_bytes = size_t{1} << 20;  // posts smaller than this are packed together
};

// What the last launch() issued on this rank.
struct NcclLaunchStats {
  size_t posts = 0;           // posts with bytes > 0
  size_t broadcasts = 0;      // ncclBroadcast calls
  size_t packed_buckets = 0;  // broadcasts that went through the staging buffer
  size_t packed_posts = 0;    // posts inside those
  size_t bytes = 0;           // payload bytes of all posts
  size_t staging_bytes = 0;   // staging buffer bytes the launch used
};

class NcclBroadcaster {
 public:
  // Collective over all `nccl_world` ranks: ncclCommInitRankConfig on the world (`unique_id`),
  // then one ncclCommSplit per entry of `all_comms`, in order (every rank calls every split;
  // members pass the entry's index as color and their world rank as key, so a communicator's
  // ranks are its sorted world_ranks; others pass NCCL_SPLIT_NOCOLOR). all_comms[i].world_ranks
  // are NCCL world ranks, sorted and distinct; ids are distinct; every rank passes the same list.
  // Each step is bounded by options.timeout: on TIMEOUT (a rank never came) or an error every
  // communicator made so far is aborted. Leaves the calling thread's current device unchanged.
  static Result<std::unique_ptr<NcclBroadcaster>> create(
      const std::vector<uint8_t>& unique_id, int nccl_rank, int nccl_world,
      const std::vector<BroadcastComm>& all_comms, const NcclBroadcasterOptions& options);
  // Finalizes and destroys every communicator (bounded by options.timeout; aborts on a failure or
  // a timeout, and always after an earlier failure), then frees the staging buffer.
  ~NcclBroadcaster();
  NcclBroadcaster(const NcclBroadcaster&) = delete;
  NcclBroadcaster& operator=(const NcclBroadcaster&) = delete;

  // Queues a broadcast of `bytes` at `data` (device memory of options.device, or managed memory)
  // on the communicator whose BroadcastComm::id is `comm_id`, from NCCL world rank `root` (the
  // root's bytes are read, the others' overwritten). This rank and `root` must be members. Nothing
  // moves until launch(); `data` must stay valid until wait() returns.
  Status post(int32_t comm_id, int32_t root, void* data, size_t bytes);
  // Issues everything queued on `stream` (a stream of options.device) and clears the queue: the
  // root packs small posts into the staging buffer, then for each communicator in create() order
  // one ncclGroupStart/End holds its broadcasts (NCCL aggregates them), and the receivers unpack.
  // Returns once the work is on the stream (not done). A launch while an earlier one has not been
  // waited for is INVALID_USAGE. A launch with nothing queued does nothing.
  Status launch(cudaStream_t stream);
  // Waits until the launched work is done: polls `stream` (the launch's stream; every other item
  // on it is waited for too) and the communicators' asynchronous errors. TIMEOUT or an error
  // aborts every communicator.
  Status wait(cudaStream_t stream, std::chrono::milliseconds timeout);
  // Aborts every communicator now (in-flight broadcasts end); the instance is unusable afterwards.
  // For a peer that gave up: its partners abort too instead of waiting for their timeouts.
  void abort();

  bool aborted() const { return aborted_; }
  int rank() const { return rank_; }
  int device() const { return device_; }
  const NcclLaunchStats& lastLaunchStats() const { return stats_; }

 private:
  NcclBroadcaster() = default;
  struct Comm {
    int32_t id = 0;
    std::vector<int32_t> world_ranks;  // sorted: the NCCL rank of world_ranks[i] is i
    ncclComm* handle = nullptr;        // null where this rank is not a member
  };
  Status failAndAbort(Status status);
  Status ensureStaging(size_t bytes);

  int rank_ = -1;
  int world_ = 0;
  int device_ = 0;
  NcclBroadcasterOptions options_;
  ncclComm* world_comm_ = nullptr;
  std::vector<Comm> comms_;  // create()'s order
  std::unordered_map<int32_t, size_t> comm_index_;
  std::vector<PostedBroadcast> queue_;
  void* staging_ = nullptr;  // device memory
  size_t staging_capacity_ = 0;
  bool in_flight_ = false;
  cudaStream_t launched_stream_ = nullptr;
  std::vector<size_t> launched_comms_;  // indices into comms_ of the last launch
  bool aborted_ = false;
  NcclLaunchStats stats_;
};

}  // namespace wsync
