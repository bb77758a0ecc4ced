#include "coordinator/version_sequencer.h"

#include <algorithm>
#include <iterator>

#include "coordinator/version_sequencer_names.h"

namespace wsync {

using sequencer_names::rolloutName;
using sequencer_names::versionName;

VersionSequencer::VersionSequencer(SequencerOptions options, int32_t num_trainers)
    : options_(options), num_trainers_(num_trainers), checks_(options.job.checksum_retries) {}

// ---- membership ------------------------------------------------------------------------------

Status VersionSequencer::addReplica(const ReplicaSpec& spec) {
  if (replicas_.count(spec.id) != 0) {
    return invalidArgument("replica " + std::to_string(spec.id) + " already exists");
  }
  WSYNC_ASSIGN_OR_RETURN(Replica replica, Replica::make(spec, replica_of_, last_started_));
  for (int32_t r : spec.ranks) {
    replica_of_[r] = spec.id;
    departed_.erase(r);
  }
  replicas_.emplace(spec.id, std::move(replica));
  return Status::ok();
}

Result<SequencerOutput> VersionSequencer::removeReplica(int32_t replica, SequencerTime now) {
  auto it = replicas_.find(replica);
  if (it == replicas_.end()) {
    return invalidArgument("replica " + std::to_string(replica) + " is not in the job");
  }
  // A replica that already took the in-flight version (Ready sent) got it: it counts as ready.
  if (in_flight_ && it->second.stage == Stage::kReady) {
    in_flight_->departed_ready.push_back(replica);
  } else if (in_flight_ && it->second.stage != Stage::kOut) {
    in_flight_->lost.push_back(replica);
  }
  checks_.removeReplica(replica);
  for (int32_t r : it->second.ranks) {
    replica_of_.erase(r);
    departed_.insert(r);
  }
  replicas_.erase(it);
  SequencerOutput out;
  tryGo(now, out);
  tryComplete(now, out);
  return out;
}

std::optional<int32_t> VersionSequencer::replicaOf(int32_t rollout) const {
  auto it = replica_of_.find(rollout);
  if (it == replica_of_.end()) return std::nullopt;
  return it->second;
}

uint64_t VersionSequencer::readyVersion(int32_t replica) const {
  auto it = replicas_.find(replica);
  return it == replicas_.end() ? 0 : it->second.ready_version;
}

std::vector<int32_t> VersionSequencer::holdingGo(SequencerTime now) const {
  std::vector<int32_t> ids;
  if (!in_flight_ || options_.replica_timeout.count() <= 0 ||
      now - in_flight_->started < options_.replica_timeout)
    return ids;
  for (const auto& [id, replica] : replicas_) {
    if (replica.stage == Stage::kPreparing && replica.prepared.size() < replica.ranks.size())
      ids.push_back(id);
  }
  return ids;
}

uint64_t VersionSequencer::inFlightVersion() const {
  return in_flight_ ? in_flight_->version : 0;
}

std::optional<SequencerTime> VersionSequencer::nextDeadline() const {
  if (!in_flight_) return std::nullopt;
  SequencerTime deadline = in_flight_->started + options_.timeout;
  if (!in_flight_->grace_applied && (!in_flight_->go_sent || anyLate())) {
    deadline = std::min(deadline, in_flight_->started + options_.skip_grace);
  }
  if (options_.replica_timeout.count() > 0) {
    for (const auto& [id, replica] : replicas_) {
      if (!replica.stall_reported && replica.owesAnswer(in_flight_->go_sent))
        deadline = std::min(deadline, replica.asked + options_.replica_timeout);
    }
  }
  return deadline;
}

// ---- events ----------------------------------------------------------------------------------

Status VersionSequencer::checkTrainer(int32_t trainer) const {
  if (trainer < 0 || trainer >= num_trainers_) {
    return invalidArgument("trainer " + std::to_string(trainer) + " is not in the job (" +
                           std::to_string(num_trainers_) + " trainers)");
  }
  return Status::ok();
}

Result<VersionSequencer::Replica*> VersionSequencer::replicaForMessage(int32_t rollout) {
  auto it = replica_of_.find(rollout);
  if (it != replica_of_.end()) return &replicas_.at(it->second);
  if (departed_.count(rollout) != 0) return static_cast<Replica*>(nullptr);
  return invalidArgument(rolloutName(rollout) + " is in no replica of the job");
}

Result<SequencerOutput> VersionSequencer::onPublish(int32_t trainer, uint64_t version,
                                                    SequencerTime now) {
  WSYNC_RETURN_IF_ERROR(checkTrainer(trainer));
  if (version == 0) {
    return invalidArgument("trainer " + std::to_string(trainer) +
                           " published version 0; versions start at 1");
  }
  if (restart_floor_ > 0 && version <= restart_floor_) {
    return invalidUsage("trainer " + std::to_string(trainer) + " published " +
                        versionName(version) + ", not above " + versionName(restart_floor_) +
                        ", the newest version started before the trainers restarted: restarted "
                        "trainers continue with higher versions");
  }
  if (version < last_started_) {
    return invalidUsage("trainer " + std::to_string(trainer) + " published " +
                        versionName(version) + " after " + versionName(last_started_) +
                        " started: trainers must publish the same increasing versions");
  }
  SequencerOutput out;
  if (version > last_started_) pending_.insert(version);
  startNext(now, out);
  return out;
}

Result<SequencerOutput> VersionSequencer::onPrepared(int32_t rollout, const SlotMsg& prepared,
                                                     SequencerTime now) {
  WSYNC_ASSIGN_OR_RETURN(Replica * replica, replicaForMessage(rollout));
  SequencerOutput out;
  if (replica == nullptr) return out;
  const std::string what = rolloutName(rollout) + " prepared " + versionName(prepared.version);
  if (!in_flight_ && replica->ahead_version != 0 && prepared.version == replica->ahead_version) {
    if (prepared.slot != replica->target_slot) {
      return protocolError(what + " in slot " + std::to_string(prepared.slot) + " but slot " +
                           std::to_string(replica->target_slot) + " was asked");
    }
    if (!replica->prepared.insert(rollout).second) return protocolError(what + " twice");
    replica->busy.erase(rollout);
    return out;  // Go once the version is published
  }
  if (prepared.version > last_started_) return protocolError(what + ", which never started");
  if (prepared.version != inFlightVersion()) return out;  // a skipped replica catching up late
  if (replica->stage == Stage::kOut) {
    return protocolError(what + " but its replica joined after the version started");
  }
  if (prepared.slot != replica->target_slot) {
    return protocolError(rolloutName(rollout) + " prepared slot " + std::to_string(prepared.slot) +
                         " for " + versionName(prepared.version) + " but slot " +
                         std::to_string(replica->target_slot) + " was asked");
  }
  if (!replica->prepared.insert(rollout).second) return protocolError(what + " twice");
  replica->busy.erase(rollout);
  if (in_flight_->go_sent) {
    tryLateGo(now, out);  // a replica left out of the first Go
    tryComplete(now, out);
  } else {
    tryGo(now, out);
  }
  return out;
}

Result<SequencerOutput> VersionSequencer::onSlotBusy(int32_t rollout, const SlotMsg& busy,
                                                     SequencerTime now) {
  SequencerOutput out;
  auto it = replica_of_.find(rollout);
  if (it == replica_of_.end()) return out;
  Replica& replica = replicas_.at(it->second);
  if (busy.slot != replica.target_slot || replica.prepared.count(rollout) != 0) return out;
  const bool ahead =
      !in_flight_ && replica.ahead_version != 0 && busy.version == replica.ahead_version;
  const bool current =
      in_flight_ && busy.version == in_flight_->version && replica.stage == Stage::kPreparing;
  if (!ahead && !current) return out;  // stale: prepared again or skipped since
  replica.busy.insert(rollout);
  if (current) tryGo(now, out);
  return out;
}

Result<SequencerOutput> VersionSequencer::onSent(int32_t trainer, uint64_t version,
                                                 SequencerTime now,
                                                 const std::vector<RankChecksum>& sums) {
  WSYNC_RETURN_IF_ERROR(checkTrainer(trainer));
  const std::string what =
      "trainer " + std::to_string(trainer) + " reported " + versionName(version) + " sent";
  if (!in_flight_ || version != in_flight_->version || !in_flight_->go_sent) {
    return protocolError(what + " out of order");
  }
  size_t& sent = in_flight_->trainer_sent[static_cast<size_t>(trainer)];
  if (sent >= in_flight_->go_batches.size()) return protocolError(what + " twice");
  // The replicas of this trainer's next Go: their current attempt is now sent by this trainer.
  for (int32_t id : in_flight_->go_batches[sent]) {
    auto it = replicas_.find(id);
    if (it == replicas_.end() || it->second.stage != Stage::kTaking) continue;  // left since
    Replica& replica = it->second;
    replica.sent.insert(trainer);
    if (options_.job.checksums) checks_.recordSent(id, replica.ranks, trainer, sums);
  }
  ++sent;
  SequencerOutput out;
  tryComplete(now, out);
  return out;
}

Result<SequencerOutput> VersionSequencer::onReceived(int32_t rollout, uint64_t version,
                                                     SequencerTime now) {
  WSYNC_ASSIGN_OR_RETURN(Replica * replica, replicaForMessage(rollout));
  SequencerOutput out;
  if (replica == nullptr || isAborted(version)) return out;
  const std::string what = rolloutName(rollout) + " reported " + versionName(version) + " received";
  if (!in_flight_ || version != in_flight_->version || !in_flight_->go_sent) {
    return protocolError(what + " out of order");
  }
  if (replica->stage != Stage::kTaking) {
    return protocolError(what + (replica->stage == Stage::kReady ? " after its replica was ready"
                                                                 : " but its replica skips it"));
  }
  if (!replica->received.insert(rollout).second) return protocolError(what + " twice");
  tryComplete(now, out);
  return out;
}

Result<VersionSequencer::Replica*> VersionSequencer::verifyAnswer(int32_t rollout, uint64_t version,
                                                                  const char* what) {
  WSYNC_ASSIGN_OR_RETURN(Replica * replica, replicaForMessage(rollout));
  if (replica == nullptr || isAborted(version)) return static_cast<Replica*>(nullptr);
  const std::string message = rolloutName(rollout) + " " + what + " " + versionName(version);
  if (!in_flight_ || version != in_flight_->version || replica->stage != Stage::kVerifying) {
    return protocolError(message + " but no Verify of it awaits an answer");
  }
  return replica;  // a second answer: ChecksumVerification refuses it
}

Result<SequencerOutput> VersionSequencer::onVerified(int32_t rollout, uint64_t version,
                                                     SequencerTime now) {
  WSYNC_ASSIGN_OR_RETURN(Replica * replica, verifyAnswer(rollout, version, "verified"));
  SequencerOutput out;
  if (replica == nullptr) return out;
  const int32_t id = *replicaOf(rollout);
  WSYNC_ASSIGN_OR_RETURN(ChecksumVerification::Step step, checks_.verified(id, rollout));
  finishVerification(id, *replica, std::move(step), out, now);
  tryComplete(now, out);
  return out;
}

Result<SequencerOutput> VersionSequencer::onChecksumFailed(int32_t rollout,
                                                           const ChecksumFailedMsg& failed,
                                                           SequencerTime now) {
  WSYNC_ASSIGN_OR_RETURN(Replica * replica,
                         verifyAnswer(rollout, failed.version, "failed the checksum of"));
  SequencerOutput out;
  if (replica == nullptr) return out;
  const int32_t id = *replicaOf(rollout);
  WSYNC_ASSIGN_OR_RETURN(ChecksumVerification::Step step,
                         checks_.failed(id, rollout, failed.detail));
  finishVerification(id, *replica, std::move(step), out, now);
  tryComplete(now, out);
  return out;
}

Result<SequencerOutput> VersionSequencer::advance(SequencerTime now) {
  SequencerOutput out;
  if (!in_flight_) return out;
  if (now - in_flight_->started >= options_.timeout) {
    return timeoutError(versionName(in_flight_->version) + " not delivered within " +
                        std::to_string(options_.timeout.count()) + " ms; " + lateReport());
  }
  tryGo(now, out);
  tryLateGo(now, out);
  tryComplete(now, out);  // a replica skipped late may have been the last one
  if (options_.replica_timeout.count() > 0) {
    for (auto& [id, replica] : replicas_) {
      if (replica.stall_reported || !replica.owesAnswer(in_flight_->go_sent) ||
          now - replica.asked < options_.replica_timeout)
        continue;
      replica.stall_reported = true;
      out.stalled_replicas.push_back(id);
    }
  }
  return out;
}

SequencerOutput VersionSequencer::abortVersions() {
  SequencerOutput out;
  pending_.clear();
  restart_floor_ = last_started_;
  if (!in_flight_) return out;
  const uint64_t v = in_flight_->version;
  OutgoingMessage give_back{
      MessageType::kGo,
      {},
      GoMsg{
          v, std::vector<int32_t>(replicas_.empty() ? 0 : replicas_.rbegin()->first + 1, -1), {}}};
  std::string ended;
  for (auto& [id, replica] : replicas_) {
    const bool writing = replica.stage == Stage::kPreparing || replica.stage == Stage::kTaking ||
                         replica.stage == Stage::kVerifying;
    replica.stage = Stage::kOut;
    if (!writing) continue;
    ended += (ended.empty() ? "" : ", ") + std::to_string(id);
    const std::vector<RankRef> ranks = replica.rankRefs();
    give_back.to.insert(give_back.to.end(), ranks.begin(), ranks.end());
  }
  if (!give_back.to.empty()) out.messages.push_back(std::move(give_back));
  out.notes.push_back(versionName(v) + " aborted" +
                      (ended.empty() ? "" : "; replicas " + ended + " give its slot back"));
  aborted_version_ = v;
  in_flight_.reset();
  return out;
}

bool VersionSequencer::isAborted(uint64_t version) const {
  return aborted_version_ != 0 && version == aborted_version_ && version != inFlightVersion();
}

// ---- starting a version: slots, Prepare (also ahead), Go, skips ----------------------------

std::vector<RankRef> VersionSequencer::trainerRanks() const {
  std::vector<RankRef> to;
  to.reserve(static_cast<size_t>(num_trainers_));
  for (int32_t t = 0; t < num_trainers_; ++t)
    to.push_back({Role::kTrainer, t});
  return to;
}

void VersionSequencer::startNext(SequencerTime now, SequencerOutput& out) {
  if (in_flight_ || pending_.empty()) return;
  const uint64_t v = *pending_.begin();
  pending_.erase(pending_.begin());
  last_started_ = v;
  in_flight_.emplace();
  in_flight_->version = v;
  in_flight_->started = now;
  in_flight_->trainer_sent.assign(static_cast<size_t>(num_trainers_), 0);
  checks_.startVersion(v);
  for (auto& [id, replica] : replicas_) {
    if (replica.startVersion(v, now)) continue;  // prepared ahead: its ranks' answers stand
    replica.target_slot = replica.nextSlot();
    replica.prepared.clear();
    replica.busy.clear();
    out.messages.push_back(
        {MessageType::kPrepare, replica.rankRefs(), SlotMsg{v, replica.target_slot}});
  }
  tryGo(now, out);  // a zero grace skips at once
}

void VersionSequencer::prepareAhead(SequencerOutput& out) {
  if (!options_.prepare_ahead || in_flight_ || !pending_.empty()) return;
  const uint64_t v = last_started_ + 1;
  for (auto& [id, replica] : replicas_) {
    if (replica.ahead_version == v) continue;  // asked already
    const std::optional<int32_t> slot = replica.aheadSlot();
    if (!slot) continue;
    replica.ahead_version = v;
    replica.target_slot = *slot;
    replica.prepared.clear();
    replica.busy.clear();
    out.messages.push_back(
        {MessageType::kPrepare, replica.rankRefs(), SlotMsg{v, replica.target_slot}});
  }
}

bool VersionSequencer::canSkip(const Replica& r) const {
  if (r.ready_version == 0) return false;  // it must get a first version
  return options_.max_staleness < 0 ||
         in_flight_->version - r.ready_version <= static_cast<uint64_t>(options_.max_staleness);
}

// The first Go: once every replica is prepared, busy (readers hold its slot: it gets a late Go)
// or skippable past the grace, and at least one replica takes the version or none is busy.
void VersionSequencer::tryGo(SequencerTime now, SequencerOutput& out) {
  if (!in_flight_ || in_flight_->go_sent) return;
  const bool grace_over = now - in_flight_->started >= options_.skip_grace;
  if (grace_over) in_flight_->grace_applied = true;
  auto prepared = [](const Replica& r) { return r.prepared.size() == r.ranks.size(); };
  auto skipped = [&](const Replica& r) { return !prepared(r) && grace_over && canSkip(r); };
  bool any_prepared = false;
  bool any_late = false;
  for (const auto& [id, replica] : replicas_) {
    if (replica.stage != Stage::kPreparing) continue;
    any_prepared = any_prepared || prepared(replica);
    if (prepared(replica) || skipped(replica)) continue;
    if (replica.busy.empty()) return;  // wait for its answer
    any_late = true;
  }
  if (any_late && !any_prepared) return;  // nothing to start yet
  const uint64_t v = in_flight_->version;
  GoMsg go{v, std::vector<int32_t>(replicas_.empty() ? 0 : replicas_.rbegin()->first + 1, -1), {}};
  OutgoingMessage message{MessageType::kGo, trainerRanks(), {}};
  std::vector<int32_t> taking;
  for (auto& [id, replica] : replicas_) {
    if (replica.stage != Stage::kPreparing) continue;
    if (prepared(replica)) {
      replica.stage = Stage::kTaking;
      replica.asked = now;
      taking.push_back(id);
      go.slot_of_replica[static_cast<size_t>(id)] = replica.target_slot;
    } else if (skipped(replica)) {
      replica.stage = Stage::kSkipped;
      out.notes.push_back(versionName(v) + ": replica " + std::to_string(id) +
                          " skipped (its readers still hold slot " +
                          std::to_string(replica.target_slot) + ")");
    } else {
      continue;  // busy: a late Go of its own (tryLateGo), its ranks hear nothing now
    }
    const std::vector<RankRef> ranks = replica.rankRefs();
    message.to.insert(message.to.end(), ranks.begin(), ranks.end());
  }
  message.payload = std::move(go);
  in_flight_->go_batches.push_back(std::move(taking));
  in_flight_->go_sent = true;
  out.messages.push_back(std::move(message));
}

void VersionSequencer::tryLateGo(SequencerTime now, SequencerOutput& out) {
  if (!in_flight_ || !in_flight_->go_sent) return;
  const bool grace_over = now - in_flight_->started >= options_.skip_grace;
  if (grace_over) in_flight_->grace_applied = true;
  const uint64_t v = in_flight_->version;
  for (auto& [id, replica] : replicas_) {
    if (replica.stage != Stage::kPreparing) continue;
    std::vector<RankRef> ranks = replica.rankRefs();
    if (replica.prepared.size() == replica.ranks.size()) {
      replica.stage = Stage::kTaking;
      replica.asked = now;
      out.notes.push_back(versionName(v) + ": replica " + std::to_string(id) +
                          " goes late (its readers held slot " +
                          std::to_string(replica.target_slot) + ")");
      std::vector<RankRef> to = trainerRanks();
      to.insert(to.end(), ranks.begin(), ranks.end());
      out.messages.push_back({MessageType::kGo, std::move(to), goFor(id, replica.target_slot)});
      in_flight_->go_batches.push_back({id});
    } else if (grace_over && canSkip(replica)) {
      replica.stage = Stage::kSkipped;
      out.notes.push_back(versionName(v) + ": replica " + std::to_string(id) +
                          " skipped (its readers still hold slot " +
                          std::to_string(replica.target_slot) + ")");
      out.messages.push_back({MessageType::kGo, std::move(ranks), goFor(id, -1)});
    }
  }
}

bool VersionSequencer::anyLate() const {
  return std::any_of(replicas_.begin(), replicas_.end(),
                     [](const auto& entry) { return entry.second.stage == Stage::kPreparing; });
}

// ---- finishing a version: Ready, checksum verification and re-sends, Delivered -------------

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
        sendVerify(id, replica, out);
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
  ChecksumVerification::Tally tally = checks_.tally();
  outcome.checksum_failures = std::move(tally.failures);
  outcome.retries = std::move(tally.retries);
  outcome.rejected_replicas = std::move(tally.rejected);
  for (auto& [id, replica] : replicas_) {
    if (replica.stage == Stage::kReady) outcome.ready_replicas.push_back(id);
    if (replica.stage == Stage::kSkipped) outcome.skipped_replicas.push_back(id);
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
  replica.ready(in_flight_->version);
  out.messages.push_back(
      {MessageType::kReady, replica.rankRefs(), SlotMsg{in_flight_->version, replica.target_slot}});
}

void VersionSequencer::sendVerify(int32_t id, Replica& replica, SequencerOutput& out) {
  replica.stage = Stage::kVerifying;
  std::vector<VerifyMsg> verifies = checks_.verify(id, replica.ranks, replica.target_slot);
  for (size_t i = 0; i < verifies.size(); ++i) {
    out.messages.push_back(
        {MessageType::kVerify, {{Role::kRollout, replica.ranks[i]}}, std::move(verifies[i])});
  }
}

GoMsg VersionSequencer::goFor(int32_t replica, int32_t slot) const {
  GoMsg go{in_flight_->version,
           std::vector<int32_t>(replicas_.empty() ? 0 : replicas_.rbegin()->first + 1, -1),
           {}};
  go.slot_of_replica[static_cast<size_t>(replica)] = slot;
  return go;
}

// An answer to Verify: its notes; once every rank of replica `id` answered, Ready, the re-send
// (a Go for it alone) or, out of re-sends, the skip (Go(v, -1) to its ranks).
void VersionSequencer::finishVerification(int32_t id, Replica& replica,
                                          ChecksumVerification::Step step, SequencerOutput& out,
                                          SequencerTime now) {
  out.notes.insert(out.notes.end(), std::make_move_iterator(step.notes.begin()),
                   std::make_move_iterator(step.notes.end()));
  if (step.verdict == ChecksumVerification::Verdict::kPending) return;
  replica.asked = now;  // a re-send asks the ranks again
  if (step.verdict == ChecksumVerification::Verdict::kVerified) {
    markReady(replica, out);
    return;
  }
  std::vector<RankRef> ranks = replica.rankRefs();
  if (step.verdict == ChecksumVerification::Verdict::kReject) {
    replica.stage = Stage::kSkipped;
    out.messages.push_back({MessageType::kGo, std::move(ranks), goFor(id, -1)});
    return;
  }
  replica.stage = Stage::kTaking;
  replica.sent.clear();
  replica.received.clear();
  std::vector<RankRef> to = trainerRanks();
  to.insert(to.end(), ranks.begin(), ranks.end());
  out.messages.push_back({MessageType::kGo, std::move(to), goFor(id, replica.target_slot)});
  in_flight_->go_batches.push_back({id});
}

// Who the in-flight version waits for, for the timeout error.
std::string VersionSequencer::lateReport() const {
  std::string late;
  for (const auto& [id, replica] : replicas_) {
    if (!replica.waitsOn(in_flight_->go_sent)) continue;
    late += (late.empty() ? "" : ", ") + std::string("replica ") + std::to_string(id);
    if (replica.stage == Stage::kPreparing) {
      late += " (readers still hold slot " + std::to_string(replica.target_slot) + ")";
    } else if (replica.stage == Stage::kVerifying) {
      late += " (verifying checksums: " + std::to_string(checks_.answered(id)) + " of " +
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
