// The bytes of a rollout's slot that its incoming write ops fill, as merged byte ranges: what a
// staged target (ExposedMemory::needsLanding) moves from its landing area into device memory each
// version. Bytes that broadcast groups fill are not in them (broadcasts land in the slot itself).
#pragma once

#include <cstdint>
#include <vector>

#include "plan/plan.h"
#include "transport/write_transport.h"

namespace wsync {

// `plan`: the rollout's RankPlan (its writes are the ops it receives); `buffer_byte_offsets`: each
// buffer's byte offset in a slot. Ranges are sorted, disjoint and not adjacent (touching ranges
// are merged); empty rows are dropped. Ops `i` with `skipped[i]` (when given) are left out: a
// delta version's patched ops, which the rank rebuilds from its base slot instead.
std::vector<ByteRange> landingRanges(const RankPlan& plan,
                                     const std::vector<uint64_t>& buffer_byte_offsets,
                                     const std::vector<bool>& skipped = {});

}  // namespace wsync
