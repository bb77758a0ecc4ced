#include "runtime/device_broadcast.h"

#include <algorithm>

#ifdef WSYNC_HAVE_CUDA
#include "transport/nccl/nccl_broadcaster.h"
#endif

namespace wsync {

std::string groupReceivers(const BroadcastGroup& group) {
  std::string s = "{";
  for (size_t i = 0; i < group.dst.size(); ++i)
    s += (i > 0 ? "," : "") + std::to_string(group.dst[i].rank);
  return s + "}";
}

std::string groupTensors(const RankPlan& plan) {
  constexpr size_t kNamed = 3;
  std::vector<int32_t> tensors;
  for (const BroadcastGroup& g : plan.groups) {
    if (std::find(tensors.begin(), tensors.end(), g.tensor) == tensors.end())
      tensors.push_back(g.tensor);
  }
  std::string s = tensors.size() == 1 ? "tensor " : "tensors ";
  for (size_t i = 0; i < tensors.size() && i < kNamed; ++i)
    s += (i > 0 ? ", '" : "'") + plan.tensors[static_cast<size_t>(tensors[i])].name + "'";
  if (tensors.size() > kNamed) s += " and " + std::to_string(tensors.size() - kNamed) + " more";
  return s;
}

#ifdef WSYNC_HAVE_CUDA

struct DeviceBroadcaster::Impl {
  std::unique_ptr<NcclBroadcaster> nccl;
};

Result<std::vector<uint8_t>> makeNcclWorldId() {
  return makeNcclUniqueId();
}

Result<std::unique_ptr<DeviceBroadcaster>> DeviceBroadcaster::create(
    const PlanAssignmentMsg& assignment, int device, std::chrono::milliseconds timeout) {
  std::unique_ptr<DeviceBroadcaster> b(new DeviceBroadcaster());
  b->impl_ = std::make_unique<Impl>();
  for (const BroadcastComm& c : assignment.comms)
    b->comm_ids_.push_back(c.id);
  b->trainer_ranks_ = assignment.nccl.trainer_ranks;
  NcclBroadcasterOptions options;
  options.device = device;
  options.timeout = timeout;
  WSYNC_ASSIGN_OR_RETURN(
      b->impl_->nccl,
      NcclBroadcaster::create(assignment.nccl.unique_id, assignment.nccl.rank,
                              assignment.nccl.world_size, assignment.comms, options));
  return b;
}

DeviceBroadcaster::~DeviceBroadcaster() = default;

Status DeviceBroadcaster::post(int32_t comm_index, int32_t root_trainer, void* data, size_t bytes) {
  if (comm_index < 0 || static_cast<size_t>(comm_index) >= comm_ids_.size() || root_trainer < 0 ||
      static_cast<size_t>(root_trainer) >= trainer_ranks_.size()) {
    return protocolError("device broadcast on communicator index " + std::to_string(comm_index) +
                         " from trainer " + std::to_string(root_trainer) +
                         ": not in the plan assignment");
  }
  return impl_->nccl->post(comm_ids_[static_cast<size_t>(comm_index)],
                           trainer_ranks_[static_cast<size_t>(root_trainer)], data, bytes);
}

Status DeviceBroadcaster::launch(CudaStreamHandle stream) {
  return impl_->nccl->launch(stream);
}

Status DeviceBroadcaster::wait(CudaStreamHandle stream, std::chrono::milliseconds timeout) {
  return impl_->nccl->wait(stream, timeout);
}

#else  // no CUDA in this build

struct DeviceBroadcaster::Impl {};

namespace {
Status noNccl() {
  return Status(WSYNC_ERR_UNSUPPORTED,
                "device broadcast groups need NCCL; this build of wsync has no CUDA");
}
}  // namespace

Result<std::vector<uint8_t>> makeNcclWorldId() {
  return noNccl();
}
Result<std::unique_ptr<DeviceBroadcaster>> DeviceBroadcaster::create(const PlanAssignmentMsg&, int,
                                                                     std::chrono::milliseconds) {
  return noNccl();
}
DeviceBroadcaster::~DeviceBroadcaster() = default;
Status DeviceBroadcaster::post(int32_t, int32_t, void*, size_t) {
  return noNccl();
}
Status DeviceBroadcaster::launch(CudaStreamHandle) {
  return noNccl();
}
Status DeviceBroadcaster::wait(CudaStreamHandle, std::chrono::milliseconds) {
  return noNccl();
}

#endif

}  // namespace wsync
