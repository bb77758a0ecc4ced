// The coordinator's metrics: per version and per replica bookkeeping of what the version
// sequencer did, as a pure component (no sockets, no clock of its own: every event carries
// `now`). The coordinator's event thread feeds it (observe(), once per sequencer output); any
// thread may read snapshot(). Memory is bounded: the last `keep_versions` versions are kept in
// full, everything else is a cumulative counter.
//
// What is measured (coordinator clock):
//   a version's seconds: from its start (first Prepare or Go) to its delivery (Delivered);
//   a replica's seconds: from the version's start to Ready on that replica;
//   bytes: what the plan delivers to a replica's ranks per version (destination dtype), counted
//   for the replicas that took the version;
//   lag: versions a replica's newest ready version is behind the newest delivered version;
//   checksum failures: a replica's verifications of a version that failed (one per attempt), and
//   retries: the re-sends they caused (checksummed jobs; 0 otherwise);
//   wire bytes: what the trainers' one-sided writes put on the wire for a version (patches with
//   delta versions, re-sends included) against full bytes, the same writes dense (SentChecksums).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "control/handshake_admission.h"
#include "coordinator/version_sequencer.h"
#include "plan/plan.h"
#include "protocol/protocol.h"

namespace wsync {

// kRejected: its checksums failed past the last re-send, so it skipped the version (counted with
// the skipped ones in totals and Delivered).
enum class ReplicaOutcome : uint8_t { kReady, kSkipped, kLost, kRejected };
const char* replicaOutcomeName(ReplicaOutcome outcome);

struct ReplicaVersionStats {
  int32_t replica = -1;
  ReplicaOutcome outcome = ReplicaOutcome::kReady;
  int64_t bytes = 0;     // delivered to it (0 unless kReady)
  double seconds = 0.0;  // start to Ready (0 unless kReady)
  uint32_t retries = 0;
  uint32_t checksum_failures = 0;
};

struct VersionStats {
  uint64_t version = 0;
  int64_t bytes = 0;     // sum over the replicas that took it
  double seconds = 0.0;  // start to delivered
  int32_t replicas_ready = 0;
  int32_t replicas_skipped = 0;
  int32_t replicas_lost = 0;
  uint32_t retries = 0;
  uint32_t checksum_failures = 0;
  uint64_t wire_bytes = 0;  // one-sided writes: on the wire (every send of the version)
  uint64_t full_bytes = 0;  // the same writes dense
  std::vector<ReplicaVersionStats> replicas;  // by replica id
};

// Cumulative, per replica (kept for every replica ever seen: bounded by the job's replicas).
struct ReplicaCounters {
  int32_t replica = -1;
  uint64_t versions_ready = 0;
  uint64_t versions_skipped = 0;
  bool lost = false;  // removed while a version was in flight
  uint64_t bytes = 0;
  double seconds = 0.0;       // sum of start-to-ready
  double last_seconds = 0.0;  // of its newest ready version
  uint64_t ready_version = 0;
  uint64_t lag_versions = 0;  // newest delivered version - ready_version
  uint64_t retries = 0;
  uint64_t checksum_failures = 0;
};

struct MetricsSnapshot {
  uint64_t versions_started = 0;
  uint64_t versions_delivered = 0;
  uint64_t newest_started = 0;
  uint64_t newest_delivered = 0;
  uint64_t bytes = 0;    // sum over delivered versions
  double seconds = 0.0;  // sum of start-to-delivered
  uint64_t skipped = 0;  // replica-versions skipped
  uint64_t lost = 0;     // replicas lost while a version was in flight
  uint64_t dropped = 0;  // replicas dropped from the running job (died, silent, stalled), any time
  uint64_t retries = 0;
  uint64_t checksum_failures = 0;
  uint64_t checksum_verifications = 0;  // Verify messages sent (one per rollout rank and attempt)
  uint64_t wire_bytes = 0;              // sums of VersionStats::wire_bytes / full_bytes
  uint64_t full_bytes = 0;
  std::vector<VersionStats> recent;       // the last delivered versions, oldest first
  std::vector<ReplicaCounters> replicas;  // by replica id
  // Control connections refused before authentication, by reason (wrong secret, garbage, limits,
  // ...): see control/handshake_admission.h.
  RefusalCounts control_refusals;
};

class CoordinatorMetrics {
 public:
  explicit CoordinatorMetrics(size_t keep_versions = 128);

  // Bytes the plan delivers to each replica per version (replicaBytes()). Set once, at planning.
  void setReplicaBytes(std::map<int32_t, int64_t> bytes_per_replica);

  // Reads one sequencer output (before its messages are sent): Prepare/Go of a new version start
  // it, Ready marks a replica ready, Delivered completes it with `out.delivered`. Returns the
  // Delivered message (with its stats) to send instead of the sequencer's version-only one when
  // the output delivers a version. `sequencer` maps rollout ranks to replicas.
  std::optional<DeliveredMsg> observe(const SequencerOutput& out, const VersionSequencer& sequencer,
                                      SequencerTime now);

  // The finer events observe() is made of (for callers without a sequencer).
  void onStarted(uint64_t version, SequencerTime now);
  void onReplicaReady(int32_t replica, uint64_t version, SequencerTime now);
  // A trainer's SentChecksums for `version`: the bytes its writes put on the wire, and dense.
  void onWireBytes(uint64_t version, uint64_t wire_bytes, uint64_t full_bytes);
  VersionStats onDelivered(const VersionOutcome& outcome, SequencerTime now);

  // One control connection refused (the control server's thread).
  void onControlRefused(RefusalReason reason);
  // A replica was dropped from the running job (not a clean leave), in flight or between versions.
  void onReplicaDropped();

  MetricsSnapshot snapshot() const;  // thread-safe

 private:
  ReplicaCounters& replica(int32_t id);  // mu_ held

  const size_t keep_versions_;
  mutable std::mutex mu_;
  std::map<int32_t, int64_t> bytes_per_replica_;
  uint64_t in_flight_ = 0;  // started, not delivered; 0: none
  SequencerTime in_flight_started_;
  std::map<int32_t, double> in_flight_ready_seconds_;  // replica -> start to Ready
  uint64_t in_flight_wire_bytes_ = 0;
  uint64_t in_flight_full_bytes_ = 0;
  MetricsSnapshot totals_;  // `recent` and `replicas` filled on read
  std::deque<VersionStats> recent_;
  std::map<int32_t, ReplicaCounters> replicas_;
};

// The bytes each replica receives per version under `plan` (destination dtype): its broadcast
// groups' and its ranks' write ops. `replica_of_rollout`: the replica of every rollout rank.
std::map<int32_t, int64_t> replicaBytes(const Plan& plan,
                                        const std::vector<int32_t>& replica_of_rollout);

// The Delivered message of `stats` (the compact form the trainers receive).
DeliveredMsg deliveredMessage(const VersionStats& stats);

// The snapshot in the Prometheus text exposition format (version 0.0.4): metrics named wsync_*,
// each with HELP and TYPE lines, per replica ones labelled replica="N".
std::string prometheusText(const MetricsSnapshot& snapshot);

// One line for the log: "version 12: 2/2 replicas ready, 0 skipped, 0 lost, 1048576 bytes in
// 0.0021 s (0.50 GB/s)".
std::string versionLine(const VersionStats& stats);
// The end-of-job summary line.
std::string summaryLine(const MetricsSnapshot& snapshot);

}  // namespace wsync
