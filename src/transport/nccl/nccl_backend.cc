// Registration of the NCCL broadcast backend (device memory; see transport/backend.h).
#include "common/cuda_check.h"
#include "transport/backend.h"
#include "transport/nccl/nccl_broadcaster.h"

namespace wsync {
namespace {

class NcclGroupBroadcaster final : public Broadcaster {
 public:
  NcclGroupBroadcaster(BroadcastSetup setup, std::unique_ptr<NcclBroadcaster> nccl)
      : setup_(std::move(setup)), nccl_(std::move(nccl)) {}
  const char* name() const override { return "nccl"; }
  Status post(int32_t comm_index, int32_t root_trainer, void* data, size_t bytes) override {
    WSYNC_ASSIGN_OR_RETURN(const int32_t root, broadcastRoot(setup_, comm_index, root_trainer));
    return nccl_->post(setup_.comms[static_cast<size_t>(comm_index)].id, root, data, bytes);
  }
  Status start(BroadcastStream stream) override { return nccl_->launch(stream); }
  Status wait(BroadcastStream stream, std::chrono::milliseconds timeout) override {
    return nccl_->wait(stream, timeout);
  }

 private:
  BroadcastSetup setup_;
  std::unique_ptr<NcclBroadcaster> nccl_;
};

}  // namespace

const BroadcastBackend& ncclBroadcastBackend() {
  static const BroadcastBackend backend{
      "nccl",
      MemoryKind::kDevice,
      BroadcastWorld::kJobRanks,  // one NCCL world of the job's ranks; each split is collective
      /*one_gpu_per_rank=*/true,  // NCCL refuses two ranks on one GPU ("Duplicate GPU detected")
      [] { return cudaDevicesPresent(); },
      &makeNcclUniqueId,  // the world token: the bytes of an NCCL unique id
      [](const BroadcastSetup& setup) -> Result<std::unique_ptr<Broadcaster>> {
        NcclBroadcasterOptions options;
        options.device = setup.cuda_device;
        options.timeout = setup.timeout;
        WSYNC_ASSIGN_OR_RETURN(auto nccl,
                               NcclBroadcaster::create(setup.world_token, setup.world_rank,
                                                       setup.world_size, setup.comms, options));
        return std::unique_ptr<Broadcaster>(new NcclGroupBroadcaster(setup, std::move(nccl)));
      },
  };
  return backend;
}

}  // namespace wsync
