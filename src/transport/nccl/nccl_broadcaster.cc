#include "transport/nccl/nccl_broadcaster.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>
#include <string>
#include <thread>

namespace wsync {
namespace {

using Clock = std::chrono::steady_clock;

std::string ncclText(ncclResult_t r) {
  std::string s = ncclGetErrorString(r);
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && last[0] != '\0') s += " (last NCCL error: " + std::string(last) + ")";
  return s;
}

std::string cudaText(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

Status ncclFailure(const std::string& what, ncclResult_t r) {
  const std::string m = what + ": " + ncclText(r);
  return r == ncclRemoteError ? remoteError(m) : systemError(m);
}

std::string ranksText(const std::vector<int32_t>& ranks) {
  std::string s = "{";
  for (size_t i = 0; i < ranks.size(); ++i)
    s += (i ? "," : "") + std::to_string(ranks[i]);
  return s + "}";
}

// Sleeps a little between polls: spins with yields for the first millisecond (launch hand-offs
// are short), then 100 us naps (waits for whole transfers).
class Backoff {
 public:
  void pause() {
    if (Clock::now() - start_ < std::chrono::milliseconds(1)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

 private:
  Clock::time_point start_ = Clock::now();
};

// Polls a non-blocking communicator until it leaves ncclInProgress or `timeout` passes. Returns
// its final state; ncclInProgress means the deadline passed.
ncclResult_t pollComm(ncclComm_t comm, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  Backoff backoff;
  for (;;) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) return r;
    if (state != ncclInProgress) return state;
    if (Clock::now() >= deadline) return ncclInProgress;
    backoff.pause();
  }
}

// Sets the current device for a scope and puts the caller's back.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    result_ = cudaSetDevice(device);
  }
  ~DeviceGuard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  cudaError_t result() const { return result_; }

 private:
  int previous_ = -1;
  cudaError_t result_ = cudaSuccess;
};

ncclConfig_t nonBlockingConfig() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

Status validateComms(const std::vector<BroadcastComm>& comms, int nccl_world) {
  std::unordered_map<int32_t, size_t> seen;
  for (size_t i = 0; i < comms.size(); ++i) {
    const BroadcastComm& c = comms[i];
    const std::string name = "broadcast communicator " + std::to_string(c.id) + " (entry " +
                             std::to_string(i) + ", NCCL world ranks " + ranksText(c.world_ranks) +
                             ")";
    if (!seen.emplace(c.id, i).second) {
      return invalidArgument(name + " repeats the id of entry " + std::to_string(seen[c.id]));
    }
    if (c.world_ranks.empty()) return invalidArgument(name + " has no members");
    for (size_t k = 0; k < c.world_ranks.size(); ++k) {
      const int32_t r = c.world_ranks[k];
      if (r < 0 || r >= nccl_world) {
        return invalidArgument(name + " names rank " + std::to_string(r) +
                               " outside the NCCL world of " + std::to_string(nccl_world));
      }
      if (k > 0 && c.world_ranks[k - 1] >= r) {
        return invalidArgument(name + ": world ranks must be sorted and distinct");
      }
    }
  }
  return Status::ok();
}

}  // namespace

Result<std::vector<uint8_t>> makeNcclUniqueId() {
  ncclUniqueId id;
  const ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) return ncclFailure("ncclGetUniqueId", r);
  std::vector<uint8_t> bytes(sizeof(id.internal));
  std::memcpy(bytes.data(), id.internal, bytes.size());
  return bytes;
}

Result<std::unique_ptr<NcclBroadcaster>> NcclBroadcaster::create(
    const std::vector<uint8_t>& unique_id, int nccl_rank, int nccl_world,
    const std::vector<BroadcastComm>& all_comms, const NcclBroadcasterOptions& options) {
  // Argument checks first: every rank gets the same arguments, so they fail alike.
  if (unique_id.size() != NCCL_UNIQUE_ID_BYTES) {
    return invalidArgument("NCCL unique id has " + std::to_string(unique_id.size()) +
                           " bytes, expected " + std::to_string(NCCL_UNIQUE_ID_BYTES));
  }
  if (nccl_world < 1 || nccl_rank < 0 || nccl_rank >= nccl_world) {
    return invalidArgument("NCCL rank " + std::to_string(nccl_rank) + " is outside a world of " +
                           std::to_string(nccl_world) + " ranks");
  }
  if (options.timeout.count() <= 0) {
    return invalidArgument("NCCL broadcaster timeout must be positive (got " +
                           std::to_string(options.timeout.count()) + " ms)");
  }
  WSYNC_RETURN_IF_ERROR(validateComms(all_comms, nccl_world));

  const std::string who = "NCCL rank " + std::to_string(nccl_rank) + " of " +
                          std::to_string(nccl_world) + " (CUDA device " +
                          std::to_string(options.device) + ")";
  int device_count = 0;
  const cudaError_t count_err = cudaGetDeviceCount(&device_count);
  if (count_err != cudaSuccess) {
    return systemError(who + ": no usable CUDA device (cudaGetDeviceCount: " + cudaText(count_err) +
                       ")");
  }
  if (options.device < 0 || options.device >= device_count) {
    return invalidArgument(who + ": CUDA device " + std::to_string(options.device) +
                           " does not exist (" + std::to_string(device_count) + " visible)");
  }
  DeviceGuard guard(options.device);
  if (guard.result() != cudaSuccess) {
    return systemError(who + ": cudaSetDevice: " + cudaText(guard.result()));
  }

  std::unique_ptr<NcclBroadcaster> b(new NcclBroadcaster());
  b->rank_ = nccl_rank;
  b->world_ = nccl_world;
  b->device_ = options.device;
  b->options_ = options;
  const auto timeout_text = std::to_string(options.timeout.count()) + " ms";

  // The world communicator. On failure `b` is aborted and destroyed with what it holds.
  ncclUniqueId id;
  std::memcpy(id.internal, unique_id.data(), NCCL_UNIQUE_ID_BYTES);
  ncclConfig_t config = nonBlockingConfig();
  ncclComm_t world = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&world, nccl_world, id, nccl_rank, &config);
  b->world_comm_ = world;
  if (r == ncclSuccess || r == ncclInProgress) {
    r = world != nullptr ? pollComm(world, options.timeout) : ncclInternalError;
  }
  if (r == ncclInProgress) {
    return b->failAndAbort(
        timeoutError(who + ": NCCL world init did not complete within " + timeout_text +
                     " (did every rank of the world call create with the same unique id?)"));
  }
  if (r != ncclSuccess) return b->failAndAbort(ncclFailure(who + ": NCCL world init", r));

  // One split per communicator, in list order, on every rank. While a split runs the parent is
  // ncclInProgress; NCCL writes the child handle into `child` when the split ends.
  b->comms_.reserve(all_comms.size());
  for (size_t i = 0; i < all_comms.size(); ++i) {
    const BroadcastComm& c = all_comms[i];
    const bool member = std::binary_search(c.world_ranks.begin(), c.world_ranks.end(), nccl_rank);
    b->comms_.push_back({c.id, c.world_ranks, nullptr});
    b->comm_index_.emplace(c.id, i);
    const std::string what = who + ": ncclCommSplit for broadcast communicator " +
                             std::to_string(c.id) + " (NCCL world ranks " +
                             ranksText(c.world_ranks) + ")";
    ncclConfig_t child_config = nonBlockingConfig();
    ncclComm_t child = nullptr;
    r = ncclCommSplit(world, member ? static_cast<int>(i) : NCCL_SPLIT_NOCOLOR, nccl_rank, &child,
                      &child_config);
    if (r == ncclSuccess || r == ncclInProgress) r = pollComm(world, options.timeout);
    if (r == ncclInProgress) {
      // Abort joins the split's thread, which may still write `child`: abort before reading it.
      b->abort();
      if (child != nullptr) ncclCommAbort(child);
      return timeoutError(what + " did not complete within " + timeout_text);
    }
    b->comms_.back().handle = child;
    if (r != ncclSuccess) return b->failAndAbort(ncclFailure(what, r));
    if (member) {
      int count = 0;
      int my_rank = -1;
      if (child == nullptr || ncclCommCount(child, &count) != ncclSuccess ||
          ncclCommUserRank(child, &my_rank) != ncclSuccess ||
          count != static_cast<int>(c.world_ranks.size()) ||
          c.world_ranks[static_cast<size_t>(my_rank)] != nccl_rank) {
        return b->failAndAbort(internalError(what + ": the new communicator has " +
                                             std::to_string(count) + " ranks and this rank is " +
                                             std::to_string(my_rank) + " in it"));
      }
    } else if (child != nullptr) {
      return b->failAndAbort(internalError(what + ": NCCL made a communicator for a non-member"));
    }
  }
  return b;
}

NcclBroadcaster::~NcclBroadcaster() {
  DeviceGuard guard(device_);
  if (!aborted_ && in_flight_) {
    // Never waited for: let it finish within the bound, else abort.
    if (!wait(launched_stream_, options_.timeout).isOk()) aborted_ = true;
  }
  if (!aborted_) {
    // Finalize flushes each communicator's work; then destroy frees it locally.
    std::vector<ncclComm_t> all;
    for (Comm& c : comms_) {
      if (c.handle != nullptr) all.push_back(c.handle);
    }
    if (world_comm_ != nullptr) all.push_back(world_comm_);
    bool ok = true;
    for (ncclComm_t comm : all) {
      ncclResult_t r = ncclCommFinalize(comm);
      if (r == ncclSuccess || r == ncclInProgress) r = pollComm(comm, options_.timeout);
      if (r != ncclSuccess) {
        ok = false;
        break;
      }
    }
    if (ok) {
      for (ncclComm_t comm : all)
        ncclCommDestroy(comm);
      for (Comm& c : comms_)
        c.handle = nullptr;
      world_comm_ = nullptr;
    }
  }
  abort();  // whatever is left (after a failure, or a finalize that failed)
  if (staging_ != nullptr) cudaFree(staging_);
}

void NcclBroadcaster::abort() {
  aborted_ = true;
  // Children first, then the world they were split from.
  for (Comm& c : comms_) {
    if (c.handle != nullptr) ncclCommAbort(c.handle);
    c.handle = nullptr;
  }
  if (world_comm_ != nullptr) ncclCommAbort(world_comm_);
  world_comm_ = nullptr;
  in_flight_ = false;
  queue_.clear();
}

Status NcclBroadcaster::failAndAbort(Status status) {
  abort();
  return status;
}

Status NcclBroadcaster::post(int32_t comm_id, int32_t root, void* data, size_t bytes) {
  const std::string what = "NCCL broadcast of " + std::to_string(bytes) +
                           " bytes on communicator " + std::to_string(comm_id) + " from rank " +
                           std::to_string(root) + " (this NCCL rank " + std::to_string(rank_) + ")";
  if (aborted_) return invalidUsage(what + ": the broadcaster was aborted after a failure");
  const auto it = comm_index_.find(comm_id);
  if (it == comm_index_.end()) return invalidArgument(what + ": no such communicator");
  const Comm& c = comms_[it->second];
  if (c.handle == nullptr) {
    return invalidUsage(what + ": this rank is not a member (members " + ranksText(c.world_ranks) +
                        ")");
  }
  if (!std::binary_search(c.world_ranks.begin(), c.world_ranks.end(), root)) {
    return invalidArgument(what + ": the root is not a member (members " +
                           ranksText(c.world_ranks) + ")");
  }
  if (bytes > 0) {
    if (data == nullptr) return invalidArgument(what + ": null data");
    cudaPointerAttributes attr{};
    const cudaError_t e = cudaPointerGetAttributes(&attr, data);
    if (e != cudaSuccess) {
      cudaGetLastError();  // not sticky: clear it
      return invalidArgument(what + ": cannot inspect the pointer (" + cudaText(e) + ")");
    }
    const bool device_ok = attr.type == cudaMemoryTypeManaged ||
                           (attr.type == cudaMemoryTypeDevice && attr.device == device_);
    if (!device_ok) {
      return invalidArgument(what + ": data must be device memory of CUDA device " +
                             std::to_string(device_) + " (memory type " +
                             std::to_string(static_cast<int>(attr.type)) + ", device " +
                             std::to_string(attr.device) + ")");
    }
  }
  queue_.push_back({static_cast<int32_t>(it->second), root, data, bytes});
  return Status::ok();
}

Status NcclBroadcaster::ensureStaging(size_t bytes) {
  if (bytes <= staging_capacity_) return Status::ok();
  // Only called with nothing in flight, so the old buffer is idle.
  if (staging_ != nullptr) cudaFree(staging_);
  staging_ = nullptr;
  staging_capacity_ = 0;
  const cudaError_t e = cudaMalloc(&staging_, bytes);
  if (e != cudaSuccess) {
    staging_ = nullptr;
    return systemError("NCCL broadcast staging buffer of " + std::to_string(bytes) +
                       " bytes on CUDA device " + std::to_string(device_) + ": " + cudaText(e));
  }
  staging_capacity_ = bytes;
  return Status::ok();
}

Status NcclBroadcaster::launch(cudaStream_t stream) {
  const std::string who =
      "NCCL rank " + std::to_string(rank_) + " (CUDA device " + std::to_string(device_) + ")";
  if (aborted_) return invalidUsage(who + ": launch after the broadcaster was aborted");
  if (in_flight_) return invalidUsage(who + ": launch before the previous launch was waited for");
  std::vector<PostedBroadcast> posts;
  posts.swap(queue_);
  stats_ = NcclLaunchStats{};
  const BucketPlan plan = planBuckets(posts, options_.bucket_bytes);
  if (plan.buckets.empty()) return Status::ok();

  DeviceGuard guard(device_);
  if (guard.result() != cudaSuccess) {
    return failAndAbort(systemError(who + ": cudaSetDevice: " + cudaText(guard.result())));
  }
  // From here on a failure aborts: the members already expect these broadcasts.
  const Status staged = ensureStaging(plan.staging_bytes);
  if (!staged.isOk()) return failAndAbort(staged.withContext(who));
  auto* staging = static_cast<char*>(staging_);

  // The roots pack first: every packed bucket's bytes are in the staging buffer before any
  // broadcast is issued on the stream.
  for (const Bucket& b : plan.buckets) {
    if (!b.packed || b.root != rank_) continue;
    for (const BucketItem& item : b.items) {
      const cudaError_t e =
          cudaMemcpyAsync(staging + b.staging_offset + item.offset, posts[item.post].data,
                          item.bytes, cudaMemcpyDeviceToDevice, stream);
      if (e != cudaSuccess) {
        return failAndAbort(systemError(who + ": packing a broadcast of " +
                                        std::to_string(item.bytes) + " bytes on communicator " +
                                        std::to_string(comms_[b.comm].id) + ": " + cudaText(e)));
      }
    }
  }

  in_flight_ = true;
  launched_stream_ = stream;
  launched_comms_.clear();
  for (size_t begin = 0; begin < plan.buckets.size();) {
    const int32_t ci = plan.buckets[begin].comm;
    size_t end = begin;
    while (end < plan.buckets.size() && plan.buckets[end].comm == ci)
      ++end;
    const Comm& c = comms_[static_cast<size_t>(ci)];
    const std::string what = who + ": broadcasts on communicator " + std::to_string(c.id) +
                             " (NCCL world ranks " + ranksText(c.world_ranks) + ")";
    launched_comms_.push_back(static_cast<size_t>(ci));

    // One group per communicator, and the stream gets it before the next communicator's group:
    // every rank enqueues its communicators' work in the same relative order.
    ncclResult_t r = ncclGroupStart();
    if (r != ncclSuccess) return failAndAbort(ncclFailure(what + ": ncclGroupStart", r));
    ncclResult_t first_error = ncclSuccess;
    for (size_t k = begin; k < end; ++k) {
      const Bucket& b = plan.buckets[k];
      void* buffer = b.packed ? staging + b.staging_offset : posts[b.items[0].post].data;
      const auto root = std::lower_bound(c.world_ranks.begin(), c.world_ranks.end(), b.root) -
                        c.world_ranks.begin();
      r = ncclBroadcast(buffer, buffer, b.bytes, ncclUint8, static_cast<int>(root), c.handle,
                        stream);
      if (r != ncclSuccess && first_error == ncclSuccess) first_error = r;
      ++stats_.broadcasts;
      if (b.packed) {
        ++stats_.packed_buckets;
        stats_.packed_posts += b.items.size();
      }
    }
    r = ncclGroupEnd();
    if (r == ncclSuccess || r == ncclInProgress) r = pollComm(c.handle, options_.timeout);
    if (r == ncclSuccess) r = first_error;
    if (r == ncclInProgress) {
      return failAndAbort(
          timeoutError(what + " were not handed to the stream within " +
                       std::to_string(options_.timeout.count()) +
                       " ms (NCCL connects peers on first use: did every member launch them?)"));
    }
    if (r != ncclSuccess) return failAndAbort(ncclFailure(what, r));

    // Receivers unpack after the broadcast, in stream order.
    for (size_t k = begin; k < end; ++k) {
      const Bucket& b = plan.buckets[k];
      if (!b.packed || b.root == rank_) continue;
      for (const BucketItem& item : b.items) {
        const cudaError_t e =
            cudaMemcpyAsync(posts[item.post].data, staging + b.staging_offset + item.offset,
                            item.bytes, cudaMemcpyDeviceToDevice, stream);
        if (e != cudaSuccess) {
          return failAndAbort(systemError(what + ": unpacking " + std::to_string(item.bytes) +
                                          " bytes: " + cudaText(e)));
        }
      }
    }
    begin = end;
  }
  for (const PostedBroadcast& p : posts) {
    if (p.bytes == 0) continue;
    ++stats_.posts;
    stats_.bytes += p.bytes;
  }
  stats_.staging_bytes = plan.staging_bytes;
  return Status::ok();
}

Status NcclBroadcaster::wait(cudaStream_t stream, std::chrono::milliseconds timeout) {
  const std::string who =
      "NCCL rank " + std::to_string(rank_) + " (CUDA device " + std::to_string(device_) + ")";
  if (aborted_) return invalidUsage(who + ": wait after the broadcaster was aborted");
  if (!in_flight_) return Status::ok();
  if (stream != launched_stream_) {
    return invalidUsage(who + ": wait on a different stream than the launch's");
  }
  std::string comm_ids;
  for (size_t ci : launched_comms_) {
    comm_ids += (comm_ids.empty() ? "" : ",") + std::to_string(comms_[ci].id);
  }
  DeviceGuard guard(device_);
  const auto deadline = Clock::now() + timeout;
  Backoff backoff;
  for (;;) {
    const cudaError_t q = cudaStreamQuery(stream);
    if (q == cudaSuccess) break;
    if (q != cudaErrorNotReady) {
      return failAndAbort(systemError(who + ": the stream of broadcasts on communicators {" +
                                      comm_ids + "} failed: " + cudaText(q)));
    }
    for (size_t ci : launched_comms_) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t r = ncclCommGetAsyncError(comms_[ci].handle, &state);
      if (r != ncclSuccess) state = r;
      if (state != ncclSuccess && state != ncclInProgress) {
        return failAndAbort(ncclFailure(
            who + ": broadcasts on communicator " + std::to_string(comms_[ci].id), state));
      }
    }
    if (Clock::now() >= deadline) {
      return failAndAbort(timeoutError(
          who + ": broadcasts on communicators {" + comm_ids + "} did not complete within " +
          std::to_string(timeout.count()) + " ms; communicators aborted"));
    }
    backoff.pause();
  }
  in_flight_ = false;
  return Status::ok();
}

}  // namespace wsync
