// The delivery gate: the coordinator holds a version's Delivered (which completes the trainers'
// publish requests) until every rollout rank that was sent Ready for it confirmed, with Readied,
// that the version is readable there. So a completed request means every taking rank's
// wsync_acquire returns the version. Pure bookkeeping on the coordinator's event thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "coordinator/version_sequencer.h"

namespace wsync {

class DeliveryGate {
 public:
  // Ready(version) was sent to `rollout`.
  void readySent(uint64_t version, int32_t rollout, SequencerTime now);
  // Delivered(version) is due: returns it when it may go now; else holds it (nullopt).
  std::optional<OutgoingMessage> deliver(OutgoingMessage delivered);
  // `rollout` confirmed `version`: returns the Delivered this released, if any. PROTOCOL when no
  // Ready(version) awaited its confirmation.
  Result<std::optional<OutgoingMessage>> readied(uint64_t version, int32_t rollout);
  // `rollout` left the job: no confirmation is awaited from it any more (returns what it released).
  std::vector<OutgoingMessage> forget(int32_t rollout);
  // A version whose confirmations are overdue (Ready sent more than `timeout` before `now`),
  // described for the job's error; nullopt when none.
  std::optional<std::string> overdue(SequencerTime now, std::chrono::milliseconds timeout) const;
  // The rollout ranks whose confirmation is overdue (Ready sent to them more than `bound` before
  // `now`),
  // in increasing order: the coordinator drops their replicas before the job's own timeout.
  std::vector<int32_t> overdueRanks(SequencerTime now, std::chrono::milliseconds bound) const;
  // The trainers are gone (trainer restart, coordinator/trainer_restart.h): every Delivered held
  // or still due is dropped; confirmations of Readys sent before are still accepted (and release
  // nothing), and are no longer overdue.
  void abandonAll();

 private:
  struct Pending {
    std::set<int32_t> waiting;  // rollout ranks sent Ready, not confirmed yet
    SequencerTime first_ready;
    std::map<int32_t, SequencerTime> ready_at;  // when each rank was sent Ready
    std::optional<OutgoingMessage> delivered;   // held
    bool abandoned = false;                     // abandonAll(): no Delivered follows
  };
  std::map<uint64_t, Pending> pending_;
};

}  // namespace wsync
