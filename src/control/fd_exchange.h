// Passing file descriptors between processes of one node: an FdServer listens on an abstract
// unix socket and hands out descriptors it was offered (SCM_RIGHTS) to clients that present the
// offer's id and secret token; fetchFd() is the client. The CUDA IPC backend shares its VMM
// allocations this way (a POSIX file descriptor per allocation; see transport/cuda_ipc/).
//
// Contract: the token is the only secret (any process in the same network namespace can connect
// to an abstract socket); it travels to the client out of band, over the authenticated control
// plane. A refused request (unknown id, wrong token) gets no descriptor and an error naming the
// server. Every wait has a deadline. Threads: offer()/withdraw() are thread-safe; the server
// answers on its own thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "common/status.h"
#include "control/socket.h"

namespace wsync {

class FdServer {
 public:
  struct Offer {
    uint64_t id = 0;
    uint64_t token = 0;
  };

  // A server on a fresh abstract socket ("wsync-fd-<pid>-<random>") with its answering thread.
  // SYSTEM when the socket cannot be made.
  static Result<std::unique_ptr<FdServer>> start();
  // The process's shared server, started on first use and never stopped (it must outlive every
  // offer, including those of objects destroyed during static destruction).
  static Result<FdServer*> processServer();

  // Stops the thread and closes the socket; descriptors still offered are not closed (they are
  // borrowed).
  ~FdServer();
  FdServer(const FdServer&) = delete;
  FdServer& operator=(const FdServer&) = delete;

  // The socket's abstract name (without the leading NUL byte).
  const std::string& name() const { return name_; }

  // Offers `fd` (borrowed: it must stay open until withdraw()) to clients presenting the returned
  // id and token.
  Offer offer(int fd);
  // Ends an offer; later requests for it are refused. Unknown ids are ignored.
  void withdraw(uint64_t id);

 private:
  FdServer(Fd listener, WakeFd wake, std::string name);
  void serve();
  void answer(Fd client);

  Fd listener_;
  WakeFd wake_;
  std::string name_;
  std::mutex mu_;
  std::unordered_map<uint64_t, std::pair<int, uint64_t>> offers_;  // id -> {fd, token}
  uint64_t next_id_ = 1;
  bool stopping_ = false;  // under mu_
  std::thread thread_;
};

// Asks the server named `server` (FdServer::name()) for offer `id` with `token`; returns the
// descriptor it sends, owned by the caller (close-on-exec). INVALID_ARGUMENT when the server
// refuses (unknown id or wrong token), REMOTE when no server listens under that name, TIMEOUT
// after `timeout`, SYSTEM for other socket errors; messages name the server.
Result<Fd> fetchFd(const std::string& server, uint64_t id, uint64_t token,
                   std::chrono::milliseconds timeout);

}  // namespace wsync
