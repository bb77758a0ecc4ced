// Joining a job: finds the coordinator (MPI: world rank 0 hosts it or is the wsync-coordinator
// program, and tells every rank its address and the job's secret with point-to-point messages;
// explicit: from the config), connects the control channel, and says Hello. Every wait is bounded.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "bootstrap/mpi_bootstrap.h"
#include "common/status.h"
#include "control/frame_channel.h"
#include "coordinator/coordinator.h"
#include "layout/registration.h"
#include "options/options.h"
#include "protocol/protocol.h"

namespace wsync {

// Who a rank is in the job and how it reaches the coordinator, from its config. ContextOptions
// holds it (as its base), so joinJob reads the context's own fields.
struct JobIdentity {
  bool use_mpi = true;
  Role role = Role::kTrainer;
  int32_t replica = -1;
  std::chrono::milliseconds timeout{60000};
  int max_staleness = -1;
  // Explicit bootstrap only.
  int32_t rank = -1;
  std::string coordinator_address;  // "host:port"
  std::string secret;
  // A rollout joining a running job (explicit bootstrap): HelloMsg::replica_size / replica_rank.
  int32_t replica_size = 0;
  int32_t replica_rank = -1;
};

struct JobConnection {
  std::unique_ptr<FrameChannel> channel;
  std::unique_ptr<Coordinator> hosted_coordinator;  // set on the rank that runs it on a thread
  WelcomeMsg welcome;
  bool mpi = false;
  int32_t world_rank = -1;
};

// Joins the job and returns once the coordinator has welcomed this rank (every rank of the job
// has joined). A coordinator that is not listening yet or is busy (too many connections in the
// handshake) is retried with backoff within who.timeout. TIMEOUT names what did not arrive
// (or that the coordinator stayed busy); PROTOCOL, at once, when it refuses the secret.
// `settings`: the rank's resolved options. Read here: spin_wait_us (ControlOptions::spin_wait of
// the rank's channel), the job-wide settings it set explicitly (HelloMsg::job_settings); on MPI
// world rank 0, which hosts the coordinator, also coordinator_host (the address it advertises and
// binds; empty: every interface, advertised by host name), log, and the job-wide `job` settings
// its coordinator decides for the job (CoordinatorOptions::job).
Result<JobConnection> joinJob(const JobIdentity& who, const Options& settings);

// Replies the coordinator itself bounds by the job's timeout are awaited this much longer, so its
// error (which names the missing rank) arrives before the rank's own wait gives up.
inline constexpr std::chrono::milliseconds kCoordinatorReplyGrace{5000};

// Waits for a frame of type `expected`; an Error frame becomes its status; anything else is a
// protocol error. Used while the calling thread owns the channel (create, commit).
Result<Frame> expectFrame(FrameChannel& channel, MessageType expected,
                          std::chrono::milliseconds timeout);

}  // namespace wsync
