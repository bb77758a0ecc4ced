// TrainerContext's part in the running job's membership (runtime/trainer_context.h): replicas the
// coordinator dropped are written no more; replicas that join get their writes from a plan
// extension. Everything here runs on the publisher thread, between versions.
#include <algorithm>
#include <cstdio>

#include "codec/plan_codec.h"
#include "runtime/host_convert.h"
#include "runtime/trainer_context.h"

namespace wsync {
namespace {
using Clock = std::chrono::steady_clock;

bool isMembership(MessageType type) {
  return type == MessageType::kReplicaDropped || type == MessageType::kPlanExtension;
}
}  // namespace

Result<Frame> TrainerContext::nextFrame(MessageType expected, std::chrono::milliseconds timeout,
                                        std::optional<MessageType> also) {
  const Clock::time_point deadline = Clock::now() + timeout;
  while (true) {
    Frame frame;
    if (!stashed_.empty()) {
      frame = std::move(stashed_.front());
      stashed_.pop_front();
    } else {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      WSYNC_ASSIGN_OR_RETURN(frame,
                             job_.channel->recv(std::max(left, std::chrono::milliseconds(0))));
    }
    const auto type = static_cast<MessageType>(frame.type);
    if (isMembership(type)) {
      WSYNC_RETURN_IF_ERROR(handleMembership(frame));
      continue;
    }
    if (type == MessageType::kError) {
      ErrorMsg err;
      WSYNC_RETURN_IF_ERROR(decode(frame.payload, err));
      return Status(err.code, err.message);
    }
    if (type != expected && type != also) {
      return protocolError(std::string("expected ") + messageTypeName(expected) +
                           " from the coordinator, got " + messageTypeName(type));
    }
    return frame;
  }
}

void TrainerContext::pollControlWhileIdle() {
  while (true) {
    Result<Frame> frame = job_.channel->recv(std::chrono::milliseconds(0));
    if (!frame.isOk()) {
      if (frame.status().code() != WSYNC_ERR_TIMEOUT) {
        setFailed(frame.status().withContext("control channel"));
      }
      return;
    }
    const auto type = static_cast<MessageType>(frame->type);
    if (type == MessageType::kError) {
      ErrorMsg err;
      const Status decoded = decode(frame->payload, err);
      setFailed(decoded.isOk() ? Status(err.code, err.message) : decoded);
      return;
    }
    if (!isMembership(type)) {  // a Go another trainer's Publish started: publishOne reads it
      stashed_.push_back(std::move(frame).value());
      continue;
    }
    const Status s = handleMembership(*frame);
    if (!s.isOk()) {
      setFailed(s);
      (void)sendError(s.withContext("trainer " + std::to_string(rank())));
      return;
    }
  }
}

Status TrainerContext::handleMembership(const Frame& frame) {
  if (static_cast<MessageType>(frame.type) == MessageType::kReplicaDropped) {
    ReplicaMsg dropped;
    WSYNC_RETURN_IF_ERROR(decode(frame.payload, dropped));
    forgetReplica(dropped);
    return Status::ok();
  }
  PlanExtensionMsg extension;
  WSYNC_RETURN_IF_ERROR(decode(frame.payload, extension));
  const int32_t replica = extension.replica;
  const Status applied = applyExtension(std::move(extension));
  if (!applied.isOk()) {
    // The replica cannot be written from here: it never gets ExtensionDone from this trainer,
    // and the coordinator ends its join (TIMEOUT naming the trainers that did not apply it). The
    // job goes on.
    std::fprintf(stderr, "[wsync trainer %d] replica %d cannot join: %s\n", rank(), replica,
                 applied.toString().c_str());
    forgetReplica(ReplicaMsg{replica, {}});
    return Status::ok();
  }
  return sendMessage(MessageType::kExtensionDone, encode(ReplicaMsg{replica, {}}));
}

// Writes to the replica's ranks stop (its part of the plan, or its extension, stays allocated:
// the memory is registered with the transports until they go).
void TrainerContext::forgetReplica(const ReplicaMsg& dropped) {
  for (int32_t r : dropped.ranks) {
    if (static_cast<size_t>(r) < replica_of_rollout_.size())
      replica_of_rollout_[static_cast<size_t>(r)] = -1;
  }
  for (auto& part : extensions_) {
    if (part->replica != dropped.replica || !part->active) continue;
    part->active = false;
    for (int32_t r : part->ranks) {
      if (static_cast<size_t>(r) < replica_of_rollout_.size())
        replica_of_rollout_[static_cast<size_t>(r)] = -1;
    }
  }
}

// Connects the joining replica's ranks, attaches their slots and adds this trainer's writes to
// them; they are posted from the first version whose Go gives the replica a slot.
Status TrainerContext::applyExtension(PlanExtensionMsg extension) {
  const std::string what = "replica " + std::to_string(extension.replica) + " joining";
  WSYNC_ASSIGN_OR_RETURN(RankPlan plan,
                         decodeRankPlan(extension.rank_plan.data(), extension.rank_plan.size()));
  const auto in_replica = [&](int32_t r) {
    return std::find(extension.ranks.begin(), extension.ranks.end(), r) != extension.ranks.end();
  };
  if (!plan.groups.empty()) return protocolError(what + ": an extension has broadcast groups");
  for (const PeerInfo& p : extension.peers) {
    if (!in_replica(p.rank))
      return protocolError(what + ": names rollout " + std::to_string(p.rank));
    const bool known = static_cast<size_t>(p.rank) < peer_of_rollout_.size() &&
                       peer_of_rollout_[static_cast<size_t>(p.rank)] >= 0;
    if (known) return protocolError(what + ": rollout " + std::to_string(p.rank) + " is known");
  }
  for (const WriteOp& op : plan.writes) {
    if (!in_replica(op.dst_rank)) {
      return protocolError(what + ": a write targets rollout " + std::to_string(op.dst_rank));
    }
  }
  auto part = std::make_unique<ExtensionPart>();
  part->replica = extension.replica;
  part->ranks = extension.ranks;
  part->plan = std::move(plan);
  WSYNC_RETURN_IF_ERROR(setupDelta(part->plan, extension.peers, part->delta).withContext(what));
  for (const PeerInfo& p : extension.peers)
    WSYNC_RETURN_IF_ERROR(connectPeer(p, part->delta).withContext(what));
  WSYNC_RETURN_IF_ERROR(sizePartStaging(*part).withContext(what));
  for (int32_t r : part->ranks) {
    if (replica_of_rollout_.size() <= static_cast<size_t>(r))
      replica_of_rollout_.resize(static_cast<size_t>(r) + 1, -1);
    replica_of_rollout_[static_cast<size_t>(r)] = part->replica;
  }
  extensions_.push_back(std::move(part));
  return Status::ok();
}

// The part's conversion staging (one range per converting write), registered with every
// transport this trainer has.
Status TrainerContext::sizePartStaging(ExtensionPart& part) {
  size_t staging = 0;
  for (const WriteOp& op : part.plan.writes) {
    part.staging_offsets.push_back(staging);
    if (!op.converts()) continue;
    const bool convertible = onDevice() ? deviceCanConvertTypes(op.src_dtype, op.dst_dtype)
                                        : hostCanConvert(op.src_dtype, op.dst_dtype);
    if (!convertible) {
      return Status(WSYNC_ERR_UNSUPPORTED,
                    "tensor '" + part.plan.tensors[static_cast<size_t>(op.tensor)].name +
                        "': " + memoryKindName(memory_) + " memory cannot convert " +
                        dtypeName(op.src_dtype) + " to " + dtypeName(op.dst_dtype));
    }
    staging += static_cast<size_t>(part.plan.numElements(op)) * dtypeSize(op.dst_dtype);
  }
  if (!part.delta.staging.empty()) {  // its patches' areas, written from here
    for (const Backend& b : transports_) {
      WSYNC_ASSIGN_OR_RETURN(auto reg, b.transport->registerSource(part.delta.staging.data(),
                                                                   part.delta.staging.size()));
      source_registrations_.push_back(std::move(reg));
    }
  }
  if (staging == 0) return Status::ok();
  if (onDevice()) {
    WSYNC_ASSIGN_OR_RETURN(part.device_staging,
                           DeviceBuffer::allocate(staging, options_.cuda_device));
  } else {
    part.host_staging.resize(staging);
  }
  for (const Backend& b : transports_) {
    WSYNC_ASSIGN_OR_RETURN(auto reg, b.transport->registerSource(part.stagingAt(0), staging));
    source_registrations_.push_back(std::move(reg));
  }
  return Status::ok();
}

Status TrainerContext::postExtensionWrites(const GoMsg& go) {
  for (const auto& part : extensions_) {
    if (!part->active) continue;
    for (size_t i = 0; i < part->plan.writes.size(); ++i) {
      const WriteOp& op = part->plan.writes[i];
      const int32_t slot = slotFor(go, op.dst_rank);
      if (slot < 0) continue;
      const uint64_t bytes =
          static_cast<uint64_t>(part->plan.numElements(op)) * dtypeSize(op.dst_dtype);
      delta_.full_bytes += bytes;
      const bool delta_op = i < part->delta.ops.size();
      if (delta_op && part->delta.ops[i].patched) continue;  // sent as a patch (sendDeltas)
      delta_.wire_bytes += bytes;
      uint8_t* staged = op.converts() ? part->stagingAt(part->staging_offsets[i]) : nullptr;
      WSYNC_RETURN_IF_ERROR(
          postWrite(part->plan, op, staged, slot, delta_op && part->delta.ops[i].converted));
    }
  }
  return Status::ok();
}

// Device memory: the extensions' converting writes into their staging (float8 scales by tensor
// name, as set now).
Status TrainerContext::convertExtensionsIntoStaging(const GoMsg& go) {
  for (const auto& part : extensions_) {
    if (!part->active) continue;
    {
      std::lock_guard lock(scale_mu_);
      part->scales.assign(part->plan.tensors.size(), 1.0f);
      for (size_t t = 0; t < part->plan.tensors.size(); ++t) {
        auto it = scale_by_name_.find(part->plan.tensors[t].name);
        if (it != scale_by_name_.end()) part->scales[t] = it->second;
      }
    }
    for (size_t i = 0; i < part->plan.writes.size(); ++i) {
      const WriteOp& op = part->plan.writes[i];
      if (!op.converts() || slotFor(go, op.dst_rank) < 0) continue;
      WSYNC_RETURN_IF_ERROR(convertWriteAsync(part->plan, op,
                                              part->stagingAt(part->staging_offsets[i]),
                                              part->scales[static_cast<size_t>(op.tensor)]));
    }
  }
  return Status::ok();
}

}  // namespace wsync
