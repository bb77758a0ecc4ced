// The demo policy shared by the C++ examples, the end-to-end tests and the sync benchmark: a small
// transformer-shaped set of tensors, the trainer's FSDP-like layout, the rollout engine's TP-like
// layouts, and a value for every element of every version, so receivers can check each byte.
// Everything goes through the public C API (include/wsync/wsync.h), as a user's code would.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "wsync/wsync.h"

namespace wsync_demo {

struct PolicyShape {
  int layers = 4;
  int64_t hidden = 512;
  int64_t ffn = 1536;  // the MLP's intermediate size
  int64_t vocab = 8192;
  // The full Llama tensor set (both off by default: the demo's small policy): a
  // `post_attention_layernorm.weight` [hidden] per layer, and an untied `lm_head.weight`
  // [vocab, hidden] after `model.norm.weight`.
  bool post_attention_norm = false;
  bool untied_lm_head = false;
};

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
};

// One piece of a buffer (see wsync_piece_t): a box of tensor `tensor` at `local_offset` with
// `strides` (row-major over the piece's own layout in the buffer).
struct PieceSpec {
  int tensor = 0;
  std::vector<int64_t> offset;
  std::vector<int64_t> extent;
  int64_t local_offset = 0;
  std::vector<int64_t> strides;
};

struct BufferSpec {
  std::string name;
  int64_t num_elements = 0;
  std::vector<PieceSpec> pieces;
};

enum class RolloutLayout {
  kMixed,   // vLLM-like TP: fused qkv, column- and row-parallel (some boxes match the trainer's)
  kMatch,   // the trainer's own split (tp == number of trainers): everything is a broadcast
  kDiffer,  // every tensor split along its last dim: nothing matches, everything is a write
};
bool parseRolloutLayout(const std::string& name, RolloutLayout* out);

std::vector<TensorSpec> policyTensors(const PolicyShape& shape);
// Llama-3-8B (Hugging Face names and shapes): hidden 4096, 32 layers, MLP 14336, vocabulary
// 128256, 8 kv heads of 128 (k/v: 1024 rows, the hidden / 4 rule), untied lm_head: 8,030,261,248
// parameters in 291 tensors.
PolicyShape llama3_8b();
// A policy of about `bytes` bytes of float32 (layers of hidden x hidden and ffn tensors).
PolicyShape policyShapeForBytes(int64_t bytes);
int64_t totalElements(const std::vector<TensorSpec>& tensors);

// FSDP-like: each tensor split along dim 0 over the trainers (torch.chunk rule), one buffer each.
std::vector<BufferSpec> trainerLayout(const std::vector<TensorSpec>& tensors, int num_trainers,
                                      int trainer);
// TP-like within a replica of `tp` ranks.
std::vector<BufferSpec> rolloutLayout(const std::vector<TensorSpec>& tensors, RolloutLayout layout,
                                      int tp, int tp_rank);

// The value of element `flat` (row-major index in the global tensor) of tensor `tensor` at
// `version`: k/64 with |k| <= 128, exact in float32, bfloat16 and float16.
inline float expectedValue(int tensor, int64_t flat, uint64_t version) {
  const int64_t k = static_cast<int64_t>((static_cast<uint64_t>(tensor) * 131u +
                                          static_cast<uint64_t>(flat) * 7u + version * 13u) %
                                         257u) -
                    128;
  return static_cast<float>(k) / 64.0f;
}

// Writes expectedValue(version) into every element of every piece of `buffer` (float32 data).
void fillTrainerBuffer(const std::vector<TensorSpec>& tensors, const BufferSpec& buffer,
                       uint64_t version, float* data);

// Counts the elements of `buffer` (dtype float32, bfloat16 or float16 at `data`) that differ from
// expectedValue(version); describes the first one in `first_error`.
int64_t countMismatches(const std::vector<TensorSpec>& tensors, const BufferSpec& buffer,
                        wsync_dtype_t dtype, const void* data, uint64_t version,
                        std::string* first_error);
// countMismatches over elements [begin, begin + count) of `buffer` only (clipped to the buffer);
// `data` holds those elements, element `begin` first. A generation step's sample check.
int64_t countMismatchesInRange(const std::vector<TensorSpec>& tensors, const BufferSpec& buffer,
                               wsync_dtype_t dtype, const void* data, uint64_t version,
                               int64_t begin, int64_t count, std::string* first_error);

// Registers every buffer with wsync_register_buffer. `data[i]` is the trainer's memory for buffer
// i (NULL for rollouts). Writes the buffer indices into `indices`.
wsync_status_t registerBuffers(wsync_context_t ctx, const std::vector<TensorSpec>& tensors,
                               const std::vector<BufferSpec>& buffers, wsync_dtype_t dtype,
                               const std::vector<void*>& data, std::vector<int>* indices,
                               wsync_memory_kind_t memory = WSYNC_MEMORY_HOST);

// This process's index and the number of processes in its MPMD app (mpirun -np T trainer : -np R
// rollout). Under Open MPI it reads the launcher's app layout; elsewhere it is collective over
// MPI_COMM_WORLD (every app calls it once, before wsync starts).
void mpmdAppRank(int* index, int* count);

size_t dtypeBytes(wsync_dtype_t dtype);
bool parseDtype(const std::string& name, wsync_dtype_t* out);

}  // namespace wsync_demo
