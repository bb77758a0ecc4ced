// The coordinator protocol's version (checked at Hello: protocol.h) and the bounds its decoders
// hold every count and length to.
#pragma once

#include <cstddef>
#include <cstdint>

namespace wsync {

// 3: backends by name, a generic broadcast world; 4: dynamic membership (heartbeats, leave, join,
// Delivered outcomes) and rollouts confirming Ready with Readied; 5: peer cold start (ColdFill)
// and checksums (SentChecksums, Verify, Verified, ChecksumFailed; Welcome::checksums); 6: trainers
// finished (TrainersDone); 7: block-scaled rollout tensors (RegisterMsg / PlanAssignmentMsg
// block_scalings, PartialMaxima, BlockMaxima), SlotBusy and a late Go per replica, Hello carrying
// the job-wide settings the rank set explicitly (HelloMsg::job_settings), delta versions, the
// broadcast backends each rank offers with their needs and world tokens (RegisterMsg::
// broadcast_offers, replacing nccl_unique_id); 8: the cuts of block-scaled tensors
// (BlockScalingRecord::cuts).
inline constexpr uint32_t kProtocolVersion = 8;

// The bounds decoders hold every count and length to.
namespace protocol_limits {
inline constexpr uint64_t kMaxRanks = 1u << 20;
inline constexpr uint64_t kMaxBlobBytes = 1ull << 30;
inline constexpr uint64_t kMaxSlots = 64;
inline constexpr size_t kMaxStringBytes = 1 << 16;
inline constexpr uint64_t kMaxWorldTokenBytes = 1024;  // NCCL's unique id is 128 bytes
inline constexpr uint64_t kMaxBroadcastOffers = 16;    // RegisterMsg::broadcast_offers
inline constexpr size_t kMaxNameBytes = 64;            // backend names
inline constexpr uint64_t kMaxGroups = 1ull << 32;     // PlanAssignment::group_comm
}  // namespace protocol_limits

}  // namespace wsync
