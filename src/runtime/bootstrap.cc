#include "runtime/bootstrap.h"

#include <mpi.h>

#include <algorithm>
#include <cstdio>

#include "bootstrap/mpi_bootstrap.h"

namespace wsync {
namespace {

Result<std::pair<std::string, uint16_t>> splitAddress(const std::string& address) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return invalidArgument("coordinator address '" + address + "' is not host:port");
  }
  const std::string port_text = address.substr(colon + 1);
  char* end = nullptr;
  const long port = std::strtol(port_text.c_str(), &end, 10);
  if (port_text.empty() || *end != '\0' || port <= 0 || port > 65535) {
    return invalidArgument("coordinator address '" + address + "' has a bad port");
  }
  return std::make_pair(address.substr(0, colon), static_cast<uint16_t>(port));
}

}  // namespace

Result<Frame> expectFrame(FrameChannel& channel, MessageType expected,
                          std::chrono::milliseconds timeout) {
  WSYNC_ASSIGN_OR_RETURN(Frame frame, channel.recv(timeout));
  const auto type = static_cast<MessageType>(frame.type);
  if (type == MessageType::kError) {
    ErrorMsg err;
    WSYNC_RETURN_IF_ERROR(decode(frame.payload, err));
    return Status(err.code, err.message);
  }
  if (type != expected) {
    return protocolError(std::string("expected ") + messageTypeName(expected) +
                         " from the coordinator, got " + messageTypeName(type));
  }
  return frame;
}

Result<JobConnection> joinJob(const JobIdentity& who, const Options& settings) {
  const auto spin_wait = std::chrono::microseconds(std::max(0, settings.spin_wait_us));
  JobConnection job;
  std::string address = who.coordinator_address;
  std::string secret = who.secret;
  HelloMsg hello;
  hello.role = who.role;
  hello.replica = who.replica;
  hello.host = hostName();
  for (const auto& [variable, value] : explicitJobSettings(settings))
    hello.job_settings.push_back({variable, value});
  if (who.use_mpi) {
    WSYNC_RETURN_IF_ERROR(ensureMpiInitialized());
    job.mpi = true;
    MPI_Comm_rank(MPI_COMM_WORLD, &job.world_rank);
    hello.world_rank = job.world_rank;
    if (job.world_rank == 0) {
      if (who.role != Role::kTrainer) {
        return invalidUsage(
            "under MPI bootstrap, world rank 0 must be a trainer (it hosts the "
            "coordinator) or the wsync-coordinator program");
      }
      CoordinatorOptions copt;
      copt.timeout = who.timeout;
      copt.max_staleness = who.max_staleness;
      copt.job = settings.job;
      copt.first_participant_world_rank = 0;
      copt.control.secret = secret.empty() ? randomSecret() : secret;
      copt.control.spin_wait = spin_wait;
      secret = copt.control.secret;
      if (settings.log) {
        copt.log = [](const std::string& l) { std::fprintf(stderr, "%s\n", l.c_str()); };
      }
      WSYNC_ASSIGN_OR_RETURN(job.hosted_coordinator,
                             hostCoordinatorForMpiJob(std::move(copt), settings.coordinator_host));
      address = "127.0.0.1:" + std::to_string(job.hosted_coordinator->port());
    } else {
      WSYNC_ASSIGN_OR_RETURN(auto received, receiveCoordinatorAddress(who.timeout));
      address = received.first;
      secret = received.second;
      // A coordinator on this very host is reached over loopback.
      const auto colon = address.rfind(':');
      if (colon != std::string::npos && address.substr(0, colon) == hostName()) {
        address = "127.0.0.1" + address.substr(colon);
      }
    }
  } else {
    hello.role_rank = who.replica_size > 0 ? -1 : who.rank;
    hello.replica_size = who.replica_size;
    hello.replica_rank = who.replica_rank;
    if (secret.empty()) return invalidArgument("explicit bootstrap needs a secret (config.secret)");
  }
  WSYNC_ASSIGN_OR_RETURN(auto host_port, splitAddress(address));
  // Connecting retries (with backoff, within the timeout) while the coordinator is not listening
  // yet or answers busy (too many connections in the handshake); a refused secret fails at once.
  ControlOptions control;
  control.secret = secret;
  control.spin_wait = spin_wait;
  control.handshake_timeout = std::min(control.handshake_timeout, who.timeout);
  WSYNC_ASSIGN_OR_RETURN(
      job.channel, FrameChannel::connect(host_port.first, host_port.second, control, who.timeout));
  WSYNC_RETURN_IF_ERROR(
      job.channel->send(static_cast<uint16_t>(MessageType::kHello), encode(hello)));
  WSYNC_ASSIGN_OR_RETURN(Frame welcome, expectFrame(*job.channel, MessageType::kWelcome,
                                                    who.timeout + kCoordinatorReplyGrace));
  WSYNC_RETURN_IF_ERROR(decode(welcome.payload, job.welcome));
  return job;
}

}  // namespace wsync
