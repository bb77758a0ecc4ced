// Broadcast groups on host memory: MPI non-blocking broadcasts on sub-communicators that are
// created once at commit (one per distinct member set). Used when every member is in the MPI job.
//
// Contract: every member of a communicator posts the same broadcasts on it in the same order
// (the plan order), so no two ranks disagree on which bytes a broadcast carries. Thread-safety:
// one thread uses an instance (MPI_THREAD_MULTIPLE lets it differ from the application's thread).
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "plan/broadcast_comm.h"

namespace wsync {

class HostBroadcaster {
 public:
  // Creates the communicators for `comms` (sorted by id; MPI_Comm_create_group, collective over
  // each member set; creating them in increasing id order on every member cannot deadlock).
  static Result<std::unique_ptr<HostBroadcaster>> create(const std::vector<BroadcastComm>& comms,
                                                         int32_t my_world_rank);
  ~HostBroadcaster();
  HostBroadcaster(const HostBroadcaster&) = delete;
  HostBroadcaster& operator=(const HostBroadcaster&) = delete;

  // Posts a broadcast of `bytes` at `data` on communicator `comm` (index into the create() list)
  // from world rank `root_world_rank` (the sender reads `data`, the others write it).
  Status post(int32_t comm, int32_t root_world_rank, void* data, size_t bytes);
  // Completes every posted broadcast; TIMEOUT leaves them posted (the context is then unusable).
  Status waitAll(std::chrono::milliseconds timeout);

 private:
  HostBroadcaster() = default;
  struct Comm {
    MPI_Comm comm = MPI_COMM_NULL;
    std::vector<int32_t> world_ranks;  // sorted: the comm rank of world_ranks[i] is i
  };
  std::vector<Comm> comms_;
  std::vector<MPI_Request> pending_;
};

}  // namespace wsync
