// Versioned binary encoding of Plan (the whole schedule, kept by the coordinator and tools) and
// RankPlan (coordinator -> one rank). Framing, bounds checks and error reporting are those of
// codec/registration_codec.h: decoding a truncated, corrupted or hostile buffer gives a
// WSYNC_ERR_PROTOCOL Status naming the field and byte offset, never a crash or a large allocation.
// Decoded plans are structurally valid: tensor indices inside the plan's tensor table, box ranks
// equal to the tensor's and boxes inside its shape, num_elements equal to the box volume,
// destination lists sorted by rank without repeats, dtypes in range, region element counts that
// fit int64. Buffer indices and offsets are only checked non-negative: the rank that executes the
// plan checks them against its own buffers. Write regions travel expanded (the format does not
// depend on the in-memory shapes table); decoding rebuilds the table with equal shapes shared, in
// order of first use, as the planner and rankView build it. Encoding is deterministic.
// Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "codec/registration_codec.h"
#include "common/status.h"
#include "plan/plan.h"

namespace wsync {

inline constexpr uint16_t kPlanFormatVersion = 1;
inline constexpr uint16_t kRankPlanFormatVersion = 1;

std::vector<uint8_t> encodePlan(const Plan& plan);
Result<Plan> decodePlan(const uint8_t* data, size_t size);
std::vector<uint8_t> encodeRankPlan(const RankPlan& plan);
Result<RankPlan> decodeRankPlan(const uint8_t* data, size_t size);

namespace codec_detail {
inline constexpr RecordKind kPlanRecord{
    {'W', 'S', 'P', 'L'}, kPlanFormatVersion, "decodePlan", "Plan"};
inline constexpr RecordKind kRankPlanRecord{
    {'W', 'S', 'R', 'P'}, kRankPlanFormatVersion, "decodeRankPlan", "RankPlan"};
}  // namespace codec_detail

}  // namespace wsync
