// Bootstrap of a job under mpirun: MPI initialization, and the coordinator's address handed from
// world rank 0 (a trainer hosting the coordinator, or the wsync-coordinator program) to every
// other world rank with point-to-point messages, so that a rank that never arrives blocks nobody.
// Used by the runtime (ranks joining a job) and by wsync-coordinator; sits below both.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "common/status.h"
#include "coordinator/coordinator.h"

namespace wsync {

// Initializes MPI with MPI_THREAD_MULTIPLE when it is not yet (finalized at exit); INVALID_USAGE
// when the application initialized it with less.
Status ensureMpiInitialized();

// This host's name ("localhost" when it cannot be read).
std::string hostName();

// 32 random hex digits: the secret of a job whose ranks learn it through MPI.
std::string randomSecret();

// For world rank 0: starts the coordinator (binding `advertise_host` when it is set, else every
// interface) and sends "host:port" and the secret (a random one when options has none) to every
// other world rank. `advertise_host`: the address ranks reach the coordinator at (empty: this
// host's name).
Result<std::unique_ptr<Coordinator>> hostCoordinatorForMpiJob(CoordinatorOptions options,
                                                              const std::string& advertise_host);

// For world ranks > 0: the {"host:port", secret} world rank 0 sent, waiting up to `timeout`
// (TIMEOUT then, naming world rank 0).
Result<std::pair<std::string, std::string>> receiveCoordinatorAddress(
    std::chrono::milliseconds timeout);

}  // namespace wsync
