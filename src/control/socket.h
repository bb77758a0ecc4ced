// TCP plumbing for the control plane: an RAII file descriptor, listen/accept/connect, and
// poll-based waits that always have a deadline and can be woken by a WakeFd.
// Contract: every socket made here is nonblocking and close-on-exec; every send uses MSG_NOSIGNAL,
// so a peer that went away yields an error (REMOTE), never SIGPIPE. Nothing here blocks past the
// deadline it is given, except name resolution (getaddrinfo), which the OS bounds.
#pragma once

#include <sys/uio.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace wsync {

using SteadyClock = std::chrono::steady_clock;

// Owns one file descriptor; closes it on destruction. Move-only. Not thread-safe.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// An eventfd used to wake a poll() from another thread. notify() is thread-safe and
// async-signal-safe; the fd stays readable until drain().
class WakeFd {
 public:
  static Result<WakeFd> create();
  int fd() const { return fd_.get(); }
  void notify() const;
  void drain() const;

 private:
  Fd fd_;
};

// Milliseconds from now until `deadline`, clamped to [0, INT_MAX], rounded up; for poll().
int pollTimeoutMs(SteadyClock::time_point deadline);

// A listening socket bound to bind_host:port (port 0: the OS picks one; bind_host "" or "0.0.0.0":
// all IPv4 interfaces). SO_REUSEADDR is set. SYSTEM when resolution, bind or listen fails.
Result<Fd> tcpListen(const std::string& bind_host, uint16_t port, int backlog = 512);

// The local port a socket is bound to.
Result<uint16_t> localPort(int fd);

// "address:port" of the socket's peer, or "<unknown peer>"; for error messages.
std::string peerName(int fd);
// The socket peer's address alone ("10.0.0.7", "::1"), or "<unknown peer>": the unit per-peer
// limits count by.
std::string peerAddress(int fd);

// One connection attempt to host:port that gives up at `deadline`. The socket comes back
// nonblocking with TCP_NODELAY. REMOTE when refused or unreachable (worth retrying), TIMEOUT at the
// deadline, SYSTEM for anything else.
Result<Fd> tcpConnect(const std::string& host, uint16_t port, SteadyClock::time_point deadline);

// Accepts one pending connection on a nonblocking listening socket. An invalid Fd when none is
// pending. The new socket is nonblocking with TCP_NODELAY. SYSTEM on failure (e.g. EMFILE).
Result<Fd> tcpAccept(int listen_fd);

// Waits until `fd` has any of `events` (POLLIN/POLLOUT; errors and hang-ups count as ready).
// TIMEOUT at the deadline; ABORTED when wake_fd (if >= 0) becomes readable. Until `spin_until`
// it polls without sleeping (yielding between polls), then blocks in poll().
Status waitFd(int fd, short events, SteadyClock::time_point deadline, int wake_fd,
              SteadyClock::time_point spin_until = {});

// Writes all bytes of iov[0..iovcnt) to a nonblocking socket, polling when the socket is full.
// Fails with TIMEOUT when no byte could be written for `stall_timeout` (the clock restarts at
// every progress), ABORTED when wake_fd becomes readable, REMOTE when the peer is gone. `*written`
// (if not null) gets the number of bytes written, also on failure. Modifies iov.
Status sendAll(int fd, iovec* iov, int iovcnt, std::chrono::milliseconds stall_timeout, int wake_fd,
               size_t* written);

// One nonblocking sendmsg(MSG_NOSIGNAL) of iov[0..iovcnt). Returns the bytes written (0 when the
// socket is full), REMOTE when the peer is gone, SYSTEM otherwise.
Result<size_t> sendSome(int fd, const iovec* iov, int iovcnt);

// Fills `buf` with cryptographically random bytes (getrandom). SYSTEM on failure.
Status randomBytes(void* buf, size_t size);

}  // namespace wsync
