// The payloads of joining a job and planning it: Hello, Welcome, Register, the plan assignment and
// the block maxima exchange (protocol.h declares the messages that carry them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/field_codec.h"
#include "common/status.h"
#include "layout/block_scaling.h"
#include "layout/registration.h"
#include "plan/broadcast_comm.h"
#include "protocol/protocol_version.h"

namespace wsync {

// ---- payloads ----------------------------------------------------------------------------------
// Each lists its fields in wire order in fields(V&, M&) (M: the struct, const when encoding); an
// optional `Status afterDecode()` checks (and may normalize) a decoded value.

// One option set on a rank: its variable and value as the variable spells them.
struct NamedValueMsg {
  std::string variable;  // "WSYNC_CHECKSUMS"
  std::string value;     // "1"
  bool operator==(const NamedValueMsg&) const = default;

  static void fields(auto& v, auto& m) {
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

  static void fields(auto& v, auto& m) {
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

  static void fields(auto& v, auto& m) {
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
  static void fields(auto& v, auto& m) {
    v.str(m.tensor, protocol_limits::kMaxStringBytes);
    v.enum8(m.scaling.format, static_cast<uint8_t>(kMaxScaleFormat));
    v.i64(m.scaling.block_rows);
    v.i64(m.scaling.block_cols);
    v.str(m.scaling.scale_tensor, protocol_limits::kMaxStringBytes);
    v.list(m.cuts, kMaxRank, [](auto& f, auto& axis) {
      f.list(axis, protocol_limits::kMaxRanks, [](auto& g, auto& x) { g.i64(x); });
    });
  }
};

// A broadcast backend the rank can run (plan/broadcast_comm.h): the coordinator chooses one that
// every rank offers and whose needs the job meets (coordinator/broadcast_choice.h).
struct BroadcastOfferRecord : BroadcastOffer {
  static void fields(auto& v, auto& m) {
    v.str(m.name, protocol_limits::kMaxNameBytes);
    v.enum8(m.needs.world, static_cast<uint8_t>(kMaxBroadcastWorld));
    v.flag(m.needs.one_gpu_per_rank);
    v.flag(m.needs.world_token);
    v.bytes(m.world_token, protocol_limits::kMaxWorldTokenBytes);
  }
};

// Slot descriptors on the wire (RegisterMsg, PeerInfo): a byte string per slot.
void slotDescriptorsField(auto& v, auto& descriptors) {
  v.list(descriptors, protocol_limits::kMaxSlots,
         [](auto& f, auto& d) { f.bytes(d, protocol_limits::kMaxBlobBytes); });
}

struct RegisterMsg {
  std::vector<uint8_t> registration;       // encodeRegistration()
  std::string transport;                   // rollouts: the write backend of the slots
  std::vector<uint8_t> transport_address;  // WriteTransport::localAddress()
  std::string device_id;  // "host/GPU-uuid" of a device-memory rank; empty for host memory
  // The broadcast backends this rank can run on its memory, in registry order; trainer 0's carry
  // their world tokens, which the coordinator forwards for the backend it chooses.
  std::vector<BroadcastOfferRecord> broadcast_offers;
  std::vector<std::vector<uint8_t>> slot_descriptors;  // rollouts: one per slot
  std::vector<uint64_t> buffer_byte_offsets;           // rollouts: each buffer's offset in a slot
  std::vector<BlockScalingRecord> block_scalings;      // rollouts: their block-scaled tensors
  std::vector<uint8_t> delta_landing;  // rollouts with delta versions: the patch landing area

  static void fields(auto& v, auto& m) {
    v.bytes(m.registration, protocol_limits::kMaxBlobBytes);
    v.str(m.transport, protocol_limits::kMaxNameBytes);
    v.bytes(m.transport_address, protocol_limits::kMaxBlobBytes);
    v.str(m.device_id, protocol_limits::kMaxStringBytes);
    slotDescriptorsField(v, m.slot_descriptors);
    v.u64s(m.buffer_byte_offsets, protocol_limits::kMaxRanks);
    v.list(m.block_scalings, protocol_limits::kMaxRanks);
    v.list(m.broadcast_offers, protocol_limits::kMaxBroadcastOffers);
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

  static void fields(auto& v, auto& m) {
    v.i32(m.rank);
    v.str(m.transport, protocol_limits::kMaxNameBytes);
    v.bytes(m.transport_address, protocol_limits::kMaxBlobBytes);
    slotDescriptorsField(v, m.slot_descriptors);
    v.u64s(m.buffer_byte_offsets, protocol_limits::kMaxRanks);
    v.bytes(m.delta_landing, protocol_limits::kMaxBlobBytes);
    v.u64(m.delta_landing_offset);
    v.u64(m.delta_landing_bytes);
  }
};

// The world of a job's broadcast backend, when its plan has broadcast groups: the backend the
// coordinator chose (a name from the ranks' offers) and this rank's place in its world
// (BroadcastWorld: MPI world ranks, or the job's ranks, trainers first). Empty `backend`: no
// broadcast groups.
struct BroadcastWorldAssignment {
  std::string backend;
  std::vector<uint8_t> world_token;  // the chosen backend's token from trainer 0's offer, if any
  int32_t world_rank = -1;           // this rank in that world, in [0, world_size)
  int32_t world_size = 0;
  std::vector<int32_t> root_ranks;  // the world rank of every trainer (broadcast roots)

  static void fields(auto& v, auto& m) {
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
  // The communicators this rank creates, in increasing id order: in the MPI job's world the ones
  // it belongs to; in a world of the job's ranks every communicator of the job, since creating one
  // is collective over that whole world (BroadcastWorld).
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

  static void fields(auto& v, auto& m) {
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

  static void fields(auto& v, auto& m) {
    v.u64(m.version);
    v.bytes(m.amax, protocol_limits::kMaxBlobBytes);
  }
};

}  // namespace wsync
