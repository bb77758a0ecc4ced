// Registration of the MPI broadcast backend (host memory; see transport/backend.h).
#include <mpi.h>

#include "transport/backend.h"
#include "transport/mpi/host_broadcast.h"

namespace wsync {
namespace {

class MpiBroadcaster final : public Broadcaster {
 public:
  MpiBroadcaster(BroadcastSetup setup, std::unique_ptr<HostBroadcaster> host)
      : setup_(std::move(setup)), host_(std::move(host)) {}
  const char* name() const override { return "mpi"; }
  Status post(int32_t comm_index, int32_t root_trainer, void* data, size_t bytes) override {
    WSYNC_ASSIGN_OR_RETURN(const int32_t root, broadcastRoot(setup_, comm_index, root_trainer));
    return host_->post(comm_index, root, data, bytes);  // MPI_Ibcast: under way at once
  }
  Status start(BroadcastStream) override { return Status::ok(); }
  Status wait(BroadcastStream, std::chrono::milliseconds timeout) override {
    return host_->waitAll(timeout);
  }

 private:
  BroadcastSetup setup_;
  std::unique_ptr<HostBroadcaster> host_;
};

Status mpiInitialized() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return Status::ok();
  return Status(WSYNC_ERR_UNSUPPORTED, "MPI broadcasts need a job launched under MPI");
}

}  // namespace

const BroadcastBackend& mpiBroadcastBackend() {
  static const BroadcastBackend backend{
      "mpi",
      MemoryKind::kHost,
      BroadcastWorld::kMpiJob,  // sub-communicators of the MPI job's world
      /*one_gpu_per_rank=*/false,
      &mpiInitialized,
      /*make_world_token=*/nullptr,  // the MPI world exists already
      [](const BroadcastSetup& setup) -> Result<std::unique_ptr<Broadcaster>> {
        WSYNC_ASSIGN_OR_RETURN(auto host, HostBroadcaster::create(setup.comms, setup.world_rank));
        return std::unique_ptr<Broadcaster>(new MpiBroadcaster(setup, std::move(host)));
      },
  };
  return backend;
}

}  // namespace wsync
