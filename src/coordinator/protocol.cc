#include "coordinator/protocol.h"

#include <algorithm>

#include "common/wire.h"

namespace wsync {
namespace {

constexpr uint64_t kMaxRanks = 1u << 20;
constexpr uint64_t kMaxBlobBytes = 1ull << 30;
constexpr uint64_t kMaxSlots = 64;
constexpr size_t kMaxStringBytes = 1 << 16;
constexpr uint64_t kMaxNcclUniqueIdBytes = 1024;  // NCCL's is 128 bytes
constexpr size_t kMaxNameBytes = 64;              // backend names

void putBlob(ByteWriter& w, const std::vector<uint8_t>& b) {
  w.varu(b.size());
  w.bytes(b.data(), b.size());
}
bool getBlob(ByteReader& r, std::vector<uint8_t>& b, uint64_t max_bytes = kMaxBlobBytes) {
  uint64_t n = 0;
  if (!r.count(n, max_bytes)) return false;
  b.resize(n);
  return r.bytes(b.data(), n);
}
void putInts(ByteWriter& w, const std::vector<int32_t>& v) {
  w.varu(v.size());
  for (int32_t x : v)
    w.vari(x);
}
bool getInts(ByteReader& r, std::vector<int32_t>& v, uint64_t max = kMaxRanks) {
  uint64_t n = 0;
  if (!r.count(n, max)) return false;
  v.resize(n);
  for (auto& x : v) {
    int64_t i = 0;
    if (!r.vari(i) || i < INT32_MIN || i > INT32_MAX) return r.fail();
    x = static_cast<int32_t>(i);
  }
  return true;
}
bool getI32(ByteReader& r, int32_t& v) {
  int64_t i = 0;
  if (!r.vari(i) || i < INT32_MIN || i > INT32_MAX) return r.fail();
  v = static_cast<int32_t>(i);
  return true;
}
void putBlobs(ByteWriter& w, const std::vector<std::vector<uint8_t>>& v) {
  w.varu(v.size());
  for (const auto& b : v)
    putBlob(w, b);
}
bool getBlobs(ByteReader& r, std::vector<std::vector<uint8_t>>& v) {
  uint64_t n = 0;
  if (!r.count(n, kMaxSlots)) return false;
  v.resize(n);
  for (auto& b : v) {
    if (!getBlob(r, b)) return false;
  }
  return true;
}
void putU64s(ByteWriter& w, const std::vector<uint64_t>& v) {
  w.varu(v.size());
  for (uint64_t x : v)
    w.varu(x);
}
bool getU64s(ByteReader& r, std::vector<uint64_t>& v) {
  uint64_t n = 0;
  if (!r.count(n, kMaxRanks)) return false;
  v.resize(n);
  for (auto& x : v) {
    if (!r.varu(x)) return false;
  }
  return true;
}

Status finish(ByteReader& r, const char* what) {
  if (!r.ok()) return protocolError(std::string("malformed or truncated ") + what + " message");
  if (!r.atEnd()) return protocolError(std::string("trailing bytes after ") + what + " message");
  return Status::ok();
}

}  // namespace

const char* messageTypeName(MessageType t) {
  switch (t) {
    case MessageType::kHello:
      return "Hello";
    case MessageType::kWelcome:
      return "Welcome";
    case MessageType::kRegister:
      return "Register";
    case MessageType::kPlanAssignment:
      return "PlanAssignment";
    case MessageType::kCommitDone:
      return "CommitDone";
    case MessageType::kCommitOk:
      return "CommitOk";
    case MessageType::kPublish:
      return "Publish";
    case MessageType::kPrepare:
      return "Prepare";
    case MessageType::kPrepared:
      return "Prepared";
    case MessageType::kGo:
      return "Go";
    case MessageType::kSent:
      return "Sent";
    case MessageType::kHeartbeat:
      return "Heartbeat";
    case MessageType::kLeave:
      return "Leave";
    case MessageType::kLeft:
      return "Left";
    case MessageType::kReplicaDropped:
      return "ReplicaDropped";
    case MessageType::kPlanExtension:
      return "PlanExtension";
    case MessageType::kExtensionDone:
      return "ExtensionDone";
    case MessageType::kReceived:
      return "Received";
    case MessageType::kReady:
      return "Ready";
    case MessageType::kDelivered:
      return "Delivered";
    case MessageType::kError:
      return "Error";
    case MessageType::kBye:
      return "Bye";
    case MessageType::kReadied:
      return "Readied";
    case MessageType::kColdFill:
      return "ColdFill";
    case MessageType::kColdFillDone:
      return "ColdFillDone";
    case MessageType::kSentChecksums:
      return "SentChecksums";
    case MessageType::kVerify:
      return "Verify";
    case MessageType::kVerified:
      return "Verified";
    case MessageType::kChecksumFailed:
      return "ChecksumFailed";
    case MessageType::kTrainersDone:  // issue 20 (elastic helper)
      return "TrainersDone";
  }
  return "Unknown";
}

std::vector<uint8_t> encode(const HelloMsg& m) {
  ByteWriter w;
  w.varu(m.protocol_version);
  w.u8(static_cast<uint8_t>(m.role));
  w.vari(m.world_rank);
  w.vari(m.role_rank);
  w.vari(m.replica);
  w.str(m.host);
  w.vari(m.replica_size);
  w.vari(m.replica_rank);
  return w.take();
}
Status decode(const std::vector<uint8_t>& bytes, HelloMsg& m) {
  ByteReader r(bytes);
  uint64_t version = 0;
  uint8_t role = 0;
  r.varu(version) && r.u8(role) && getI32(r, m.world_rank) && getI32(r, m.role_rank) &&
      getI32(r, m.replica) && r.str(m.host, kMaxStringBytes) && getI32(r, m.replica_size) &&
      getI32(r, m.replica_rank);
  WSYNC_RETURN_IF_ERROR(finish(r, "Hello"));
  if (version != kProtocolVersion) {
    return protocolError("protocol version " + std::to_string(version) +
                         " is not supported (this is " + std::to_string(kProtocolVersion) + ")");
  }
  if (role > 1) return protocolError("Hello: unknown role " + std::to_string(role));
  m.protocol_version = static_cast<uint32_t>(version);
  m.role = static_cast<Role>(role);
  return Status::ok();
}

std::vector<uint8_t> encode(const WelcomeMsg& m) {
  ByteWriter w;
  w.vari(m.role_rank);
  w.vari(m.num_trainers);
  w.vari(m.num_rollouts);
  putInts(w, m.trainer_world_ranks);
  putInts(w, m.rollout_world_ranks);
  w.vari(m.heartbeat_interval_ms);
  w.u8(m.checksums ? 1 : 0);
  return w.take();
}
Status decode(const std::vector<uint8_t>& bytes, WelcomeMsg& m) {
  ByteReader r(bytes);
  uint8_t checksums = 0;
  getI32(r, m.role_rank) && getI32(r, m.num_trainers) && getI32(r, m.num_rollouts) &&
      getInts(r, m.trainer_world_ranks) && getInts(r, m.rollout_world_ranks) &&
      getI32(r, m.heartbeat_interval_ms) && r.u8(checksums);
  WSYNC_RETURN_IF_ERROR(finish(r, "Welcome"));
  if (checksums > 1) return protocolError("Welcome: checksums flag " + std::to_string(checksums));
  m.checksums = checksums == 1;
  return Status::ok();
}

std::vector<uint8_t> encode(const RegisterMsg& m) {
  ByteWriter w;
  putBlob(w, m.registration);
  w.str(m.transport);
  putBlob(w, m.transport_address);
  w.str(m.device_id);
  putBlobs(w, m.slot_descriptors);
  putU64s(w, m.buffer_byte_offsets);
  putBlob(w, m.nccl_unique_id);
  return w.take();
}
Status decode(const std::vector<uint8_t>& bytes, RegisterMsg& m) {
  ByteReader r(bytes);
  getBlob(r, m.registration) && r.str(m.transport, kMaxNameBytes) &&
      getBlob(r, m.transport_address) && r.str(m.device_id, kMaxStringBytes) &&
      getBlobs(r, m.slot_descriptors) && getU64s(r, m.buffer_byte_offsets) &&
      getBlob(r, m.nccl_unique_id, kMaxNcclUniqueIdBytes);
  return finish(r, "Register");
}

namespace {
void putPeers(ByteWriter& w, const std::vector<PeerInfo>& peers) {
  w.varu(peers.size());
  for (const PeerInfo& p : peers) {
    w.vari(p.rank);
    w.str(p.transport);
    putBlob(w, p.transport_address);
    putBlobs(w, p.slot_descriptors);
    putU64s(w, p.buffer_byte_offsets);
  }
}
bool getPeers(ByteReader& r, std::vector<PeerInfo>& peers) {
  uint64_t n = 0;
  if (!r.count(n, kMaxRanks)) return false;
  peers.resize(n);
  for (PeerInfo& p : peers) {
    if (!(getI32(r, p.rank) && r.str(p.transport, kMaxNameBytes) &&
          getBlob(r, p.transport_address) && getBlobs(r, p.slot_descriptors) &&
          getU64s(r, p.buffer_byte_offsets))) {
      return false;
    }
  }
  return true;
}
}  // namespace

std::vector<uint8_t> encode(const PlanAssignmentMsg& m) {
  ByteWriter w;
  putBlob(w, m.rank_plan);
  putPeers(w, m.peers);
  w.varu(m.comms.size());
  for (const BroadcastComm& c : m.comms) {
    w.vari(c.id);
    putInts(w, c.world_ranks);
  }
  putInts(w, m.group_comm);
  putInts(w, m.replica_of_rollout);
  w.str(m.broadcast.backend);
  putBlob(w, m.broadcast.world_token);
  w.vari(m.broadcast.world_rank);
  w.vari(m.broadcast.world_size);
  putInts(w, m.broadcast.root_ranks);
  return w.take();
}
Status decode(const std::vector<uint8_t>& bytes, PlanAssignmentMsg& m) {
  ByteReader r(bytes);
  uint64_t n = 0;
  getBlob(r, m.rank_plan) && getPeers(r, m.peers);
  if (r.ok() && r.count(n, kMaxRanks)) {
    m.comms.resize(n);
    for (BroadcastComm& c : m.comms) {
      if (!(getI32(r, c.id) && getInts(r, c.world_ranks))) break;
    }
  }
  getInts(r, m.group_comm, 1ull << 32) && getInts(r, m.replica_of_rollout) &&
      r.str(m.broadcast.backend, kMaxNameBytes) &&
      getBlob(r, m.broadcast.world_token, kMaxNcclUniqueIdBytes) &&
      getI32(r, m.broadcast.world_rank) && getI32(r, m.broadcast.world_size) &&
      getInts(r, m.broadcast.root_ranks);
  WSYNC_RETURN_IF_ERROR(finish(r, "PlanAssignment"));
  for (int32_t c : m.group_comm) {
    if (c < 0 || static_cast<size_t>(c) >= m.comms.size()) {
      return protocolError("PlanAssignment: group communicator index out of range");
    }
  }
  if (!m.broadcast.backend.empty()) {
    const BroadcastWorldAssignment& b = m.broadcast;
    const auto in_world = [&](int32_t rank) { return rank >= 0 && rank < b.world_size; };
    if (!in_world(b.world_rank) ||
        !std::all_of(b.root_ranks.begin(), b.root_ranks.end(), in_world)) {
      return protocolError("PlanAssignment: " + b.backend + " world rank " +
                           std::to_string(b.world_rank) +
                           " or a trainer's rank is outside the world of " +
                           std::to_string(b.world_size) + " ranks");
    }
    for (const BroadcastComm& c : m.comms) {
      if (!std::all_of(c.world_ranks.begin(), c.world_ranks.end(), in_world)) {
        return protocolError("PlanAssignment: broadcast communicator " + std::to_string(c.id) +
                             " names a rank outside the " + b.backend + " world of " +
                             std::to_string(b.world_size) + " ranks");
      }
    }
  } else if (!m.comms.empty()) {
    return protocolError("PlanAssignment: broadcast communicators without a broadcast backend");
  }
  return Status::ok();
}

std::vector<uint8_t> encode(const VersionMsg& m) {
  ByteWriter w;
  w.varu(m.version);
  return w.take();
}
Status decode(const std::vector<uint8_t>& bytes, VersionMsg& m) {
  ByteReader r(bytes);
  r.varu(m.version);
  return finish(r, "version");
}

std::vector<uint8_t> encode(const SlotMsg& m) {
  ByteWriter w;
  w.varu(m.version);
  w.vari(m.slot);
  return w.take();
}
Status decode(const std::vector<uint8_t>& bytes, SlotMsg& m) {
  ByteReader r(bytes);
  r.varu(m.version) && getI32(r, m.slot);
  return finish(r, "slot");
}

std::vector<uint8_t> encode(const GoMsg& m) {
  ByteWriter w;
  w.varu(m.version);
  putInts(w, m.slot_of_replica);
  return w.take();
}
Status decode(const std::vector<uint8_t>& bytes, GoMsg& m) {
  ByteReader r(bytes);
  r.varu(m.version) && getInts(r, m.slot_of_replica);
  return finish(r, "Go");
}

namespace {
constexpr uint8_t kDeliveredStatsFormat = 1;  // the fields of DeliveredStats, in order

bool getU32(ByteReader& r, uint32_t& v) {
  uint64_t x = 0;
  if (!r.varuMax(x, UINT32_MAX)) return false;
  v = static_cast<uint32_t>(x);
  return true;
}
bool getCount32(ByteReader& r, int32_t& v) {
  uint64_t x = 0;
  if (!r.varuMax(x, kMaxRanks)) return false;
  v = static_cast<int32_t>(x);
  return true;
}
}  // namespace

std::vector<uint8_t> encode(const DeliveredMsg& m) {
  ByteWriter w;
  w.varu(m.version);
  putInts(w, m.ready_replicas);
  putInts(w, m.skipped_replicas);
  putInts(w, m.lost_replicas);
  if (!m.has_stats) return w.take();
  const DeliveredStats& s = m.stats;
  w.u8(kDeliveredStatsFormat);
  w.varu(s.bytes);
  w.varu(s.microseconds);
  w.varu(static_cast<uint64_t>(std::max(0, s.replicas_ready)));
  w.varu(static_cast<uint64_t>(std::max(0, s.replicas_skipped)));
  w.varu(static_cast<uint64_t>(std::max(0, s.replicas_lost)));
  w.varu(s.retries);
  w.varu(s.checksum_failures);
  return w.take();
}
Status decode(const std::vector<uint8_t>& bytes, DeliveredMsg& m) {
  ByteReader r(bytes);
  DeliveredMsg d;
  r.varu(d.version) && getInts(r, d.ready_replicas) && getInts(r, d.skipped_replicas) &&
      getInts(r, d.lost_replicas);
  uint8_t format = 0;
  if (r.ok() && !r.atEnd() && r.u8(format)) {
    if (format == 0) return protocolError("Delivered: stats block of format 0");
    DeliveredStats& s = d.stats;
    r.varu(s.bytes) && r.varu(s.microseconds) && getCount32(r, s.replicas_ready) &&
        getCount32(r, s.replicas_skipped) && getCount32(r, s.replicas_lost) &&
        getU32(r, s.retries) && getU32(r, s.checksum_failures);
    d.has_stats = true;
  }
  // A newer format's fields after the known ones are skipped (the frame's size bounds them).
  const bool newer_format = r.ok() && format > kDeliveredStatsFormat;
  if (!newer_format) WSYNC_RETURN_IF_ERROR(finish(r, "Delivered"));
  m = d;
  return Status::ok();
}

std::vector<uint8_t> encode(const ErrorMsg& m) {
  ByteWriter w;
  w.varu(static_cast<uint64_t>(m.code));
  w.str(m.message);
  return w.take();
}
Status decode(const std::vector<uint8_t>& bytes, ErrorMsg& m) {
  ByteReader r(bytes);
  uint64_t code = 0;
  r.varuMax(code, WSYNC_ERR_INTERNAL) && r.str(m.message, kMaxStringBytes);
  WSYNC_RETURN_IF_ERROR(finish(r, "Error"));
  m.code = code == WSYNC_SUCCESS ? WSYNC_ERR_REMOTE : static_cast<wsync_status_t>(code);
  return Status::ok();
}

std::vector<uint8_t> encode(const ReplicaMsg& m) {
  ByteWriter w;
  w.vari(m.replica);
  putInts(w, m.ranks);
  return w.take();
}
Status decode(const std::vector<uint8_t>& bytes, ReplicaMsg& m) {
  ByteReader r(bytes);
  getI32(r, m.replica) && getInts(r, m.ranks);
  WSYNC_RETURN_IF_ERROR(finish(r, "replica"));
  for (int32_t rank : m.ranks) {
    if (rank < 0) return protocolError("replica message: negative rollout rank");
  }
  return Status::ok();
}

std::vector<uint8_t> encode(const PlanExtensionMsg& m) {
  ByteWriter w;
  w.vari(m.replica);
  putInts(w, m.ranks);
  putBlob(w, m.rank_plan);
  putPeers(w, m.peers);
  return w.take();
}
Status decode(const std::vector<uint8_t>& bytes, PlanExtensionMsg& m) {
  ByteReader r(bytes);
  getI32(r, m.replica) && getInts(r, m.ranks) && getBlob(r, m.rank_plan) && getPeers(r, m.peers);
  WSYNC_RETURN_IF_ERROR(finish(r, "PlanExtension"));
  if (m.replica < 0) return protocolError("PlanExtension: negative replica id");
  for (int32_t rank : m.ranks) {
    if (rank < 0) return protocolError("PlanExtension: negative rollout rank");
  }
  return Status::ok();
}

std::vector<uint8_t> encode(const ColdFillMsg& m) {
  ByteWriter w;
  w.varu(m.fill);
  w.varu(m.version);
  w.vari(m.target_slot);
  putBlob(w, m.rank_plan);
  putPeers(w, m.peers);
  return w.take();
}
Status decode(const std::vector<uint8_t>& bytes, ColdFillMsg& m) {
  ByteReader r(bytes);
  r.varu(m.fill) && r.varu(m.version) && getI32(r, m.target_slot) && getBlob(r, m.rank_plan) &&
      getPeers(r, m.peers);
  WSYNC_RETURN_IF_ERROR(finish(r, "ColdFill"));
  if (m.version == 0) return protocolError("ColdFill: version 0");
  if (m.target_slot < 0 || static_cast<uint64_t>(m.target_slot) >= kMaxSlots) {
    return protocolError("ColdFill: target slot " + std::to_string(m.target_slot) +
                         " is outside [0, " + std::to_string(kMaxSlots) + ")");
  }
  for (const PeerInfo& p : m.peers) {
    if (p.rank < 0) return protocolError("ColdFill: negative rollout rank");
    if (static_cast<size_t>(m.target_slot) >= p.slot_descriptors.size()) {
      return protocolError("ColdFill: rollout " + std::to_string(p.rank) + " has no slot " +
                           std::to_string(m.target_slot));
    }
  }
  return Status::ok();
}

std::vector<uint8_t> encode(const ColdFillDoneMsg& m) {
  ByteWriter w;
  w.varu(m.fill);
  w.varu(static_cast<uint64_t>(m.code));
  w.str(m.message);
  w.varu(m.bytes);
  return w.take();
}
Status decode(const std::vector<uint8_t>& bytes, ColdFillDoneMsg& m) {
  ByteReader r(bytes);
  uint64_t code = 0;
  r.varu(m.fill) && r.varuMax(code, WSYNC_ERR_INTERNAL) && r.str(m.message, kMaxStringBytes) &&
      r.varu(m.bytes);
  WSYNC_RETURN_IF_ERROR(finish(r, "ColdFillDone"));
  m.code = static_cast<wsync_status_t>(code);
  return Status::ok();
}

// ---- checksums ---------------------------------------------------------------------------------
namespace {
void putChecksums(ByteWriter& w, const std::vector<RankChecksum>& sums) {
  w.varu(sums.size());
  for (const RankChecksum& c : sums) {
    w.vari(c.rank);
    w.fixed64(c.sum);
  }
}
// Ranks >= 0, strictly increasing (so at most kMaxRanks of them).
bool getChecksums(ByteReader& r, std::vector<RankChecksum>& sums) {
  uint64_t n = 0;
  if (!r.count(n, kMaxRanks, 9)) return false;
  sums.resize(n);
  for (size_t i = 0; i < sums.size(); ++i) {
    if (!getI32(r, sums[i].rank) || !r.fixed64(sums[i].sum)) return false;
    if (sums[i].rank < 0 || (i > 0 && sums[i].rank <= sums[i - 1].rank)) return r.fail();
  }
  return true;
}
}  // namespace

std::vector<uint8_t> encode(const SentChecksumsMsg& m) {
  ByteWriter w;
  w.varu(m.version);
  putChecksums(w, m.sums);
  return w.take();
}
Status decode(const std::vector<uint8_t>& bytes, SentChecksumsMsg& m) {
  ByteReader r(bytes);
  r.varu(m.version) && getChecksums(r, m.sums);
  return finish(r, "SentChecksums");
}

std::vector<uint8_t> encode(const VerifyMsg& m) {
  ByteWriter w;
  w.varu(m.version);
  w.vari(m.slot);
  putChecksums(w, m.sums);
  return w.take();
}
Status decode(const std::vector<uint8_t>& bytes, VerifyMsg& m) {
  ByteReader r(bytes);
  r.varu(m.version) && getI32(r, m.slot) && getChecksums(r, m.sums);
  return finish(r, "Verify");
}

std::vector<uint8_t> encode(const ChecksumFailedMsg& m) {
  ByteWriter w;
  w.varu(m.version);
  putInts(w, m.trainers);
  w.str(m.detail);
  return w.take();
}
Status decode(const std::vector<uint8_t>& bytes, ChecksumFailedMsg& m) {
  ByteReader r(bytes);
  r.varu(m.version) && getInts(r, m.trainers) && r.str(m.detail, kMaxStringBytes);
  WSYNC_RETURN_IF_ERROR(finish(r, "ChecksumFailed"));
  for (int32_t t : m.trainers) {
    if (t < 0) return protocolError("ChecksumFailed: negative trainer rank");
  }
  return Status::ok();
}

}  // namespace wsync
