// Starting a version (version_sequencer.h): which slot each replica gets, Prepare (also ahead of
// the version), and Go once the replicas are prepared or skipped past the grace.
#include <algorithm>

#include "coordinator/version_sequencer.h"
#include "coordinator/version_sequencer_names.h"

namespace wsync {

using sequencer_names::versionName;

std::vector<RankRef> VersionSequencer::trainerRanks() const {
  std::vector<RankRef> to;
  to.reserve(static_cast<size_t>(num_trainers_));
  for (int32_t t = 0; t < num_trainers_; ++t)
    to.push_back({Role::kTrainer, t});
  return to;
}

int32_t VersionSequencer::chooseSlot(const Replica& r) const {
  int32_t best = -1;
  for (int32_t s = 0; s < static_cast<int32_t>(r.slot_version.size()); ++s) {
    if (s == r.ready_slot) continue;
    if (best < 0 ||
        r.slot_version[static_cast<size_t>(s)] < r.slot_version[static_cast<size_t>(best)])
      best = s;
  }
  return best;
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
  for (auto& [id, replica] : replicas_) {
    replica.stage = Stage::kPreparing;
    replica.asked = now;
    replica.stall_reported = false;
    const bool ahead = replica.ahead_version == v;  // its ranks drain (or drained) the slot
    replica.ahead_version = 0;
    replica.received.clear();
    replica.sent.clear();
    replica.expected.clear();
    replica.checksum_failures = 0;
    replica.retries = 0;
    if (ahead) continue;  // its prepared and busy ranks stand
    replica.target_slot = chooseSlot(replica);
    replica.prepared.clear();
    replica.busy.clear();
    OutgoingMessage prepare{MessageType::kPrepare, {}, SlotMsg{v, replica.target_slot}};
    for (int32_t r : replica.ranks)
      prepare.to.push_back({Role::kRollout, r});
    out.messages.push_back(std::move(prepare));
  }
  tryGo(now, out);  // a zero grace skips at once
}

void VersionSequencer::prepareAhead(SequencerOutput& out) {
  if (!options_.prepare_ahead || in_flight_ || !pending_.empty()) return;
  const uint64_t v = last_started_ + 1;
  for (auto& [id, replica] : replicas_) {
    if (replica.ahead_version == v) continue;  // asked already
    // Never ahead of time at the cost of the newest version but one: readers may still ask for it
    // (a rollout one step behind) until the next version starts, as without preparing ahead.
    const int32_t slot = chooseSlot(replica);
    uint64_t behind = 0;  // the newest version in a slot other than the ready one
    for (int32_t s = 0; s < static_cast<int32_t>(replica.slot_version.size()); ++s)
      if (s != replica.ready_slot)
        behind = std::max(behind, replica.slot_version[static_cast<size_t>(s)]);
    const uint64_t held = replica.slot_version[static_cast<size_t>(slot)];
    if (held != 0 && held == behind) continue;
    replica.ahead_version = v;
    replica.target_slot = slot;
    replica.prepared.clear();
    replica.busy.clear();
    OutgoingMessage prepare{MessageType::kPrepare, {}, SlotMsg{v, replica.target_slot}};
    for (int32_t r : replica.ranks)
      prepare.to.push_back({Role::kRollout, r});
    out.messages.push_back(std::move(prepare));
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
  GoMsg go{v, std::vector<int32_t>(replicas_.empty() ? 0 : replicas_.rbegin()->first + 1, -1)};
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
    for (int32_t r : replica.ranks)
      message.to.push_back({Role::kRollout, r});
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
    std::vector<RankRef> ranks;
    for (int32_t r : replica.ranks)
      ranks.push_back({Role::kRollout, r});
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

}  // namespace wsync
