// Broadcaster: the broadcast groups of one rank (docs/architecture.md, step 3: a shard whose box a
// trainer holds exactly goes from that trainer to every rollout rank that wants it). Backends: MPI
// broadcasts on sub-communicators (host memory, transport/mpi/) and NCCL broadcasts on splits of
// one NCCL world (device memory, transport/nccl/).
//
// Contract: created at commit, collectively, by every rank the setup's communicators name (creating
// them in increasing id order cannot deadlock). Every member of a communicator posts the same
// broadcasts on it, in the same order, with the same sizes and root (the plan order) between two
// start() calls; data pointers differ per rank. The root only reads `data`, the others write it.
// Threads: one thread at a time uses an instance (the trainer's publisher thread, the rollout's
// receiver thread).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "plan/broadcast_comm.h"

struct CUstream_st;  // CUDA's stream type (cudaStream_t is CUstream_st*); no CUDA headers here

namespace wsync {

using BroadcastStream = CUstream_st*;  // the CUDA stream of device backends; host ones ignore it

// Everything a rank needs to create its broadcaster, from its plan assignment.
struct BroadcastSetup {
  // The communicators to create, in increasing id order; post() names them by index in this list.
  // Their world ranks are ranks of the backend's world.
  std::vector<BroadcastComm> comms;
  std::vector<uint8_t> world_token;  // backends with a world of their own (the NCCL unique id)
  int32_t world_rank = -1;           // this rank in the backend's world
  int32_t world_size = 0;
  std::vector<int32_t> root_ranks;           // per trainer rank: its rank in the backend's world
  int cuda_device = -1;                      // device backends: this rank's GPU
  std::chrono::milliseconds timeout{60000};  // bound on creating the communicators
};

class Broadcaster {
 public:
  virtual ~Broadcaster() = default;
  virtual const char* name() const = 0;

  // Queues a broadcast of `bytes` at `data` on communicator `comm_index` (an index into
  // BroadcastSetup::comms) from trainer `root_trainer`. PROTOCOL for an index or trainer outside
  // the setup. Host backends may start the broadcast at once.
  virtual Status post(int32_t comm_index, int32_t root_trainer, void* data, size_t bytes) = 0;
  // Issues everything posted (device backends: on `stream`; returns once it is queued there).
  virtual Status start(BroadcastStream stream) = 0;
  // Completes every started broadcast within `timeout` (device backends: and everything else on
  // `stream`). TIMEOUT or another error leaves the broadcaster unusable.
  virtual Status wait(BroadcastStream stream, std::chrono::milliseconds timeout) = 0;
};

// The root of post(comm_index, root_trainer) in the backend's world, after checking both against
// the setup (PROTOCOL naming them otherwise). Shared by every backend.
inline Result<int32_t> broadcastRoot(const BroadcastSetup& setup, int32_t comm_index,
                                     int32_t root_trainer) {
  if (comm_index < 0 || static_cast<size_t>(comm_index) >= setup.comms.size() || root_trainer < 0 ||
      static_cast<size_t>(root_trainer) >= setup.root_ranks.size()) {
    return protocolError("broadcast on communicator index " + std::to_string(comm_index) +
                         " from trainer " + std::to_string(root_trainer) +
                         ": not in the plan assignment");
  }
  return setup.root_ranks[static_cast<size_t>(root_trainer)];
}

}  // namespace wsync
