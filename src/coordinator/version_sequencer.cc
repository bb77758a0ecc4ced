// The version sequencer's membership, queries and events (version_sequencer.h). Starting a
// version (slot choice, Prepare, Go, skips): version_sequencer_start.cc; finishing it (Ready,
// checksum verification and re-sends, Delivered): version_sequencer_finish.cc.
#include "coordinator/version_sequencer.h"

#include <algorithm>

#include "coordinator/version_sequencer_names.h"

namespace wsync {

using sequencer_names::rolloutName;
using sequencer_names::versionName;

VersionSequencer::VersionSequencer(SequencerOptions options, int32_t num_trainers)
    : options_(options), num_trainers_(num_trainers) {}

// ---- membership ------------------------------------------------------------------------------

Status VersionSequencer::addReplica(const ReplicaSpec& spec) {
  const std::string what = "replica " + std::to_string(spec.id);
  if (spec.id < 0) return invalidArgument(what + ": a replica id must be >= 0");
  if (replicas_.count(spec.id) != 0) return invalidArgument(what + " already exists");
  if (spec.ranks.empty()) return invalidArgument(what + " has no rank");
  if (spec.num_slots < 2) {
    return invalidArgument(what + " has " + std::to_string(spec.num_slots) +
                           " slots; at least 2 are needed");
  }
  std::set<int32_t> seen;
  for (int32_t r : spec.ranks) {
    if (r < 0) return invalidArgument(what + ": rank " + std::to_string(r) + " is not a rank");
    if (!seen.insert(r).second)
      return invalidArgument(what + " lists " + rolloutName(r) + " twice");
    auto it = replica_of_.find(r);
    if (it != replica_of_.end()) {
      return invalidArgument(what + ": " + rolloutName(r) + " is already in replica " +
                             std::to_string(it->second));
    }
  }
  const bool holds = spec.ready_version != 0 || spec.ready_slot != -1;
  if (holds &&
      (spec.ready_version == 0 || spec.ready_slot < 0 || spec.ready_slot >= spec.num_slots)) {
    return invalidArgument(what + ": ready " + versionName(spec.ready_version) + " in slot " +
                           std::to_string(spec.ready_slot) + " is not a version in one of its " +
                           std::to_string(spec.num_slots) + " slots");
  }
  if (spec.ready_version > last_started_) {
    return invalidArgument(what + " holds " + versionName(spec.ready_version) + ", but only " +
                           versionName(last_started_) + " started");
  }
  Replica replica;
  replica.ranks = spec.ranks;
  replica.slot_version.assign(static_cast<size_t>(spec.num_slots), 0);
  if (holds) {
    replica.ready_version = spec.ready_version;
    replica.ready_slot = spec.ready_slot;
    replica.slot_version[static_cast<size_t>(spec.ready_slot)] = spec.ready_version;
  }
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
      if (!replica.stall_reported && owesAnswer(replica))
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
    if (!options_.job.checksums) continue;
    for (const RankChecksum& c : sums) {
      if (std::find(replica.ranks.begin(), replica.ranks.end(), c.rank) != replica.ranks.end())
        replica.expected[c.rank][trainer] = c.sum;
    }
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
  if (!replica->verified.insert(rollout).second) return protocolError(message + " twice");
  return replica;
}

Result<SequencerOutput> VersionSequencer::onVerified(int32_t rollout, uint64_t version,
                                                     SequencerTime now) {
  WSYNC_ASSIGN_OR_RETURN(Replica * replica, verifyAnswer(rollout, version, "verified"));
  SequencerOutput out;
  if (replica == nullptr) return out;
  if (replica->verified.size() == replica->ranks.size())
    finishVerification(*replicaOf(rollout), *replica, out, now);
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
  replica->verify_failed = true;
  out.notes.push_back(versionName(failed.version) + ": checksum mismatch on " +
                      rolloutName(rollout) + ": " + failed.detail);
  if (replica->verified.size() == replica->ranks.size())
    finishVerification(*replicaOf(rollout), *replica, out, now);
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
      if (replica.stall_reported || !owesAnswer(replica) ||
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
      GoMsg{v, std::vector<int32_t>(replicas_.empty() ? 0 : replicas_.rbegin()->first + 1, -1)}};
  std::string ended;
  for (auto& [id, replica] : replicas_) {
    const bool writing = replica.stage == Stage::kPreparing || replica.stage == Stage::kTaking ||
                         replica.stage == Stage::kVerifying;
    replica.stage = Stage::kOut;
    if (!writing) continue;
    ended += (ended.empty() ? "" : ", ") + std::to_string(id);
    for (int32_t r : replica.ranks)
      give_back.to.push_back({Role::kRollout, r});
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

}  // namespace wsync
