// The wire cost of a rollout format (ClusterSpec::rollout_format, issue 21) for the cluster model:
// per plan tensor the bytes of one element on the wire, per (rollout rank, tensor) the block
// scale bytes that rank receives per element, and the partial-maxima exchange of blocks that
// straddle trainers.
//
// Which tensors are quantized (the fp8 formats): rank >= 2 weights other than the embeddings,
// lm_head and the MoE router (mlp.gate.weight), as DeepSeek-V3 / Kimi-K2 block-fp8 checkpoints
// hold them; every other tensor travels as bf16.
// Scales: a rollout rank receives the scales of every block its pieces intersect
// (blockCover: a TP shard that cuts a block gets that block's scale too), one float32 per
// 128x128 block or one e8m0 byte per 1x32 block; in the model they travel with the rank's data,
// from the same trainers, in proportion to the elements each trainer sends it.
// Partial maxima: a block whose elements sit on several trainers' shards gets its scale from the
// max of their partial absolute maxima. Per version, every trainer piece that holds part of a
// block (replicated shards, e.g. FSDP shards copied over EP groups, each quantize their own copy
// and take part) sends one float32 per such block to the coordinator (PartialMaxima) and gets the
// merged maxima back (BlockMaxima) before it quantizes and writes (src/coordinator/
// maxima_relay.h): bytes in = bytes out = 4 x partial maxima, on the version's critical path.
// Thread-safety: pure functions; FormatCosts is plain data.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "cluster_spec.h"
#include "common/status.h"
#include "layout/block_scaling.h"
#include "layout/registration.h"
#include "plan/plan.h"

namespace wsync::cluster {

struct FormatCosts {
  RolloutFormat format = RolloutFormat::kAsRegistered;
  std::vector<uint8_t> quantized;  // per plan tensor: 1 when it travels as fp8 with scales
  // Scale bytes per received element, per (rollout rank << 32 | plan tensor).
  std::unordered_map<uint64_t, double> scale_bytes_per_element;
  double scale_bytes = 0;  // delivered to all rollout ranks, per version
  int64_t quantized_tensors = 0;
  int64_t partial_maxima = 0;     // per version: (distinct trainer shard, block it holds part of)
  int64_t straddling_blocks = 0;  // blocks held by more than one distinct trainer shard
  double amax_bytes_in = 0;       // into the coordinator per version (4 x partial_maxima)
  double amax_bytes_out = 0;      // out of the coordinator per version (the merged maxima back)
  int amax_trainers = 0;          // trainers that hold part of some straddling block

  // Bytes of one element of plan tensor `tensor` on the wire (the registered dtype's for
  // kAsRegistered).
  int elemBytes(int32_t tensor, DType registered) const;
  // Scale bytes that travel with each element of `tensor` into rollout rank `dst_rank`.
  double scaleRatio(int32_t dst_rank, int32_t tensor) const;
};

// True for the tensors the fp8 formats quantize (see above).
bool quantizedTensor(const std::string& name, const Dims& shape);
// The block scaling of an fp8 format; nullopt for kAsRegistered and kBf16.
std::optional<BlockScaling> formatScaling(RolloutFormat f);
// Blocks of blockCover(box, s) that `box` holds only part of (clipped to `shape`).
int64_t partialBlocks(const Box& box, const Dims& shape, const BlockScaling& s);

// The costs of `format` for `plan`, from the registrations the plan was made from.
// INVALID_ARGUMENT when a registration names a tensor the plan lacks.
Result<FormatCosts> buildFormatCosts(const Plan& plan, const std::vector<Registration>& trainers,
                                     const std::vector<Registration>& rollouts,
                                     RolloutFormat format);

}  // namespace wsync::cluster
