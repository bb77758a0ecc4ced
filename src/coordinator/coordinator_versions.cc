// The coordinator's version events: the sequencer's input from ranks, and sending its output
// (Delivered held by the delivery gate until every Ready is confirmed, with the metrics' stats).
#include "coordinator/coordinator_impl.h"
#include "coordinator/delivery_gate.h"
#include "coordinator/delta_assign.h"
#include "coordinator/metrics.h"

namespace wsync {

using coordinator_internal::Clock;

// ---- versions (coordinator/version_sequencer.h) -----------------------------------------
Status Coordinator::Impl::onVersionMessage(const Participant& p, MessageType type,
                                           const std::vector<uint8_t>& payload) {
  if (phase_ != Phase::kRunning) {
    return invalidUsage(std::string(messageTypeName(type)) + " before commit completed");
  }
  const bool trainer_message = type == MessageType::kPublish || type == MessageType::kSent ||
                               type == MessageType::kSentChecksums;
  if ((p.hello.role == Role::kTrainer) != trainer_message) {
    return protocolError(std::string("unexpected message ") + messageTypeName(type) + " from a " +
                         roleName(p.hello.role) + " rank");
  }
  const auto now = Clock::now();
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
    opt_.metrics->onWireBytes(m.version, m.wire_bytes, m.full_bytes);
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

// Logs the sequencer's notes and sends its messages; returns its error, if any.
Status Coordinator::Impl::apply(Result<SequencerOutput> output) {
  if (!output.isOk()) return output.status();
  // Delivered also carries the version's stats (coordinator/metrics.h).
  const std::optional<DeliveredMsg> stats =
      opt_.metrics->observe(*output, *sequencer_, Clock::now());
  for (const std::string& note : output->notes)
    log(note);
  for (OutgoingMessage& m : output->messages) {
    // Delta versions: a version's first Go names each taking replica's base (re-sends are dense).
    if (m.type == MessageType::kGo && opt_.job.delta &&
        std::get<GoMsg>(m.payload).version > delta_first_go_) {
      delta_first_go_ = std::get<GoMsg>(m.payload).version;
      setDeltaBases(*sequencer_, std::get<GoMsg>(m.payload));
    }
    if (m.type == MessageType::kReady) {
      for (const RankRef& to : m.to)
        delivery_gate_.readySent(std::get<SlotMsg>(m.payload).version, to.rank, Clock::now());
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
  if (output->delivered && !joins_.empty()) joins_.onDelivered();
  return Status::ok();
}

void Coordinator::Impl::send(const OutgoingMessage& m) {
  const std::vector<uint8_t> payload = m.encodedPayload();
  for (const RankRef& to : m.to)
    sendTo(to.role == Role::kTrainer ? trainer(to.rank) : rollout(to.rank), m.type, payload);
}

// A rollout rank can now acquire the version: the last confirmation releases Delivered.
Status Coordinator::Impl::onReadied(const Participant& p, const std::vector<uint8_t>& payload) {
  if (phase_ != Phase::kRunning || p.hello.role != Role::kRollout) {
    return protocolError("unexpected Readied");
  }
  VersionMsg m;
  WSYNC_RETURN_IF_ERROR(decode(payload, m));
  WSYNC_ASSIGN_OR_RETURN(std::optional<OutgoingMessage> released,
                         delivery_gate_.readied(m.version, p.role_rank));
  if (released) send(*released);
  return Status::ok();
}

}  // namespace wsync
