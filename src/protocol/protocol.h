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
#include "protocol/protocol_version.h"
#include "protocol/setup_messages.h"
#include "protocol/version_messages.h"

namespace wsync {

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
// Whether `from` (kRank or kCoordinator) sends message `t` as the table declares it (its sender,
// or kEither); false for a type id not in the table. The coordinator refuses a rank's message the
// table gives to the coordinator, naming it.
bool maySend(Sender from, MessageType t);
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
