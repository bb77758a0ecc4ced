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
//   coord -> Go(v, slot per replica, -1 = skipped) to every trainer and rollout rank
//   trainers write/broadcast -> Sent(v);  rollout ranks that receive broadcasts -> Received(v)
//   coord -> Ready(v, slot) to the ranks of each replica once all of its data landed
//   rollout rank -> Readied(v) once v is readable on it (wsync_acquire returns it)
//   coord -> Delivered(v) to every trainer once every rank sent Ready(v) confirmed it
// Any side -> Error(status, message); rank -> Bye at finalize.
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
  kReadied = 17,
};
const char* messageTypeName(MessageType t);

// 3: backends by name, a generic broadcast world; 4: rollouts confirm Ready with Readied.
inline constexpr uint32_t kProtocolVersion = 4;

struct HelloMsg {
  uint32_t protocol_version = kProtocolVersion;
  Role role = Role::kTrainer;
  int32_t world_rank = -1;  // MPI bootstrap; -1 otherwise
  int32_t role_rank = -1;   // explicit bootstrap; -1 under MPI (the coordinator assigns it)
  int32_t replica = -1;     // rollouts
  std::string host;         // for messages only
};

struct WelcomeMsg {
  int32_t role_rank = 0;
  int32_t num_trainers = 0;
  int32_t num_rollouts = 0;
  std::vector<int32_t> trainer_world_ranks;  // empty without MPI
  std::vector<int32_t> rollout_world_ranks;
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

struct VersionMsg {  // Publish, Sent, Received, Readied, Delivered, CommitDone(version 0)
  uint64_t version = 0;
};

struct SlotMsg {  // Prepare, Prepared, Ready
  uint64_t version = 0;
  int32_t slot = -1;
};

struct GoMsg {
  uint64_t version = 0;
  std::vector<int32_t> slot_of_replica;  // -1: the replica skips this version
};

struct ErrorMsg {
  wsync_status_t code = WSYNC_ERR_REMOTE;
  std::string message;
};

std::vector<uint8_t> encode(const HelloMsg& m);
std::vector<uint8_t> encode(const WelcomeMsg& m);
std::vector<uint8_t> encode(const RegisterMsg& m);
std::vector<uint8_t> encode(const PlanAssignmentMsg& m);
std::vector<uint8_t> encode(const VersionMsg& m);
std::vector<uint8_t> encode(const SlotMsg& m);
std::vector<uint8_t> encode(const GoMsg& m);
std::vector<uint8_t> encode(const ErrorMsg& m);

Status decode(const std::vector<uint8_t>& bytes, HelloMsg& m);
Status decode(const std::vector<uint8_t>& bytes, WelcomeMsg& m);
Status decode(const std::vector<uint8_t>& bytes, RegisterMsg& m);
Status decode(const std::vector<uint8_t>& bytes, PlanAssignmentMsg& m);
Status decode(const std::vector<uint8_t>& bytes, VersionMsg& m);
Status decode(const std::vector<uint8_t>& bytes, SlotMsg& m);
Status decode(const std::vector<uint8_t>& bytes, GoMsg& m);
Status decode(const std::vector<uint8_t>& bytes, ErrorMsg& m);

}  // namespace wsync
