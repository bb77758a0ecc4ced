// Finishing a version (version_sequencer.h): Ready per replica once its data landed, checksum
// verification and re-sends, Delivered once every taking replica is done; who a late version
// waits on.
#include <algorithm>

#include "coordinator/version_sequencer.h"
#include "coordinator/version_sequencer_names.h"

namespace wsync {

using sequencer_names::versionName;

void VersionSequencer::tryComplete(SequencerTime now, SequencerOutput& out) {
  if (!in_flight_ || !in_flight_->go_sent) return;
  const uint64_t v = in_flight_->version;
  bool all_done = true;
  for (auto& [id, replica] : replicas_) {
    if (replica.stage == Stage::kTaking &&
        replica.sent.size() == static_cast<size_t>(num_trainers_) &&
        replica.received.size() == replica.ranks.size()) {
      if (options_.job.checksums) {
        replica.asked = now;
        sendVerify(replica, out);
      } else {
        markReady(replica, out);
      }
    }
    all_done = all_done && replica.stage != Stage::kTaking && replica.stage != Stage::kVerifying &&
               replica.stage != Stage::kPreparing;
  }
  if (!all_done || !allTrainersSentEveryGo()) return;
  VersionOutcome outcome;
  outcome.version = v;
  outcome.lost_replicas = std::move(in_flight_->lost);
  std::sort(outcome.lost_replicas.begin(), outcome.lost_replicas.end());
  outcome.ready_replicas = std::move(in_flight_->departed_ready);
  outcome.rejected_replicas = std::move(in_flight_->rejected);
  std::sort(outcome.rejected_replicas.begin(), outcome.rejected_replicas.end());
  for (auto& [id, replica] : replicas_) {
    if (replica.stage == Stage::kReady) outcome.ready_replicas.push_back(id);
    if (replica.stage == Stage::kSkipped) outcome.skipped_replicas.push_back(id);
    if (replica.checksum_failures > 0) outcome.checksum_failures[id] = replica.checksum_failures;
    if (replica.retries > 0) outcome.retries[id] = replica.retries;
    replica.stage = Stage::kOut;
  }
  std::sort(outcome.ready_replicas.begin(), outcome.ready_replicas.end());
  out.messages.push_back(
      {MessageType::kDelivered, trainerRanks(),
       DeliveredMsg{
           v, outcome.ready_replicas, outcome.skipped_replicas, outcome.lost_replicas, false, {}}});
  out.delivered = std::move(outcome);
  in_flight_.reset();
  startNext(now, out);
  prepareAhead(out);
}

bool VersionSequencer::allTrainersSentEveryGo() const {
  const size_t gos = in_flight_->go_batches.size();
  return std::all_of(in_flight_->trainer_sent.begin(), in_flight_->trainer_sent.end(),
                     [gos](size_t sent) { return sent == gos; });
}

void VersionSequencer::markReady(Replica& replica, SequencerOutput& out) {
  const uint64_t v = in_flight_->version;
  replica.stage = Stage::kReady;
  replica.ready_version = v;
  replica.ready_slot = replica.target_slot;
  replica.slot_version[static_cast<size_t>(replica.target_slot)] = v;
  OutgoingMessage ready{MessageType::kReady, {}, SlotMsg{v, replica.target_slot}};
  for (int32_t r : replica.ranks)
    ready.to.push_back({Role::kRollout, r});
  out.messages.push_back(std::move(ready));
}

// ---- checksums ---------------------------------------------------------------------------------

void VersionSequencer::sendVerify(Replica& replica, SequencerOutput& out) {
  replica.stage = Stage::kVerifying;
  replica.verified.clear();
  replica.verify_failed = false;
  for (int32_t r : replica.ranks) {
    VerifyMsg verify{in_flight_->version, replica.target_slot, {}};
    for (const auto& [trainer, sum] : replica.expected[r])
      verify.sums.push_back({trainer, sum});
    out.messages.push_back({MessageType::kVerify, {{Role::kRollout, r}}, std::move(verify)});
  }
}

GoMsg VersionSequencer::goFor(int32_t replica, int32_t slot) const {
  GoMsg go{in_flight_->version,
           std::vector<int32_t>(replicas_.empty() ? 0 : replicas_.rbegin()->first + 1, -1)};
  go.slot_of_replica[static_cast<size_t>(replica)] = slot;
  return go;
}

// Every rank of replica `id` answered Verify: ready, re-sent, or (out of re-sends) skipped.
void VersionSequencer::finishVerification(int32_t id, Replica& replica, SequencerOutput& out,
                                          SequencerTime now) {
  replica.asked = now;  // a re-send asks the ranks again
  if (!replica.verify_failed) {
    markReady(replica, out);
    return;
  }
  const uint64_t v = in_flight_->version;
  ++replica.checksum_failures;
  std::vector<RankRef> ranks;
  for (int32_t r : replica.ranks)
    ranks.push_back({Role::kRollout, r});
  const std::string what = versionName(v) + ": replica " + std::to_string(id);
  if (replica.retries >= static_cast<uint32_t>(std::max(0, options_.job.checksum_retries))) {
    replica.stage = Stage::kSkipped;
    in_flight_->rejected.push_back(id);
    out.notes.push_back(what + " skips the version: its checksums failed " +
                        std::to_string(replica.checksum_failures) + " times");
    out.messages.push_back({MessageType::kGo, std::move(ranks), goFor(id, -1)});
    return;
  }
  ++replica.retries;
  replica.stage = Stage::kTaking;
  replica.sent.clear();
  replica.received.clear();
  replica.expected.clear();
  out.notes.push_back(what + " re-sent (checksum retry " + std::to_string(replica.retries) +
                      " of " + std::to_string(options_.job.checksum_retries) + ")");
  std::vector<RankRef> to = trainerRanks();
  to.insert(to.end(), ranks.begin(), ranks.end());
  out.messages.push_back({MessageType::kGo, std::move(to), goFor(id, replica.target_slot)});
  in_flight_->go_batches.push_back({id});
}

bool VersionSequencer::waitsOn(const Replica& replica) const {
  if (replica.stage == Stage::kPreparing) return replica.prepared.size() < replica.ranks.size();
  return in_flight_->go_sent &&
         ((replica.stage == Stage::kTaking && replica.received.size() < replica.ranks.size()) ||
          replica.stage == Stage::kVerifying);
}

bool VersionSequencer::owesAnswer(const Replica& replica) const {
  return (replica.stage == Stage::kTaking && in_flight_->go_sent &&
          replica.received.size() < replica.ranks.size()) ||
         (replica.stage == Stage::kVerifying && replica.verified.size() < replica.ranks.size());
}

// Who the in-flight version waits for, for the timeout error.
std::string VersionSequencer::lateReport() const {
  std::string late;
  for (const auto& [id, replica] : replicas_) {
    if (!waitsOn(replica)) continue;
    late += (late.empty() ? "" : ", ") + std::string("replica ") + std::to_string(id);
    if (replica.stage == Stage::kPreparing) {
      late += " (readers still hold slot " + std::to_string(replica.target_slot) + ")";
    } else if (replica.stage == Stage::kVerifying) {
      late += " (verifying checksums: " + std::to_string(replica.verified.size()) + " of " +
              std::to_string(replica.ranks.size()) + " ranks answered)";
    }
  }
  std::string report = "waiting on " + (late.empty() ? std::string("no replica") : late);
  if (in_flight_->go_sent) {
    const size_t gos = in_flight_->go_batches.size();
    const auto& sent = in_flight_->trainer_sent;
    report += "; trainers done: " + std::to_string(std::count(sent.begin(), sent.end(), gos)) +
              " of " + std::to_string(num_trainers_);
  }
  return report;
}

}  // namespace wsync
