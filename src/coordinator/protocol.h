// The coordinator protocol: the messages ranks and the coordinator exchange over the control plane
// (src/control frames: type = MessageType, payload = the encoded struct). Decoders are
// bounds-checked and return WSYNC_ERR_PROTOCOL on malformed input.
//
// Life of a job:
//   rank -> Hello                          coord -> Welcome (role rank, counts, world map)
//   rank -> Register (registration, transport address, slot descriptors)
//   coord -> PlanAssignment (RankPlan, peers' addresses and slots, broadcast communicators, and
//            the NCCL world when device broadcast groups exist) | Error
//   rank -> CommitDone                     coord -> CommitOk (every rank connected)  | Error
// Each version v (trainers publish in increasing order):
//   trainer -> Publish(v)                  (the first Publish(v) starts v)
//   coord -> Prepare(v, slot) to each rollout rank; rank drains leases on slot -> Prepared(v, slot)
//            (sent ahead, for v = the last started + 1, once the previous version was delivered,
//            to a replica whose next slot does not hold the newest version but one; a Publish of
//            another version is prepared again, replacing it)
//   coord -> Go(v, slot per replica, -1 = skipped) to every trainer and rollout rank
//   trainers write/broadcast -> Sent(v);  rollout ranks that receive broadcasts -> Received(v)
//   coord -> Ready(v, slot) to the ranks of each replica once all of its data landed
//   rollout rank -> Readied(v) once v is readable on it (wsync_acquire returns it)
//   coord -> Delivered(v, which replicas took, skipped, were lost; the coordinator's stats) to
//            every trainer once every taking replica is ready and every rank sent Ready(v)
//            confirmed it
// Any side -> Error(status, message); rank -> Bye at finalize.
// Membership while the job runs (protocol version 4):
//   rollout -> Heartbeat every Welcome::heartbeat_interval_ms (a rank silent past the
//            coordinator's heartbeat timeout is dropped, as is one whose connection closes)
//   rollout -> Leave (finalize)            coord -> Left once no trainer writes into it any more
//   coord -> ReplicaDropped(replica, ranks) to every trainer: write to those ranks no more
//   a replica joining a running job (Hello with replica_size > 0) registers as above; the
//   coordinator plans it alone (one-sided writes) and sends each trainer PlanExtension (its writes
//   to the new ranks and their peers); trainer -> ExtensionDone(replica). Once every new rank
//   sent CommitDone: CommitOk to the new ranks (protocol 5: without waiting for the trainers) and
//   its peer cold start below; once that ended and every trainer is done, the replica takes part
//   from the next version.
// Peer cold start (protocol version 5): when the joiner's ranks committed and a running replica S
// holds a ready version v, the coordinator fills the joiner with v from S's ranks before it takes
// part in versions:
//   coord -> Prepare(v, slot) to the joiner's ranks -> Prepared(v, slot)   (as for any version)
//   coord -> ColdFill(fill id, v, its writes, the joiner ranks' addresses and slots, target slot)
//            to each rank of S that has writes; the rank takes a lease on v (or answers failure
//            at once when it no longer holds v), writes from its slot into the joiner's, flushes
//            -> ColdFillDone(fill id, status, bytes)
//   coord -> Ready(v, slot) to the joiner's ranks -> Readied(v); the replica then takes part
//            from the next version (the sequencer counts v as its ready one).
//   A fill that fails (v no longer held, a source rank lost) is retried with the newest ready
//   version, or given up: the joiner's ranks get Go(v, slot -1) (give the slot back) and the
//   replica gets its first version from the trainers.
// Checksums (protocol version 5; Welcome::checksums, docs/checksums.md): each trainer sends
//   SentChecksums(v, per rollout rank the checksum of what it sent there) instead of Sent(v);
//   once a replica's data landed, the coordinator sends each of its ranks Verify(v, slot, per
//   trainer the expected checksum) instead of Ready; the rank sums its slot's regions per trainer
//   and answers Verified(v) or ChecksumFailed(v, the trainers whose bytes differ). Every rank
//   verified: Ready(v, slot) as above. A rank failed: the replica's version is re-sent (a Go(v)
//   giving only that replica a slot, to the trainers and its ranks, which write and receive
//   again and answer SentChecksums / Received again), up to a bounded number of retries; then
//   the replica skips the version (Go(v, -1) to its ranks: they give the slot back).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "layout/registration.h"
#include "plan/broadcast_comm.h"

namespace wsync {

enum class MessageType : uint16_t {
  kHello = 1,
  kWelcome = 2,
  kRegister = 3,
  kPlanAssignment = 4,
  kCommitDone = 5,
  kCommitOk = 6,
  kPublish = 7,
  kPrepare = 8,
  kPrepared = 9,
  kGo = 10,
  kSent = 11,
  kReceived = 12,
  kReady = 13,
  kDelivered = 14,
  kError = 15,
  kBye = 16,
  kHeartbeat = 17,       // rollout -> coord, empty
  kLeave = 18,           // rollout -> coord, empty
  kLeft = 19,            // coord -> rollout, empty
  kReplicaDropped = 20,  // coord -> trainer, ReplicaMsg
  kPlanExtension = 21,   // coord -> trainer, PlanExtensionMsg
  kExtensionDone = 22,   // trainer -> coord, ReplicaMsg
  kReadied = 23,         // rollout -> coord, VersionMsg
  kColdFill = 24,        // coord -> rollout of a source replica, ColdFillMsg
  kColdFillDone = 25,    // that rollout -> coord, ColdFillDoneMsg
  kSentChecksums = 26,   // trainer -> coord, SentChecksumsMsg (Sent with checksums)
  kVerify = 27,          // coord -> rollout, VerifyMsg
  kVerified = 28,        // rollout -> coord, VersionMsg
  kChecksumFailed = 29,  // rollout -> coord, ChecksumFailedMsg
  // ---- issue 20 (elastic helper): every trainer said goodbye; payload VersionMsg (the last
  // version started). Rollouts stop waiting for newer versions (WSYNC_ERR_TRAINERS_DONE).
  kTrainersDone = 30,  // coord -> rollout, VersionMsg
};
const char* messageTypeName(MessageType t);

// 3: backends by name, a generic broadcast world; 4: dynamic membership (heartbeats, leave, join,
// Delivered outcomes) and rollouts confirming Ready with Readied; 5: peer cold start (ColdFill)
// and checksums (SentChecksums, Verify, Verified, ChecksumFailed; Welcome::checksums).
inline constexpr uint32_t kProtocolVersion = 5;

struct HelloMsg {
  uint32_t protocol_version = kProtocolVersion;
  Role role = Role::kTrainer;
  int32_t world_rank = -1;  // MPI bootstrap; -1 otherwise
  int32_t role_rank = -1;   // explicit bootstrap; -1 under MPI (the coordinator assigns it)
  int32_t replica = -1;     // rollouts
  std::string host;         // for messages only
  // A rollout joining a running job (explicit bootstrap, role_rank -1): its replica has
  // replica_size ranks, this is number replica_rank of them. 0: a rank of the fixed membership.
  int32_t replica_size = 0;
  int32_t replica_rank = -1;
};

struct WelcomeMsg {
  int32_t role_rank = 0;
  int32_t num_trainers = 0;
  int32_t num_rollouts = 0;
  std::vector<int32_t> trainer_world_ranks;  // empty without MPI
  std::vector<int32_t> rollout_world_ranks;
  // Rollouts send Heartbeat this often (ms); 0: the coordinator watches no heartbeats.
  int32_t heartbeat_interval_ms = 0;
  // Versions are checksummed (SentChecksums, Verify): the coordinator's choice, for every rank.
  bool checksums = false;
};

struct RegisterMsg {
  std::vector<uint8_t> registration;       // encodeRegistration()
  std::string transport;                   // rollouts: the write backend of the slots
  std::vector<uint8_t> transport_address;  // WriteTransport::localAddress()
  std::string device_id;  // "host/GPU-uuid" of a device-memory rank; empty for host memory
  // Trainer 0 on device memory in a CUDA (hence NCCL) build: the NCCL unique id of the job's NCCL
  // world (makeNcclUniqueId), which the coordinator forwards when the plan has device broadcast
  // groups. Empty otherwise.
  std::vector<uint8_t> nccl_unique_id;
  std::vector<std::vector<uint8_t>> slot_descriptors;  // rollouts: one per slot
  std::vector<uint64_t> buffer_byte_offsets;           // rollouts: each buffer's offset in a slot
};

// What a rank needs to know about a peer of the other role.
struct PeerInfo {
  int32_t rank = -1;
  std::string transport;  // the write backend of its slots
  std::vector<uint8_t> transport_address;
  std::vector<std::vector<uint8_t>> slot_descriptors;
  std::vector<uint64_t> buffer_byte_offsets;
};

// The world of a job's broadcast backend, when its plan has broadcast groups: "mpi" (host memory;
// world ranks are MPI world ranks) or "nccl" (device memory; every rank of the job is one NCCL
// rank, trainers first). Empty `backend`: no broadcast groups.
struct BroadcastWorldAssignment {
  std::string backend;
  std::vector<uint8_t> world_token;  // NCCL: trainer 0's RegisterMsg::nccl_unique_id
  int32_t world_rank = -1;           // this rank in that world, in [0, world_size)
  int32_t world_size = 0;
  std::vector<int32_t> root_ranks;  // the world rank of every trainer (broadcast roots)
};

struct PlanAssignmentMsg {
  std::vector<uint8_t> rank_plan;  // encodeRankPlan()
  std::vector<PeerInfo> peers;
  // The communicators this rank creates, in increasing id order: host broadcasts (MPI) the ones
  // it belongs to; device broadcasts (NCCL) every communicator of the job, since each NCCL split is
  // collective over the whole NCCL world.
  std::vector<BroadcastComm> comms;
  std::vector<int32_t> group_comm;          // per RankPlan group: index into `comms`
  std::vector<int32_t> replica_of_rollout;  // replica of every rollout rank
  BroadcastWorldAssignment broadcast;
};

struct VersionMsg {  // Publish, Sent, Received, Readied, CommitDone(version 0)
  uint64_t version = 0;
};

struct ReplicaMsg {  // ReplicaDropped, ExtensionDone
  int32_t replica = -1;
  std::vector<int32_t> ranks;  // ReplicaDropped: the replica's rollout ranks
};

// A joined replica's part of the plan for one trainer: its writes to the replica's ranks
// (encodeRankPlan of rankView over the replica's plan) and those ranks' addresses and slots.
struct PlanExtensionMsg {
  int32_t replica = -1;
  std::vector<int32_t> ranks;  // the replica's rollout ranks
  std::vector<uint8_t> rank_plan;
  std::vector<PeerInfo> peers;
};

struct SlotMsg {  // Prepare, Prepared, Ready
  uint64_t version = 0;
  int32_t slot = -1;
};

struct GoMsg {
  uint64_t version = 0;
  std::vector<int32_t> slot_of_replica;  // -1: the replica skips this version
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
};

struct ErrorMsg {
  wsync_status_t code = WSYNC_ERR_REMOTE;
  std::string message;
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
};

// ColdFillDone: the source rank's answer; SUCCESS once its writes are flushed.
struct ColdFillDoneMsg {
  uint64_t fill = 0;
  wsync_status_t code = WSYNC_SUCCESS;
  std::string message;  // the error, naming the rank (and tensor) where relevant
  uint64_t bytes = 0;   // bytes written
};

// One rank's checksum of a version's bytes (checksum/checksum.h): a rollout rank's (what a trainer
// sent it) or a trainer rank's (what a rollout rank received from it).
struct RankChecksum {
  int32_t rank = -1;
  uint64_t sum = 0;
  bool operator==(const RankChecksum&) const = default;
};

// SentChecksums: Sent(version), with the checksum of what this trainer sent to each rollout rank
// it wrote to or broadcast to for this Go (ranks increasing, each once).
struct SentChecksumsMsg {
  uint64_t version = 0;
  std::vector<RankChecksum> sums;
};

// Verify: `slot` of the receiving rank holds `version` once its checksum from each trainer (by
// trainer rank, increasing; a trainer not listed sent it nothing) matches `sums`.
struct VerifyMsg {
  uint64_t version = 0;
  int32_t slot = -1;
  std::vector<RankChecksum> sums;
};

// ChecksumFailed: the rank's bytes of `version` from `trainers` do not match their checksums.
struct ChecksumFailedMsg {
  uint64_t version = 0;
  std::vector<int32_t> trainers;  // increasing, not empty
  std::string detail;             // names the rank, the trainers and their tensors
};

std::vector<uint8_t> encode(const HelloMsg& m);
std::vector<uint8_t> encode(const WelcomeMsg& m);
std::vector<uint8_t> encode(const RegisterMsg& m);
std::vector<uint8_t> encode(const PlanAssignmentMsg& m);
std::vector<uint8_t> encode(const VersionMsg& m);
std::vector<uint8_t> encode(const SlotMsg& m);
std::vector<uint8_t> encode(const GoMsg& m);
std::vector<uint8_t> encode(const DeliveredMsg& m);
std::vector<uint8_t> encode(const ErrorMsg& m);
std::vector<uint8_t> encode(const ReplicaMsg& m);
std::vector<uint8_t> encode(const PlanExtensionMsg& m);
std::vector<uint8_t> encode(const ColdFillMsg& m);
std::vector<uint8_t> encode(const ColdFillDoneMsg& m);
std::vector<uint8_t> encode(const SentChecksumsMsg& m);
std::vector<uint8_t> encode(const VerifyMsg& m);
std::vector<uint8_t> encode(const ChecksumFailedMsg& m);

Status decode(const std::vector<uint8_t>& bytes, HelloMsg& m);
Status decode(const std::vector<uint8_t>& bytes, WelcomeMsg& m);
Status decode(const std::vector<uint8_t>& bytes, RegisterMsg& m);
Status decode(const std::vector<uint8_t>& bytes, PlanAssignmentMsg& m);
Status decode(const std::vector<uint8_t>& bytes, VersionMsg& m);
Status decode(const std::vector<uint8_t>& bytes, SlotMsg& m);
Status decode(const std::vector<uint8_t>& bytes, GoMsg& m);
Status decode(const std::vector<uint8_t>& bytes, DeliveredMsg& m);
Status decode(const std::vector<uint8_t>& bytes, ErrorMsg& m);
Status decode(const std::vector<uint8_t>& bytes, ReplicaMsg& m);
Status decode(const std::vector<uint8_t>& bytes, PlanExtensionMsg& m);
Status decode(const std::vector<uint8_t>& bytes, ColdFillMsg& m);
Status decode(const std::vector<uint8_t>& bytes, ColdFillDoneMsg& m);
Status decode(const std::vector<uint8_t>& bytes, SentChecksumsMsg& m);
Status decode(const std::vector<uint8_t>& bytes, VerifyMsg& m);
Status decode(const std::vector<uint8_t>& bytes, ChecksumFailedMsg& m);

}  // namespace wsync
