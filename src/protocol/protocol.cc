#include "protocol/protocol.h"

#include <algorithm>

namespace wsync {
namespace {

// Checksums of distinct ranks >= 0, in increasing rank order.
Status checkRankOrder(const std::vector<RankChecksum>& sums, const char* what) {
  for (size_t i = 0; i < sums.size(); ++i) {
    if (sums[i].rank < 0 || (i > 0 && sums[i].rank <= sums[i - 1].rank)) {
      return protocolError(std::string(what) + ": checksum ranks negative or not increasing");
    }
  }
  return Status::ok();
}

}  // namespace

const char* messageTypeName(MessageType t) {
  for (const MessageInfo& m : kMessages) {
    if (m.type == t) return m.name;
  }
  return "Unknown";
}

bool maySend(Sender from, MessageType t) {
  for (const MessageInfo& m : kMessages) {
    if (m.type == t) return m.sender == Sender::kEither || m.sender == from;
  }
  return false;
}

Status HelloMsg::protocolVersionMismatch(uint32_t rank_version) {
  return protocolError("protocol version " + std::to_string(rank_version) + " of the rank, " +
                       std::to_string(kProtocolVersion) +
                       " of the coordinator: ranks and the coordinator must run the same wsync "
                       "protocol version");
}

Status PlanAssignmentMsg::afterDecode() {
  for (int32_t c : group_comm) {
    if (c < 0 || static_cast<size_t>(c) >= comms.size()) {
      return protocolError("PlanAssignment: group communicator index out of range");
    }
  }
  if (broadcast.backend.empty()) {
    if (!comms.empty()) {
      return protocolError("PlanAssignment: broadcast communicators without a broadcast backend");
    }
    return Status::ok();
  }
  const BroadcastWorldAssignment& b = broadcast;
  const auto in_world = [&](int32_t rank) { return rank >= 0 && rank < b.world_size; };
  if (!in_world(b.world_rank) || !std::all_of(b.root_ranks.begin(), b.root_ranks.end(), in_world)) {
    return protocolError(
        "PlanAssignment: " + b.backend + " world rank " + std::to_string(b.world_rank) +
        " or a trainer's rank is outside the world of " + std::to_string(b.world_size) + " ranks");
  }
  for (const BroadcastComm& c : comms) {
    if (!std::all_of(c.world_ranks.begin(), c.world_ranks.end(), in_world)) {
      return protocolError("PlanAssignment: broadcast communicator " + std::to_string(c.id) +
                           " names a rank outside the " + b.backend + " world of " +
                           std::to_string(b.world_size) + " ranks");
    }
  }
  return Status::ok();
}

Status ReplicaMsg::afterDecode() {
  for (int32_t rank : ranks) {
    if (rank < 0) return protocolError("replica message: negative rollout rank");
  }
  return Status::ok();
}

Status PlanExtensionMsg::afterDecode() {
  if (replica < 0) return protocolError("PlanExtension: negative replica id");
  for (int32_t rank : ranks) {
    if (rank < 0) return protocolError("PlanExtension: negative rollout rank");
  }
  return Status::ok();
}

Status ErrorMsg::afterDecode() {
  if (code == WSYNC_SUCCESS) code = WSYNC_ERR_REMOTE;
  return Status::ok();
}

Status ColdFillMsg::afterDecode() {
  if (version == 0) return protocolError("ColdFill: version 0");
  if (target_slot < 0 || static_cast<uint64_t>(target_slot) >= protocol_limits::kMaxSlots) {
    return protocolError("ColdFill: target slot " + std::to_string(target_slot) +
                         " is outside [0, " + std::to_string(protocol_limits::kMaxSlots) + ")");
  }
  for (const PeerInfo& p : peers) {
    if (p.rank < 0) return protocolError("ColdFill: negative rollout rank");
    if (static_cast<size_t>(target_slot) >= p.slot_descriptors.size()) {
      return protocolError("ColdFill: rollout " + std::to_string(p.rank) + " has no slot " +
                           std::to_string(target_slot));
    }
  }
  return Status::ok();
}

Status SentChecksumsMsg::afterDecode() {
  return checkRankOrder(sums, "SentChecksums");
}

Status VerifyMsg::afterDecode() {
  return checkRankOrder(sums, "Verify");
}

Status ChecksumFailedMsg::afterDecode() {
  for (int32_t t : trainers) {
    if (t < 0) return protocolError("ChecksumFailed: negative trainer rank");
  }
  return Status::ok();
}

}  // namespace wsync
