#include "runtime/trainer_context.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "runtime/host_convert.h"
#include "runtime/plan_names.h"
#include "transport/registry.h"

namespace wsync {
namespace {
// How often an idle publisher thread reads the coordinator's membership news.
constexpr std::chrono::milliseconds kIdlePoll{20};
}  // namespace

// ---- TrainerContext: float8 scales -----------------------------------------------------------
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
  std::lock_guard lock(scale_mu_);
  scale_by_name_[name] = scale;
  for (size_t i = 0; i < plan_.tensors.size() && i < plan_scales_.size(); ++i) {
    if (plan_.tensors[i].name == name) plan_scales_[i] = scale;
  }
  return Status::ok();
}

// ---- TrainerContext: commit ------------------------------------------------------------------
TrainerContext::~TrainerContext() {
  stopPublisher();
}

Status TrainerContext::prepareRegistration(RegisterMsg& msg) {
  memory_ = memoryKind();
  size_t total = 0;
  for (const LocalBuffer& b : registration_.buffers) {
    snapshot_offsets_.push_back(total);
    total += static_cast<size_t>(b.num_elements) * dtypeSize(b.dtype);
  }
  if (onDevice()) {
    WSYNC_ASSIGN_OR_RETURN(msg.device_id, deviceIdentity(options_.cuda_device));
    WSYNC_ASSIGN_OR_RETURN(stream_, DeviceStream::create(options_.cuda_device));
    if (options_.snapshot) {
      WSYNC_ASSIGN_OR_RETURN(device_snapshot_, DeviceBuffer::allocate(total, options_.cuda_device));
    }
  } else if (options_.snapshot) {
    snapshot_.resize(std::max<size_t>(total, 1));
  }
  return allocateCorruptByte();
}

uint8_t* TrainerContext::stagingAt(size_t offset) const {
  return (onDevice() ? device_convert_staging_.data()
                     : const_cast<uint8_t*>(convert_staging_.data())) +
         offset;
}

Status TrainerContext::applyPlan(RankPlan plan, PlanAssignmentMsg assignment) {
  plan_ = std::move(plan);
  adoptScales();
  replica_of_rollout_ = std::move(assignment.replica_of_rollout);
  group_comm_ = std::move(assignment.group_comm);
  if (group_comm_.size() != plan_.groups.size()) {
    return protocolError("plan assignment: group communicators do not match the groups");
  }
  WSYNC_RETURN_IF_ERROR(setUpQuantizer(assignment));
  WSYNC_RETURN_IF_ERROR(sizeConversionStaging());
  WSYNC_RETURN_IF_ERROR(setupDelta(plan_, assignment.peers, delta_));
  if (job_.welcome.checksums) WSYNC_RETURN_IF_ERROR(buildChecksums());
  WSYNC_RETURN_IF_ERROR(connectPeers(assignment.peers));
  WSYNC_ASSIGN_OR_RETURN(broadcaster_, createBroadcaster(plan_, assignment));
  return Status::ok();
}

// Scales set by name before commit apply to the plan's tensors of that name.
void TrainerContext::adoptScales() {
  std::lock_guard lock(scale_mu_);
  plan_scales_.assign(plan_.tensors.size(), 1.0f);
  for (size_t i = 0; i < plan_.tensors.size(); ++i) {
    auto it = scale_by_name_.find(plan_.tensors[i].name);
    if (it != scale_by_name_.end()) plan_scales_[i] = it->second;
  }
}

// Conversion staging: every converting write and group gets its own range (UNSUPPORTED naming
// the tensor for a pair this memory cannot convert).
Status TrainerContext::sizeConversionStaging() {
  auto convertible = [this](DType from, DType to) {
    return onDevice() ? deviceCanConvertTypes(from, to) : hostCanConvert(from, to);
  };
  auto unsupported = [this](int32_t tensor, DType from, DType to, const char* what) {
    return Status(WSYNC_ERR_UNSUPPORTED,
                  "tensor '" + plan_.tensors[static_cast<size_t>(tensor)].name +
                      "': " + memoryKindName(memory_) + " memory cannot convert " +
                      dtypeName(from) + " to " + dtypeName(to) + what);
  };
  size_t staging = 0;
  for (const WriteOp& op : plan_.writes) {
    write_staging_offsets_.push_back(staging);
    if (!op.converts()) continue;
    if (!convertible(op.src_dtype, op.dst_dtype))
      return unsupported(op.tensor, op.src_dtype, op.dst_dtype, "");
    staging += static_cast<size_t>(plan_.numElements(op)) * dtypeSize(op.dst_dtype);
  }
  for (const BroadcastGroup& g : plan_.groups) {
    group_staging_offsets_.push_back(staging);
    if (g.src_dtype == g.dst_dtype) continue;
    if (!convertible(g.src_dtype, g.dst_dtype))
      return unsupported(g.tensor, g.src_dtype, g.dst_dtype, " for a broadcast");
    staging += static_cast<size_t>(g.num_elements) * dtypeSize(g.dst_dtype);
  }
  if (onDevice()) {
    WSYNC_ASSIGN_OR_RETURN(device_convert_staging_,
                           DeviceBuffer::allocate(staging, options_.cuda_device));
  } else {
    convert_staging_.resize(staging);
  }
  return Status::ok();
}

// The transport of `backend`, created (and given every source to register) on first use.
Result<WriteTransport*> TrainerContext::transportFor(const WriteBackend* backend) {
  for (const Backend& b : transports_)
    if (b.backend == backend) return b.transport.get();
  WSYNC_ASSIGN_OR_RETURN(std::unique_ptr<WriteTransport> transport,
                         backend->create(transportSetup(rank())));
  WSYNC_RETURN_IF_ERROR(registerSources(*transport));
  transports_.push_back({backend, std::move(transport)});
  return transports_.back().transport.get();
}

// Every memory writes read from (the buffers or their snapshot, and the conversion staging),
// registered once with `transport`.
Status TrainerContext::registerSources(WriteTransport& transport) {
  auto add = [&](const void* base, size_t bytes) -> Status {
    if (bytes == 0 || base == nullptr) return Status::ok();
    WSYNC_ASSIGN_OR_RETURN(auto reg, transport.registerSource(base, bytes));
    source_registrations_.push_back(std::move(reg));
    return Status::ok();
  };
  if (options_.snapshot) {
    WSYNC_RETURN_IF_ERROR(onDevice() ? add(device_snapshot_.data(), device_snapshot_.size())
                                     : add(snapshot_.data(), snapshot_.size()));
  } else {
    for (size_t i = 0; i < registration_.buffers.size(); ++i) {
      const LocalBuffer& b = registration_.buffers[i];
      WSYNC_RETURN_IF_ERROR(
          add(buffer_data_[i], static_cast<size_t>(b.num_elements) * dtypeSize(b.dtype)));
    }
  }
  WSYNC_RETURN_IF_ERROR(onDevice() ? add(device_corrupt_byte_.data(), device_corrupt_byte_.size())
                                   : add(corrupt_byte_.data(), corrupt_byte_.size()));
  for (const auto& part : extensions_) {
    WSYNC_RETURN_IF_ERROR(onDevice() ? add(part->device_staging.data(), part->device_staging.size())
                                     : add(part->host_staging.data(), part->host_staging.size()));
  }
  WSYNC_RETURN_IF_ERROR(add(quantizer_.memory(), quantizer_.memoryBytes()));
  WSYNC_RETURN_IF_ERROR(add(delta_.staging.data(), delta_.staging.size()));
  return onDevice() ? add(device_convert_staging_.data(), device_convert_staging_.size())
                    : add(convert_staging_.data(), convert_staging_.size());
}

// Peers: the write backend that reaches each one's slots from this trainer's memory; connect
// once, attach every slot once.
Status TrainerContext::connectPeers(const std::vector<PeerInfo>& peers) {
  peer_of_rollout_.assign(static_cast<size_t>(numRollouts()), -1);
  for (const PeerInfo& p : peers) {
    if (p.rank < 0 || p.rank >= numRollouts()) {
      return protocolError("plan assignment names unknown rollout " + std::to_string(p.rank));
    }
    WSYNC_RETURN_IF_ERROR(connectPeer(p, delta_));
  }
  for (const WriteOp& op : plan_.writes) {
    if (op.dst_rank < 0 || op.dst_rank >= numRollouts() ||
        peer_of_rollout_[static_cast<size_t>(op.dst_rank)] < 0) {
      return protocolError("a write targets rollout " + std::to_string(op.dst_rank) +
                           " with no peer information");
    }
  }
  return Status::ok();
}

Status TrainerContext::connectPeer(const PeerInfo& p, TrainerDeltaState& delta) {
  const std::string where = "rollout " + std::to_string(p.rank) + " (" + p.transport + ")";
  Result<const WriteBackend*> backend = writerBackendFor(p.transport, memory_);
  if (!backend.isOk()) return backend.status().withContext(where);
  WSYNC_ASSIGN_OR_RETURN(WriteTransport * transport, transportFor(*backend));
  if ((*backend)->reaches != nullptr) {
    const Status reach = (*backend)->reaches(transport->localAddress(), p.transport_address);
    if (!reach.isOk()) return reach.withContext(where);
  }
  WSYNC_RETURN_IF_ERROR(transport->connect(p.rank, p.transport_address).withContext(where));
  Peer peer;
  peer.transport = transport;
  for (const auto& descriptor : p.slot_descriptors) {
    WSYNC_ASSIGN_OR_RETURN(RemoteMemoryId id, transport->attach(p.rank, descriptor));
    peer.slot_memory.push_back(id);
  }
  peer.buffer_byte_offsets = p.buffer_byte_offsets;
  WSYNC_RETURN_IF_ERROR(attachDeltaLanding(p, *transport, delta).withContext(where));
  if (peer_of_rollout_.size() <= static_cast<size_t>(p.rank))
    peer_of_rollout_.resize(static_cast<size_t>(p.rank) + 1, -1);
  peer_of_rollout_[static_cast<size_t>(p.rank)] = static_cast<int32_t>(peers_.size());
  peers_.push_back(std::move(peer));
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
  std::unique_lock lock(queue_mu_);
  if (version == 0 || version <= last_version_) {
    return invalidUsage("version " + std::to_string(version) +
                        " is not greater than the last published version " +
                        std::to_string(last_version_) + " (versions start at 1 and increase)");
  }
  if (options_.snapshot) {
    // The staging copy may be overwritten only once the previous version left it.
    const bool free = queue_cv_.wait_for(lock, options_.timeout, [this] {
      return (queue_.empty() && !transfer_busy_) || failedOrAborted();
    });
    if (failedOrAborted()) return failure();
    if (!free) {
      return timeoutError("publish " + std::to_string(version) +
                          ": the previous version still occupies the "
                          "snapshot buffer after " +
                          std::to_string(options_.timeout.count()) + " ms");
    }
    if (onDevice()) {
      // Device copy into staging after the caller's work; the caller's later work waits for it.
      WSYNC_RETURN_IF_ERROR(setDevice(options_.cuda_device));
      WSYNC_RETURN_IF_ERROR(streamWaitFor(stream_.get(), stream));
      for (size_t i = 0; i < registration_.buffers.size(); ++i) {
        const LocalBuffer& b = registration_.buffers[i];
        WSYNC_RETURN_IF_ERROR(
            copyAsync(device_snapshot_.data() + snapshot_offsets_[i], buffer_data_[i],
                      static_cast<size_t>(b.num_elements) * dtypeSize(b.dtype), stream_.get()));
      }
      WSYNC_RETURN_IF_ERROR(streamWaitFor(stream, stream_.get()));
    } else {
      for (size_t i = 0; i < registration_.buffers.size(); ++i) {
        const LocalBuffer& b = registration_.buffers[i];
        if (b.num_elements == 0) continue;  // an empty buffer may have no data pointer
        std::memcpy(snapshot_.data() + snapshot_offsets_[i], buffer_data_[i],
                    static_cast<size_t>(b.num_elements) * dtypeSize(b.dtype));
      }
    }
  } else if (onDevice()) {
    // The transfer reads the buffers after what the caller's stream has produced so far.
    WSYNC_RETURN_IF_ERROR(setDevice(options_.cuda_device));
    WSYNC_RETURN_IF_ERROR(streamWaitFor(stream_.get(), stream));
  }
  // The coordinator hears of the version from this thread, so that the publisher thread's
  // wake-up overlaps the round trip to Go (publishOne reads the Go; one that arrives while the
  // publisher is idle is stashed for it).
  WSYNC_RETURN_IF_ERROR(sendMessage(MessageType::kPublish, encode(VersionMsg{version})));
  if (options_.snapshot) transfer_busy_ = true;
  std::vector<float> scales;
  {
    std::lock_guard scale_lock(scale_mu_);
    scales = plan_scales_;
  }
  auto request = std::make_shared<PublishRequest>(version, std::move(scales));
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
      // Idle: every kIdlePoll, read what the coordinator sent (membership news).
      while (
          !queue_cv_.wait_for(lock, kIdlePoll, [this] { return stopping_ || !queue_.empty(); })) {
        lock.unlock();
        if (!failedOrAborted()) pollControlWhileIdle();
        lock.lock();
      }
      if (queue_.empty()) return;
      request = queue_.front();
    }
    active_scales_ = request->scales();
    DeliveredMsg outcome;
    Status s = failedOrAborted() ? failure() : publishOne(request->version(), &outcome);
    if (!s.isOk()) setFailed(s);
    {
      std::lock_guard lock(queue_mu_);
      queue_.pop_front();
      transfer_busy_ = false;
    }
    queue_cv_.notify_all();
    request->complete(s, std::move(outcome));
  }
}

Status TrainerContext::publishOne(uint64_t version, DeliveredMsg* outcome) {
  const std::string what = "version " + std::to_string(version);
  using Clock = std::chrono::steady_clock;
  const Clock::time_point started = Clock::now();  // publish() sent Publish
  WSYNC_RETURN_IF_ERROR(startQuantizing(version));
  WSYNC_ASSIGN_OR_RETURN(GoMsg go, awaitGo(version));
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
  {
    std::lock_guard lock(queue_mu_);
    transfer_busy_ = false;  // the snapshot may be overwritten by the next publish
  }
  queue_cv_.notify_all();
  WSYNC_RETURN_IF_ERROR(sendSent(go));
  WSYNC_ASSIGN_OR_RETURN(DeliveredMsg d, awaitDelivered(version));  // re-sends on the way
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

const uint8_t* TrainerContext::sourceOf(int32_t buffer) const {
  if (buffer >= quantizer_.firstBuffer() && !quantizer_.empty()) {
    return quantizer_.bufferData(buffer);
  }
  const auto b = static_cast<size_t>(buffer);
  if (options_.snapshot) {
    return (onDevice() ? device_snapshot_.data() : snapshot_.data()) + snapshot_offsets_[b];
  }
  return static_cast<const uint8_t*>(buffer_data_[b]);
}

// The slot `rollout`'s replica writes this version into; -1 when the replica skips it (or left).
int32_t TrainerContext::slotFor(const GoMsg& go, int32_t rollout) const {
  if (rollout < 0 || static_cast<size_t>(rollout) >= replica_of_rollout_.size()) return -1;
  const int32_t replica = replica_of_rollout_[static_cast<size_t>(rollout)];
  if (replica < 0 || static_cast<size_t>(replica) >= go.slot_of_replica.size()) return -1;
  return go.slot_of_replica[static_cast<size_t>(replica)];
}

// A group's replica takes the version when Go gives it a slot and it is still the replica of
// the group's ranks (not dropped; a later replica may reuse its id).
bool TrainerContext::replicaTakes(const GoMsg& go, const BroadcastGroup& group) const {
  if (group.dst.empty() || slotFor(go, group.dst.front().rank) < 0) return false;
  return replica_of_rollout_[static_cast<size_t>(group.dst.front().rank)] == group.replica;
}

// Device memory: every converting write and group is first converted (and packed) into staging by a
// kernel on stream_, which also carries the snapshot copy and waits for the caller's stream; the
// copies and broadcasts start once stream_ is idle.
Status TrainerContext::convertIntoStaging(const GoMsg& go) {
  WSYNC_RETURN_IF_ERROR(setDevice(options_.cuda_device));
  for (size_t i = 0; i < plan_.groups.size(); ++i) {
    const BroadcastGroup& g = plan_.groups[i];
    if (g.src_dtype == g.dst_dtype || !replicaTakes(go, g)) continue;
    Region run;  // the group's elements: one contiguous run on both sides
    run.count[0] = g.num_elements;
    const uint8_t* src =
        sourceOf(g.src.buffer) + static_cast<size_t>(g.src.offset) * dtypeSize(g.src_dtype);
    const Status s = convertRegionAsync(src, g.src_dtype, stagingAt(group_staging_offsets_[i]),
                                        g.dst_dtype, run, activeScale(g.tensor), stream_.get());
    if (!s.isOk()) {
      return s.withContext("tensor '" + plan_.tensors[static_cast<size_t>(g.tensor)].name +
                           "': converting for a broadcast");
    }
  }
  for (size_t i = 0; i < plan_.writes.size(); ++i) {
    const WriteOp& op = plan_.writes[i];
    if (!op.converts() || slotFor(go, op.dst_rank) < 0) continue;
    WSYNC_RETURN_IF_ERROR(
        convertWriteAsync(plan_, op, stagingAt(write_staging_offsets_[i]), activeScale(op.tensor)));
  }
  WSYNC_RETURN_IF_ERROR(convertExtensionsIntoStaging(go));
  return streamSync(stream_.get(), options_.timeout);
}

// Device memory: converts write op `op`'s source region into `staged`, packed, on stream_.
Status TrainerContext::convertWriteAsync(const RankPlan& plan, const WriteOp& op, uint8_t* staged,
                                         float scale) {
  Region packed = plan.region(op);  // the source region, written contiguously into staging
  packed.dst_offset = 0;
  packed.dst_stride[0] = packed.count[0];
  packed.dst_stride[1] = packed.count[0] * packed.count[1];
  const uint8_t* src =
      sourceOf(op.src_buffer) + static_cast<size_t>(op.src_offset) * dtypeSize(op.src_dtype);
  packed.src_offset = 0;
  return convertRegionAsync(src, op.src_dtype, staged, op.dst_dtype, packed, scale, stream_.get());
}

// Queues this trainer's broadcast of every group whose replica takes the version (host memory:
// converting here first; device memory: convertIntoStaging did).
Status TrainerContext::postGroups(const GoMsg& go) {
  if (!broadcaster_) return Status::ok();
  for (size_t i = 0; i < plan_.groups.size(); ++i) {
    const BroadcastGroup& g = plan_.groups[i];
    if (!replicaTakes(go, g)) continue;  // that replica skips this version
    const uint8_t* src =
        sourceOf(g.src.buffer) + static_cast<size_t>(g.src.offset) * dtypeSize(g.src_dtype);
    uint8_t* data = const_cast<uint8_t*>(src);  // the broadcasts take void*; the root only reads
    if (g.src_dtype != g.dst_dtype) {
      data = stagingAt(group_staging_offsets_[i]);
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
  if (!broadcaster_) return Status::ok();
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
  if (onDevice()) WSYNC_RETURN_IF_ERROR(convertIntoStaging(go));
  WSYNC_RETURN_IF_ERROR(postGroups(go));
  WSYNC_RETURN_IF_ERROR(sendDeltas(go));  // patches first; their ops are not written dense
  for (size_t i = 0; i < plan_.writes.size(); ++i) {
    const WriteOp& op = plan_.writes[i];
    const int32_t slot = slotFor(go, op.dst_rank);
    if (slot < 0) continue;
    const uint64_t bytes = static_cast<uint64_t>(plan_.numElements(op)) * dtypeSize(op.dst_dtype);
    delta_.full_bytes += bytes;
    const bool delta_op = i < delta_.ops.size();
    if (delta_op && delta_.ops[i].patched) continue;
    delta_.wire_bytes += bytes;
    uint8_t* staged = op.converts() ? stagingAt(write_staging_offsets_[i]) : nullptr;
    WSYNC_RETURN_IF_ERROR(postWrite(plan_, op, staged, slot, delta_op && delta_.ops[i].converted));
  }
  WSYNC_RETURN_IF_ERROR(postExtensionWrites(go));
  WSYNC_RETURN_IF_ERROR(flushWrites());
  WSYNC_RETURN_IF_ERROR(corruptOneWrite(go));
  return waitGroups();
}

// Posts write op `op` of `plan` into `slot` of its rollout (host memory converts its rows into
// `staged` first; device memory did in convertIntoStaging).
Status TrainerContext::postWrite(const RankPlan& plan, const WriteOp& op, uint8_t* staged,
                                 int32_t slot, bool converted) {
  const auto peer_index = static_cast<size_t>(op.dst_rank) < peer_of_rollout_.size()
                              ? peer_of_rollout_[static_cast<size_t>(op.dst_rank)]
                              : -1;
  if (peer_index < 0) {
    return protocolError("a write targets rollout " + std::to_string(op.dst_rank) +
                         " with no peer information");
  }
  const Peer& peer = peers_[static_cast<size_t>(peer_index)];
  if (static_cast<size_t>(slot) >= peer.slot_memory.size()) {
    return protocolError("slot " + std::to_string(slot) + " of rollout " +
                         std::to_string(op.dst_rank) + " is unknown");
  }
  const RemoteMemoryId remote = peer.slot_memory[static_cast<size_t>(slot)];
  const Region r = plan.region(op);
  const size_t ssz = dtypeSize(op.src_dtype);
  const size_t dsz = dtypeSize(op.dst_dtype);
  const uint64_t dst_base = peer.buffer_byte_offsets[static_cast<size_t>(op.dst_buffer)] +
                            static_cast<uint64_t>(r.dst_offset) * dsz;
  const uint8_t* src_base = sourceOf(op.src_buffer) + static_cast<size_t>(r.src_offset) * ssz;
  const size_t row_bytes = static_cast<size_t>(r.count[0]) * dsz;
  const auto rows = static_cast<size_t>(r.count[1]);
  const uint8_t* src = src_base;
  size_t src_pitch = static_cast<size_t>(r.src_stride[0]) * ssz;
  size_t src_plane_pitch = static_cast<size_t>(r.src_stride[1]) * ssz;
  if (op.converts()) {  // the converted region, packed in its staging
    // host: convert the rows now (device: convertIntoStaging did)
    if (!onDevice() && !converted) WSYNC_RETURN_IF_ERROR(convertHostStaging(plan, op, staged));
    src = staged;
    src_pitch = row_bytes;
    src_plane_pitch = row_bytes * rows;
  }
  return peer.transport->write3d(remote, dst_base, static_cast<uint64_t>(r.dst_stride[0]) * dsz,
                                 static_cast<uint64_t>(r.dst_stride[1]) * dsz, src, src_pitch,
                                 src_plane_pitch, row_bytes, rows, static_cast<size_t>(r.count[2]));
}

Status TrainerContext::convertHostStaging(const RankPlan& plan, const WriteOp& op,
                                          uint8_t* staged) const {
  const Region r = plan.region(op);
  const size_t ssz = dtypeSize(op.src_dtype);
  const size_t row_bytes = static_cast<size_t>(r.count[0]) * dtypeSize(op.dst_dtype);
  const uint8_t* src_base = sourceOf(op.src_buffer) + static_cast<size_t>(r.src_offset) * ssz;
  for (int64_t row = 0; row < r.count[1] * r.count[2]; ++row) {
    const int64_t plane = row / r.count[1];
    const int64_t at = plane * r.src_stride[1] + (row % r.count[1]) * r.src_stride[0];
    WSYNC_RETURN_IF_ERROR(convertHost(src_base + static_cast<size_t>(at) * ssz, op.src_dtype,
                                      staged + static_cast<size_t>(row) * row_bytes, op.dst_dtype,
                                      r.count[0]));
  }
  return Status::ok();
}

// Completes every posted write on every backend.
Status TrainerContext::flushWrites() {
  for (const Backend& b : transports_)
    WSYNC_RETURN_IF_ERROR(b.transport->flush(options_.timeout));
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
    queue_cv_.wait_for(lock, options_.timeout,
                       [this] { return queue_.empty() || failedOrAborted(); });
  }
  stopPublisher();
  return Context::finalize();
}

}  // namespace wsync
