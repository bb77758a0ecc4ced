#include "runtime/rollout_context.h"

#include <algorithm>
#include <cstring>

#include "runtime/landing_ranges.h"
#include "runtime/plan_names.h"
#include "transport/registry.h"

namespace wsync {
namespace {
constexpr uint64_t kBufferAlignment = 256;  // bytes; every buffer starts aligned in its slot
constexpr std::chrono::milliseconds kPollInterval{20};
// acquire(v) of a version being received: how often it looks whether v was given up.
constexpr std::chrono::milliseconds kReadyWaitSlice{5};
// Prepare: how long the receiver waits for a slot's readers before it serves other messages.
constexpr std::chrono::milliseconds kFirstDrainWait{2};
// While a staged slot is written or a slot drains: how often the receiver thread polls.
constexpr std::chrono::milliseconds kLandingPollInterval{1};
}  // namespace

RolloutContext::~RolloutContext() {
  membership_.stopHeartbeats();
  stopReceiver();
  if (cold_filler_) cold_filler_->stop();
}

Status RolloutContext::prepareRegistration(RegisterMsg& msg) {
  const MemoryKind memory = memoryKind();
  WSYNC_ASSIGN_OR_RETURN(const WriteBackend* backend,
                         targetBackendFor(memory, options_.settings.device_transport));
  WSYNC_ASSIGN_OR_RETURN(transport_, backend->create(transportSetup(-1)));
  msg.transport = backend->name;
  msg.transport_address = transport_->localAddress();
  for (const ScaledTensor& t : block_scalings_) {
    BlockScalingRecord record;
    static_cast<ScaledTensor&>(record) = t;
    msg.block_scalings.push_back(std::move(record));
  }
  if (memory == MemoryKind::kDevice) {
    WSYNC_ASSIGN_OR_RETURN(msg.device_id, deviceIdentity(options_.cuda_device));
    WSYNC_ASSIGN_OR_RETURN(flip_stream_, DeviceStream::create(options_.cuda_device));
  }
  WSYNC_ASSIGN_OR_RETURN(store_, SlotStore::create(options_.num_slots));
  uint64_t offset = 0;
  for (const LocalBuffer& b : registration_.buffers) {
    buffer_byte_offsets_.push_back(offset);
    offset += static_cast<uint64_t>(b.num_elements) * dtypeSize(b.dtype);
    offset = (offset + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
  }
  const size_t slot_bytes = std::max<uint64_t>(offset, kBufferAlignment);
  for (int32_t s = 0; s < options_.num_slots; ++s) {
    WSYNC_ASSIGN_OR_RETURN(auto slot_memory, transport_->allocateExposed(slot_bytes));
    if (memory == MemoryKind::kHost) {
      // Fault the pages in now, once, rather than in the first version written into the slot.
      std::memset(slot_memory->data(), 0, slot_memory->size());
    }
    msg.slot_descriptors.push_back(slot_memory->descriptor());
    slots_.push_back(std::move(slot_memory));
  }
  msg.buffer_byte_offsets = buffer_byte_offsets_;
  // Delta versions where the writes may cross a NIC (docs/delta.md): not over CUDA IPC.
  return delta_.exposeLanding(job_.welcome.delta && backend->crosses_nodes, *transport_, memory,
                              options_.cuda_device, slot_bytes, numTrainers(),
                              job_.welcome.delta_max_share_ppm, &msg.delta_landing);
}

Status RolloutContext::applyPlan(RankPlan plan, PlanAssignmentMsg assignment) {
  plan_ = std::move(plan);
  group_comm_ = std::move(assignment.group_comm);
  if (group_comm_.size() != plan_.groups.size()) {
    return protocolError("plan assignment: group communicators do not match the groups");
  }
  // Broadcast groups: collective with every member of the backend's world (members of no group
  // included, for NCCL). Device broadcasts run on their own stream while generation reads others.
  if (memoryKind() == MemoryKind::kDevice && !assignment.broadcast.backend.empty()) {
    WSYNC_ASSIGN_OR_RETURN(broadcast_stream_, DeviceStream::create(options_.cuda_device));
  }
  WSYNC_ASSIGN_OR_RETURN(broadcaster_, createBroadcaster(plan_, assignment));
  if (!slots_.empty() && slots_.front()->needsLanding())
    landing_ranges_ = landingRanges(plan_, buffer_byte_offsets_);
  WSYNC_RETURN_IF_ERROR(delta_.planParts(plan_, numTrainers(), job_.welcome.delta_max_share_ppm));
  checksums_.emplace(plan_, buffer_byte_offsets_, rank(), memoryKind(), options_.cuda_device);
  return Status::ok();
}

Status RolloutContext::startRunning() {
  ColdFiller::Source source{rank(), memoryKind(), &registration_.buffers, &buffer_byte_offsets_,
                            &slots_};
  ColdFiller::Settings settings{transportSetup(-1), options_.timeout,
                                options_.settings.debug_cold_fill_delay_ms,
                                options_.settings.debug_timing};
  cold_filler_ = std::make_unique<ColdFiller>(
      source, settings,
      [this](const ColdFillDoneMsg& done) {
        return sendMessage(MessageType::kColdFillDone, encode(done));
      },
      [this] { return stopping_.load() || failedOrAborted(); });
  receiver_ = std::thread([this] { receiverLoop(); });
  membership_.startHeartbeats(std::chrono::milliseconds(job_.welcome.heartbeat_interval_ms));
  return Status::ok();
}

// ---- readers ---------------------------------------------------------------------------------
Result<Lease> RolloutContext::acquire(uint64_t version) {
  if (!committed()) return invalidUsage("acquire before commit");
  Result<Lease> lease = store_->acquire(version);
  if (lease.isOk() || version == kNewestVersion || !beingWritten(version)) return lease;
  // This rank is receiving `version`: its replica may be ready already (a peer rank got Ready
  // first), so wait, bounded by the timeout, for this rank's Ready instead of failing.
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  while (beingWritten(version) && !failedOrAborted()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    const std::optional<uint64_t> newest = store_->newestReady();
    if (newest && *newest >= version) break;  // it cannot become ready any more
    (void)store_->waitForNewer(newest.value_or(0), std::min(left, kReadyWaitSlice));
    lease = store_->acquire(version);
    if (lease.isOk()) return lease;
  }
  return store_->acquire(version);
}

bool RolloutContext::beingWritten(uint64_t version) const {
  for (int i = 0; i < store_->numSlots(); ++i) {
    const std::optional<SlotInfo> info = store_->slotInfo(i);
    if (info && info->state == SlotState::kWriting && info->version == version) return true;
  }
  return false;
}

std::optional<uint64_t> RolloutContext::newestVersion() const {
  if (!store_) return std::nullopt;
  return store_->newestReady();
}

Result<uint64_t> RolloutContext::waitVersion(uint64_t newer_than,
                                             std::chrono::milliseconds timeout) {
  if (!committed()) return invalidUsage("wait_version before commit");
  // A failed job answers with its failure every time (never TIMEOUT, which means "wait again").
  if (failedOrAborted()) return failure();
  Result<uint64_t> v = store_->waitForNewer(newer_than, timeout);  // TRAINERS_DONE included
  if (!v.isOk() && failedOrAborted()) return failure();
  return v;
}

void* RolloutContext::bufferData(const Lease& lease, int32_t index) const {
  if (!lease.valid() || index < 0 || index >= numBuffers()) return nullptr;
  return static_cast<uint8_t*>(slots_[static_cast<size_t>(lease.slot())]->data()) +
         buffer_byte_offsets_[static_cast<size_t>(index)];
}

bool RolloutContext::hasLiveMemory() const {
  for (int32_t i = 0; i < numBuffers(); ++i) {
    if (buffer_data_[static_cast<size_t>(i)] != nullptr &&
        registration_.buffers[static_cast<size_t>(i)].num_elements > 0)
      return true;
  }
  return false;
}

Result<uint64_t> RolloutContext::copyFlip(uint64_t version, CudaStreamHandle stream) {
  WSYNC_ASSIGN_OR_RETURN(Lease lease, acquire(version));
  const bool device = memoryKind() == MemoryKind::kDevice;
  if (device) {
    WSYNC_RETURN_IF_ERROR(setDevice(options_.cuda_device));
    if (stream == nullptr) stream = flip_stream_.get();
  }
  for (int32_t i = 0; i < numBuffers(); ++i) {
    void* live = buffer_data_[static_cast<size_t>(i)];
    if (live == nullptr || registration_.buffers[static_cast<size_t>(i)].num_elements == 0)
      continue;
    const LocalBuffer& b = registration_.buffers[static_cast<size_t>(i)];
    const size_t bytes = static_cast<size_t>(b.num_elements) * dtypeSize(b.dtype);
    if (device) {
      WSYNC_RETURN_IF_ERROR(copyAsync(live, bufferData(lease, i), bytes, stream));
    } else {
      std::memcpy(live, bufferData(lease, i), bytes);
    }
  }
  // The lease holds the slot until the copies have read it.
  if (device) WSYNC_RETURN_IF_ERROR(streamSync(stream, options_.timeout));
  return lease.version();
}

// ---- receiver thread -------------------------------------------------------------------------
void RolloutContext::receiverLoop() {
  while (!stopping_) {
    Result<Frame> frame =
        job_.channel->recv(landing_slot_ >= 0 || draining_ ? kLandingPollInterval : kPollInterval);
    if (!frame.isOk()) {
      if (frame.status().code() == WSYNC_ERR_TIMEOUT) {
        transport_->progress();  // emulated writes into exposed memory need the target's progress
        if (draining_) {
          const Status drained = coordinatorVerdict(continueDraining(std::chrono::milliseconds(0)));
          if (!drained.isOk()) {
            setFailed(drained);
            (void)sendError(drained.withContext("rollout " + std::to_string(rank())));
            break;
          }
        }
        if (landing_slot_ >= 0) {
          const Status landed = slots_[static_cast<size_t>(landing_slot_)]->landArrived();
          if (!landed.isOk()) {
            setFailed(landed.withContext("version " + std::to_string(prepared_version_)));
            (void)sendError(landed.withContext("rollout " + std::to_string(rank())));
            break;
          }
        }
        continue;
      }
      if (!stopping_) setFailed(frame.status().withContext("control channel"));
      break;
    }
    Status s = coordinatorVerdict(handle(*frame));
    if (!s.isOk()) {
      setFailed(s);
      (void)sendError(s.withContext("rollout " + std::to_string(rank())));
      break;
    }
  }
  store_->abort();
  membership_.onReceiverEnded();
}

Status RolloutContext::coordinatorVerdict(const Status& failure) {
  if (failure.code() != WSYNC_ERR_REMOTE) return failure;
  // Frames the coordinator sent before it closed are still readable; an Error among them says
  // why (e.g. this replica was dropped as stalled) better than the broken connection does.
  for (int i = 0; i < 64; ++i) {
    Result<Frame> frame = job_.channel->recv(std::chrono::milliseconds(100));
    if (!frame.isOk()) break;
    if (static_cast<MessageType>(frame->type) != MessageType::kError) continue;
    ErrorMsg err;
    if (decode(frame->payload, err).isOk()) return Status(err.code, err.message);
  }
  return failure;
}

Status RolloutContext::handle(const Frame& frame) {
  switch (static_cast<MessageType>(frame.type)) {
    case MessageType::kPrepare: {
      SlotMsg m;
      WSYNC_RETURN_IF_ERROR(decode(frame.payload, m));
      // A Prepare may come ahead of its version (the coordinator prepares the next version's slot
      // once the previous one was delivered); a new one replaces it (another version was
      // published, or a version was skipped).
      if (prepared_slot_ >= 0) (void)store_->abandonWrite(prepared_slot_);
      landing_slot_ = -1;
      prepared_slot_ = m.slot;
      prepared_version_ = m.version;
      draining_ = true;
      WSYNC_RETURN_IF_ERROR(continueDraining(kFirstDrainWait));
      // Readers hold the slot: the coordinator need not hold the other replicas' Go for this one
      // (it gets a Go of its own once Prepared follows, or skips the version).
      if (draining_) return sendMessage(MessageType::kSlotBusy, encode(SlotMsg{m.version, m.slot}));
      return Status::ok();
    }
    case MessageType::kGo: {
      GoMsg go;
      WSYNC_RETURN_IF_ERROR(decode(frame.payload, go));
      go_version_ = go.version;
      staleness_.onStarted(go.version);
      delta_.setBase(go.baseOf(options_.replica));  // 0 (dense) for re-sends
      const auto replica = static_cast<size_t>(options_.replica);
      const int32_t slot = replica < go.slot_of_replica.size() ? go.slot_of_replica[replica] : -1;
      if (slot < 0) {  // this replica skips the version: give the slot back
        if (prepared_slot_ >= 0 && prepared_version_ == go.version) {
          WSYNC_RETURN_IF_ERROR(store_->abandonWrite(prepared_slot_));
          prepared_slot_ = -1;
          draining_ = false;
          landing_slot_ = -1;  // an aborted version (trainer restart) may have been landing
        }
        return Status::ok();
      }
      if (slot != prepared_slot_ || go.version != prepared_version_ || draining_) {
        return protocolError("Go for version " + std::to_string(go.version) + " slot " +
                             std::to_string(slot) + " but slot " + std::to_string(prepared_slot_) +
                             " was prepared for version " + std::to_string(prepared_version_));
      }
      WSYNC_RETURN_IF_ERROR(receiveBroadcasts(go));
      if (!landing_ranges_.empty()) landing_slot_ = slot;
      return sendMessage(MessageType::kReceived, encode(VersionMsg{go.version}));
    }
    case MessageType::kReady: {
      SlotMsg m;
      WSYNC_RETURN_IF_ERROR(decode(frame.payload, m));
      landing_slot_ = -1;
      if (!landing_ranges_.empty() && landed_version_ != m.version) {  // not landed at Verify
        if (m.slot < 0 || static_cast<size_t>(m.slot) >= slots_.size()) {
          return protocolError("Ready for unknown slot " + std::to_string(m.slot));
        }
        Status landed =
            slots_[static_cast<size_t>(m.slot)]->land(landing_ranges_, options_.timeout);
        if (!landed.isOk()) return landed.withContext("version " + std::to_string(m.version));
      }
      // Before readers see it. Ready without Go: a peer replica wrote it (peer cold start).
      staleness_.onReady(m.version, RolloutStaleness::Clock::now(), m.version != go_version_);
      WSYNC_RETURN_IF_ERROR(store_->markReady(m.slot, m.version));
      if (m.slot == prepared_slot_) prepared_slot_ = -1;
      // Readable here now: the trainers' requests complete once every rank of the replica says so.
      return sendMessage(MessageType::kReadied, encode(VersionMsg{m.version}));
    }
    case MessageType::kVerify: {
      VerifyMsg m;
      WSYNC_RETURN_IF_ERROR(decode(frame.payload, m));
      return verifyVersion(m);
    }
    case MessageType::kError: {
      ErrorMsg err;
      WSYNC_RETURN_IF_ERROR(decode(frame.payload, err));
      setFailed(Status(err.code, err.message));
      stopping_ = true;
      return Status::ok();
    }
    case MessageType::kColdFill: {
      ColdFillMsg fill;
      WSYNC_RETURN_IF_ERROR(decode(frame.payload, fill));
      return cold_filler_->start(std::move(fill), *store_);
    }
    case MessageType::kTrainersDone: {
      VersionMsg m;
      WSYNC_RETURN_IF_ERROR(decode(frame.payload, m));
      if (store_) store_->trainersDone(m.version);  // waits for newer versions end
      return Status::ok();
    }
    case MessageType::kLeft:
      membership_.onLeft();
      return Status::ok();
    default:
      return protocolError(std::string("unexpected ") +
                           messageTypeName(static_cast<MessageType>(frame.type)) +
                           " from the coordinator");
  }
}

// Receiver thread: waits up to `wait` for the readers of the prepared slot to release it, then
// sends Prepared. While they hold it the receiver goes on serving the coordinator (which may skip
// this replica: Go with slot -1 gives the slot back) and retries when idle; a slow reader thus
// only keeps its own replica out of versions, and the coordinator's timeout bounds the wait.
Status RolloutContext::continueDraining(std::chrono::milliseconds wait) {
  const Status begun = store_->beginWrite(prepared_slot_, prepared_version_, wait);
  if (begun.code() == WSYNC_ERR_TIMEOUT) return Status::ok();  // still leased: retried when idle
  WSYNC_RETURN_IF_ERROR(begun);
  draining_ = false;
  if (!landing_ranges_.empty()) {  // staged: empty progress logs before the writers start
    WSYNC_RETURN_IF_ERROR(slots_[static_cast<size_t>(prepared_slot_)]->beginLanding());
  }
  return sendMessage(MessageType::kPrepared, encode(SlotMsg{prepared_version_, prepared_slot_}));
}

// Receiver thread: takes part in this rank's broadcasts of the version into the prepared slot
// (every group of the plan view belongs to this rank's replica, which takes the version).
Status RolloutContext::receiveBroadcasts(const GoMsg& go) {
  (void)go;
  if (plan_.groups.empty() || !broadcaster_) return Status::ok();
  uint8_t* slot = static_cast<uint8_t*>(slots_[static_cast<size_t>(prepared_slot_)]->data());
  for (size_t i = 0; i < plan_.groups.size(); ++i) {
    const BroadcastGroup& g = plan_.groups[i];
    const size_t dsz = dtypeSize(g.dst_dtype);
    for (const BufferSpan& d : g.dst) {
      if (d.rank != rank()) continue;
      uint8_t* data = slot + buffer_byte_offsets_[static_cast<size_t>(d.buffer)] +
                      static_cast<size_t>(d.offset) * dsz;
      const size_t bytes = static_cast<size_t>(g.num_elements) * dsz;
      const Status s = broadcaster_->post(group_comm_[i], g.src.rank, data, bytes);
      if (!s.isOk()) {
        return s.withContext("broadcast of tensor '" +
                             plan_.tensors[static_cast<size_t>(g.tensor)].name + "' from trainer " +
                             std::to_string(g.src.rank));
      }
    }
  }
  WSYNC_RETURN_IF_ERROR(broadcaster_->start(broadcast_stream_.get())
                            .withContext("starting the broadcasts of " + groupTensors(plan_)));
  return broadcaster_->wait(broadcast_stream_.get(), options_.timeout)
      .withContext("broadcasts of " + groupTensors(plan_));
}

// Receiver thread, between Go and Ready (the slot stays WRITING, unreadable, throughout): lands a
// staged slot, rebuilds delta-patched regions, then sums the slot per trainer and answers Verified
// or ChecksumFailed (RolloutChecksums).
Status RolloutContext::verifyVersion(const VerifyMsg& verify) {
  const std::string what =
      "rollout " + std::to_string(rank()) + ", version " + std::to_string(verify.version);
  if (verify.slot != prepared_slot_ || verify.version != prepared_version_ || draining_) {
    return protocolError("Verify for version " + std::to_string(verify.version) + " slot " +
                         std::to_string(verify.slot) + " but slot " +
                         std::to_string(prepared_slot_) + " was prepared for version " +
                         std::to_string(prepared_version_));
  }
  ExposedMemory& slot = *slots_[static_cast<size_t>(verify.slot)];
  landing_slot_ = -1;
  if (!landing_ranges_.empty()) {  // staged: move every byte to the device now (Ready will not)
    // Delta versions: patched ops are rebuilt from the base slot below, not moved.
    const std::vector<bool> patched = delta_.patchedOps(plan_, verify.version);
    const Status landed =
        patched.empty()
            ? slot.land(landing_ranges_, options_.timeout)
            : slot.land(landingRanges(plan_, buffer_byte_offsets_, patched), options_.timeout);
    WSYNC_RETURN_IF_ERROR(landed.withContext(what));
    WSYNC_RETURN_IF_ERROR(slot.beginLanding());  // a re-send's writes start a new round
    landed_version_ = verify.version;
  }
  // Delta versions: the patched ops are rebuilt from the base version first (rollout_delta.cc).
  const RolloutDelta::PatchFailures patch_failures = delta_.apply(
      plan_, buffer_byte_offsets_, verify.version, verify.slot, *store_, slots_, options_.timeout);
  WSYNC_ASSIGN_OR_RETURN(
      std::optional<ChecksumFailedMsg> failed,
      checksums_->verify(verify, static_cast<const uint8_t*>(slot.data()), patch_failures, what,
                         broadcast_stream_.get(), options_.timeout));
  if (!failed) return sendMessage(MessageType::kVerified, encode(VersionMsg{verify.version}));
  return sendMessage(MessageType::kChecksumFailed, encode(*failed));
}

// ---- shutdown --------------------------------------------------------------------------------
void RolloutContext::stopReceiver() {
  stopping_ = true;
  if (receiver_.joinable()) receiver_.join();
}

void RolloutContext::abort() {
  Context::abort();
  if (store_) store_->abort();
}

Status RolloutContext::finalize() {
  const Status left = committed() && !failedOrAborted() ? leaveJob() : Status::ok();
  membership_.stopHeartbeats();
  stopReceiver();
  if (cold_filler_) cold_filler_->stop();
  const Status bye = Context::finalize();
  return left.isOk() ? bye : left;
}

// ---- membership --------------------------------------------------------------------------------
Status RolloutContext::leaveJob() {
  return membership_.leave(options_.timeout + kCoordinatorReplyGrace, [this] { return failure(); });
}

Status RolloutContext::setBlockScaling(const std::string& tensor, const BlockScaling& scaling) {
  if (committed()) return invalidUsage("set_block_scaling after commit");
  if (tensor.empty()) return invalidArgument("empty tensor name");
  const std::string what = "tensor '" + tensor + "' (" + describe(scaling) + ")";
  if (!validScaleFormat(static_cast<int>(scaling.format))) {
    return invalidArgument(what + ": unknown scale format " +
                           std::to_string(static_cast<int>(scaling.format)));
  }
  // The weight's shape is checked at commit; here what needs none.
  if (std::string why = checkBlockScaling(scaling, Dims{scaling.block_rows, scaling.block_cols});
      !why.empty()) {
    return invalidArgument(what + ": " + why);
  }
  for (const ScaledTensor& t : block_scalings_) {
    if (t.tensor == tensor && t.scaling == scaling) return Status::ok();  // idempotent
    if (t.tensor == tensor) {
      return invalidArgument(what + ": already scaled with " + describe(t.scaling));
    }
    if (t.scaling.scale_tensor == scaling.scale_tensor) {
      return invalidArgument(what + ": its scale tensor '" + scaling.scale_tensor +
                             "' already holds the scales of '" + t.tensor + "'");
    }
  }
  block_scalings_.push_back({tensor, scaling, {}});
  return Status::ok();
}

}  // namespace wsync
