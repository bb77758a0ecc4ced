#include "control/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>
#include <thread>

namespace wsync {
namespace {

std::string errnoText(int err) {
  return std::strerror(err);
}

std::string hostPort(const std::string& host, uint16_t port) {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
         std::to_string(port);
}

struct AddrInfoDeleter {
  void operator()(addrinfo* p) const { freeaddrinfo(p); }
};
using AddrInfoPtr = std::unique_ptr<addrinfo, AddrInfoDeleter>;

Result<AddrInfoPtr> resolve(const std::string& host, uint16_t port, bool passive) {
  addrinfo hints{};
  const bool wildcard = passive && (host.empty() || host == "0.0.0.0");
  hints.ai_family = wildcard ? AF_INET : AF_UNSPEC;  // the wildcard means all IPv4 interfaces
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  const char* node = wildcard || host.empty() ? nullptr : host.c_str();
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const int rc = getaddrinfo(node, service.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    return systemError("cannot resolve " + hostPort(host, port) + ": " +
                       (rc == EAI_SYSTEM ? errnoText(errno) : gai_strerror(rc)));
  }
  return AddrInfoPtr(res);
}

// A nonblocking call found nothing to do now (EAGAIN, or EWOULDBLOCK where it differs).
bool wouldBlock(int err) {
  return err == EAGAIN || err == EWOULDBLOCK;
}

void setNoDelay(int fd) {
  int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

}  // namespace

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

Result<WakeFd> WakeFd::create() {
  const int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) return systemError("eventfd failed: " + errnoText(errno));
  WakeFd w;
  w.fd_.reset(fd);
  return w;
}

void WakeFd::notify() const {
  const uint64_t one = 1;
  // Fails only when the counter would overflow, in which case the fd is readable anyway.
  ssize_t rc;
  do {
    rc = ::write(fd_.get(), &one, sizeof(one));
  } while (rc < 0 && errno == EINTR);
}

void WakeFd::drain() const {
  uint64_t value = 0;
  ssize_t rc;
  do {
    rc = ::read(fd_.get(), &value, sizeof(value));
  } while (rc < 0 && errno == EINTR);
}

int pollTimeoutMs(SteadyClock::time_point deadline) {
  const auto now = SteadyClock::now();
  if (deadline <= now) return 0;
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(deadline - now).count();
  const long long ms = (us + 999) / 1000;
  return ms > INT_MAX ? INT_MAX : static_cast<int>(ms);
}

Result<Fd> tcpListen(const std::string& bind_host, uint16_t port, int backlog) {
  WSYNC_ASSIGN_OR_RETURN(AddrInfoPtr addrs, resolve(bind_host, port, /*passive=*/true));
  std::string last_error = "no address";
  for (const addrinfo* a = addrs.get(); a != nullptr; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd.valid()) {
      last_error = "socket: " + errnoText(errno);
      continue;
    }
    int one = 1;
    (void)setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0) {
      last_error = "bind: " + errnoText(errno);
      continue;
    }
    if (::listen(fd.get(), backlog) != 0) {
      last_error = "listen: " + errnoText(errno);
      continue;
    }
    return fd;
  }
  return systemError("cannot listen on " + hostPort(bind_host, port) + ": " + last_error);
}

Result<uint16_t> localPort(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    return systemError("getsockname failed: " + errnoText(errno));
  }
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return systemError("getsockname: unexpected address family " + std::to_string(ss.ss_family));
}

namespace {

// The peer's address (without port) and port; false when unknown.
bool peerEndpoint(int fd, std::string* address, uint16_t* port, bool* v6) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return false;
  char text[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* sin = reinterpret_cast<sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &sin->sin_addr, text, sizeof(text));
    *port = ntohs(sin->sin_port);
    *v6 = false;
  } else if (ss.ss_family == AF_INET6) {
    const auto* sin6 = reinterpret_cast<sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &sin6->sin6_addr, text, sizeof(text));
    *port = ntohs(sin6->sin6_port);
    *v6 = true;
  } else {
    return false;
  }
  *address = text;
  return true;
}

}  // namespace

std::string peerName(int fd) {
  std::string address;
  uint16_t port = 0;
  bool v6 = false;
  if (!peerEndpoint(fd, &address, &port, &v6)) return "<unknown peer>";
  return (v6 ? "[" + address + "]" : address) + ":" + std::to_string(port);
}

std::string peerAddress(int fd) {
  std::string address;
  uint16_t port = 0;
  bool v6 = false;
  return peerEndpoint(fd, &address, &port, &v6) ? address : "<unknown peer>";
}

Result<Fd> tcpConnect(const std::string& host, uint16_t port, SteadyClock::time_point deadline) {
  const std::string where = hostPort(host, port);
  WSYNC_ASSIGN_OR_RETURN(AddrInfoPtr addrs, resolve(host, port, /*passive=*/false));
  Status last = remoteError("cannot connect to " + where + ": no address");
  for (const addrinfo* a = addrs.get(); a != nullptr; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd.valid()) return systemError("socket failed: " + errnoText(errno));
    int rc;
    do {
      rc = ::connect(fd.get(), a->ai_addr, a->ai_addrlen);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0 && errno != EINPROGRESS) {
      last = remoteError("cannot connect to " + where + ": " + errnoText(errno));
      continue;
    }
    if (rc != 0) {
      Status waited = waitFd(fd.get(), POLLOUT, deadline, -1);
      if (waited.code() == WSYNC_ERR_TIMEOUT) {
        return timeoutError("connecting to " + where + " did not complete in time");
      }
      WSYNC_RETURN_IF_ERROR(waited);
      int err = 0;
      socklen_t len = sizeof(err);
      if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      if (err != 0) {
        last = remoteError("cannot connect to " + where + ": " + errnoText(err));
        continue;
      }
    }
    setNoDelay(fd.get());
    return fd;
  }
  return last;
}

Result<Fd> tcpAccept(int listen_fd) {
  for (;;) {
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      setNoDelay(fd);
      return Fd(fd);
    }
    if (errno == EINTR) continue;
    if (wouldBlock(errno)) return Fd();
    // The connection died in the backlog: nothing to accept, not a server failure.
    if (errno == ECONNABORTED || errno == EPROTO || errno == EPERM) continue;
    return systemError("accept failed: " + errnoText(errno));
  }
}

Status waitFd(int fd, short events, SteadyClock::time_point deadline, int wake_fd,
              SteadyClock::time_point spin_until) {
  pollfd fds[2] = {{fd, events, 0}, {wake_fd, POLLIN, 0}};
  const nfds_t n = wake_fd >= 0 ? 2 : 1;
  for (;;) {
    const bool spinning = SteadyClock::now() < std::min(spin_until, deadline);
    const int rc = ::poll(fds, n, spinning ? 0 : pollTimeoutMs(deadline));
    if (spinning && rc == 0) {
      std::this_thread::yield();
      continue;
    }
    if (rc < 0) {
      if (errno == EINTR) continue;
      return systemError("poll failed: " + errnoText(errno));
    }
    if (n == 2 && fds[1].revents != 0) return {WSYNC_ERR_ABORTED, "the wait was aborted"};
    if (fds[0].revents != 0) return Status::ok();
    if (SteadyClock::now() >= deadline) return timeoutError("timed out waiting on a socket");
  }
}

Result<size_t> sendSome(int fd, const iovec* iov, int iovcnt) {
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(iov);
  msg.msg_iovlen = static_cast<size_t>(iovcnt);
  for (;;) {
    const ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno == EINTR) continue;
    if (wouldBlock(errno) || errno == ENOBUFS) return size_t{0};
    switch (errno) {
      case EPIPE:
      case ECONNRESET:
      case ENOTCONN:
      case ETIMEDOUT:
      case EHOSTUNREACH:
      case ENETUNREACH:
        return remoteError("the peer " + peerName(fd) + " is gone: " + errnoText(errno));
      default:
        return systemError("send to " + peerName(fd) + " failed: " + errnoText(errno));
    }
  }
}

Status sendAll(int fd, iovec* iov, int iovcnt, std::chrono::milliseconds stall_timeout, int wake_fd,
               size_t* written) {
  size_t total = 0;
  if (written != nullptr) *written = 0;
  // Skip leading empty buffers so the loop below sees only bytes still to write.
  while (iovcnt > 0 && iov->iov_len == 0) {
    ++iov;
    --iovcnt;
  }
  while (iovcnt > 0) {
    Result<size_t> sent = sendSome(fd, iov, iovcnt);
    if (!sent.isOk()) return sent.status();
    size_t n = *sent;
    if (n == 0) {
      Status waited = waitFd(fd, POLLOUT, SteadyClock::now() + stall_timeout, wake_fd);
      if (waited.code() == WSYNC_ERR_TIMEOUT) {
        return timeoutError("the peer " + peerName(fd) + " accepted no data for " +
                            std::to_string(stall_timeout.count()) + " ms (" +
                            std::to_string(total) + " bytes of this frame written)");
      }
      WSYNC_RETURN_IF_ERROR(waited);
      continue;
    }
    total += n;
    if (written != nullptr) *written = total;
    while (iovcnt > 0 && n >= iov->iov_len) {
      n -= iov->iov_len;
      ++iov;
      --iovcnt;
    }
    if (iovcnt > 0) {
      iov->iov_base = static_cast<uint8_t*>(iov->iov_base) + n;
      iov->iov_len -= n;
    }
  }
  return Status::ok();
}

Status randomBytes(void* buf, size_t size) {
  auto* p = static_cast<uint8_t*>(buf);
  while (size > 0) {
    const ssize_t n = ::getrandom(p, size, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return systemError("getrandom failed: " + errnoText(errno));
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return Status::ok();
}

}  // namespace wsync
