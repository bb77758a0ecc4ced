// The running job's versions on the wire (coordinator/coordinator.h): the version sequencer
// (coordinator/version_sequencer.h) fed by the ranks' version messages, and its output sent to
// the ranks: Delivered held by the delivery gate (coordinator/delivery_gate.h) until every Ready
// is confirmed, with the version's stats from the metrics; a delta version's first Go naming each
// taking replica's base. A component of the coordinator's event loop: it owns the sequencer (from
// planning on), the gate and the delta bases, finds ranks in the participant table and sends
// through a CoordinatorWire; the time comes from a clock callback. No sockets; not thread-safe:
// the event thread owns it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "coordinator/coordinator_wire.h"
#include "coordinator/delivery_gate.h"
#include "coordinator/metrics.h"
#include "coordinator/participants.h"
#include "coordinator/version_sequencer.h"
#include "options/options.h"
#include "protocol/protocol.h"

namespace wsync {

class RunningVersions {
 public:
  // `job`: job.delta (delta bases on first Go); `delivered`: called after an event delivered a
  // version (joins waiting for one); `clock`: the time of each event.
  RunningVersions(JobSettings job, CoordinatorMetrics& metrics,
                  const ParticipantTable& participants, CoordinatorWire& wire,
                  std::function<void()> delivered, std::function<SequencerTime()> clock);

  // At planning: the sequencer, with the job's replicas (INVALID_ARGUMENT as addReplica()).
  Status start(const SequencerOptions& options, int32_t num_trainers,
               const std::vector<ReplicaSpec>& replicas);
  // The sequencer, for queries; nullptr before start().
  const VersionSequencer* sequencer() const { return sequencer_ ? &*sequencer_ : nullptr; }
  uint64_t inFlightVersion() const { return sequencer_ ? sequencer_->inFlightVersion() : 0; }

  // ---- events (after start()) ----
  // A rank's Publish, Prepared, SlotBusy, Sent, SentChecksums, Received, Verified or
  // ChecksumFailed: PROTOCOL when the rank's role does not send it; the sequencer's error.
  Status onMessage(const Participant& p, MessageType type, const std::vector<uint8_t>& payload);
  // A rollout rank's Readied: the last confirmation of a version releases its Delivered.
  Status onReadied(const Participant& p, const std::vector<uint8_t>& payload);
  Status addReplica(const ReplicaSpec& spec) { return sequencer_->addReplica(spec); }
  // Replica `replica` (rollout ranks `ranks`) left the job: no confirmation of Ready is awaited
  // from its ranks, the sequencer stops waiting for it (when it had it).
  Status dropReplica(int32_t replica, const std::vector<int32_t>& ranks);
  // Time passed (VersionSequencer::advance): the replicas stalled past the replica bound.
  Result<std::vector<int32_t>> advance(SequencerTime now);
  // The trainers were lost: the version in flight ends (slots given back), Delivered dropped.
  Status abort();
  // Confirmations of Ready overdue past `timeout` (the job's error), and the ranks past `bound`.
  std::optional<std::string> overdue(SequencerTime now, std::chrono::milliseconds timeout) const {
    return delivery_gate_.overdue(now, timeout);
  }
  std::vector<int32_t> overdueRanks(SequencerTime now, std::chrono::milliseconds bound) const {
    return delivery_gate_.overdueRanks(now, bound);
  }

 private:
  // Logs the sequencer's notes and sends its messages; returns its error, if any.
  Status apply(Result<SequencerOutput> output);
  void send(const OutgoingMessage& m);

  JobSettings job_;
  CoordinatorMetrics& metrics_;
  const ParticipantTable& participants_;
  CoordinatorWire& wire_;
  std::function<void()> delivered_;
  std::function<SequencerTime()> clock_;
  std::optional<VersionSequencer> sequencer_;
  DeliveryGate delivery_gate_;   // holds Delivered until Ready is confirmed
  uint64_t delta_first_go_ = 0;  // delta versions: the newest version whose first Go was sent
};

}  // namespace wsync
