#include "transport/mpi/host_broadcast.h"

#include <algorithm>
#include <climits>
#include <string>
#include <thread>

namespace wsync {
namespace {

constexpr size_t kMaxChunkBytes = size_t{1} << 30;  // MPI counts are int

std::string mpiError(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string(text, static_cast<size_t>(len));
}

}  // namespace

Result<std::unique_ptr<HostBroadcaster>> HostBroadcaster::create(
    const std::vector<BroadcastComm>& comms, int32_t my_world_rank) {
  std::unique_ptr<HostBroadcaster> b(new HostBroadcaster());
  MPI_Group world_group = MPI_GROUP_NULL;
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  for (const BroadcastComm& c : comms) {
    if (std::find(c.world_ranks.begin(), c.world_ranks.end(), my_world_rank) ==
        c.world_ranks.end()) {
      MPI_Group_free(&world_group);
      return protocolError("broadcast communicator " + std::to_string(c.id) +
                           " does not include this rank (world rank " +
                           std::to_string(my_world_rank) + ")");
    }
    MPI_Group group = MPI_GROUP_NULL;
    MPI_Group_incl(world_group, static_cast<int>(c.world_ranks.size()), c.world_ranks.data(),
                   &group);
    Comm comm;
    comm.world_ranks = c.world_ranks;
    const int rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, c.id, &comm.comm);
    MPI_Group_free(&group);
    if (rc != MPI_SUCCESS) {
      MPI_Group_free(&world_group);
      return systemError("MPI_Comm_create_group for broadcast communicator " +
                         std::to_string(c.id) + ": " + mpiError(rc));
    }
    b->comms_.push_back(std::move(comm));
  }
  MPI_Group_free(&world_group);
  return b;
}

HostBroadcaster::~HostBroadcaster() {
  for (Comm& c : comms_) {
    if (c.comm != MPI_COMM_NULL) MPI_Comm_free(&c.comm);
  }
}

Status HostBroadcaster::post(int32_t comm, int32_t root_world_rank, void* data, size_t bytes) {
  if (comm < 0 || static_cast<size_t>(comm) >= comms_.size()) {
    return internalError("broadcast communicator index " + std::to_string(comm) + " out of range");
  }
  const Comm& c = comms_[static_cast<size_t>(comm)];
  const auto it = std::lower_bound(c.world_ranks.begin(), c.world_ranks.end(), root_world_rank);
  if (it == c.world_ranks.end() || *it != root_world_rank) {
    return internalError("broadcast root (world rank " + std::to_string(root_world_rank) +
                         ") is not a member of its communicator");
  }
  const int root = static_cast<int>(it - c.world_ranks.begin());
  auto* p = static_cast<char*>(data);
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(kMaxChunkBytes, bytes - done);
    MPI_Request req = MPI_REQUEST_NULL;
    const int rc = MPI_Ibcast(p + done, static_cast<int>(n), MPI_BYTE, root, c.comm, &req);
    if (rc != MPI_SUCCESS) return systemError("MPI_Ibcast: " + mpiError(rc));
    pending_.push_back(req);
    done += n;
  }
  return Status::ok();
}

Status HostBroadcaster::waitAll(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pending_.empty()) {
    int done = 0;
    const int rc =
        MPI_Testall(static_cast<int>(pending_.size()), pending_.data(), &done, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) return systemError("MPI broadcast failed: " + mpiError(rc));
    if (done) {
      pending_.clear();
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return timeoutError(std::to_string(pending_.size()) +
                          " host broadcasts did not complete within " +
                          std::to_string(timeout.count()) + " ms");
    }
    std::this_thread::yield();
  }
  return Status::ok();
}

}  // namespace wsync
