#include "runtime/bootstrap.h"

#include <mpi.h>
#include <netdb.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>

#include "common/wire.h"

namespace wsync {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kAddressTag = 0x5753;  // MPI tag of the coordinator-address message
constexpr int kMaxAddressBytes = 4096;

std::string mpiError(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string(text, static_cast<size_t>(len));
}

std::string randomSecret() {
  std::random_device rd;
  std::string s;
  const char* hex = "0123456789abcdef";
  for (int i = 0; i < 32; ++i)
    s += hex[rd() % 16];
  return s;
}

std::string hostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

// The address the coordinator binds and advertises: WSYNC_COORDINATOR_HOST when set (an interface
// address, or 127.0.0.1 to stay on this node), else every interface and this host's name.
std::pair<std::string, std::string> coordinatorBindAndAdvertise() {
  if (const char* host = std::getenv("WSYNC_COORDINATOR_HOST"); host && *host) return {host, host};
  return {"0.0.0.0", hostName()};
}

// Sends "host:port\nsecret" from world rank 0 to every other rank (point to point, so a rank that
// never arrives delays nobody else).
Status sendAddressToAll(const std::string& address, const std::string& secret) {
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const std::string msg = address + "\n" + secret;
  std::vector<MPI_Request> reqs(static_cast<size_t>(std::max(0, world - 1)), MPI_REQUEST_NULL);
  for (int r = 1; r < world; ++r) {
    const int rc = MPI_Isend(msg.data(), static_cast<int>(msg.size()), MPI_CHAR, r, kAddressTag,
                             MPI_COMM_WORLD, &reqs[static_cast<size_t>(r - 1)]);
    if (rc != MPI_SUCCESS)
      return systemError("MPI_Isend of the coordinator address: " + mpiError(rc));
  }
  // The sends complete once received; do not wait here (a missing rank must not block rank 0):
  // the requests are freed and MPI completes them in the background.
  for (MPI_Request& r : reqs)
    MPI_Request_free(&r);
  return Status::ok();
}

Result<std::pair<std::string, std::string>> receiveAddress(std::chrono::milliseconds timeout) {
  std::vector<char> buf(kMaxAddressBytes);
  MPI_Request req = MPI_REQUEST_NULL;
  int rc = MPI_Irecv(buf.data(), kMaxAddressBytes, MPI_CHAR, 0, kAddressTag, MPI_COMM_WORLD, &req);
  if (rc != MPI_SUCCESS)
    return systemError("MPI_Irecv of the coordinator address: " + mpiError(rc));
  const auto deadline = Clock::now() + timeout;
  MPI_Status status;
  int done = 0;
  while (true) {
    MPI_Test(&req, &done, &status);
    if (done) break;
    if (Clock::now() >= deadline) {
      MPI_Cancel(&req);
      MPI_Request_free(&req);
      return timeoutError("no coordinator address from MPI world rank 0 within " +
                          std::to_string(timeout.count()) +
                          " ms (world rank 0 must be a trainer or the wsync-coordinator program)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  int count = 0;
  MPI_Get_count(&status, MPI_CHAR, &count);
  const std::string msg(buf.data(), static_cast<size_t>(count));
  const auto nl = msg.find('\n');
  if (nl == std::string::npos) return protocolError("malformed coordinator address message");
  return std::make_pair(msg.substr(0, nl), msg.substr(nl + 1));
}

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

Status ensureMpiInitialized() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) {
    int provided = 0;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_MULTIPLE) {
      return invalidUsage(
          "MPI was initialized without MPI_THREAD_MULTIPLE; wsync's background "
          "threads need it (use MPI_Init_thread)");
    }
    return Status::ok();
  }
  int provided = 0;
  const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  if (rc != MPI_SUCCESS) return systemError("MPI_Init_thread: " + mpiError(rc));
  if (provided < MPI_THREAD_MULTIPLE) {
    return systemError("this MPI does not provide MPI_THREAD_MULTIPLE");
  }
  std::atexit([] {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  });
  return Status::ok();
}

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

Result<std::unique_ptr<Coordinator>> hostCoordinatorForMpiJob(CoordinatorOptions options) {
  WSYNC_RETURN_IF_ERROR(ensureMpiInitialized());
  const auto [bind, advertise] = coordinatorBindAndAdvertise();
  options.bind_host = bind;
  if (options.control.secret.empty()) options.control.secret = randomSecret();
  MPI_Comm_size(MPI_COMM_WORLD, &options.mpi_world_size);
  const std::string secret = options.control.secret;
  WSYNC_ASSIGN_OR_RETURN(auto coordinator, Coordinator::start(std::move(options)));
  const std::string address = advertise + ":" + std::to_string(coordinator->port());
  WSYNC_RETURN_IF_ERROR(sendAddressToAll(address, secret));
  return coordinator;
}

Result<JobConnection> joinJob(const BootstrapOptions& options) {
  JobConnection job;
  std::string address = options.coordinator_address;
  std::string secret = options.secret;
  HelloMsg hello;
  hello.role = options.role;
  hello.replica = options.replica;
  hello.host = hostName();
  if (options.use_mpi) {
    WSYNC_RETURN_IF_ERROR(ensureMpiInitialized());
    job.mpi = true;
    MPI_Comm_rank(MPI_COMM_WORLD, &job.world_rank);
    hello.world_rank = job.world_rank;
    if (job.world_rank == 0) {
      if (options.role != Role::kTrainer) {
        return invalidUsage(
            "under MPI bootstrap, world rank 0 must be a trainer (it hosts the "
            "coordinator) or the wsync-coordinator program");
      }
      CoordinatorOptions copt;
      copt.timeout = options.timeout;
      copt.max_staleness = options.max_staleness;
      copt.first_participant_world_rank = 0;
      copt.control.secret = secret.empty() ? randomSecret() : secret;
      secret = copt.control.secret;
      if (std::getenv("WSYNC_LOG")) {
        copt.log = [](const std::string& l) { std::fprintf(stderr, "%s\n", l.c_str()); };
      }
      WSYNC_ASSIGN_OR_RETURN(job.hosted_coordinator, hostCoordinatorForMpiJob(std::move(copt)));
      address = "127.0.0.1:" + std::to_string(job.hosted_coordinator->port());
    } else {
      WSYNC_ASSIGN_OR_RETURN(auto received, receiveAddress(options.timeout));
      address = received.first;
      secret = received.second;
      // A coordinator on this very host is reached over loopback.
      const auto colon = address.rfind(':');
      if (colon != std::string::npos && address.substr(0, colon) == hostName()) {
        address = "127.0.0.1" + address.substr(colon);
      }
    }
  } else {
    hello.role_rank = options.rank;
    if (secret.empty()) return invalidArgument("explicit bootstrap needs a secret (config.secret)");
  }
  WSYNC_ASSIGN_OR_RETURN(auto host_port, splitAddress(address));
  ControlOptions control;
  control.secret = secret;
  WSYNC_ASSIGN_OR_RETURN(job.channel, FrameChannel::connect(host_port.first, host_port.second,
                                                            control, options.timeout));
  WSYNC_RETURN_IF_ERROR(
      job.channel->send(static_cast<uint16_t>(MessageType::kHello), encode(hello)));
  WSYNC_ASSIGN_OR_RETURN(Frame welcome, expectFrame(*job.channel, MessageType::kWelcome,
                                                    options.timeout + kCoordinatorReplyGrace));
  WSYNC_RETURN_IF_ERROR(decode(welcome.payload, job.welcome));
  return job;
}

}  // namespace wsync
