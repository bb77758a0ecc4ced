// The payloads of a version's flow: publish, prepare, go, ready and delivered, membership changes,
// peer cold start and checksums (protocol.h declares the messages that carry them). Each lists its
// fields in wire order in fields(V&, M&); an optional `Status afterDecode()` checks a decoded
// value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/field_codec.h"
#include "common/status.h"
#include "protocol/protocol_version.h"
#include "protocol/setup_messages.h"  // PeerInfo (PlanExtension)

namespace wsync {

struct VersionMsg {  // Publish, Sent, Received, Readied, Verified, CommitDone(version 0)
  uint64_t version = 0;

  static void fields(auto& v, auto& m) { v.u64(m.version); }
};

struct ReplicaMsg {  // ReplicaDropped, ExtensionDone
  int32_t replica = -1;
  std::vector<int32_t> ranks;  // ReplicaDropped: the replica's rollout ranks

  static void fields(auto& v, auto& m) {
    v.i32(m.replica);
    v.i32s(m.ranks, protocol_limits::kMaxRanks);
  }
  Status afterDecode();  // ranks >= 0
};

// A joined replica's part of the plan for one trainer: its writes to the replica's ranks
// (encodeRankPlan of rankView over the replica's plan) and those ranks' addresses and slots.
struct PlanExtensionMsg {
  int32_t replica = -1;
  std::vector<int32_t> ranks;  // the replica's rollout ranks
  std::vector<uint8_t> rank_plan;
  std::vector<PeerInfo> peers;

  static void fields(auto& v, auto& m) {
    v.i32(m.replica);
    v.i32s(m.ranks, protocol_limits::kMaxRanks);
    v.bytes(m.rank_plan, protocol_limits::kMaxBlobBytes);
    v.list(m.peers, protocol_limits::kMaxRanks);
  }
  Status afterDecode();  // replica and ranks >= 0
};

struct SlotMsg {  // Prepare, Prepared, Ready
  uint64_t version = 0;
  int32_t slot = -1;

  static void fields(auto& v, auto& m) {
    v.u64(m.version);
    v.i32(m.slot);
  }
};

struct GoMsg {
  uint64_t version = 0;
  std::vector<int32_t> slot_of_replica;  // -1: the replica skips this version
  // Delta versions: per replica, the version it holds that trainers may send a patch against
  // (its newest ready one); 0 or missing (shorter vector): a full (dense) version.
  std::vector<uint64_t> base_of_replica;

  static void fields(auto& v, auto& m) {
    v.u64(m.version);
    v.i32s(m.slot_of_replica, protocol_limits::kMaxRanks);
    v.u64s(m.base_of_replica, protocol_limits::kMaxRanks);
  }
  uint64_t baseOf(int32_t replica) const {
    return replica >= 0 && static_cast<size_t>(replica) < base_of_replica.size()
               ? base_of_replica[static_cast<size_t>(replica)]
               : 0;
  }
};

// What the coordinator measured for a delivered version (coordinator/metrics.h).
struct DeliveredStats {
  uint64_t bytes = 0;              // delivered to the replicas that took it
  uint64_t microseconds = 0;       // start to delivered, coordinator clock
  int32_t replicas_ready = 0;      // took it
  int32_t replicas_skipped = 0;    // were busy and skipped it
  int32_t replicas_lost = 0;       // left while it was in flight
  uint32_t retries = 0;            // 0 until the data plane retries
  uint32_t checksum_failures = 0;  // 0 until versions are checksummed
  // Format 2: the one-sided writes' bytes on the wire (patches and dense writes) and what they
  // would have been dense, summed over the trainers and every send of the version (re-sends too).
  uint64_t wire_bytes = 0;
  uint64_t full_bytes = 0;

  static constexpr uint8_t kFormat = 2;  // the fields below, in order
  static void fields(auto& v, auto& m) {
    v.u64(m.bytes);
    v.u64(m.microseconds);
    v.count32(m.replicas_ready, protocol_limits::kMaxRanks);
    v.count32(m.replicas_skipped, protocol_limits::kMaxRanks);
    v.count32(m.replicas_lost, protocol_limits::kMaxRanks);
    v.u32(m.retries);
    v.u32(m.checksum_failures);
    v.u64(m.wire_bytes);
    v.u64(m.full_bytes);
  }
};

// Delivered(v): the version is ready on every replica that took it. Replica ids increasing. On the
// wire: the version, the three replica lists, then (optional) a stats block that starts with its
// format number; a payload without it decodes with has_stats false, and a newer format's extra
// fields after the ones known here are skipped.
struct DeliveredMsg {
  uint64_t version = 0;
  std::vector<int32_t> ready_replicas;    // took the version
  std::vector<int32_t> skipped_replicas;  // busy past the skip grace
  std::vector<int32_t> lost_replicas;     // dropped or left while the version was in flight
  bool has_stats = false;
  DeliveredStats stats;

  static void fields(auto& v, auto& m) {
    v.u64(m.version);
    v.i32s(m.ready_replicas, protocol_limits::kMaxRanks);
    v.i32s(m.skipped_replicas, protocol_limits::kMaxRanks);
    v.i32s(m.lost_replicas, protocol_limits::kMaxRanks);
    v.extension(m.has_stats, DeliveredStats::kFormat,
                [&](auto& f) { DeliveredStats::fields(f, m.stats); });
  }
};

struct ErrorMsg {
  wsync_status_t code = WSYNC_ERR_REMOTE;
  std::string message;

  static void fields(auto& v, auto& m) {
    v.enumeration(m.code, WSYNC_ERR_INTERNAL);
    v.str(m.message, protocol_limits::kMaxStringBytes);
  }
  Status afterDecode();  // SUCCESS on the wire reads as REMOTE
};

// ColdFill: one source rank's part of filling a joining replica from the version it holds.
struct ColdFillMsg {
  uint64_t fill = 0;         // the attempt's id (ColdFillDone names it)
  uint64_t version = 0;      // the ready version to copy, > 0
  int32_t target_slot = -1;  // the joiner's slot to write
  // encodeRankPlan of the fill plan's view for this rank as the sender (role trainer): its writes,
  // whose sources are its own buffers (in the slot holding `version`) and whose destinations are
  // the joiner's ranks. Never converting.
  std::vector<uint8_t> rank_plan;
  std::vector<PeerInfo> peers;  // the joiner's ranks this rank writes to

  static void fields(auto& v, auto& m) {
    v.u64(m.fill);
    v.u64(m.version);
    v.i32(m.target_slot);
    v.bytes(m.rank_plan, protocol_limits::kMaxBlobBytes);
    v.list(m.peers, protocol_limits::kMaxRanks);
  }
  Status afterDecode();  // version > 0, target slot within every peer's slots
};

// ColdFillDone: the source rank's answer; SUCCESS once its writes are flushed.
struct ColdFillDoneMsg {
  uint64_t fill = 0;
  wsync_status_t code = WSYNC_SUCCESS;
  std::string message;  // the error, naming the rank (and tensor) where relevant
  uint64_t bytes = 0;   // bytes written

  static void fields(auto& v, auto& m) {
    v.u64(m.fill);
    v.enumeration(m.code, WSYNC_ERR_INTERNAL);
    v.str(m.message, protocol_limits::kMaxStringBytes);
    v.u64(m.bytes);
  }
};

// One rank's checksum of a version's bytes (checksum/checksum.h): a rollout rank's (what a trainer
// sent it) or a trainer rank's (what a rollout rank received from it).
struct RankChecksum {
  int32_t rank = -1;
  uint64_t sum = 0;
  bool operator==(const RankChecksum&) const = default;

  static constexpr size_t kMinWireBytes = 9;  // a one-byte rank and the fixed sum
  static void fields(auto& v, auto& m) {
    v.i32(m.rank);
    v.fixed64(m.sum);
  }
  // A list of them (SentChecksums, Verify).
  static void listField(auto& v, auto& sums) {
    v.list(
        sums, protocol_limits::kMaxRanks, [](auto& f, auto& c) { fields(f, c); }, kMinWireBytes);
  }
};

// SentChecksums: Sent(version), with the checksum of what this trainer sent to each rollout rank
// it wrote to or broadcast to for this Go (ranks increasing, each once).
struct SentChecksumsMsg {
  uint64_t version = 0;
  std::vector<RankChecksum> sums;
  // This send's one-sided writes: bytes put on the wire (patches with delta versions) and the
  // bytes the same writes carry dense.
  uint64_t wire_bytes = 0;
  uint64_t full_bytes = 0;

  static void fields(auto& v, auto& m) {
    v.u64(m.version);
    RankChecksum::listField(v, m.sums);
    v.u64(m.wire_bytes);
    v.u64(m.full_bytes);
  }
  Status afterDecode();  // ranks >= 0, strictly increasing
};

// Verify: `slot` of the receiving rank holds `version` once its checksum from each trainer (by
// trainer rank, increasing; a trainer not listed sent it nothing) matches `sums`.
struct VerifyMsg {
  uint64_t version = 0;
  int32_t slot = -1;
  std::vector<RankChecksum> sums;

  static void fields(auto& v, auto& m) {
    v.u64(m.version);
    v.i32(m.slot);
    RankChecksum::listField(v, m.sums);
  }
  Status afterDecode();  // ranks >= 0, strictly increasing
};

// ChecksumFailed: the rank's bytes of `version` from `trainers` do not match their checksums.
struct ChecksumFailedMsg {
  uint64_t version = 0;
  std::vector<int32_t> trainers;  // increasing, not empty
  std::string detail;             // names the rank, the trainers and their tensors

  static void fields(auto& v, auto& m) {
    v.u64(m.version);
    v.i32s(m.trainers, protocol_limits::kMaxRanks);
    v.str(m.detail, protocol_limits::kMaxStringBytes);
  }
  Status afterDecode();  // trainers >= 0
};

// No payload (CommitOk, Bye, Heartbeat, Leave, Left).
struct EmptyMsg {
  static void fields(auto& /*v*/, auto& /*m*/) {}
};

}  // namespace wsync
