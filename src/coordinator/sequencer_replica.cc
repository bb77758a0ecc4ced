#include "coordinator/sequencer_replica.h"

#include <algorithm>
#include <string>

#include "coordinator/version_sequencer_names.h"

namespace wsync {

using sequencer_names::rolloutName;
using sequencer_names::versionName;

Result<SequencerReplica> SequencerReplica::make(const ReplicaSpec& spec,
                                                const std::map<int32_t, int32_t>& replica_of,
                                                uint64_t last_started) {
  const std::string what = "replica " + std::to_string(spec.id);
  if (spec.id < 0) return invalidArgument(what + ": a replica id must be >= 0");
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
    auto it = replica_of.find(r);
    if (it != replica_of.end()) {
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
  if (spec.ready_version > last_started) {
    return invalidArgument(what + " holds " + versionName(spec.ready_version) + ", but only " +
                           versionName(last_started) + " started");
  }
  SequencerReplica replica;
  replica.ranks = spec.ranks;
  replica.slot_version.assign(static_cast<size_t>(spec.num_slots), 0);
  if (holds) {
    replica.ready_version = spec.ready_version;
    replica.ready_slot = spec.ready_slot;
    replica.slot_version[static_cast<size_t>(spec.ready_slot)] = spec.ready_version;
  }
  return replica;
}

int32_t SequencerReplica::nextSlot() const {
  int32_t best = -1;
  for (int32_t s = 0; s < static_cast<int32_t>(slot_version.size()); ++s) {
    if (s == ready_slot) continue;
    if (best < 0 || slot_version[static_cast<size_t>(s)] < slot_version[static_cast<size_t>(best)])
      best = s;
  }
  return best;
}

std::optional<int32_t> SequencerReplica::aheadSlot() const {
  // Never ahead of time at the cost of the newest version but one: readers may still ask for it
  // (a rollout one step behind) until the next version starts, as without preparing ahead.
  const int32_t slot = nextSlot();
  uint64_t behind = 0;  // the newest version in a slot other than the ready one
  for (int32_t s = 0; s < static_cast<int32_t>(slot_version.size()); ++s)
    if (s != ready_slot) behind = std::max(behind, slot_version[static_cast<size_t>(s)]);
  const uint64_t held = slot_version[static_cast<size_t>(slot)];
  if (held != 0 && held == behind) return std::nullopt;
  return slot;
}

bool SequencerReplica::startVersion(uint64_t version, SequencerTime now) {
  stage = Stage::kPreparing;
  asked = now;
  stall_reported = false;
  const bool ahead = ahead_version == version;  // its ranks drain (or drained) the slot
  ahead_version = 0;
  received.clear();
  sent.clear();
  return ahead;
}

void SequencerReplica::ready(uint64_t version) {
  stage = Stage::kReady;
  ready_version = version;
  ready_slot = target_slot;
  slot_version[static_cast<size_t>(target_slot)] = version;
}

std::vector<RankRef> SequencerReplica::rankRefs() const {
  std::vector<RankRef> refs;
  refs.reserve(ranks.size());
  for (int32_t r : ranks)
    refs.push_back({Role::kRollout, r});
  return refs;
}

bool SequencerReplica::waitsOn(bool go_sent) const {
  if (stage == Stage::kPreparing) return prepared.size() < ranks.size();
  return go_sent && ((stage == Stage::kTaking && received.size() < ranks.size()) ||
                     stage == Stage::kVerifying);
}

bool SequencerReplica::owesAnswer(bool go_sent) const {
  return (stage == Stage::kTaking && go_sent && received.size() < ranks.size()) ||
         stage == Stage::kVerifying;  // until every rank answered (then it leaves kVerifying)
}

}  // namespace wsync
