// Which data plane carries a job's broadcast groups (docs/architecture.md, "Backends and the
// registry"), decided once by the coordinator from every rank's registration, before planning.
// With no backend the planner makes one-sided writes only.
#pragma once

#include <string>
#include <vector>

namespace wsync {

enum class BroadcastBackend {
  kNone,        // writes only
  kMpiHost,     // host memory: MPI broadcasts on sub-communicators (HostBroadcaster)
  kNcclDevice,  // device memory: NCCL broadcasts on splits of one NCCL world (NcclBroadcaster)
};
const char* broadcastBackendName(BroadcastBackend backend);

// Where one rank's buffers live, as it registered them.
struct RankBufferPlace {
  std::string rank_name;  // "trainer 0", "rollout 3": for the reason only
  std::string device_id;  // RegisterMsg::device_id: "host/GPU-uuid"; empty for host memory
};

struct BroadcastDecision {
  BroadcastBackend backend = BroadcastBackend::kNone;
  std::string reason;  // why: names the ranks that rule a backend out
};

// The rule:
//   - every rank on host memory: kMpiHost when the job runs under MPI (`mpi_job`), else kNone;
//   - every rank on device memory: kNcclDevice when every device_id is distinct (NCCL refuses
//     two ranks on one GPU: "Duplicate GPU detected") and `nccl_unique_id_given` (trainer 0 sent
//     one: it does so in CUDA builds, which always have NCCL), else kNone;
//   - host and device ranks mixed, or no rank: kNone.
BroadcastDecision decideBroadcastBackend(const std::vector<RankBufferPlace>& ranks, bool mpi_job,
                                         bool nccl_unique_id_given);

}  // namespace wsync
