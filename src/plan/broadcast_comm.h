// The member set of broadcast groups, as the coordinator maps a plan's groups onto communicators
// and every broadcast backend creates them: shared by the coordinator (which assigns them) and the
// broadcast backends (which build them), so it lives below both.
#pragma once

#include <cstdint>
#include <vector>

namespace wsync {

// A broadcast communicator: an MPI sub-communicator (host memory; world ranks are MPI world ranks)
// or an NCCL split (device memory; world ranks are NCCL world ranks). Created by every member in
// increasing id order.
struct BroadcastComm {
  int32_t id = 0;
  std::vector<int32_t> world_ranks;  // sorted; the sender is one of them
};

}  // namespace wsync
