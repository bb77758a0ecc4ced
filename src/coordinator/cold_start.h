// Peer cold start of joining replicas (protocol/protocol.h, "Peer cold start"), as a pure
// component: a replica whose ranks committed is filled with the newest ready version from a
// running replica's ranks, over the data plane, before it takes part in versions. Like the
// VersionSequencer it takes events (a joiner to fill, its ranks' Prepared and Readied, a source
// rank's ColdFillDone, a source replica lost, time passed) and returns the messages to send and
// log notes; it has no sockets, no threads and no clock (every event carries `now`). Not
// thread-safe; the coordinator's event thread owns it.
//
// An attempt: Prepare(v, slot) to the joiner's ranks -> every Prepared; ColdFill to each source
// rank with writes -> every ColdFillDone; Ready(v, slot) to the joiner's ranks -> every Readied;
// then the cold start ends holding v in that slot (ColdStartOutput::finished: the caller adds the
// replica to the sequencer with it once its join is otherwise complete). A failed attempt (a
// source rank no longer holds v, or failed) is retried from the newest ready version, at most
// options.max_attempts times; a source replica lost mid-fill (dropped, or reported by tick() as
// stalled because its fill took more than half the timeout, which the caller drops) is replaced
// by another (the next attempt writes another slot of the joiner, since the lost one's surviving
// ranks may still be finishing a write). Without a source the cold start is given up: the
// joiner's ranks give their prepared slot back (Go with slot -1) and the cold start ends without
// a version (the replica gets its first version from the trainers). The trainers go on
// publishing throughout (the joiner is not in the sequencer until it holds v), and a source
// rank's lease on v only keeps its replica from writing that one slot.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "common/status.h"
#include "layout/registration.h"
#include "plan/plan.h"
#include "protocol/protocol.h"

namespace wsync {

using ColdStartTime = std::chrono::steady_clock::time_point;

struct ColdStartOptions {
  // Bound on one attempt: tick() reports the join overdue past it (the caller aborts it: writers
  // may still be busy); a source holding its fill past half of it is reported stalled.
  std::chrono::milliseconds timeout{60000};
  int max_attempts = 3;  // attempts before the replica gets its first version from the trainers
};

// A joining replica whose ranks committed.
struct ColdStartJoiner {
  int32_t replica = -1;
  std::vector<int32_t> ranks;               // its rollout ranks, by replica rank; not empty
  int32_t num_slots = 0;                    // slots on each of its ranks, >= 1
  std::vector<Registration> registrations;  // by replica rank, as its plan saw them
  // By rollout rank: what a source rank needs to write into each of its ranks (ColdFill peers).
  std::map<int32_t, PeerInfo> peers;
  // A catch-up (the joiner already holds a version from an earlier cold start: `held_version` in
  // `held_slot` on every rank, readable): no attempt writes that slot (num_slots >= 2 then), and
  // a catch-up that cannot fill a newer version ends holding it. 0 / -1: it holds none.
  uint64_t held_version = 0;
  int32_t held_slot = -1;
};

// What the tracker asks of the running job when it picks a source (the coordinator: its
// participants and sequencer; a test: a table). Called only during the event that needs them.
struct ColdStartSources {
  // Running replicas holding a ready version: (its newest ready version, replica id).
  std::function<std::set<std::pair<uint64_t, int32_t>>()> holders;
  // The rollout ranks of a replica that can serve as sources (connected, committed), ascending.
  std::function<std::vector<int32_t>(int32_t replica)> live_ranks;
  // A rollout rank's registration as the job's plan saw it.
  std::function<Result<Registration>(int32_t rollout)> registration;
};

// One message: the same payload to every rollout rank in `to`, in order.
struct ColdStartMessage {
  MessageType type = MessageType::kError;  // kPrepare, kColdFill, kReady or kGo
  std::vector<int32_t> to;
  std::variant<SlotMsg, ColdFillMsg, GoMsg> payload;

  std::vector<uint8_t> encodedPayload() const {
    return std::visit([](const auto& m) { return encode(m); }, payload);
  }
};

// A cold start that ended: its replica holds `version` in `slot` on every rank (0 / -1: none, its
// first version comes from the trainers). A catch-up that found nothing newer ends with the
// joiner's held version and slot.
struct ColdStartResult {
  int32_t replica = -1;
  uint64_t version = 0;
  int32_t slot = -1;
};

// What one event asks the caller to do, in this order: send `messages`, log `notes`, then act on
// the rest.
struct ColdStartOutput {
  std::vector<ColdStartMessage> messages;
  std::vector<std::string> notes;
  std::vector<ColdStartResult> finished;  // each ended cold start, once (it is forgotten)
  // tick(): joins whose current attempt ran past options.timeout (replica, why), by replica id;
  // the caller aborts them (forget()).
  std::vector<std::pair<int32_t, std::string>> overdue;
  // tick(): source replicas that held a fill past half of options.timeout (replica, why); the
  // caller drops them, and onSourceLost() moves the fill elsewhere.
  std::vector<std::pair<int32_t, std::string>> stalled_sources;
};

class ColdStartTracker {
 public:
  explicit ColdStartTracker(ColdStartOptions options = {}) : options_(options) {}

  // The joiner's cold start begins: a first attempt from the best source, or, when none can fill
  // it (no version yet, or none whose layout and dtypes fill it: noted), it ends at once.
  // INVALID_ARGUMENT (nothing changed) when the replica is in a cold start already or the spec is
  // malformed (no ranks, no slots, a registration or peer missing for a rank, a held slot outside
  // [0, num_slots) or with fewer than 2 slots).
  Result<ColdStartOutput> start(ColdStartJoiner joiner, const ColdStartSources& sources,
                                ColdStartTime now);

  // A joiner rank's answers. PROTOCOL (naming the message) when one is out of order or the
  // replica is in no cold start: the caller ends that join (forget()).
  Result<ColdStartOutput> onPrepared(int32_t replica, int32_t rank, const SlotMsg& prepared,
                                     const ColdStartSources& sources, ColdStartTime now);
  Result<ColdStartOutput> onReadied(int32_t replica, int32_t rank, const VersionMsg& readied,
                                    ColdStartTime now);
  // A source rank's answer to its ColdFill. Answers of earlier attempts or forgotten cold starts
  // are ignored; PROTOCOL when the fill is current but the rank owes it no answer.
  Result<ColdStartOutput> onFillDone(int32_t rank, const ColdFillDoneMsg& done,
                                     const ColdStartSources& sources, ColdStartTime now);
  // A source replica was dropped: cold starts reading from it try another source.
  ColdStartOutput onSourceLost(int32_t replica, const ColdStartSources& sources, ColdStartTime now);
  // Time passed: overdue attempts and stalled sources (see ColdStartOutput).
  ColdStartOutput tick(ColdStartTime now) const;

  // The replica's join ended otherwise (aborted): its cold start, if any, is dropped.
  void forget(int32_t replica) { fills_.erase(replica); }
  bool active(int32_t replica) const { return fills_.count(replica) != 0; }
  // The current attempt's id of the replica's cold start (ColdFill::fill); 0: none.
  uint64_t currentFill(int32_t replica) const;

 private:
  // One joiner's cold start: one attempt at a time.
  struct Fill {
    enum class Stage { kPreparing, kFilling, kReadying };
    ColdStartJoiner joiner;
    uint64_t fill = 0;    // this attempt's id
    int32_t source = -1;  // the source replica
    uint64_t version = 0;
    int32_t slot = 0;  // the joiner's slot
    Stage stage = Stage::kPreparing;
    std::set<int32_t> waiting;  // joiner ranks (Prepared, Readied) or source ranks (ColdFillDone)
    bool source_lost = false;   // the source replica was dropped during this attempt
    std::string failure;        // why this attempt's fill failed (empty: it did not)
    int attempts = 0;
    uint64_t bytes = 0;                 // written by the sources this attempt
    Plan plan;                          // the attempt's fill plan, until its ColdFills are sent
    std::vector<int32_t> source_ranks;  // the fill plan's sender i is rollout source_ranks[i]
    ColdStartTime started;              // the first attempt
    ColdStartTime attempt_started;      // this one
    ColdStartTime fill_sent;            // this attempt's ColdFills (stage kFilling)
  };

  // A new attempt from the best source; gives the cold start up when there is none.
  void retry(Fill& f, const ColdStartSources& sources, ColdStartTime now, ColdStartOutput& out);
  // Every joiner rank prepared: ColdFill to each source rank with writes (false: none has any).
  bool sendFills(Fill& f, ColdStartTime now, ColdStartOutput& out);
  void sendReady(Fill& f, ColdStartOutput& out);
  // Ends the cold start without a version; Go(slot -1) to the joiner's ranks when `prepared`.
  void giveUp(Fill& f, const std::string& why, bool prepared, ColdStartOutput& out);
  // Ends the cold start (f is gone on return).
  void finish(Fill& f, uint64_t version, int32_t slot, ColdStartOutput& out);
  // The joiner's slot after `slot` that does not hold its held version.
  static int32_t nextSlot(const ColdStartJoiner& j, int32_t slot);

  ColdStartOptions options_;
  std::map<int32_t, Fill> fills_;  // by joining replica id
  uint64_t last_fill_id_ = 0;
};

}  // namespace wsync
