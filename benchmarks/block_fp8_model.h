// wsync-block-fp8-bench: the model and its layouts per phase. Trainers hold every tensor in
// bfloat16, FSDP-like: split along dim 0 (torch.chunk rule), the interior cuts of each tensor
// moved by --cut-offset rows (so that shards cut 128-row blocks even where rows / trainers is a
// multiple of 128). Rollouts hold it as vLLM does in TP (fused qkv and gate_up column-parallel,
// o and down row-parallel, vocab-parallel embeddings and lm_head, replicated norms), the 2-D
// linear weights in the phase's format (bf16, block fp8 128x128 with float32 scales, or MXFP8 1x32
// with e8m0 scales) with their scale tensors sharded at block boundaries, everything else in bf16.
// Every element of every version has a known value (valueOf), so rollouts check what they get:
// bf16 bit for bit, fp8 bytes and scales against the host reference quantizer
// (quant/block_quant.h) run on the whole blocks the rank holds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/demo_policy.h"
#include "wsync/wsync.h"

namespace wsync_fp8 {

enum class Format { kBf16, kBlockFp8, kMxfp8 };
const char* formatName(Format f);  // "bf16", "fp8", "mxfp8"
bool parseFormat(const std::string& name, Format* out);

// The tensors of one phase: the model's weights first (indices < num_weights), then the scale
// tensor of every quantized weight.
struct PhaseModel {
  Format format = Format::kBf16;
  std::vector<wsync_demo::TensorSpec> tensors;
  int num_weights = 0;
  std::vector<int> scale_of;  // per weight: its scale tensor's index, -1 when held in bf16
  wsync_block_scaling_t scaling = WSYNC_BLOCK_SCALING_INITIALIZER;  // scale_tensor unset
};

// The rollouts quantize exactly the 2-D linear weights (not embeddings, lm_head or norms).
bool quantizedWeight(const wsync_demo::TensorSpec& t);
PhaseModel makePhase(const std::vector<wsync_demo::TensorSpec>& weights, Format format);

// A box of one tensor, packed row-major in its buffer after the previous pieces.
struct Piece {
  int tensor = 0;
  std::vector<int64_t> offset, extent;
  int64_t elements() const;
};
struct Buffer {
  std::string name;
  wsync_dtype_t dtype = WSYNC_DTYPE_BFLOAT16;
  std::vector<Piece> pieces;
  int scales = -1;  // fp8 weights: index of the buffer holding their scales (same piece order)
  int64_t elements() const;
  size_t elementBytes() const;
  size_t bytes() const { return static_cast<size_t>(elements()) * elementBytes(); }
};

// Trainer `trainer` of `trainers`: one bf16 buffer per tensor, its rows
// [cut(trainer), cut(trainer + 1)).
std::vector<Buffer> trainerBuffers(const std::vector<wsync_demo::TensorSpec>& weights, int trainers,
                                   int trainer, int64_t cut_offset);
// Rank `tp_rank` of a TP `tp` replica; "" in `error`, else why the model cannot be sharded so
// (a TP shard that would cut a block).
std::vector<Buffer> rolloutBuffers(const PhaseModel& phase, int tp, int tp_rank,
                                   std::string* error);

// Blocks of the quantized weights whose rows sit on several trainers, and the partial maxima a
// version exchanges for them: 4 bytes per block per contributing trainer, each way.
struct Straddles {
  int64_t blocks = 0;
  int64_t contributions = 0;  // sum over those blocks of their trainers
  uint64_t maximaBytes() const { return 2 * 4 * static_cast<uint64_t>(contributions); }
};
Straddles countStraddles(const PhaseModel& phase, int trainers, int64_t cut_offset);

// Registers `buffer` (data: the trainer's memory, nullptr for rollout slots) into *index.
wsync_status_t registerBuffer(wsync_context_t ctx, const PhaseModel& phase, const Buffer& buffer,
                              wsync_memory_kind_t memory, void* data, int* index);
// Rollouts: wsync_set_block_scaling for every quantized weight among `buffers`.
wsync_status_t declareScalings(wsync_context_t ctx, const PhaseModel& phase,
                               const std::vector<Buffer>& buffers);

// The bf16 bits of element (row, flat) of weight `tensor` at `version`: the demo policy's value
// (k / 64) times a power of two that varies per row, so that a block's maximum sits on one row.
uint16_t valueOf(int tensor, int64_t row, int64_t flat, uint64_t version);
// Trainers: writes `version` into a bf16 buffer.
void fillBuffer(const PhaseModel& phase, const Buffer& buffer, uint64_t version, uint16_t* data);

// Rollouts: the weight buffers a check of every `every`-th one covers (scale buffers are checked
// with their weights).
std::vector<size_t> checkedBuffers(const std::vector<Buffer>& buffers, int every);
// The bytes of weight buffer `b` (and of its scales) that differ from `version`: bf16 bit for bit,
// fp8 bytes and scales against the host reference quantizer. `data`: host copies, one per buffer
// (only those of `b` and its scales are read). The first difference is described in *first.
int64_t countWrongBytes(const PhaseModel& phase, const std::vector<Buffer>& buffers,
                        const std::vector<const uint8_t*>& data, size_t b, uint64_t version,
                        std::string* first);

}  // namespace wsync_fp8
