#include "coordinator/running_versions.h"

#include <utility>

#include "coordinator/delta_assign.h"

namespace wsync {

RunningVersions::RunningVersions(JobSettings job, CoordinatorMetrics& metrics,
                                 const ParticipantTable& participants, CoordinatorWire& wire,
                                 std::function<void()> delivered,
                                 std::function<SequencerTime()> clock)
    : job_(job),
      metrics_(metrics),
      participants_(participants),
      wire_(wire),
      delivered_(std::move(delivered)),
      clock_(std::move(clock)) {}

Status RunningVersions::start(const SequencerOptions& options, int32_t num_trainers,
                              const std::vector<ReplicaSpec>& replicas) {
  sequencer_.emplace(options, num_trainers);
  for (const ReplicaSpec& spec : replicas)
    WSYNC_RETURN_IF_ERROR(sequencer_->addReplica(spec));
  return Status::ok();
}

Status RunningVersions::onMessage(const Participant& p, MessageType type,
                                  const std::vector<uint8_t>& payload) {
  const bool trainer_message = type == MessageType::kPublish || type == MessageType::kSent ||
                               type == MessageType::kSentChecksums;
  if ((p.hello.role == Role::kTrainer) != trainer_message) {
    return protocolError(std::string("unexpected message ") + messageTypeName(type) + " from a " +
                         roleName(p.hello.role) + " rank");
  }
  const SequencerTime now = clock_();
  if (type == MessageType::kPrepared) {
    SlotMsg m;
    WSYNC_RETURN_IF_ERROR(decode(payload, m));
    return apply(sequencer_->onPrepared(p.role_rank, m, now));
  }
  if (type == MessageType::kSlotBusy) {
    SlotMsg m;
    WSYNC_RETURN_IF_ERROR(decode(payload, m));
    return apply(sequencer_->onSlotBusy(p.role_rank, m, now));
  }
  if (type == MessageType::kSentChecksums) {
    SentChecksumsMsg m;
    WSYNC_RETURN_IF_ERROR(decode(payload, m));
    metrics_.onWireBytes(m.version, m.wire_bytes, m.full_bytes);
    return apply(sequencer_->onSent(p.role_rank, m.version, now, m.sums));
  }
  if (type == MessageType::kChecksumFailed) {
    ChecksumFailedMsg m;
    WSYNC_RETURN_IF_ERROR(decode(payload, m));
    return apply(sequencer_->onChecksumFailed(p.role_rank, m, now));
  }
  VersionMsg m;
  WSYNC_RETURN_IF_ERROR(decode(payload, m));
  if (type == MessageType::kPublish)
    return apply(sequencer_->onPublish(p.role_rank, m.version, now));
  if (type == MessageType::kSent) return apply(sequencer_->onSent(p.role_rank, m.version, now));
  if (type == MessageType::kVerified)
    return apply(sequencer_->onVerified(p.role_rank, m.version, now));
  return apply(sequencer_->onReceived(p.role_rank, m.version, now));
}

Status RunningVersions::onReadied(const Participant& p, const std::vector<uint8_t>& payload) {
  VersionMsg m;
  WSYNC_RETURN_IF_ERROR(decode(payload, m));
  WSYNC_ASSIGN_OR_RETURN(std::optional<OutgoingMessage> released,
                         delivery_gate_.readied(m.version, p.role_rank));
  if (released) send(*released);
  return Status::ok();
}

Status RunningVersions::dropReplica(int32_t replica, const std::vector<int32_t>& ranks) {
  for (int32_t rank : ranks) {  // no confirmation of Ready is awaited from it any more
    for (const OutgoingMessage& released : delivery_gate_.forget(rank))
      send(released);
  }
  if (!sequencer_ || !sequencer_->hasReplica(replica)) return Status::ok();
  return apply(sequencer_->removeReplica(replica, clock_()));
}

Result<std::vector<int32_t>> RunningVersions::advance(SequencerTime now) {
  Result<SequencerOutput> advanced = sequencer_->advance(now);
  std::vector<int32_t> stalled =
      advanced.isOk() ? advanced->stalled_replicas : std::vector<int32_t>{};
  WSYNC_RETURN_IF_ERROR(apply(std::move(advanced)));
  return stalled;
}

Status RunningVersions::abort() {
  WSYNC_RETURN_IF_ERROR(apply(sequencer_->abortVersions()));
  delivery_gate_.abandonAll();
  return Status::ok();
}

Status RunningVersions::apply(Result<SequencerOutput> output) {
  if (!output.isOk()) return output.status();
  // Delivered also carries the version's stats (coordinator/metrics.h).
  const std::optional<DeliveredMsg> stats = metrics_.observe(*output, *sequencer_, clock_());
  for (const std::string& note : output->notes)
    wire_.log(note);
  for (OutgoingMessage& m : output->messages) {
    // Delta versions: a version's first Go names each taking replica's base (re-sends are dense).
    if (m.type == MessageType::kGo && job_.delta &&
        std::get<GoMsg>(m.payload).version > delta_first_go_) {
      delta_first_go_ = std::get<GoMsg>(m.payload).version;
      setDeltaBases(*sequencer_, std::get<GoMsg>(m.payload));
    }
    if (m.type == MessageType::kReady) {
      for (const RankRef& to : m.to)
        delivery_gate_.readySent(std::get<SlotMsg>(m.payload).version, to.rank, clock_());
    }
    if (m.type == MessageType::kDelivered) {  // held by the gate until every Ready is confirmed
      if (stats) {
        auto& d = std::get<DeliveredMsg>(m.payload);
        d.has_stats = true;
        d.stats = stats->stats;
      }
      if (std::optional<OutgoingMessage> now = delivery_gate_.deliver(std::move(m))) send(*now);
      continue;
    }
    send(m);
  }
  if (output->delivered && delivered_) delivered_();
  return Status::ok();
}

void RunningVersions::send(const OutgoingMessage& m) {
  const std::vector<uint8_t> payload = m.encodedPayload();
  for (const RankRef& to : m.to) {
    wire_.sendTo(
        to.role == Role::kTrainer ? participants_.trainer(to.rank) : participants_.rollout(to.rank),
        m.type, payload);
  }
}

}  // namespace wsync
