#include "runtime/trainer_context.h"

#include <cstdlib>
#include <cstring>

#include "runtime/host_convert.h"
#include "transport/ucx/ucx_transport.h"

namespace wsync {

// ---- PublishRequest ------------------------------------------------------------------------
Status PublishRequest::test() const {
  std::lock_guard lock(mu_);
  if (!done_) return {WSYNC_IN_PROGRESS, "version " + std::to_string(version_) + " is in flight"};
  return status_;
}

Status PublishRequest::wait(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, timeout, [this] { return done_; })) {
    return timeoutError("version " + std::to_string(version_) + " not delivered within " +
                        std::to_string(timeout.count()) + " ms (still in flight)");
  }
  return status_;
}

void PublishRequest::complete(const Status& status) {
  {
    std::lock_guard lock(mu_);
    if (done_) return;
    done_ = true;
    status_ = status;
  }
  cv_.notify_all();
}

// ---- TrainerContext: commit ------------------------------------------------------------------
TrainerContext::~TrainerContext() {
  stopPublisher();
}

Status TrainerContext::prepareRegistration(RegisterMsg& /*msg*/) {
  WSYNC_ASSIGN_OR_RETURN(transport_, createUcxTransport());
  if (const char* delay = std::getenv("WSYNC_DEBUG_SEND_DELAY_MS")) debug_send_delay_ms_ = std::atoi(delay);
  size_t total = 0;
  for (const LocalBuffer& b : registration_.buffers) {
    snapshot_offsets_.push_back(total);
    total += static_cast<size_t>(b.num_elements) * dtypeSize(b.dtype);
  }
  if (options_.snapshot) {
    snapshot_.resize(std::max<size_t>(total, 1));
    WSYNC_ASSIGN_OR_RETURN(auto reg, transport_->registerSource(snapshot_.data(), snapshot_.size()));
    source_registrations_.push_back(std::move(reg));
  } else {
    for (size_t i = 0; i < registration_.buffers.size(); ++i) {
      const LocalBuffer& b = registration_.buffers[i];
      const size_t bytes = static_cast<size_t>(b.num_elements) * dtypeSize(b.dtype);
      if (bytes == 0) continue;
      WSYNC_ASSIGN_OR_RETURN(auto reg, transport_->registerSource(buffer_data_[i], bytes));
      source_registrations_.push_back(std::move(reg));
    }
  }
  return Status::ok();
}

Status TrainerContext::applyPlan(RankPlan plan, PlanAssignmentMsg assignment) {
  plan_ = std::move(plan);
  replica_of_rollout_ = std::move(assignment.replica_of_rollout);
  group_comm_ = std::move(assignment.group_comm);
  if (group_comm_.size() != plan_.groups.size()) {
    return protocolError("plan assignment: group communicators do not match the groups");
  }
  // Conversion staging: every converting write and group gets its own range.
  size_t staging = 0;
  for (const WriteOp& op : plan_.writes) {
    write_staging_offsets_.push_back(staging);
    if (op.converts()) {
      if (!hostCanConvert(op.src_dtype, op.dst_dtype)) {
        return {WSYNC_ERR_UNSUPPORTED, "tensor '" + plan_.tensors[static_cast<size_t>(op.tensor)].name +
                                           "': host memory cannot convert " + dtypeName(op.src_dtype) +
                                           " to " + dtypeName(op.dst_dtype)};
      }
      staging += static_cast<size_t>(op.region.numElements()) * dtypeSize(op.dst_dtype);
    }
  }
  for (const BroadcastGroup& g : plan_.groups) {
    group_staging_offsets_.push_back(staging);
    if (g.src_dtype != g.dst_dtype) {
      if (!hostCanConvert(g.src_dtype, g.dst_dtype)) {
        return {WSYNC_ERR_UNSUPPORTED, "tensor '" + plan_.tensors[static_cast<size_t>(g.tensor)].name +
                                           "': host memory cannot convert " + dtypeName(g.src_dtype) +
                                           " to " + dtypeName(g.dst_dtype)};
      }
      staging += static_cast<size_t>(g.num_elements) * dtypeSize(g.dst_dtype);
    }
  }
  if (staging > 0) {
    convert_staging_.resize(staging);
    WSYNC_ASSIGN_OR_RETURN(auto reg, transport_->registerSource(convert_staging_.data(), staging));
    source_registrations_.push_back(std::move(reg));
  }
  // Peers: connect once, attach every slot once.
  peer_of_rollout_.assign(static_cast<size_t>(numRollouts()), -1);
  for (const PeerInfo& p : assignment.peers) {
    if (p.rank < 0 || p.rank >= numRollouts()) return protocolError("plan assignment names an unknown rollout");
    WSYNC_RETURN_IF_ERROR(transport_->connect(p.rank, p.transport_address));
    Peer peer;
    for (const auto& descriptor : p.slot_descriptors) {
      WSYNC_ASSIGN_OR_RETURN(RemoteMemoryId id, transport_->attach(p.rank, descriptor));
      peer.slot_memory.push_back(id);
    }
    peer.buffer_byte_offsets = p.buffer_byte_offsets;
    peer_of_rollout_[static_cast<size_t>(p.rank)] = static_cast<int32_t>(peers_.size());
    peers_.push_back(std::move(peer));
  }
  for (const WriteOp& op : plan_.writes) {
    if (op.dst_rank < 0 || op.dst_rank >= numRollouts() || peer_of_rollout_[static_cast<size_t>(op.dst_rank)] < 0) {
      return protocolError("a write targets rollout " + std::to_string(op.dst_rank) + " with no peer information");
    }
  }
  if (!assignment.comms.empty()) {
    WSYNC_ASSIGN_OR_RETURN(broadcaster_, HostBroadcaster::create(assignment.comms, job_.world_rank));
  }
  return Status::ok();
}

Status TrainerContext::startRunning() {
  publisher_ = std::thread([this] { publisherLoop(); });
  return Status::ok();
}

// ---- publish ---------------------------------------------------------------------------------
Result<std::shared_ptr<PublishRequest>> TrainerContext::publish(uint64_t version) {
  if (!committed()) return invalidUsage("publish before commit");
  if (failedOrAborted()) return failure();
  std::unique_lock lock(queue_mu_);
  if (version == 0 || version <= last_version_) {
    return invalidUsage("version " + std::to_string(version) + " is not greater than the last published version " +
                        std::to_string(last_version_) + " (versions start at 1 and increase)");
  }
  if (options_.snapshot) {
    // The staging copy may be overwritten only once the previous version left it.
    const bool free = queue_cv_.wait_for(lock, options_.timeout, [this] {
      return (queue_.empty() && !transfer_busy_) || failedOrAborted();
    });
    if (failedOrAborted()) return failure();
    if (!free) {
      return timeoutError("publish " + std::to_string(version) + ": the previous version still occupies the "
                          "snapshot buffer after " + std::to_string(options_.timeout.count()) + " ms");
    }
    for (size_t i = 0; i < registration_.buffers.size(); ++i) {
      const LocalBuffer& b = registration_.buffers[i];
      std::memcpy(snapshot_.data() + snapshot_offsets_[i], buffer_data_[i],
                  static_cast<size_t>(b.num_elements) * dtypeSize(b.dtype));
    }
    transfer_busy_ = true;
  }
  auto request = std::make_shared<PublishRequest>(version);
  last_version_ = version;
  queue_.push_back(request);
  queue_cv_.notify_all();
  return request;
}

void TrainerContext::publisherLoop() {
  while (true) {
    std::shared_ptr<PublishRequest> request;
    {
      std::unique_lock lock(queue_mu_);
      queue_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      request = queue_.front();
    }
    Status s = failedOrAborted() ? failure() : publishOne(request->version());
    if (!s.isOk()) setFailed(s);
    {
      std::lock_guard lock(queue_mu_);
      queue_.pop_front();
      transfer_busy_ = false;
    }
    queue_cv_.notify_all();
    request->complete(s);
  }
}

Status TrainerContext::publishOne(uint64_t version) {
  const std::string what = "version " + std::to_string(version);
  WSYNC_RETURN_IF_ERROR(sendMessage(MessageType::kPublish, encode(VersionMsg{version})));
  WSYNC_ASSIGN_OR_RETURN(Frame go_frame, expectFrame(*job_.channel, MessageType::kGo, options_.timeout));
  GoMsg go;
  WSYNC_RETURN_IF_ERROR(decode(go_frame.payload, go));
  if (go.version != version) {
    return invalidUsage("the coordinator started version " + std::to_string(go.version) + " while this trainer publishes " +
                        what + ": every trainer must publish the same versions");
  }
  if (debug_send_delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(debug_send_delay_ms_));
  Status s = transfer(go);
  if (!s.isOk()) {
    s = s.withContext(what);
    (void)sendError(s.withContext("trainer " + std::to_string(rank())));
    return s;
  }
  {
    std::lock_guard lock(queue_mu_);
    transfer_busy_ = false;  // the snapshot may be overwritten by the next publish
  }
  queue_cv_.notify_all();
  WSYNC_RETURN_IF_ERROR(sendMessage(MessageType::kSent, encode(VersionMsg{version})));
  WSYNC_ASSIGN_OR_RETURN(Frame delivered, expectFrame(*job_.channel, MessageType::kDelivered, options_.timeout));
  VersionMsg d;
  WSYNC_RETURN_IF_ERROR(decode(delivered.payload, d));
  if (d.version != version) return protocolError("delivered " + std::to_string(d.version) + " while waiting for " + what);
  return Status::ok();
}

const uint8_t* TrainerContext::sourceOf(int32_t buffer) const {
  const auto b = static_cast<size_t>(buffer);
  if (options_.snapshot) return snapshot_.data() + snapshot_offsets_[b];
  return static_cast<const uint8_t*>(buffer_data_[b]);
}

namespace {
// The slot `rollout`'s replica writes this version into; -1 when the replica skips it.
int32_t slotFor(const GoMsg& go, const std::vector<int32_t>& replica_of_rollout, int32_t rollout) {
  const int32_t replica = replica_of_rollout[static_cast<size_t>(rollout)];
  if (replica < 0 || static_cast<size_t>(replica) >= go.slot_of_replica.size()) return -1;
  return go.slot_of_replica[static_cast<size_t>(replica)];
}
}  // namespace

Status TrainerContext::transfer(const GoMsg& go) {
  for (size_t i = 0; i < plan_.groups.size(); ++i) {
    const BroadcastGroup& g = plan_.groups[i];
    if (g.replica < 0 || static_cast<size_t>(g.replica) >= go.slot_of_replica.size() ||
        go.slot_of_replica[static_cast<size_t>(g.replica)] < 0) {
      continue;  // that replica skips this version
    }
    const uint8_t* src = sourceOf(g.src.buffer) + static_cast<size_t>(g.src.offset) * dtypeSize(g.src_dtype);
    uint8_t* data = const_cast<uint8_t*>(src);  // MPI_Ibcast takes void*; the root only reads it
    if (g.src_dtype != g.dst_dtype) {
      data = convert_staging_.data() + group_staging_offsets_[i];
      WSYNC_RETURN_IF_ERROR(convertHost(src, g.src_dtype, data, g.dst_dtype, g.num_elements));
    }
    WSYNC_RETURN_IF_ERROR(broadcaster_->post(group_comm_[i], job_.world_rank, data,
                                             static_cast<size_t>(g.num_elements) * dtypeSize(g.dst_dtype)));
  }
  for (size_t i = 0; i < plan_.writes.size(); ++i) {
    const WriteOp& op = plan_.writes[i];
    const int32_t slot = slotFor(go, replica_of_rollout_, op.dst_rank);
    if (slot < 0) continue;
    const Peer& peer = peers_[static_cast<size_t>(peer_of_rollout_[static_cast<size_t>(op.dst_rank)])];
    if (static_cast<size_t>(slot) >= peer.slot_memory.size()) {
      return protocolError("slot " + std::to_string(slot) + " of rollout " + std::to_string(op.dst_rank) + " is unknown");
    }
    const RemoteMemoryId remote = peer.slot_memory[static_cast<size_t>(slot)];
    const Region& r = op.region;
    const size_t ssz = dtypeSize(op.src_dtype);
    const size_t dsz = dtypeSize(op.dst_dtype);
    const uint64_t dst_base = peer.buffer_byte_offsets[static_cast<size_t>(op.dst_buffer)] +
                              static_cast<uint64_t>(r.dst_offset) * dsz;
    const uint8_t* src_base = sourceOf(op.src_buffer) + static_cast<size_t>(r.src_offset) * ssz;
    const size_t row_bytes = static_cast<size_t>(r.count[0]) * dsz;
    for (int64_t plane = 0; plane < r.count[2]; ++plane) {
      const uint8_t* src = src_base + static_cast<size_t>(plane * r.src_stride[1]) * ssz;
      size_t src_pitch = static_cast<size_t>(r.src_stride[0]) * ssz;
      if (op.converts()) {
        // Convert this plane's rows into contiguous staging, then send from there.
        uint8_t* staged = convert_staging_.data() + write_staging_offsets_[i] +
                          static_cast<size_t>(plane * r.count[1]) * row_bytes;
        for (int64_t row = 0; row < r.count[1]; ++row) {
          WSYNC_RETURN_IF_ERROR(convertHost(src + static_cast<size_t>(row) * src_pitch, op.src_dtype,
                                            staged + static_cast<size_t>(row) * row_bytes, op.dst_dtype,
                                            r.count[0]));
        }
        src = staged;
        src_pitch = row_bytes;
      }
      const uint64_t dst = dst_base + static_cast<uint64_t>(plane * r.dst_stride[1]) * dsz;
      const uint64_t dst_pitch = static_cast<uint64_t>(r.dst_stride[0]) * dsz;
      WSYNC_RETURN_IF_ERROR(transport_->write2d(remote, dst, r.count[1] > 1 ? dst_pitch : row_bytes, src,
                                                r.count[1] > 1 ? src_pitch : row_bytes, row_bytes,
                                                static_cast<size_t>(r.count[1])));
    }
  }
  WSYNC_RETURN_IF_ERROR(transport_->flush(options_.timeout));
  if (broadcaster_) WSYNC_RETURN_IF_ERROR(broadcaster_->waitAll(options_.timeout));
  return Status::ok();
}

// ---- shutdown --------------------------------------------------------------------------------
void TrainerContext::stopPublisher() {
  {
    std::lock_guard lock(queue_mu_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  if (publisher_.joinable()) publisher_.join();
}

void TrainerContext::abort() {
  Context::abort();
  queue_cv_.notify_all();
}

Status TrainerContext::finalize() {
  // In-flight publishes finish first (each bounded by the timeout).
  {
    std::unique_lock lock(queue_mu_);
    queue_cv_.wait_for(lock, options_.timeout, [this] { return queue_.empty() || failedOrAborted(); });
  }
  stopPublisher();
  return Context::finalize();
}

}  // namespace wsync
