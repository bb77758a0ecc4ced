// The coordinator protocol: the messages ranks and the coordinator exchange over the control plane
// (src/control frames: type = MessageType, payload = the encoded struct). Every message is declared
// once, in WSYNC_PROTOCOL_MESSAGES below (type id, name, payload struct, who sends it); each
// payload struct lists its fields once, in wire order, in a static fields() (common/field_codec.h),
// from which encode(), decode(), messageTypeName() and the fuzz target's coverage and seeds all
// come. Decoders are bounds-checked (every count and length against the limits in protocol_limits)
// and return WSYNC_ERR_PROTOCOL on malformed input.
//
// Wire compatibility: ranks and the coordinator must run the same protocol version
// (kProtocolVersion). Hello carries the rank's version first; the coordinator refuses a mismatch at
// Hello with PROTOCOL naming both ("protocol version 4 of the rank, 5 of the coordinator"),
// whatever follows in that Hello. Any change to a payload's fields (order, encoding, bounds) or a
// new message bumps kProtocolVersion; the one exception is Delivered's stats block, an extension
// that older decoders of the same version skip past (FieldReader::extension).
//
// Adding a message: one WSYNC_PROTOCOL_MESSAGES line, its payload struct with its fields() (or an
// existing payload), and its handler where it is received.
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
//   trainers with exchanged blocks (block-scaled rollout tensors) -> PartialMaxima(v, their
//            blocks' partial maxima); once every such trainer sent them, coord -> BlockMaxima(v,
//            the merged maxima) to each (they quantize with them after Go)
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
// Trainers finished (protocol version 6): once every trainer said Bye, the coordinator sends
//   TrainersDone(the last version started) to every rollout rank; waits for newer versions end
//   with WSYNC_ERR_TRAINERS_DONE (a later Ready, after a trainer restart, clears it).
// A late Go per replica (protocol version 7): a rollout rank whose readers still hold the slot a
//   Prepare(v, slot) asked for sends SlotBusy(v, slot) (once per Prepare; Prepared follows when
//   they let go). The first Go(v) then goes to the trainers and the prepared replicas without
//   waiting for a busy one: such a replica is left out of it (no Go to its ranks), and once its
//   ranks prepared it gets a Go(v) of its own (a slot for it alone, to every trainer and its
//   ranks, as a checksum re-send), or past the skip grace Go(v, -1) to its ranks (skipped).
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "common/field_codec.h"
#include "common/status.h"
#include "layout/block_scaling.h"
#include "layout/registration.h"
#include "plan/broadcast_comm.h"

namespace wsync {

// 3: backends by name, a generic broadcast world; 4: dynamic membership (heartbeats, leave, join,
// Delivered outcomes) and rollouts confirming Ready with Readied; 5: peer cold start (ColdFill)
// and checksums (SentChecksums, Verify, Verified, ChecksumFailed; Welcome::checksums); 6: trainers
// finished (TrainersDone); 7: block-scaled rollout tensors (RegisterMsg / PlanAssignmentMsg
// block_scalings, PartialMaxima, BlockMaxima), SlotBusy and a late Go per replica, Hello carrying
// the job-wide settings the rank set explicitly (HelloMsg::job_settings), delta versions.
inline constexpr uint32_t kProtocolVersion = 7;

// The bounds decoders hold every count and length to.
namespace protocol_limits {
inline constexpr uint64_t kMaxRanks = 1u << 20;
inline constexpr uint64_t kMaxBlobBytes = 1ull << 30;
inline constexpr uint64_t kMaxSlots = 64;
inline constexpr size_t kMaxStringBytes = 1 << 16;
inline constexpr uint64_t kMaxWorldTokenBytes = 1024;  // NCCL's unique id is 128 bytes
inline constexpr size_t kMaxNameBytes = 64;            // backend names
inline constexpr uint64_t kMaxGroups = 1ull << 32;     // PlanAssignment::group_comm
}  // namespace protocol_limits

// ---- payloads ----------------------------------------------------------------------------------
// Each lists its fields in wire order in fields(V&, M&) (M: the struct, const when encoding); an
// optional `Status afterDecode()` checks (and may normalize) a decoded value.

// One option set on a rank: its variable and value as the variable spells them.
struct NamedValueMsg {
  std::string variable;  // "WSYNC_CHECKSUMS"
  std::string value;     // "1"
  bool operator==(const NamedValueMsg&) const = default;

  template <class V, class M>
  static void fields(V& v, M& m) {
    v.str(m.variable, protocol_limits::kMaxNameBytes);
    v.str(m.value, protocol_limits::kMaxStringBytes);
  }
};

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
  // The job-wide settings this rank set explicitly (environment or config); the coordinator
  // fails the job (a joiner: refuses it) when one differs from its own.
  std::vector<NamedValueMsg> job_settings;

  template <class V, class M>
  static void fields(V& v, M& m) {
    v.u32(m.protocol_version);  // first, and checked before anything else is read
    v.check([&] { return m.protocol_version == kProtocolVersion; },
            [&] { return protocolVersionMismatch(m.protocol_version); });
    v.enum8(m.role, static_cast<uint8_t>(Role::kRollout));
    v.i32(m.world_rank);
    v.i32(m.role_rank);
    v.i32(m.replica);
    v.str(m.host, protocol_limits::kMaxStringBytes);
    v.i32(m.replica_size);
    v.i32(m.replica_rank);
    v.list(m.job_settings, 64);
  }
  // PROTOCOL: "protocol version <rank's> of the rank, <ours> of the coordinator ...".
  static Status protocolVersionMismatch(uint32_t rank_version);
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
  // Delta versions (docs/delta.md): rollouts expose a landing area for patches of
  // delta_max_share_ppm millionths of their slot bytes (plus a per-trainer header allowance).
  bool delta = false;
  uint32_t delta_max_share_ppm = 0;

  template <class V, class M>
  static void fields(V& v, M& m) {
    v.i32(m.role_rank);
    v.i32(m.num_trainers);
    v.i32(m.num_rollouts);
    v.i32s(m.trainer_world_ranks, protocol_limits::kMaxRanks);
    v.i32s(m.rollout_world_ranks, protocol_limits::kMaxRanks);
    v.i32(m.heartbeat_interval_ms);
    v.flag(m.checksums);
    v.flag(m.delta);
    v.u32(m.delta_max_share_ppm);
  }
};

// A rollout's block-scaled float8 tensor (wsync_set_block_scaling; layout/block_scaling.h).
struct BlockScalingRecord : ScaledTensor {
  template <class V, class M>
  static void fields(V& v, M& m) {
    v.str(m.tensor, protocol_limits::kMaxStringBytes);
    v.enum8(m.scaling.format, static_cast<uint8_t>(kMaxScaleFormat));
    v.i64(m.scaling.block_rows);
    v.i64(m.scaling.block_cols);
    v.str(m.scaling.scale_tensor, protocol_limits::kMaxStringBytes);
  }
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
  std::vector<BlockScalingRecord> block_scalings;      // rollouts: their block-scaled tensors
  std::vector<uint8_t> delta_landing;  // rollouts with delta versions: the patch landing area

  template <class V, class M>
  static void fields(V& v, M& m) {
    v.bytes(m.registration, protocol_limits::kMaxBlobBytes);
    v.str(m.transport, protocol_limits::kMaxNameBytes);
    v.bytes(m.transport_address, protocol_limits::kMaxBlobBytes);
    v.str(m.device_id, protocol_limits::kMaxStringBytes);
    v.list(m.slot_descriptors, protocol_limits::kMaxSlots,
           [](auto& f, auto& d) { f.bytes(d, protocol_limits::kMaxBlobBytes); });
    v.u64s(m.buffer_byte_offsets, protocol_limits::kMaxRanks);
    v.list(m.block_scalings, protocol_limits::kMaxRanks);
    v.bytes(m.nccl_unique_id, protocol_limits::kMaxWorldTokenBytes);
    v.bytes(m.delta_landing, protocol_limits::kMaxBlobBytes);
  }
};

// What a rank needs to know about a peer of the other role.
struct PeerInfo {
  int32_t rank = -1;
  std::string transport;  // the write backend of its slots
  std::vector<uint8_t> transport_address;
  std::vector<std::vector<uint8_t>> slot_descriptors;
  std::vector<uint64_t> buffer_byte_offsets;
  // Delta versions, to a trainer: the rank's landing area and this trainer's part of it (bytes 0:
  // this trainer writes the rank dense; src/delta/delta_landing.h).
  std::vector<uint8_t> delta_landing;
  uint64_t delta_landing_offset = 0;
  uint64_t delta_landing_bytes = 0;

  template <class V, class M>
  static void fields(V& v, M& m) {
    v.i32(m.rank);
    v.str(m.transport, protocol_limits::kMaxNameBytes);
    v.bytes(m.transport_address, protocol_limits::kMaxBlobBytes);
    v.list(m.slot_descriptors, protocol_limits::kMaxSlots,
           [](auto& f, auto& d) { f.bytes(d, protocol_limits::kMaxBlobBytes); });
    v.u64s(m.buffer_byte_offsets, protocol_limits::kMaxRanks);
    v.bytes(m.delta_landing, protocol_limits::kMaxBlobBytes);
    v.u64(m.delta_landing_offset);
    v.u64(m.delta_landing_bytes);
  }
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

  template <class V, class M>
  static void fields(V& v, M& m) {
    v.str(m.backend, protocol_limits::kMaxNameBytes);
    v.bytes(m.world_token, protocol_limits::kMaxWorldTokenBytes);
    v.i32(m.world_rank);
    v.i32(m.world_size);
    v.i32s(m.root_ranks, protocol_limits::kMaxRanks);
  }
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
  // Trainers: every block-scaled tensor of the job (plan/block_scaling_plan.h), from which the
  // trainer derives its quantized sources, and the blocks of those sources whose maxima it
  // exchanges each version (PartialMaxima / BlockMaxima): indices into its sources' block grids,
  // concatenated in source order, increasing.
  std::vector<BlockScalingRecord> block_scalings;
  std::vector<uint64_t> exchanged_blocks;

  template <class V, class M>
  static void fields(V& v, M& m) {
    v.bytes(m.rank_plan, protocol_limits::kMaxBlobBytes);
    v.list(m.peers, protocol_limits::kMaxRanks);
    v.list(m.comms, protocol_limits::kMaxRanks, [](auto& f, auto& c) {
      f.i32(c.id);
      f.i32s(c.world_ranks, protocol_limits::kMaxRanks);
    });
    v.i32s(m.group_comm, protocol_limits::kMaxGroups);
    v.i32s(m.replica_of_rollout, protocol_limits::kMaxRanks);
    BroadcastWorldAssignment::fields(v, m.broadcast);
    v.list(m.block_scalings, protocol_limits::kMaxRanks);
    v.u64s(m.exchanged_blocks, protocol_limits::kMaxBlobBytes);
  }
  // Group indices within `comms`; world ranks within the broadcast world.
  Status afterDecode();
};

// PartialMaxima (trainer -> coordinator): the trainer's maxima |x| of its exchanged blocks for
// `version`, in PlanAssignment::exchanged_blocks order. BlockMaxima (coordinator -> trainer): the
// same blocks' maxima over every trainer (NaN-propagating max). float32 little-endian each.
struct BlockMaximaMsg {
  uint64_t version = 0;
  std::vector<uint8_t> amax;

  template <class V, class M>
  static void fields(V& v, M& m) {
    v.u64(m.version);
    v.bytes(m.amax, protocol_limits::kMaxBlobBytes);
  }
};

struct VersionMsg {  // Publish, Sent, Received, Readied, Verified, CommitDone(version 0)
  uint64_t version = 0;

  template <class V, class M>
  static void fields(V& v, M& m) {
    v.u64(m.version);
  }
};

struct ReplicaMsg {  // ReplicaDropped, ExtensionDone
  int32_t replica = -1;
  std::vector<int32_t> ranks;  // ReplicaDropped: the replica's rollout ranks

  template <class V, class M>
  static void fields(V& v, M& m) {
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

  template <class V, class M>
  static void fields(V& v, M& m) {
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

  template <class V, class M>
  static void fields(V& v, M& m) {
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

  template <class V, class M>
  static void fields(V& v, M& m) {
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
  template <class V, class M>
  static void fields(V& v, M& m) {
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

  template <class V, class M>
  static void fields(V& v, M& m) {
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

  template <class V, class M>
  static void fields(V& v, M& m) {
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

  template <class V, class M>
  static void fields(V& v, M& m) {
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

  template <class V, class M>
  static void fields(V& v, M& m) {
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
  template <class V, class M>
  static void fields(V& v, M& m) {
    v.i32(m.rank);
    v.fixed64(m.sum);
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

  template <class V, class M>
  static void fields(V& v, M& m) {
    v.u64(m.version);
    v.list(
        m.sums, protocol_limits::kMaxRanks, [](auto& f, auto& c) { RankChecksum::fields(f, c); },
        RankChecksum::kMinWireBytes);
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

  template <class V, class M>
  static void fields(V& v, M& m) {
    v.u64(m.version);
    v.i32(m.slot);
    v.list(
        m.sums, protocol_limits::kMaxRanks, [](auto& f, auto& c) { RankChecksum::fields(f, c); },
        RankChecksum::kMinWireBytes);
  }
  Status afterDecode();  // ranks >= 0, strictly increasing
};

// ChecksumFailed: the rank's bytes of `version` from `trainers` do not match their checksums.
struct ChecksumFailedMsg {
  uint64_t version = 0;
  std::vector<int32_t> trainers;  // increasing, not empty
  std::string detail;             // names the rank, the trainers and their tensors

  template <class V, class M>
  static void fields(V& v, M& m) {
    v.u64(m.version);
    v.i32s(m.trainers, protocol_limits::kMaxRanks);
    v.str(m.detail, protocol_limits::kMaxStringBytes);
  }
  Status afterDecode();  // trainers >= 0
};

// No payload (CommitOk, Bye, Heartbeat, Leave, Left).
struct EmptyMsg {
  template <class V, class M>
  static void fields(V& /*v*/, M& /*m*/) {}
};

// ---- the messages ------------------------------------------------------------------------------
// Who sends a message: a rank (trainer or rollout) to the coordinator, the coordinator to ranks,
// or either.
enum class Sender : uint8_t { kRank, kCoordinator, kEither };

// X(Name, type id, payload struct, sender): every message, once. The type id is the frame type
// on the wire; ids are never reused.
#define WSYNC_PROTOCOL_MESSAGES(X)                      \
  X(Hello, 1, HelloMsg, kRank)                          \
  X(Welcome, 2, WelcomeMsg, kCoordinator)               \
  X(Register, 3, RegisterMsg, kRank)                    \
  X(PlanAssignment, 4, PlanAssignmentMsg, kCoordinator) \
  X(CommitDone, 5, VersionMsg, kRank)                   \
  X(CommitOk, 6, EmptyMsg, kCoordinator)                \
  X(Publish, 7, VersionMsg, kRank)                      \
  X(Prepare, 8, SlotMsg, kCoordinator)                  \
  X(Prepared, 9, SlotMsg, kRank)                        \
  X(Go, 10, GoMsg, kCoordinator)                        \
  X(Sent, 11, VersionMsg, kRank)                        \
  X(Received, 12, VersionMsg, kRank)                    \
  X(Ready, 13, SlotMsg, kCoordinator)                   \
  X(Delivered, 14, DeliveredMsg, kCoordinator)          \
  X(Error, 15, ErrorMsg, kEither)                       \
  X(Bye, 16, EmptyMsg, kRank)                           \
  X(Heartbeat, 17, EmptyMsg, kRank)                     \
  X(Leave, 18, EmptyMsg, kRank)                         \
  X(Left, 19, EmptyMsg, kCoordinator)                   \
  X(ReplicaDropped, 20, ReplicaMsg, kCoordinator)       \
  X(PlanExtension, 21, PlanExtensionMsg, kCoordinator)  \
  X(ExtensionDone, 22, ReplicaMsg, kRank)               \
  X(Readied, 23, VersionMsg, kRank)                     \
  X(ColdFill, 24, ColdFillMsg, kCoordinator)            \
  X(ColdFillDone, 25, ColdFillDoneMsg, kRank)           \
  X(SentChecksums, 26, SentChecksumsMsg, kRank)         \
  X(Verify, 27, VerifyMsg, kCoordinator)                \
  X(Verified, 28, VersionMsg, kRank)                    \
  X(ChecksumFailed, 29, ChecksumFailedMsg, kRank)       \
  X(TrainersDone, 30, VersionMsg, kCoordinator)         \
  X(PartialMaxima, 31, BlockMaximaMsg, kRank)           \
  X(BlockMaxima, 32, BlockMaximaMsg, kCoordinator)      \
  X(SlotBusy, 33, SlotMsg, kRank)

enum class MessageType : uint16_t {
#define WSYNC_PROTOCOL_ENUM(name, id, payload, sender) k##name = (id),
  WSYNC_PROTOCOL_MESSAGES(WSYNC_PROTOCOL_ENUM)
#undef WSYNC_PROTOCOL_ENUM
};

// One message as the table declares it.
struct MessageInfo {
  MessageType type;
  const char* name;
  Sender sender;
};
inline constexpr MessageInfo kMessages[] = {
#define WSYNC_PROTOCOL_INFO(name, id, payload, sender) \
  {MessageType::k##name, #name, Sender::sender},
    WSYNC_PROTOCOL_MESSAGES(WSYNC_PROTOCOL_INFO)
#undef WSYNC_PROTOCOL_INFO
};

// "Hello", ...; "Unknown" for a type id not in the table.
const char* messageTypeName(MessageType t);
// Calls f(std::type_identity<Payload>{}) with the payload struct of `t`; false (f not called)
// for a type id not in the table.
template <class F>
bool withPayloadOf(MessageType t, F&& f) {
  switch (t) {
#define WSYNC_PROTOCOL_CASE(name, id, payload, sender) \
  case MessageType::k##name:                           \
    f(std::type_identity<payload>{});                  \
    return true;
    WSYNC_PROTOCOL_MESSAGES(WSYNC_PROTOCOL_CASE)
#undef WSYNC_PROTOCOL_CASE
  }
  return false;
}

// "Hello message", "Publish/Sent/... message": the messages a payload struct carries, for errors
// ("protocol record message" for a nested record decoded alone).
template <class M>
const std::string& payloadDescription() {
  static const std::string description = [] {
    std::string names;
#define WSYNC_PROTOCOL_NAME(name, id, payload, sender) \
  if (std::is_same_v<M, payload>) names += (names.empty() ? "" : "/") + std::string(#name);
    WSYNC_PROTOCOL_MESSAGES(WSYNC_PROTOCOL_NAME)
#undef WSYNC_PROTOCOL_NAME
    return (names.empty() ? "protocol record" : names) + " message";
  }();
  return description;
}

// ---- encoding ----------------------------------------------------------------------------------
template <class M>
concept ProtocolPayload = requires(FieldWriter& w, const M& m) {
  M::fields(w, m);
};

template <ProtocolPayload M>
std::vector<uint8_t> encode(const M& m) {
  return encodeFields(m);
}

// Decodes `bytes` as M: PROTOCOL naming the message when malformed, truncated, followed by
// trailing bytes or failing its afterDecode(); `m` is left as it was then.
template <ProtocolPayload M>
Status decode(const std::vector<uint8_t>& bytes, M& m) {
  FieldReader r(bytes);
  M decoded{};
  M::fields(r, decoded);
  WSYNC_RETURN_IF_ERROR(r.finish(payloadDescription<M>()));
  if constexpr (requires { decoded.afterDecode(); }) WSYNC_RETURN_IF_ERROR(decoded.afterDecode());
  m = std::move(decoded);
  return Status::ok();
}

}  // namespace wsync
