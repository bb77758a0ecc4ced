// Planning block-scaled rollout tensors (layout/block_scaling.h; wsync_set_block_scaling). The
// coordinator rewrites registrations before the planner sees them, so that the planner moves
// float8 bytes and scales like any other tensor:
//   - a rollout's pieces of tensor T scaled with S name the internal tensor valuesName(T, S), its
//     pieces of S's scale tensor the internal tensor scalesName(T, S) (replicas may hold T with
//     different schemes: each scheme is its own pair of tensors);
//   - every trainer piece of T gets, for each scheme of the job's table, a quantized source: two
//     buffers of its own (e4m3 values, row-major over the piece's box; scales, row-major over the
//     blocks the box intersects) holding those internal tensors, which the trainer fills each
//     version (runtime) before its writes copy them unchanged.
// A block whose elements sit on several trainers' pieces (a shard boundary that cuts it) needs
// the maximum over all of them: planMaximaExchange lists, once, which blocks of which sources are
// exchanged through the coordinator each version, and how their partial maxima are merged.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "layout/block_scaling.h"
#include "layout/registration.h"

namespace wsync {

// "T@fp8_b128x128_float32" and "T@fp8_b128x128_float32/scales".
std::string valuesName(const ScaledTensor& t);
std::string scalesName(const ScaledTensor& t);

// Checks a rollout's scalings against its registration and renames its pieces (in place):
// INVALID_ARGUMENT for a bad scheme or a tensor scaled twice; MISMATCH (naming the rank, tensor
// and piece) for a piece of T outside a float8_e4m3 buffer, a piece that cuts a block, a scale
// tensor declared with the wrong shape or registered in the wrong dtype.
Status applyRolloutScalings(Registration& reg, const std::vector<ScaledTensor>& scalings);

// One rollout rank's scalings, for jobScalingTable.
struct RolloutScalings {
  const Registration* reg = nullptr;  // before applyRolloutScalings
  const std::vector<ScaledTensor>* scalings = nullptr;
};
// Every (tensor, scheme) any rollout holds, sorted by tensor then scheme; MISMATCH when two ranks
// of one replica that both hold pieces of a tensor disagree on its scaling (one may hold none).
Result<std::vector<ScaledTensor>> jobScalingTable(const std::vector<RolloutScalings>& rollouts);

// Sets each table entry's cuts (layout/block_scaling.h: ScaledTensor::cuts) from the rollouts'
// pieces of its values tensor (registrations after applyRolloutScalings). A cut inside the last
// two dims is a block boundary, since applyRolloutScalings refuses pieces that cut blocks.
void setRolloutCuts(std::vector<ScaledTensor>& table, const std::vector<Registration>& rollouts);

// A trainer piece (or a part of one between the table entry's cuts) quantized for one entry of
// the table.
struct QuantizedSource {
  int32_t values_buffer = -1;  // registration index of the e4m3 buffer
  int32_t scales_buffer = -1;  // registration index of the scales buffer
  int32_t source_buffer = -1;  // the trainer's buffer and piece it quantizes
  int32_t source_piece = -1;
  int32_t entry = -1;  // index into the job's table
  Box box;             // the part's box of the weight (the piece's, where no cut crosses it)
  Box cover;           // blockCover(box): the scale tensor's elements it computes
  Dims shape;          // the weight's global shape
};

// Adds the quantized sources of `table` to a trainer's registration (buffers appended after the
// trainer's own, in buffer, piece, entry, part order; the same on the coordinator and the
// trainer). A piece is cut into parts at the entry's cuts that lie strictly inside its box and on
// block boundaries (others are ignored), row-major over the parts.
// UNSUPPORTED when a piece of a scaled tensor is not float32, bfloat16 or float16.
Result<std::vector<QuantizedSource>> addQuantizedSources(Registration& reg,
                                                         const std::vector<ScaledTensor>& table);

// Which blocks' maxima cross trainers each version. A block is exchanged when some source's box
// holds only part of it; every source that holds any of its elements then sends its partial
// maximum and receives the merged one.
struct MaximaExchange {
  // Per trainer: indices into the concatenation of its sources' cover grids (row-major each, in
  // source order), increasing.
  std::vector<std::vector<uint64_t>> exchanged;
  // Per trainer, per exchanged index: the job-wide block it contributes to, in [0, num_blocks).
  std::vector<std::vector<uint32_t>> block_of;
  uint32_t num_blocks = 0;
  bool empty() const { return num_blocks == 0; }
};
MaximaExchange planMaximaExchange(const std::vector<std::vector<QuantizedSource>>& sources,
                                  const std::vector<ScaledTensor>& table);

}  // namespace wsync
