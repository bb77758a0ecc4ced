#include "coordinator/broadcast_backend.h"

#include <map>

namespace wsync {

const char* broadcastBackendName(BroadcastBackend backend) {
  switch (backend) {
    case BroadcastBackend::kNone:
      return "none (writes only)";
    case BroadcastBackend::kMpiHost:
      return "MPI (host memory)";
    case BroadcastBackend::kNcclDevice:
      return "NCCL (device memory)";
  }
  return "unknown";
}

BroadcastDecision decideBroadcastBackend(const std::vector<RankBufferPlace>& ranks, bool mpi_job,
                                         bool nccl_unique_id_given) {
  if (ranks.empty()) return {BroadcastBackend::kNone, "the job has no rank"};
  const RankBufferPlace* host = nullptr;
  const RankBufferPlace* device = nullptr;
  for (const RankBufferPlace& r : ranks) {
    if (r.device_id.empty()) {
      host = &r;
    } else {
      device = &r;
    }
  }
  if (host != nullptr && device != nullptr) {
    return {BroadcastBackend::kNone, host->rank_name + " holds host memory and " +
                                         device->rank_name +
                                         " device memory: mixed jobs use writes only"};
  }
  if (host != nullptr) {
    if (!mpi_job) {
      return {BroadcastBackend::kNone,
              "host memory broadcasts need MPI; this job was bootstrapped explicitly"};
    }
    return {BroadcastBackend::kMpiHost, "every rank holds host memory in an MPI job"};
  }
  std::map<std::string, const RankBufferPlace*> owner_of_device;
  for (const RankBufferPlace& r : ranks) {
    const auto [it, inserted] = owner_of_device.emplace(r.device_id, &r);
    if (!inserted) {
      return {BroadcastBackend::kNone, it->second->rank_name + " and " + r.rank_name +
                                           " share GPU " + r.device_id +
                                           " (NCCL needs one GPU per rank)"};
    }
  }
  if (!nccl_unique_id_given) {
    return {BroadcastBackend::kNone,
            "trainer 0 sent no NCCL unique id (a build without NCCL, or NCCL could not make one)"};
  }
  return {BroadcastBackend::kNcclDevice, "every rank holds device memory on its own GPU"};
}

}  // namespace wsync
