// A raw control-plane client for tests: real sockets that speak (or abuse) the wire format of
// control/frame_channel.h byte by byte, from a chosen source address (127.0.0.2, ... stand for
// other hosts on loopback). Every wait is bounded; nothing here uses gtest, so both unit tests and
// the hostile-client program (tests/fault) use it.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "common/status.h"
#include "control/frame_channel.h"
#include "control/socket.h"

namespace wsync::raw_control {

using Ms = std::chrono::milliseconds;

// A nonblocking TCP connection to 127.0.0.1:port (or `host`) from `source` (an IPv4 address of
// this host, e.g. "127.0.0.2"; empty: the OS picks). REMOTE when refused, TIMEOUT past `timeout`.
inline Result<Fd> connectFrom(const std::string& source, uint16_t port, Ms timeout = Ms(2000),
                              const std::string& host = "127.0.0.1") {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return systemError(std::string("socket: ") + std::strerror(errno));
  if (!source.empty()) {
    // The port is chosen at connect(), by the whole 4-tuple: loops of short connections do not
    // run out of ports bound one by one.
    const int one = 1;
    ::setsockopt(fd.get(), IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
    sockaddr_in local{};
    local.sin_family = AF_INET;
    if (::inet_pton(AF_INET, source.c_str(), &local.sin_addr) != 1) {
      return invalidArgument("bad source address " + source);
    }
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&local), sizeof local) != 0) {
      return systemError("bind to " + source + ": " + std::strerror(errno));
    }
  }
  sockaddr_in remote{};
  remote.sin_family = AF_INET;
  remote.sin_port = htons(port);
  if (::inet_pton(AF_INET, host.c_str(), &remote.sin_addr) != 1) {
    return invalidArgument("bad address " + host);
  }
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&remote), sizeof remote) != 0) {
    if (errno != EINPROGRESS) return remoteError(std::string("connect: ") + std::strerror(errno));
    WSYNC_RETURN_IF_ERROR(waitFd(fd.get(), POLLOUT, SteadyClock::now() + timeout, -1));
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return remoteError(std::string("connect: ") + std::strerror(err));
  }
  return fd;
}

inline Status writeAll(int fd, const std::vector<uint8_t>& bytes, Ms timeout = Ms(2000)) {
  iovec iov{const_cast<uint8_t*>(bytes.data()), bytes.size()};
  return sendAll(fd, &iov, 1, timeout, -1, nullptr);
}

// Reads exactly n bytes. REMOTE on EOF or reset, TIMEOUT past `timeout`.
inline Status readExact(int fd, uint8_t* out, size_t n, Ms timeout = Ms(2000)) {
  const auto deadline = SteadyClock::now() + timeout;
  while (n > 0) {
    WSYNC_RETURN_IF_ERROR(waitFd(fd, POLLIN, deadline, -1));
    const ssize_t got = ::recv(fd, out, n, MSG_DONTWAIT);
    if (got == 0) return remoteError("eof");
    if (got < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return remoteError(std::strerror(errno));
    }
    out += got;
    n -= static_cast<size_t>(got);
  }
  return Status::ok();
}

// One whole frame (at most 1 MiB of payload). PROTOCOL for a bad magic or a longer frame.
inline Result<Frame> readRawFrame(int fd, Ms timeout = Ms(2000)) {
  uint8_t h[control_wire::kHeaderBytes];
  WSYNC_RETURN_IF_ERROR(readExact(fd, h, sizeof(h), timeout));
  const control_wire::Header header = control_wire::decodeHeader(h);
  if (header.magic != control_wire::kMagic || header.length > (1u << 20)) {
    return protocolError("bad raw frame");
  }
  Frame f;
  f.type = header.type;
  f.payload.resize(header.length);
  WSYNC_RETURN_IF_ERROR(readExact(fd, f.payload.data(), f.payload.size(), timeout));
  return f;
}

// True when the peer closes the connection (EOF or reset) within `timeout`; data is discarded.
inline bool closedByPeer(int fd, Ms timeout = Ms(3000)) {
  const auto deadline = SteadyClock::now() + timeout;
  uint8_t buf[4096];
  for (;;) {
    if (!waitFd(fd, POLLIN, deadline, -1).isOk()) return false;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0) return true;
    if (n < 0 && errno != EAGAIN && errno != EINTR) return true;  // reset
  }
}

// The client side of the handshake, with `secret`. OK once welcomed; PROTOCOL with the server's
// text when refused (kRefused) or busy (kBusy).
inline Status rawHandshake(int fd, const std::string& secret) {
  using namespace control_wire;
  WSYNC_ASSIGN_OR_RETURN(Frame hello, readRawFrame(fd));
  if (hello.type == kBusy) {
    return protocolError("busy: " + std::string(hello.payload.begin(), hello.payload.end()));
  }
  if (hello.type != kServerHello || hello.payload.size() != 4 + kNonceBytes) {
    return protocolError("unexpected hello");
  }
  Nonce server_nonce{};
  std::memcpy(server_nonce.data(), hello.payload.data() + 4, kNonceBytes);
  Nonce client_nonce{};
  client_nonce.fill(7);
  const AuthKey key = deriveAuthKey(secret);
  WSYNC_RETURN_IF_ERROR(
      writeAll(fd, clientAuthFrame(client_nonce, clientTag(key, server_nonce, client_nonce))));
  WSYNC_ASSIGN_OR_RETURN(Frame reply, readRawFrame(fd));
  if (reply.type == kRefused) {
    return protocolError("refused: " + std::string(reply.payload.begin(), reply.payload.end()));
  }
  const Tag expected = serverTag(key, server_nonce, client_nonce);
  if (reply.type != kWelcome || reply.payload.size() != kTagBytes ||
      std::memcmp(reply.payload.data(), expected.data(), kTagBytes) != 0) {
    return protocolError("not welcomed");
  }
  return Status::ok();
}

}  // namespace wsync::raw_control
