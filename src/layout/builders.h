// Layout builders: add the LocalBuffers (and their Pieces) that real trainers and inference engines
// hold to a Registration: replicated tensors, TP/DTensor splits, FSDP flat ranges, fused tensors
// (qkv, gate_up) and experts.
//
// Contracts shared by every add*:
//  - It adds exactly the buffers it documents to `reg.buffers` (appended) and returns the index of
//    the (first) added buffer. The buffer's name is the tensor's name unless the function takes a
//    buffer_name. Every tensor the call names is declared with reg.declareTensor, even when this
//    rank holds none of it (an empty split part, a flat member outside the range), so the
//    coordinator can check global shapes; the expert builders declare only this rank's experts.
//  - Pieces of one buffer never overlap in the buffer and lie inside [0, num_elements).
//  - On error it returns INVALID_ARGUMENT (bad shape, dim, parts, index, range, head counts, dtype,
//    memory kind) or MISMATCH (a tensor already declared in `reg` with another shape), with a
//    message naming the builder, the tensor and the numbers, and leaves `reg` unchanged.
//  - Buffer names are not checked for uniqueness here (that needs a scan of all buffers); the
//    registration's validation reports duplicates.
//  - Cost: O(rank + pieces) per buffer (plus O(k log k) for the duplicate-name check of k members);
//    allocations are the buffer name, the exact-size piece vector and new tensor declarations.
// Not thread-safe: one thread builds one Registration.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "layout/box.h"
#include "layout/dtype.h"
#include "layout/registration.h"

namespace wsync {

// How n items split into `parts`:
//  kBalanced: the first (n % parts) parts get one extra (Megatron, numpy.array_split).
//  kTorchChunk: torch.chunk / DTensor Shard: each part ceil(n/parts), trailing parts short or
//  empty. kEven: n must be divisible by parts (error otherwise).
enum class SplitRule : uint8_t { kBalanced, kTorchChunk, kEven };
const char* splitRuleName(SplitRule rule);  // "balanced", "torch_chunk", "even"

struct IndexRange {
  int64_t begin = 0;
  int64_t size = 0;
};

// Part `index` of n items split into `parts` by `rule`. Errors: n < 0, parts < 1, index outside
// [0, parts), an unknown rule, or kEven with n % parts != 0 (all INVALID_ARGUMENT).
Result<IndexRange> splitRange(int64_t n, int parts, int index, SplitRule rule);
// The box of part `index` when `shape` (rank 1..kMaxRank, every dim >= 1) splits along `dim`.
Result<Box> splitBox(const Dims& shape, int dim, int parts, int index, SplitRule rule);

// The whole tensor, row-major, in one buffer.
Result<int32_t> addReplicated(Registration& reg, const std::string& tensor, const Dims& shape,
                              DType dtype, MemoryKind memory = MemoryKind::kHost);

// Tensor/Megatron TP split or DTensor Shard(dim) (use kTorchChunk for DTensor/FSDP2): part `index`
// of `parts` along `dim`, row-major over its box. An empty part (possible with kTorchChunk)
// yields a buffer with num_elements 0 and no piece.
Result<int32_t> addSplit(Registration& reg, const std::string& tensor, const Dims& shape,
                         DType dtype, int dim, int parts, int index,
                         SplitRule rule = SplitRule::kBalanced,
                         MemoryKind memory = MemoryKind::kHost);

// Flat 1-D range [flat_begin, flat_end) over the row-major flattening of ONE tensor (FSDP1 flat
// param of one tensor, Megatron distributed-optimizer buffer slice). The range is cut into the
// minimal set of boxes (at most 2*(rank-1)+1), each with the global row-major strides and
// local_offset = (global flat index of the box's first element) - flat_begin. Empty range ->
// buffer with 0 elements and no pieces. Requires 0 <= flat_begin <= flat_end <= numel.
Result<int32_t> addFlatRange(Registration& reg, const std::string& tensor, const Dims& shape,
                             DType dtype, int64_t flat_begin, int64_t flat_end,
                             MemoryKind memory = MemoryKind::kHost);

// FSDP1 FlatParameter: `members` concatenated (each flattened row-major, in order, no padding);
// this rank holds [flat_begin, flat_end) of the concatenation, in one buffer named buffer_name
// with flat_end - flat_begin elements. Member names must be distinct.
struct FlatMember {
  std::string tensor;
  Dims shape;
};
Result<int32_t> addFlatParameter(Registration& reg, const std::string& buffer_name,
                                 const std::vector<FlatMember>& members, DType dtype,
                                 int64_t flat_begin, int64_t flat_end,
                                 MemoryKind memory = MemoryKind::kHost);

// As addFlatParameter, with padding (FSDP1 use_orig_params alignment, world-size tail padding):
// member i starts at element member_offsets[i] of a flat parameter of padded_numel elements;
// gaps and the tail are padding and get no pieces. Offsets must be >= the previous member's end,
// the last member must end by padded_numel, and 0 <= flat_begin <= flat_end <= padded_numel.
Result<int32_t> addFlatParameterWithOffsets(Registration& reg, const std::string& buffer_name,
                                            const std::vector<FlatMember>& members,
                                            const std::vector<int64_t>& member_offsets,
                                            int64_t padded_numel, DType dtype, int64_t flat_begin,
                                            int64_t flat_end,
                                            MemoryKind memory = MemoryKind::kHost);

// Fused tensor: the engine's buffer is `parts` side by side along `dim`, each part split by the
// engine's TP (tp_size, tp_rank, rule) along `dim`; local layout = the parts' local slices
// concatenated along dim (vLLM's MergedColumnParallelLinear), row-major over the local shape.
// All parts have equal shapes except along `dim`; names must be distinct. A part whose local slice
// is empty (kTorchChunk) gets no piece.
struct FusedPart {
  std::string tensor;
  Dims shape;
};
Result<int32_t> addFused(Registration& reg, const std::string& buffer_name,
                         const std::vector<FusedPart>& parts, int dim, DType dtype, int tp_size,
                         int tp_rank, SplitRule rule = SplitRule::kEven,
                         MemoryKind memory = MemoryKind::kHost);

// vLLM QKVParallelLinear with grouped-query attention: q [num_heads*head_dim, hidden],
// k and v [num_kv_heads*head_dim, hidden] fused along dim 0. TP splits q heads evenly
// (num_heads % tp_size == 0). If tp_size <= num_kv_heads, kv heads split evenly
// (num_kv_heads % tp_size == 0); otherwise each kv head is replicated: tp_size % num_kv_heads == 0
// and rank r holds kv head r / (tp_size / num_kv_heads). Local buffer: [q rows; k rows; v rows].
Result<int32_t> addQkv(Registration& reg, const std::string& buffer_name, const std::string& q,
                       const std::string& k, const std::string& v, int num_heads, int num_kv_heads,
                       int head_dim, int hidden, DType dtype, int tp_size, int tp_rank,
                       MemoryKind memory = MemoryKind::kHost);

// gate_up_proj = gate and up ([intermediate, hidden] each) fused along dim 0, each split evenly by
// TP (intermediate % tp_size == 0). Local buffer: [gate rows; up rows].
Result<int32_t> addGateUp(Registration& reg, const std::string& buffer_name,
                          const std::string& gate, const std::string& up, int64_t intermediate,
                          int64_t hidden, DType dtype, int tp_size, int tp_rank,
                          MemoryKind memory = MemoryKind::kHost);

// The name of expert `expert` from `name_template`: every "{}" replaced by the decimal index.
std::string expertName(const std::string& name_template, int expert);

// Experts held as separate tensors (name_template contains "{}" replaced by the expert index),
// each of expert_shape, stacked by the engine into ONE buffer [local_experts, ...expert_shape]
// where this EP rank holds experts split by kBalanced over ep_size (contiguous block). An EP rank
// with no expert (num_experts < ep_size) gets a buffer with 0 elements and no piece.
Result<int32_t> addStackedExperts(Registration& reg, const std::string& buffer_name,
                                  const std::string& name_template, const Dims& expert_shape,
                                  int num_experts, DType dtype, int ep_size, int ep_rank,
                                  MemoryKind memory = MemoryKind::kHost);

// Experts as separate tensors, one buffer each (the trainer's EP layout): adds one replicated
// buffer per local expert of this EP rank (kBalanced over ep_size), in expert order; returns the
// index of the first added buffer. Error (INVALID_ARGUMENT) when this rank would hold no expert.
Result<int32_t> addSeparateExperts(Registration& reg, const std::string& name_template,
                                   const Dims& expert_shape, int num_experts, DType dtype,
                                   int ep_size, int ep_rank, MemoryKind memory = MemoryKind::kHost);

}  // namespace wsync
