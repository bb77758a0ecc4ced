// wsync-sync-bench: the model and its layouts. The model is the demo policy
// (src/models/demo_policy.h) with the real Llama-3-8B names and shapes (--model
// llama3-8b) or scaled to about --bytes. Trainers hold it FSDP-like (Shard(0) over the trainers);
// rollouts form --replicas replicas of TP = rollouts / replicas in the --layout asked for.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "models/demo_policy.h"
#include "sync_bench_args.h"

namespace wsync_bench {

// The tensors of the model the flags ask for. --bytes counts `trainer_dtype` (the dtype the
// trainers hold: float32 on the host, --dtype on the device).
std::vector<wsync_demo::TensorSpec> benchTensors(const Options& opt, wsync_dtype_t trainer_dtype);

// This rank's buffers: a trainer's Shard(0) pieces, or a rollout's pieces in --layout.
std::vector<wsync_demo::BufferSpec> rankLayout(const std::vector<wsync_demo::TensorSpec>& tensors,
                                               const Options& opt, const Roles& roles);

// Bytes of the buffers of `layout` themselves (no alignment gaps).
uint64_t layoutBytes(const std::vector<wsync_demo::BufferSpec>& layout, size_t element_bytes);

// Sizes every rank needs, from every rank's layout (in the dtypes registered).
struct LayoutSizes {
  uint64_t mine = 0;          // this rank's buffers
  uint64_t params_bytes = 0;  // the largest trainer's parameters
  uint64_t slot_bytes = 0;    // the largest rollout slot
  uint64_t delivered = 0;     // bytes delivered to all rollouts per version
};
// Collective over `comm` (every rank of the job).
LayoutSizes exchangeLayoutSizes(uint64_t my_bytes, bool trainer, MPI_Comm comm);

}  // namespace wsync_bench
