// One replica as the version sequencer (coordinator/version_sequencer.h) sees it: its ranks, its
// slots (which version each holds, the newest ready one, which slot the next version goes to,
// whether one may be prepared ahead) and its part in the version in flight. A value the sequencer
// owns, one per replica; pure (no sockets, no clock: times are the sequencer's arguments).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "common/status.h"
#include "protocol/protocol.h"

namespace wsync {

using SequencerTime = std::chrono::steady_clock::time_point;

struct RankRef {
  Role role = Role::kTrainer;
  int32_t rank = -1;  // role rank
  bool operator==(const RankRef& o) const { return role == o.role && rank == o.rank; }
};

struct ReplicaSpec {
  int32_t id = -1;             // >= 0, unique
  std::vector<int32_t> ranks;  // rollout ranks (>= 0), in no other replica; not empty
  int32_t num_slots = 0;       // slots on each of its ranks; >= 2
  // A replica that already holds a version (filled from a peer replica: peer cold start): slot
  // `ready_slot` of every rank holds `ready_version`, readable. 0 / -1: it holds none.
  uint64_t ready_version = 0;
  int32_t ready_slot = -1;
};

struct SequencerReplica {
  // Its part in the in-flight version.
  enum class Stage { kOut, kPreparing, kTaking, kVerifying, kSkipped, kReady };

  // A replica from `spec`; INVALID_ARGUMENT (naming the replica) for an id below 0, no rank, a
  // rank below 0, listed twice or in `replica_of` (rollout rank -> replica id: the other
  // replicas'), fewer than 2 slots, a ready slot outside them, or a ready version without its
  // slot or above `last_started`.
  static Result<SequencerReplica> make(const ReplicaSpec& spec,
                                       const std::map<int32_t, int32_t>& replica_of,
                                       uint64_t last_started);

  // The slot the next version goes to: never the newest ready one; an empty one, else the one
  // holding the oldest version.
  int32_t nextSlot() const;
  // Prepare ahead (SequencerOptions::prepare_ahead): the slot to drain for the next version now,
  // unless that costs readers the newest version but one (it is in nextSlot()).
  std::optional<int32_t> aheadSlot() const;
  // Version `version` starts at `now`: the replica prepares it, its previous version's answers
  // and checksums forgotten. True when its slot was prepared ahead for it (Prepare was sent
  // already: its prepared and busy ranks stand).
  bool startVersion(uint64_t version, SequencerTime now);
  // target_slot now holds `version`, the newest ready one (Ready).
  void ready(uint64_t version);
  std::vector<RankRef> rankRefs() const;  // its ranks, as rollout RankRefs
  // The in-flight version waits for a message of its ranks (`go_sent`: its first Go went out).
  bool waitsOn(bool go_sent) const;
  // Its ranks owe the in-flight version an answer their receiver gives at once (Received after
  // Go, a Verify answer): SequencerOptions::replica_timeout applies.
  bool owesAnswer(bool go_sent) const;

  std::vector<int32_t> ranks;
  std::vector<uint64_t> slot_version;  // per slot; 0: empty
  uint64_t ready_version = 0;          // 0: none yet
  int32_t ready_slot = -1;
  Stage stage = Stage::kOut;
  int32_t target_slot = -1;
  std::set<int32_t> prepared;  // ranks that drained target_slot
  std::set<int32_t> busy;      // ranks whose readers hold target_slot (SlotBusy), not prepared
  uint64_t ahead_version = 0;  // prepare ahead: target_slot was asked for it (0: not asked)
  std::set<int32_t> received;  // ranks that received their broadcasts
  std::set<int32_t> sent;      // the trainers that sent the replica's current attempt
  // (the checksums they sent and the Verify answers: coordinator/checksum_verification.h)
  // replica_timeout: when its ranks were asked for what they owe now (Prepare: the version's
  // start; Go; Verify), and whether advance() reported it stalled in this version.
  SequencerTime asked;
  bool stall_reported = false;
};

}  // namespace wsync
