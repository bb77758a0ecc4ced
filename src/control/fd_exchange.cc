#include "control/fd_exchange.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

namespace wsync {
namespace {

// A request is {id, token} (native byte order: both ends are on one node); the answer is one
// byte, kGranted with the descriptor attached or kRefused without.
struct Request {
  uint64_t id;
  uint64_t token;
};
constexpr uint8_t kGranted = 1;
constexpr uint8_t kRefused = 2;
// How long the server gives one client to send its request and take the answer.
constexpr std::chrono::milliseconds kClientBudget{2000};

std::string errnoText(int e) {
  return std::string(std::strerror(e)) + " (errno " + std::to_string(e) + ")";
}

std::string quoted(const std::string& name) {
  return "fd server '@" + name + "'";
}

// sockaddr of the abstract name `name` and its length.
socklen_t abstractAddress(const std::string& name, sockaddr_un& addr) {
  std::memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  const size_t n = std::min(name.size(), sizeof(addr.sun_path) - 1);
  std::memcpy(addr.sun_path + 1, name.data(), n);  // sun_path[0] == '\0': abstract namespace
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

Result<Fd> unixSocket(const std::string& what) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return systemError(what + ": socket(AF_UNIX) failed: " + errnoText(errno));
  return Fd(fd);
}

// Reads exactly `size` bytes (and, when `received` is not null, a descriptor sent with them)
// before `deadline`.
Status receiveExactly(int fd, void* buf, size_t size, SteadyClock::time_point deadline,
                      Fd* received, const std::string& what) {
  auto* out = static_cast<uint8_t*>(buf);
  size_t got = 0;
  while (got < size) {
    WSYNC_RETURN_IF_ERROR(waitFd(fd, POLLIN, deadline, -1).withContext(what));
    iovec iov{out + got, size - got};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (received != nullptr) {
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
    }
    const ssize_t n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
      return systemError(what + ": recvmsg failed: " + errnoText(errno));
    }
    if (n == 0) return remoteError(what + ": the other side closed the connection");
    if (received != nullptr) {
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
          int passed = -1;
          std::memcpy(&passed, CMSG_DATA(c), sizeof(int));
          received->reset(passed);
        }
      }
    }
    got += static_cast<size_t>(n);
  }
  return Status::ok();
}

// Sends `byte`, with `fd` attached when fd >= 0, before `deadline`.
Status sendByte(int socket, uint8_t byte, int fd, SteadyClock::time_point deadline,
                const std::string& what) {
  while (true) {
    iovec iov{&byte, 1};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (fd >= 0) {
      std::memset(control, 0, sizeof(control));
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
    }
    const ssize_t n = ::sendmsg(socket, &msg, MSG_NOSIGNAL);
    if (n == 1) return Status::ok();
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return systemError(what + ": sendmsg failed: " + errnoText(errno));
    }
    WSYNC_RETURN_IF_ERROR(waitFd(socket, POLLOUT, deadline, -1).withContext(what));
  }
}

uint64_t randomWord() {
  uint64_t v = 0;
  if (!randomBytes(&v, sizeof(v)).isOk()) {
    v = static_cast<uint64_t>(SteadyClock::now().time_since_epoch().count()) ^
        (static_cast<uint64_t>(::getpid()) << 32);
  }
  return v;
}

}  // namespace

Result<std::unique_ptr<FdServer>> FdServer::start() {
  WSYNC_ASSIGN_OR_RETURN(Fd listener, unixSocket("fd server"));
  char name[64];
  std::snprintf(name, sizeof(name), "wsync-fd-%d-%016llx", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(randomWord()));
  sockaddr_un addr{};
  const socklen_t len = abstractAddress(name, addr);
  if (::bind(listener.get(), reinterpret_cast<const sockaddr*>(&addr), len) != 0) {
    return systemError(quoted(name) + ": bind failed: " + errnoText(errno));
  }
  if (::listen(listener.get(), 64) != 0) {
    return systemError(quoted(name) + ": listen failed: " + errnoText(errno));
  }
  WSYNC_ASSIGN_OR_RETURN(WakeFd wake, WakeFd::create());
  return std::unique_ptr<FdServer>(new FdServer(std::move(listener), std::move(wake), name));
}

Result<FdServer*> FdServer::processServer() {
  static std::mutex mu;
  static FdServer* server = nullptr;  // never destroyed; see the header
  std::lock_guard lock(mu);
  if (server == nullptr) {
    WSYNC_ASSIGN_OR_RETURN(std::unique_ptr<FdServer> started, start());
    server = started.release();
  }
  return server;
}

FdServer::FdServer(Fd listener, WakeFd wake, std::string name)
    : listener_(std::move(listener)), wake_(std::move(wake)), name_(std::move(name)) {
  thread_ = std::thread([this] { serve(); });
}

FdServer::~FdServer() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify();
  if (thread_.joinable()) thread_.join();
}

FdServer::Offer FdServer::offer(int fd) {
  std::lock_guard lock(mu_);
  Offer o{next_id_++, randomWord()};
  offers_[o.id] = {fd, o.token};
  return o;
}

void FdServer::withdraw(uint64_t id) {
  std::lock_guard lock(mu_);
  offers_.erase(id);
}

void FdServer::serve() {
  while (true) {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
    }
    pollfd fds[2] = {{listener_.get(), POLLIN, 0}, {wake_.fd(), POLLIN, 0}};
    const int n = ::poll(fds, 2, 1000);
    if (n < 0 && errno != EINTR) return;  // nothing sensible left to do; clients time out
    if (n <= 0 || (fds[1].revents & POLLIN) != 0) continue;
    const int client = ::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (client >= 0) answer(Fd(client));
  }
}

// One client: its request, then the descriptor or a refusal. A misbehaving client costs at most
// kClientBudget and gets nothing.
void FdServer::answer(Fd client) {
  const auto deadline = SteadyClock::now() + kClientBudget;
  Request request{};
  if (!receiveExactly(client.get(), &request, sizeof(request), deadline, nullptr, quoted(name_))
           .isOk()) {
    return;
  }
  int fd = -1;
  {
    std::lock_guard lock(mu_);
    auto it = offers_.find(request.id);
    if (it != offers_.end() && it->second.second == request.token) fd = it->second.first;
    // The descriptor is duplicated into the message while the lock keeps the offer alive.
    (void)sendByte(client.get(), fd >= 0 ? kGranted : kRefused, fd, deadline, quoted(name_));
  }
}

Result<Fd> fetchFd(const std::string& server, uint64_t id, uint64_t token,
                   std::chrono::milliseconds timeout) {
  const std::string what = quoted(server) + ", offer " + std::to_string(id);
  const auto deadline = SteadyClock::now() + timeout;
  WSYNC_ASSIGN_OR_RETURN(Fd socket, unixSocket(what));
  sockaddr_un addr{};
  const socklen_t len = abstractAddress(server, addr);
  if (::connect(socket.get(), reinterpret_cast<const sockaddr*>(&addr), len) != 0) {
    if (errno == ECONNREFUSED || errno == ENOENT) {
      return remoteError(what +
                         ": nobody listens (is the owning process alive, on this node and "
                         "in this network namespace?)");
    }
    if (errno != EINPROGRESS && errno != EAGAIN) {
      return systemError(what + ": connect failed: " + errnoText(errno));
    }
    WSYNC_RETURN_IF_ERROR(waitFd(socket.get(), POLLOUT, deadline, -1).withContext(what));
  }
  const Request request{id, token};
  iovec iov{const_cast<Request*>(&request), sizeof(request)};
  WSYNC_RETURN_IF_ERROR(sendAll(socket.get(), &iov, 1, timeout, -1, nullptr).withContext(what));
  uint8_t answer = 0;
  Fd received;
  WSYNC_RETURN_IF_ERROR(
      receiveExactly(socket.get(), &answer, 1, deadline, &received, what + ": the answer"));
  if (answer != kGranted) {
    return invalidArgument(what + ": refused (unknown offer or wrong token)");
  }
  if (!received.valid()) return protocolError(what + ": granted, but no descriptor came with it");
  return received;
}

}  // namespace wsync
