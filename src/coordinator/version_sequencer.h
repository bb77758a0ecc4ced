// The version sequencer: the coordinator's per-version state machine, as a pure component. It
// takes events (a trainer published, a rollout rank drained its slot, data was sent or received,
// time passed, a replica joined or left) and returns the messages to send; it has no sockets, no
// threads and no clock of its own: every event carries `now`, and nextDeadline() says when the
// caller must call advance() at the latest. Not thread-safe; the coordinator's event thread owns
// it.
//
// One version at a time (protocol/protocol.h):
//   the first Publish(v) of any trainer queues v; versions start in increasing order, each once
//   the previous one was delivered;
//   start: Prepare(v, slot) to every rank of every replica (the slot: not the replica's newest
//   ready one; an empty one, else the oldest);
//   Go(v, slot per replica) to every trainer and every rank of the version's replicas once each
//   replica is prepared on all its ranks, or busy (a rank said SlotBusy: readers hold its slot).
//   A replica still busy skip_grace after the start is skipped (slot -1) if it already holds a
//   version and skipping keeps its lag within max_staleness; otherwise Go waits for it, unless
//   it is busy;
//   late Go: a busy replica is left out of that Go (its ranks get none) unless no replica is
//   prepared yet; once its ranks prepared it gets a Go(v) of its own (a slot for it alone, to
//   every trainer and its ranks, like a checksum re-send), or, still busy past the grace and
//   skippable as above, Go(v, -1) to its ranks only; so readers on one replica never hold up Go
//   for the others. Delivered waits for it (bounded by the grace when skippable);
//   Ready(v, slot) to the ranks of a taking replica once every trainer sent v and every rank of
//   the replica received it (with checksums, see below: once every rank verified it);
//   Delivered(v) to every trainer once every taking replica is ready (VersionOutcome, also the
//   message's DeliveredMsg, says which replicas took v, which were skipped, which left while v was
//   in flight).
//
// Prepare ahead (SequencerOptions::prepare_ahead): once a version is delivered and none is
// queued, every replica whose next slot is empty or holds a version older than the newest but one
// (3 or more slots) gets Prepare(last started + 1, that slot) at once, so its ranks drain it
// between versions; a Publish of exactly that version then starts without Prepare, and Go follows
// as soon as the ranks answered (usually before the Publish arrives). The version before the
// newest stays readable until the next version starts, as without it (with 2 slots a replica is
// prepared ahead only while a slot is empty). A Publish of another version prepares as above (the
// ranks give the ahead slot back and drain again).
//
// Checksums (SequencerOptions::job.checksums): trainers' Sent carries, per rollout rank, the
// checksum of what they sent there. A replica whose data landed gets Verify(v, slot, expected
// checksums per trainer) on each rank instead of Ready; once every rank answered, the replica is
// ready (Ready as above) if all verified, else its version is re-sent: a Go(v) that gives only
// that replica a slot, to every trainer and the replica's ranks, and the replica waits for their
// Sent and Received again. After job.checksum_retries re-sends that still fail, the replica skips
// the version (Go(v, -1) to its ranks only: they give the slot back; never readable corrupt).
// The sums, the answers and these counts are ChecksumVerification's (checksum_verification.h).
// Delivered waits until every trainer sent every Go of the version.
//
// Membership is keyed by replica id and rollout rank so that replicas can join and leave between
// or during versions: a replica added while a version is in flight takes part from the next
// version on; a replica removed while a version is in flight is no longer waited for (the version
// completes for the others; it counts as lost, or as ready when it had been sent Ready already),
// and later messages from its ranks are ignored. Trainers are fixed: losing one ends the job, or
// (trainer restart) abortVersions() and the same number of trainers go on with higher versions.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "common/status.h"
#include "coordinator/checksum_verification.h"
#include "coordinator/sequencer_replica.h"
#include "layout/registration.h"  // Role
#include "options/options.h"      // JobSettings
#include "protocol/protocol.h"

namespace wsync {

struct SequencerOptions {
  // Bound on one version's progress, from its start to its delivery.
  std::chrono::milliseconds timeout{60000};
  // How long after a version's start a busy replica may still hold up Go (see above).
  std::chrono::milliseconds skip_grace{200};
  int max_staleness = -1;  // versions a skipped replica may lag; -1: unbounded
  // The job-wide settings it reads: job.checksums (versions are checksummed, see above) and
  // job.checksum_retries (a replica's version is re-sent at most that many times, >= 0).
  JobSettings job;
  bool prepare_ahead = false;  // see the file comment
  // Bound on how long a version waits on one replica's ranks (0: none, only `timeout`): a replica
  // whose ranks still owe the version an answer they give at once when running (Received, from
  // its Go; a Verify answer, from the Verify) this long after they were asked is reported by
  // advance() in SequencerOutput::stalled_replicas; the caller drops it (removeReplica), so a
  // stopped or hung replica never holds the version up to `timeout`. Below `timeout`. Prepared is
  // not bounded by it: readers' leases may hold a slot (the replica is skipped, or with the
  // staleness bound the version waits up to `timeout`, as before).
  std::chrono::milliseconds replica_timeout{0};
};

// One message: the same payload to every rank in `to`.
struct OutgoingMessage {
  MessageType type = MessageType::kError;
  std::vector<RankRef> to;
  std::variant<VersionMsg, SlotMsg, GoMsg, DeliveredMsg, VerifyMsg> payload;

  std::vector<uint8_t> encodedPayload() const {
    return std::visit([](const auto& m) { return encode(m); }, payload);
  }
};

// How a delivered version ended, replica ids in increasing order.
struct VersionOutcome {
  uint64_t version = 0;
  std::vector<int32_t> ready_replicas;    // took the version: every rank got Ready
  std::vector<int32_t> skipped_replicas;  // busy past the grace: Go said -1
  std::vector<int32_t> lost_replicas;     // removed while the version was in flight, not ready
  // Checksums, per replica that had failures (replica id -> count): its verifications that failed
  // (one per attempt, whatever the number of its ranks that failed) and the re-sends they caused.
  // A replica still failing after its last re-send is in skipped_replicas and rejected_replicas.
  std::map<int32_t, uint32_t> checksum_failures;
  std::map<int32_t, uint32_t> retries;
  std::vector<int32_t> rejected_replicas;
};

// What one event asks the caller to do.
struct SequencerOutput {
  std::vector<OutgoingMessage> messages;    // send in this order
  std::vector<std::string> notes;           // progress lines for the log (skipped replicas)
  std::optional<VersionOutcome> delivered;  // set when this event completed a version
  // advance(): replicas that held the in-flight version past options.replica_timeout (see there);
  // each is reported once per version.
  std::vector<int32_t> stalled_replicas;
};

class VersionSequencer {
 public:
  // Trainers are ranks [0, num_trainers), num_trainers >= 1; replicas come through addReplica().
  VersionSequencer(SequencerOptions options, int32_t num_trainers);

  // Adds a replica (INVALID_ARGUMENT on a bad spec, see ReplicaSpec; a ready slot outside
  // [0, num_slots), or a ready version without its slot or above the last started version). It
  // takes part from the next version that starts. A ready version counts as the replica's newest
  // ready one: the next version goes to another slot, and skipping and staleness start from it.
  Status addReplica(const ReplicaSpec& spec);
  // Removes a replica (INVALID_ARGUMENT when unknown). The in-flight version stops waiting for it,
  // so this may send Go, Ready and Delivered, and start the next version.
  Result<SequencerOutput> removeReplica(int32_t replica, SequencerTime now);

  // Events from ranks. Errors (the job should fail): INVALID_ARGUMENT for an unknown rank or
  // version 0, INVALID_USAGE for a Publish below the started version, PROTOCOL for a message out
  // of order (before Go, for another version, twice, from a replica that does not take the
  // version, for another slot than asked). On error nothing changed.
  Result<SequencerOutput> onPublish(int32_t trainer, uint64_t version, SequencerTime now);
  Result<SequencerOutput> onPrepared(int32_t rollout, const SlotMsg& prepared, SequencerTime now);
  // A rank's readers hold the slot its Prepare asked for (SlotBusy): its replica no longer holds
  // up Go for the others (late Go, above). Advisory: one about another version or slot, or from a
  // rank in no replica, is ignored.
  Result<SequencerOutput> onSlotBusy(int32_t rollout, const SlotMsg& busy, SequencerTime now);
  // A trainer's Sent for its next Go of `version`; `sums`: its checksums per rollout rank
  // (SentChecksums; used when verifying checksums).
  Result<SequencerOutput> onSent(int32_t trainer, uint64_t version, SequencerTime now,
                                 const std::vector<RankChecksum>& sums = {});
  Result<SequencerOutput> onReceived(int32_t rollout, uint64_t version, SequencerTime now);
  // A rank's answer to Verify (PROTOCOL when no Verify awaits one).
  Result<SequencerOutput> onVerified(int32_t rollout, uint64_t version, SequencerTime now);
  Result<SequencerOutput> onChecksumFailed(int32_t rollout, const ChecksumFailedMsg& failed,
                                           SequencerTime now);
  // The trainers are gone (trainer restart, coordinator/coordinator.h): the version in flight ends
  // undelivered. Every replica not sent Ready for it gets Go(v, -1), so its ranks give the prepared
  // slot back and nothing a lost writer wrote becomes readable; published versions not started
  // are forgotten, and rollouts' later messages about the aborted version are ignored. From then
  // on a Publish must be above the last started version (INVALID_USAGE naming both), so versions
  // continue to increase for the rollouts.
  SequencerOutput abortVersions();
  // Time passed: skips busy replicas once the grace is over; reports the replicas it still waits
  // on past options.replica_timeout (stalled_replicas); TIMEOUT when the in-flight version was not
  // delivered within options.timeout of its start.
  Result<SequencerOutput> advance(SequencerTime now);

  // The latest time at which advance() must be called next; none while no version is in flight.
  std::optional<SequencerTime> nextDeadline() const;

  // Replicas whose ranks have not all prepared the in-flight version's slot while its Go (or
  // their late Go) waits for them, the version started at least options.replica_timeout before
  // `now` (readers' leases, or a stopped rank: the caller tells them apart).
  std::vector<int32_t> holdingGo(SequencerTime now) const;
  uint64_t inFlightVersion() const;  // 0: none
  uint64_t lastStartedVersion() const { return last_started_; }
  std::optional<int32_t> replicaOf(int32_t rollout) const;
  bool hasReplica(int32_t replica) const { return replicas_.count(replica) != 0; }
  uint64_t readyVersion(int32_t replica) const;  // newest version ready on it; 0: none or unknown

 private:
  using Replica = SequencerReplica;
  using Stage = SequencerReplica::Stage;

  struct InFlight {
    // User-provided: clang (14) cannot tell that a nested class with member initializers is
    // default-constructible while the enclosing class is incomplete (std::optional<InFlight>).
    InFlight() {}  // NOLINT(modernize-use-equals-default)
    uint64_t version = 0;
    SequencerTime started;
    bool go_sent = false;
    bool grace_applied = false;  // a call at or after started + skip_grace looked for skips
    // The replicas of each Go of the version to the trainers (the first Go's taking replicas,
    // then one per re-send), and per trainer how many of them it reported sent.
    std::vector<std::vector<int32_t>> go_batches;
    std::vector<size_t> trainer_sent;
    std::vector<int32_t> lost;            // replicas removed while in flight, before their Ready
    std::vector<int32_t> departed_ready;  // removed after their Ready: they took the version
  };

  Status checkTrainer(int32_t trainer) const;
  bool isAborted(uint64_t version) const;  // a message about the version abortVersions() ended
  // The replica of `rollout`: nullptr with OK status when the rank departed (ignore its message).
  Result<Replica*> replicaForMessage(int32_t rollout);
  std::vector<RankRef> trainerRanks() const;

  void startNext(SequencerTime now, SequencerOutput& out);
  void prepareAhead(SequencerOutput& out);  // when no version is in flight or queued
  void tryGo(SequencerTime now, SequencerOutput& out);
  // After the first Go: a late Go to each busy replica now prepared, or its skip past the grace.
  void tryLateGo(SequencerTime now, SequencerOutput& out);
  bool anyLate() const;  // a replica left out of the first Go still owes its Prepared
  bool canSkip(const Replica& r) const;
  void tryComplete(SequencerTime now, SequencerOutput& out);
  void markReady(Replica& r, SequencerOutput& out);
  // Checksums (checks_ decides): Verify to replica `id`'s ranks; then, once all answered, Ready
  // or a re-send.
  void sendVerify(int32_t id, Replica& r, SequencerOutput& out);
  // The replica awaiting a Verify answer from `rollout` (nullptr: ignore the answer).
  Result<Replica*> verifyAnswer(int32_t rollout, uint64_t version, const char* what);
  // A Verify answer's step: its notes, then once every rank answered, Ready, a re-send (asking
  // the ranks again at `now`) or a skip.
  void finishVerification(int32_t id, Replica& r, ChecksumVerification::Step step,
                          SequencerOutput& out, SequencerTime now);
  GoMsg goFor(int32_t replica, int32_t slot) const;  // a Go giving only `replica` a slot
  bool allTrainersSentEveryGo() const;
  std::string lateReport() const;

  SequencerOptions options_;
  int32_t num_trainers_;
  std::map<int32_t, Replica> replicas_;    // by replica id
  std::map<int32_t, int32_t> replica_of_;  // rollout rank -> replica id
  std::set<int32_t> departed_;             // ranks of removed replicas
  std::set<uint64_t> pending_;             // published, not started
  uint64_t last_started_ = 0;
  std::optional<InFlight> in_flight_;
  // The in-flight version's checksums per replica (sums, answers, failures, re-sends, rejected);
  // reset by startNext.
  ChecksumVerification checks_;
  uint64_t restart_floor_ = 0;    // abortVersions(): a Publish must be above it
  uint64_t aborted_version_ = 0;  // the version abortVersions() ended in flight (0: none)
};

}  // namespace wsync
