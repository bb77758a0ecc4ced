#include "bootstrap/mpi_bootstrap.h"

#include <mpi.h>
#include <unistd.h>

#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

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

}  // namespace

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

Result<std::unique_ptr<Coordinator>> hostCoordinatorForMpiJob(CoordinatorOptions options,
                                                              const std::string& advertise_host) {
  WSYNC_RETURN_IF_ERROR(ensureMpiInitialized());
  // An advertised address is also the one bound (an interface address, or 127.0.0.1 to stay on
  // this node); otherwise every interface, advertised by this host's name.
  options.bind_host = advertise_host.empty() ? "0.0.0.0" : advertise_host;
  const std::string advertise = advertise_host.empty() ? hostName() : advertise_host;
  if (options.control.secret.empty()) options.control.secret = randomSecret();
  MPI_Comm_size(MPI_COMM_WORLD, &options.mpi_world_size);
  const std::string secret = options.control.secret;
  WSYNC_ASSIGN_OR_RETURN(auto coordinator, Coordinator::start(std::move(options)));
  const std::string address = advertise + ":" + std::to_string(coordinator->port());
  WSYNC_RETURN_IF_ERROR(sendAddressToAll(address, secret));
  return coordinator;
}

Result<std::pair<std::string, std::string>> receiveCoordinatorAddress(
    std::chrono::milliseconds timeout) {
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

}  // namespace wsync
