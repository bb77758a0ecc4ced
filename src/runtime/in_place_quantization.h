// Block-scaled rollout tensors quantized in place (docs/block_fp8.md, "In place"): where the one
// write of a quantized source's float8 values in a Go is a copy into a rollout slot that the write
// backend maps into this process (CUDA IPC), the quantization kernel writes the slot itself and
// the copy is not posted, so the values cross memory once instead of twice. The scales still go
// by their writes (they are 1/16384 of the values at 128 x 128 blocks).
//
// Eligible (TrainerContext decides once, at commit): device memory, no checksums (they sum the
// trainer's copy of the values), no delta versions, no debug corruption, and not turned off by
// WSYNC_DEBUG_NO_IN_PLACE_QUANT (A/B runs). Per Go, a source goes in place only when exactly one
// write of the plan reads its values buffer for a replica that takes the Go, no broadcast group or
// joined replica's write reads it, and that write covers the whole buffer with rows the kernel
// can address with one pitch (placeInPlace). Publisher thread; no sockets.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "common/status.h"
#include "layout/box.h"
#include "plan/plan.h"
#include "protocol/protocol.h"
#include "runtime/trainer_membership.h"
#include "runtime/trainer_peers.h"
#include "runtime/trainer_quantizer.h"

namespace wsync {

// Where a write's destination puts a source's packed float8 values: `offset` elements into the
// destination buffer, rows of the box `pitch` elements apart.
struct InPlaceRows {
  int64_t offset = 0;
  int64_t pitch = 0;
};
// Whether `region` (of a write from a source's values buffer, row-major over `box`) copies the
// whole buffer with box rows at one pitch in the destination; nullopt otherwise.
std::optional<InPlaceRows> placeInPlace(const Region& region, const Box& box);

struct InPlaceQuantization {
  std::vector<TrainerQuantizer::ValuesTarget> targets;  // per quantized source
  std::vector<uint8_t> written;                         // per write of the plan: 1 when in place
  size_t sources = 0;                                   // how many targets are set
  bool writtenInPlace(size_t op) const { return op < written.size() && written[op] != 0; }
};

// This Go's in-place sources (none where no transport maps its rollout's memory).
Result<InPlaceQuantization> planInPlaceQuantization(const GoMsg& go, const RankPlan& plan,
                                                    const TrainerMembership& membership,
                                                    const TrainerQuantizer& quantizer,
                                                    TrainerPeers& peers);

}  // namespace wsync
