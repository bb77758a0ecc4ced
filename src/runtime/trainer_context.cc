#include "runtime/trainer_context.h"

#include <cmath>
#include <cstdio>
#include <limits>

#include "runtime/host_convert.h"
#include "runtime/plan_names.h"

namespace wsync {
namespace {
// How often an idle publisher thread reads the coordinator's membership news.
constexpr std::chrono::milliseconds kIdlePoll{20};
}  // namespace

TrainerContext::TrainerContext(ContextOptions options)
    : Context(std::move(options)),
      queue_([this] { return failedOrAborted() ? failure() : Status::ok(); }),
      control_([this](std::chrono::milliseconds timeout) { return job_.channel->recv(timeout); },
               [this](const Frame& frame) { return handleMembership(frame); }) {}

Status TrainerContext::setTensorScale(const std::string& name, float scale) {
  if (!std::isfinite(scale) || scale <= 0) {
    return invalidArgument("tensor '" + name + "': a float8 scale must be finite and > 0, got " +
                           std::to_string(scale));
  }
  bool declared = false;
  for (const TensorDecl& t : registration_.tensors)
    declared = declared || t.name == name;
  if (!declared) {
    return invalidArgument("tensor '" + name +
                           "' is not declared on this rank (register a buffer holding it first)");
  }
  scales_.set(name, scale);
  return Status::ok();
}

// ---- TrainerContext: commit ------------------------------------------------------------------
TrainerContext::~TrainerContext() {
  stopPublisher();
}

Status TrainerContext::prepareRegistration(RegisterMsg& msg) {
  memory_ = memoryKind();
  if (onDevice()) {
    WSYNC_ASSIGN_OR_RETURN(msg.device_id, deviceIdentity(options_.cuda_device));
    WSYNC_ASSIGN_OR_RETURN(stream_, DeviceStream::create(options_.cuda_device));
  }
  WSYNC_RETURN_IF_ERROR(sources_.setUp(registration_.buffers, buffer_data_, quantizer_, memory_,
                                       options_.cuda_device, options_.snapshot));
  WSYNC_ASSIGN_OR_RETURN(
      corruption_, DebugCorruption::create(options_.settings.debug_corrupt_every, rank(), memory_,
                                           options_.cuda_device));
  return Status::ok();
}

Status TrainerContext::applyPlan(RankPlan plan, PlanAssignmentMsg assignment) {
  plan_ = std::move(plan);
  scales_.adoptPlan(plan_.tensors);
  membership_.reset(std::move(assignment.replica_of_rollout));
  group_comm_ = std::move(assignment.group_comm);
  if (group_comm_.size() != plan_.groups.size()) {
    return protocolError("plan assignment: group communicators do not match the groups");
  }
  // Block-scaled rollout tensors: the quantized sources of the job's table.
  const std::vector<ScaledTensor> table(assignment.block_scalings.begin(),
                                        assignment.block_scalings.end());
  WSYNC_ASSIGN_OR_RETURN(quantizer_,
                         TrainerQuantizer::create(registration_, table, assignment.exchanged_blocks,
                                                  memory_, options_.cuda_device, options_.timeout));
  WSYNC_ASSIGN_OR_RETURN(staging_,
                         ConversionStaging::create(plan_, true, memory_, options_.cuda_device));
  WSYNC_RETURN_IF_ERROR(setUpDelta(plan_, assignment.peers, job_.welcome.delta,
                                   job_.welcome.delta_max_share_ppm, memory_, options_.cuda_device,
                                   delta_));
  if (job_.welcome.checksums) WSYNC_RETURN_IF_ERROR(rebuildChecksums());
  quantize_in_place_ = onDevice() && !quantizer_.empty() && !job_.welcome.checksums &&
                       !delta_.active() && corruption_.data() == nullptr &&
                       !options_.settings.debug_no_in_place_quant;
  peers_.setUp(memory_, transportSetup(rank()));
  WSYNC_RETURN_IF_ERROR(addSources());
  WSYNC_RETURN_IF_ERROR(connectPeers(assignment.peers));
  WSYNC_ASSIGN_OR_RETURN(broadcaster_, createBroadcaster(plan_, assignment));
  return Status::ok();
}

// Every memory writes read from (the buffers or their snapshot, the quantized sources, the patch
// areas and the conversion staging), registered with every transport.
Status TrainerContext::addSources() {
  auto add = [this](const void* base, size_t bytes) { return peers_.addSource(base, bytes); };
  if (options_.snapshot) {
    WSYNC_RETURN_IF_ERROR(add(sources_.snapshotData(), sources_.snapshotBytes()));
  } else {
    for (size_t i = 0; i < registration_.buffers.size(); ++i) {
      const LocalBuffer& b = registration_.buffers[i];
      WSYNC_RETURN_IF_ERROR(
          add(buffer_data_[i], static_cast<size_t>(b.num_elements) * dtypeSize(b.dtype)));
    }
  }
  WSYNC_RETURN_IF_ERROR(add(corruption_.data(), corruption_.bytes()));
  WSYNC_RETURN_IF_ERROR(add(quantizer_.memory(), quantizer_.memoryBytes()));
  WSYNC_RETURN_IF_ERROR(add(delta_.staging.data(), delta_.staging.size()));
  return add(staging_.data(), staging_.bytes());
}

// Peers: the write backend that reaches each one's slots from this trainer's memory; connect
// once, attach every slot once.
Status TrainerContext::connectPeers(const std::vector<PeerInfo>& peers) {
  for (const PeerInfo& p : peers) {
    if (p.rank < 0 || p.rank >= numRollouts()) {
      return protocolError("plan assignment names unknown rollout " + std::to_string(p.rank));
    }
    WSYNC_RETURN_IF_ERROR(peers_.connect(
        p, [&](WriteTransport& transport) { return attachDeltaLanding(p, transport, delta_); }));
  }
  for (const WriteOp& op : plan_.writes) {
    if (op.dst_rank < 0 || op.dst_rank >= numRollouts() || !peers_.connected(op.dst_rank)) {
      return protocolError("a write targets rollout " + std::to_string(op.dst_rank) +
                           " with no peer information");
    }
  }
  return Status::ok();
}

Status TrainerContext::startRunning() {
  publisher_ = std::thread([this] { publisherLoop(); });
  return Status::ok();
}

// ---- publish ---------------------------------------------------------------------------------
Result<std::shared_ptr<PublishRequest>> TrainerContext::publish(uint64_t version,
                                                                CudaStreamHandle stream) {
  if (version == std::numeric_limits<uint64_t>::max()) {
    return invalidArgument("publish: version " + std::to_string(version) +
                           " is reserved (WSYNC_VERSION_NEWEST) and cannot be published");
  }
  if (!committed()) return invalidUsage("publish before commit");
  if (failedOrAborted()) return failure();
  // Publish goes to the coordinator from this thread, so that the publisher thread's wake-up
  // overlaps the round trip to Go (publishOne reads the Go; one that arrives while the publisher
  // is idle is kept for it).
  return queue_.push(
      version, options_.snapshot, options_.timeout,
      [&]() -> Status {
        if (onDevice()) {
          // The transfer reads the buffers (or the snapshot copy, made here) after what the
          // caller's stream has produced so far; the caller's later work waits for the copy.
          WSYNC_RETURN_IF_ERROR(setDevice(options_.cuda_device));
          WSYNC_RETURN_IF_ERROR(streamWaitFor(stream_.get(), stream));
          if (options_.snapshot) {
            WSYNC_RETURN_IF_ERROR(sources_.takeSnapshot(stream_.get()));
            WSYNC_RETURN_IF_ERROR(streamWaitFor(stream, stream_.get()));
          }
        } else if (options_.snapshot) {
          WSYNC_RETURN_IF_ERROR(sources_.takeSnapshot(nullptr));
        }
        return sendMessage(MessageType::kPublish, encode(VersionMsg{version}));
      },
      scales_.planScales());
}

void TrainerContext::publisherLoop() {
  // Idle: every kIdlePoll, read what the coordinator sent (membership news).
  const auto idle = [this] {
    if (failedOrAborted()) return;
    if (std::optional<TrainerControl::IdleFailure> failed = control_.pollIdle()) {
      setFailed(failed->status);
      if (failed->tell_coordinator)
        (void)sendError(failed->status.withContext("trainer " + std::to_string(rank())));
    }
  };
  while (std::shared_ptr<PublishRequest> request = queue_.next(kIdlePoll, idle)) {
    active_scales_ = request->scales();
    DeliveredMsg outcome;
    Status s = failedOrAborted() ? failure() : publishOne(request->version(), &outcome);
    if (!s.isOk()) setFailed(s);
    queue_.pop();
    request->complete(s, std::move(outcome));
  }
}

Status TrainerContext::publishOne(uint64_t version, DeliveredMsg* outcome) {
  const std::string what = "version " + std::to_string(version);
  using Clock = std::chrono::steady_clock;
  const Clock::time_point started = Clock::now();  // publish() sent Publish
  WSYNC_RETURN_IF_ERROR(startQuantizing(version));
  const auto reply_timeout = options_.timeout + kCoordinatorReplyGrace;
  WSYNC_ASSIGN_OR_RETURN(
      GoMsg go, control_.awaitGo(version, reply_timeout, quantizer_.exchanges(),
                                 [this](const BlockMaximaMsg& maxima) {
                                   if (quantize_in_place_) {  // at transfer
                                     pending_maxima_ = maxima.amax;
                                     return Status::ok();
                                   }
                                   return quantizer_.quantize(
                                       maxima.amax, [this](int32_t b) { return sources_.of(b); },
                                       stream_.get());
                                 }));
  if (go.version != version) {
    return invalidUsage("the coordinator started version " + std::to_string(go.version) +
                        " while this trainer publishes " + what +
                        ": every trainer must publish the same versions");
  }
  if (options_.settings.debug_send_delay_ms > 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(options_.settings.debug_send_delay_ms));
  const Clock::time_point got_go = Clock::now();
  transfer_attempt_ = 0;
  Status s = transfer(go);
  const Clock::time_point sent = Clock::now();
  if (!s.isOk()) {
    s = s.withContext(what);
    (void)sendError(s.withContext("trainer " + std::to_string(rank())));
    return s;
  }
  queue_.snapshotFree();  // the next publish may overwrite the snapshot
  WSYNC_RETURN_IF_ERROR(sendSent(go));
  WSYNC_ASSIGN_OR_RETURN(  // re-sends on the way
      DeliveredMsg d, control_.awaitDelivered(version, reply_timeout, [this](const GoMsg& again) {
        return resend(again);
      }));
  delivered_.record(d);
  *outcome = std::move(d);
  if (options_.settings.debug_timing) {
    auto ms = [](Clock::time_point x, Clock::time_point y) {
      return std::chrono::duration<double, std::milli>(y - x).count();
    };
    printTiming(what, ms(started, got_go), ms(got_go, sent), ms(sent, Clock::now()));
  }
  return Status::ok();
}

// WSYNC_DEBUG_TIMING: one line per version on stderr.
void TrainerContext::printTiming(const std::string& what, double to_go_ms, double transfer_ms,
                                 double to_delivered_ms) const {
  std::fprintf(stderr,
               "[wsync trainer %d] %s: publish -> go %.3f ms, transfer %.3f ms, sent -> "
               "delivered %.3f ms\n",
               rank(), what.c_str(), to_go_ms, transfer_ms, to_delivered_ms);
}

// Device memory: every converting write and group is first converted (and packed) into staging by a
// kernel on stream_, which also carries the snapshot copy and waits for the caller's stream; the
// copies and broadcasts start once stream_ is idle. The plan converts with the scales of the
// version's publish, joined replicas' extensions with those in force now.
Status TrainerContext::convertIntoStaging(const GoMsg& go) {
  WSYNC_RETURN_IF_ERROR(setDevice(options_.cuda_device));
  const auto active_scale = [this](int32_t tensor) {
    const auto t = static_cast<size_t>(tensor);
    return t < active_scales_.size() ? active_scales_[t] : 1.0f;
  };
  for (size_t i = 0; i < plan_.groups.size(); ++i) {
    const BroadcastGroup& g = plan_.groups[i];
    if (g.src_dtype == g.dst_dtype || !membership_.replicaTakes(go, g)) continue;
    Region run;  // the group's elements: one contiguous run on both sides
    run.count[0] = g.num_elements;
    const uint8_t* src =
        sources_.of(g.src.buffer) + static_cast<size_t>(g.src.offset) * dtypeSize(g.src_dtype);
    const Status s = convertRegionAsync(src, g.src_dtype, staging_.group(i), g.dst_dtype, run,
                                        active_scale(g.tensor), stream_.get());
    if (!s.isOk()) {
      return s.withContext("tensor '" + plan_.tensors[static_cast<size_t>(g.tensor)].name +
                           "': converting for a broadcast");
    }
  }
  WSYNC_RETURN_IF_ERROR(convertWrites(go, plan_, staging_, active_scale));
  for (const auto& part : membership_.extensions()) {
    if (!part->active) continue;
    part->scales = scales_.scalesFor(part->plan.tensors);
    const std::vector<float>& scales = part->scales;
    WSYNC_RETURN_IF_ERROR(convertWrites(go, part->plan, part->staging, [&](int32_t tensor) {
      return scales[static_cast<size_t>(tensor)];
    }));
  }
  return streamSync(stream_.get(), options_.timeout);
}

// Device memory: converts each converting write op of `plan` whose replica takes `go` from its
// source region into its staging, packed, on stream_.
Status TrainerContext::convertWrites(const GoMsg& go, const RankPlan& plan,
                                     const ConversionStaging& staging,
                                     const std::function<float(int32_t tensor)>& scale_of) {
  for (size_t i = 0; i < plan.writes.size(); ++i) {
    const WriteOp& op = plan.writes[i];
    if (!op.converts() || membership_.slotFor(go, op.dst_rank) < 0) continue;
    WSYNC_RETURN_IF_ERROR(
        sources_.convertAsync(plan, op, staging.write(i), scale_of(op.tensor), stream_.get()));
  }
  return Status::ok();
}

// Queues this trainer's broadcast of every group whose replica takes the version (host memory:
// converting here first; device memory: convertIntoStaging did).
Status TrainerContext::postGroups(const GoMsg& go) {
  if (!broadcaster_) return Status::ok();
  for (size_t i = 0; i < plan_.groups.size(); ++i) {
    const BroadcastGroup& g = plan_.groups[i];
    if (!membership_.replicaTakes(go, g)) continue;  // that replica skips this version
    const uint8_t* src =
        sources_.of(g.src.buffer) + static_cast<size_t>(g.src.offset) * dtypeSize(g.src_dtype);
    uint8_t* data = const_cast<uint8_t*>(src);  // the broadcasts take void*; the root only reads
    if (g.src_dtype != g.dst_dtype) {
      data = staging_.group(i);
      if (!onDevice()) {
        WSYNC_RETURN_IF_ERROR(convertHost(src, g.src_dtype, data, g.dst_dtype, g.num_elements));
      }
    }
    const size_t bytes = static_cast<size_t>(g.num_elements) * dtypeSize(g.dst_dtype);
    delta_.full_bytes += bytes;  // broadcasts are dense; counted once per group (its root's send)
    delta_.wire_bytes += bytes;
    const Status s = broadcaster_->post(group_comm_[i], rank(), data, bytes);
    if (!s.isOk()) {
      return s.withContext("broadcast of tensor '" +
                           plan_.tensors[static_cast<size_t>(g.tensor)].name +
                           "' to rollout ranks " + groupReceivers(g));
    }
  }
  // Device broadcasts go on stream_ after the conversions; they run while the writes are issued.
  return broadcaster_->start(stream_.get())
      .withContext("starting the broadcasts of " + groupTensors(plan_));
}

Status TrainerContext::waitGroups() {
  if (!broadcaster_) return Status::ok();
  return broadcaster_->wait(stream_.get(), options_.timeout)
      .withContext("broadcasts of " + groupTensors(plan_));
}

Status TrainerContext::transfer(const GoMsg& go) {
  delta_.wire_bytes = 0;  // this send's bytes: broadcasts, patches, dense and extension writes
  delta_.full_bytes = 0;
  if (quantize_in_place_) WSYNC_RETURN_IF_ERROR(quantizeInPlace(go));
  if (onDevice()) WSYNC_RETURN_IF_ERROR(convertIntoStaging(go));
  WSYNC_RETURN_IF_ERROR(postGroups(go));
  WSYNC_RETURN_IF_ERROR(sendDeltas(go));  // patches first; their ops are not written dense
  WSYNC_RETURN_IF_ERROR(postWrites(go, plan_, staging_, delta_, &in_place_));
  for (const auto& part : membership_.extensions()) {
    if (!part->active) continue;
    WSYNC_RETURN_IF_ERROR(postWrites(go, part->plan, part->staging, part->delta, nullptr));
  }
  WSYNC_RETURN_IF_ERROR(peers_.flush(options_.timeout));
  WSYNC_RETURN_IF_ERROR(corruptOneWrite(go));
  return waitGroups();
}

Status TrainerContext::sendDeltas(const GoMsg& go) {
  const DeltaSendSources plan_sources{sources_, [this](size_t i) { return staging_.write(i); },
                                      options_.timeout};
  WSYNC_RETURN_IF_ERROR(
      sendDeltaPatches(go, plan_, delta_, plan_sources, membership_, rank(), &delta_.wire_bytes));
  for (const auto& part : membership_.extensions()) {
    if (!part->active) continue;
    const ConversionStaging& staging = part->staging;
    const DeltaSendSources part_sources{sources_, [&staging](size_t i) { return staging.write(i); },
                                        options_.timeout};
    WSYNC_RETURN_IF_ERROR(sendDeltaPatches(go, part->plan, part->delta, part_sources, membership_,
                                           rank(), &delta_.wire_bytes));
  }
  return Status::ok();
}

// In-place quantization (runtime/in_place_quantization.h): this Go's in-place sources' values go
// straight into their rollouts' slots, the others' into the quantizer's buffers, on stream_
// (convertIntoStaging synchronizes it before any write is posted).
Status TrainerContext::quantizeInPlace(const GoMsg& go) {
  WSYNC_ASSIGN_OR_RETURN(in_place_,
                         planInPlaceQuantization(go, plan_, membership_, quantizer_, peers_));
  return quantizer_.quantize(
      pending_maxima_, [this](int32_t b) { return sources_.of(b); }, stream_.get(),
      in_place_.targets);
}

// The writes of `plan` whose replica takes `go`, dense, except those `delta` sent as patches
// (sendDeltas) and those `in_place` (may be null) wrote. Every write's bytes count as this send's
// full bytes, those not sent as patches as its wire bytes (delta_).
Status TrainerContext::postWrites(const GoMsg& go, const RankPlan& plan,
                                  const ConversionStaging& staging, const TrainerDeltaState& delta,
                                  const InPlaceQuantization* in_place) {
  for (size_t i = 0; i < plan.writes.size(); ++i) {
    const WriteOp& op = plan.writes[i];
    const int32_t slot = membership_.slotFor(go, op.dst_rank);
    if (slot < 0) continue;
    const uint64_t bytes = static_cast<uint64_t>(plan.numElements(op)) * dtypeSize(op.dst_dtype);
    delta_.full_bytes += bytes;
    const bool delta_op = i < delta.ops.size();
    if (delta_op && delta.ops[i].patched) continue;
    delta_.wire_bytes += bytes;
    if (in_place != nullptr && in_place->writtenInPlace(i)) continue;
    uint8_t* staged = op.converts() ? staging.write(i) : nullptr;
    WSYNC_RETURN_IF_ERROR(postWrite(plan, op, staged, slot, delta_op && delta.ops[i].converted));
  }
  return Status::ok();
}

// Posts write op `op` of `plan` into `slot` of its rollout (host memory converts its rows into
// `staged` first; device memory did in convertIntoStaging).
Status TrainerContext::postWrite(const RankPlan& plan, const WriteOp& op, uint8_t* staged,
                                 int32_t slot, bool converted) {
  const Region r = plan.region(op);
  const size_t ssz = dtypeSize(op.src_dtype);
  const size_t dsz = dtypeSize(op.dst_dtype);
  const uint8_t* src = sources_.of(op.src_buffer) + static_cast<size_t>(r.src_offset) * ssz;
  const size_t row_bytes = static_cast<size_t>(r.count[0]) * dsz;
  const auto rows = static_cast<size_t>(r.count[1]);
  size_t src_pitch = static_cast<size_t>(r.src_stride[0]) * ssz;
  size_t src_plane_pitch = static_cast<size_t>(r.src_stride[1]) * ssz;
  if (op.converts()) {  // the converted region, packed in its staging
    // host: convert the rows now (device: convertIntoStaging did)
    if (!onDevice() && !converted) WSYNC_RETURN_IF_ERROR(sources_.convertHost(plan, op, staged));
    src = staged;
    src_pitch = row_bytes;
    src_plane_pitch = row_bytes * rows;
  }
  return peers_.write(op.dst_rank, slot, op.dst_buffer, static_cast<uint64_t>(r.dst_offset) * dsz,
                      static_cast<uint64_t>(r.dst_stride[0]) * dsz,
                      static_cast<uint64_t>(r.dst_stride[1]) * dsz, src, src_pitch, src_plane_pitch,
                      row_bytes, rows, static_cast<size_t>(r.count[2]));
}

// ---- after a send: Sent, re-sends ------------------------------------------------------------
// Sent(version) for the Go just transferred; with checksums, SentChecksums carrying the sum of
// what this trainer sent each rollout rank whose replica took this Go.
Status TrainerContext::sendSent(const GoMsg& go) {
  if (!job_.welcome.checksums)
    return sendMessage(MessageType::kSent, encode(VersionMsg{go.version}));
  if (checksums_.coveredExtensions() != membership_.extensions().size())
    WSYNC_RETURN_IF_ERROR(rebuildChecksums());
  WSYNC_ASSIGN_OR_RETURN(
      std::vector<RankChecksum> sums,
      checksums_.sums([this, &go](int32_t r) { return membership_.slotFor(go, r) >= 0; },
                      onDevice() ? stream_.get() : nullptr, options_.timeout));
  return sendMessage(
      MessageType::kSentChecksums,
      encode(SentChecksumsMsg{go.version, std::move(sums), delta_.wire_bytes, delta_.full_bytes}));
}

// Every span this trainer sends: the plan's writes and groups, then each joined replica's writes.
Status TrainerContext::rebuildChecksums() {
  const auto source = [this](int32_t b) { return sources_.of(b); };
  checksums_.addWrites(plan_, source, [this](size_t i) { return staging_.write(i); });
  checksums_.addGroups(plan_, source, [this](size_t i) { return staging_.group(i); });
  for (const auto& part : membership_.extensions()) {
    const ConversionStaging& staging = part->staging;
    checksums_.addWrites(part->plan, source, [&staging](size_t i) { return staging.write(i); });
  }
  return checksums_.build(membership_.extensions().size(), memory_, options_.cuda_device);
}

// A Go of the version in flight after Sent: a busy replica's late Go, or a re-send to the
// replicas whose checksums failed. Transfers again and sends Sent again.
Status TrainerContext::resend(const GoMsg& go) {
  const std::string what = "version " + std::to_string(go.version);
  ++transfer_attempt_;
  const Status s = transfer(go);
  if (!s.isOk()) {
    (void)sendError(s.withContext(what).withContext("trainer " + std::to_string(rank())));
    return s.withContext(what);
  }
  return sendSent(go);
}

// Block-scaled rollout tensors: this version's block maxima go to the coordinator (PartialMaxima;
// the values are quantized once BlockMaxima comes back), or, when no block straddles trainers, the
// values are quantized at once.
Status TrainerContext::startQuantizing(uint64_t version) {
  if (quantizer_.empty()) return Status::ok();
  const auto source = [this](int32_t b) { return sources_.of(b); };
  WSYNC_ASSIGN_OR_RETURN(std::vector<uint8_t> partial,
                         quantizer_.computeMaxima(source, stream_.get()));
  if (!quantizer_.exchanges())
    return quantize_in_place_ ? Status::ok() : quantizer_.quantize({}, source, stream_.get());
  return sendMessage(MessageType::kPartialMaxima,
                     encode(BlockMaximaMsg{version, std::move(partial)}));
}

// WSYNC_DEBUG_CORRUPT_EVERY: after the writes were flushed, the first byte of the first dense write
// to a taking replica is overwritten with its complement (with delta versions, a byte of a patch
// first: trainer_delta.cc).
Status TrainerContext::corruptOneWrite(const GoMsg& go) {
  if (!corruption_.due(go.version, transfer_attempt_)) return Status::ok();
  WSYNC_ASSIGN_OR_RETURN(const bool patch_corrupted, corruptOnePatch(go, delta_));
  // A patched op's slot bytes are the rank's to write.
  if (patch_corrupted) return peers_.flush(options_.timeout);
  for (size_t i = 0; i < plan_.writes.size(); ++i) {
    const WriteOp& op = plan_.writes[i];
    const int32_t slot = membership_.slotFor(go, op.dst_rank);
    if (slot < 0 || plan_.numElements(op) == 0) continue;
    if (i < delta_.ops.size() && delta_.ops[i].patched) continue;  // the rank writes it
    const ChecksumSpan sent = TrainerChecksums::sentSpan(
        plan_, op, sources_.of(op.src_buffer), op.converts() ? staging_.write(i) : nullptr);
    const auto* first = reinterpret_cast<const uint8_t*>(static_cast<uintptr_t>(sent.src));
    WSYNC_ASSIGN_OR_RETURN(const uint8_t* flipped,
                           corruption_.flip(first, stream_.get(), options_.timeout));
    WSYNC_RETURN_IF_ERROR(peers_.write(op.dst_rank, slot, op.dst_buffer, sent.dst_offset, 1, 1,
                                       flipped, 1, 1, 1, 1, 1));
    std::fprintf(stderr,
                 "[wsync trainer 0] debug: version %llu: corrupted byte %llu of buffer %d in "
                 "rollout %d's slot %d (tensor '%s')\n",
                 static_cast<unsigned long long>(go.version),
                 static_cast<unsigned long long>(sent.dst_offset), op.dst_buffer, op.dst_rank, slot,
                 plan_.tensors[static_cast<size_t>(op.tensor)].name.c_str());
    return peers_.flush(options_.timeout);
  }
  return Status::ok();
}

// ---- membership --------------------------------------------------------------------------------
Status TrainerContext::handleMembership(const Frame& frame) {
  if (static_cast<MessageType>(frame.type) == MessageType::kReplicaDropped) {
    ReplicaMsg dropped;
    WSYNC_RETURN_IF_ERROR(decode(frame.payload, dropped));
    membership_.forget(dropped);
    return Status::ok();
  }
  PlanExtensionMsg extension;
  WSYNC_RETURN_IF_ERROR(decode(frame.payload, extension));
  const int32_t replica = extension.replica;
  const Status applied = applyExtension(extension);
  if (!applied.isOk()) {
    // The replica cannot be written from here: it never gets ExtensionDone from this trainer,
    // and the coordinator ends its join (TIMEOUT naming the trainers that did not apply it). The
    // job goes on.
    std::fprintf(stderr, "[wsync trainer %d] replica %d cannot join: %s\n", rank(), replica,
                 applied.toString().c_str());
    membership_.forget(ReplicaMsg{replica, {}});
    return Status::ok();
  }
  return sendMessage(MessageType::kExtensionDone, encode(ReplicaMsg{replica, {}}));
}

// Connects the joining replica's ranks, attaches their slots and adds this trainer's writes to
// them (their staging and patch areas registered with every transport); they are posted from the
// first version whose Go gives the replica a slot.
Status TrainerContext::applyExtension(const PlanExtensionMsg& extension) {
  const std::string what = "replica " + std::to_string(extension.replica) + " joining";
  WSYNC_ASSIGN_OR_RETURN(RankPlan plan,
                         TrainerMembership::checkExtension(
                             extension, [this](int32_t r) { return peers_.connected(r); }));
  auto part = std::make_unique<ExtensionPart>();
  part->replica = extension.replica;
  part->ranks = extension.ranks;
  part->plan = std::move(plan);
  TrainerDeltaState& delta = part->delta;
  WSYNC_RETURN_IF_ERROR(setUpDelta(part->plan, extension.peers, job_.welcome.delta,
                                   job_.welcome.delta_max_share_ppm, memory_, options_.cuda_device,
                                   delta)
                            .withContext(what));
  for (const PeerInfo& p : extension.peers) {
    const auto attach = [&](WriteTransport& t) { return attachDeltaLanding(p, t, delta); };
    WSYNC_RETURN_IF_ERROR(peers_.connect(p, attach).withContext(what));
  }
  Result<ConversionStaging> staging =
      ConversionStaging::create(part->plan, false, memory_, options_.cuda_device);
  if (!staging.isOk()) return staging.status().withContext(what);
  part->staging = std::move(staging).value();
  WSYNC_RETURN_IF_ERROR(
      peers_.addSource(delta.staging.data(), delta.staging.size()).withContext(what));
  WSYNC_RETURN_IF_ERROR(
      peers_.addSource(part->staging.data(), part->staging.bytes()).withContext(what));
  membership_.add(std::move(part));
  return Status::ok();
}

// ---- shutdown --------------------------------------------------------------------------------
void TrainerContext::stopPublisher() {
  queue_.stop();
  if (publisher_.joinable()) publisher_.join();
}

void TrainerContext::abort() {
  Context::abort();
  queue_.wake();
}

Status TrainerContext::finalize() {
  queue_.drain(options_.timeout);  // in-flight publishes finish first (each bounded)
  stopPublisher();
  return Context::finalize();
}

}  // namespace wsync
