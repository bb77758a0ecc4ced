// FrameServer, the handshake: accepting connections, admitting them (per-peer and total limits),
// authenticating them, and refusing the rest (counted and logged, rate-limited). Server thread.
#include <sys/socket.h>

#include <cstdio>
#include <cstring>

#include "common/wire.h"
#include "control/frame_server.h"
#include "control/frame_server_connection.h"

namespace wsync {

using frame_server_internal::describe;
using frame_server_internal::Phase;

namespace {
constexpr auto kAcceptPause = std::chrono::milliseconds(100);  // after EMFILE and the like
constexpr auto kAcceptErrorLogInterval = std::chrono::seconds(5);

// Sends `frame` on a fresh socket without waiting (it is tiny: the socket buffer takes it) and
// closes our side for writing, so the peer reads it before our FIN.
void sendFinalFrame(int fd, std::vector<uint8_t> frame) {
  iovec iov{frame.data(), frame.size()};
  (void)sendSome(fd, &iov, 1);
  ::shutdown(fd, SHUT_WR);
}

std::string milliseconds(std::chrono::milliseconds ms) {
  return std::to_string(ms.count()) + " ms";
}

}  // namespace

void FrameServer::logLine(const std::string& line) {
  if (handlers_.log) handlers_.log(line);
}

void FrameServer::acceptNew() {
  for (int i = 0; i < 64; ++i) {  // bounded per round so connections get served too
    Result<Fd> accepted = tcpAccept(listen_fd_.get());
    const auto now = SteadyClock::now();
    if (!accepted.isOk()) {
      // Out of descriptors and the like: pause accepting (connections wait in the backlog).
      if (now - accept_error_logged_ >= kAcceptErrorLogInterval) {
        accept_error_logged_ = now;
        logLine("control server on port " + std::to_string(port_) + ": " +
                accepted.status().message() + "; pausing accepts");
      }
      accept_paused_until_ = now + kAcceptPause;
      return;
    }
    if (!accepted->valid()) return;
    admit(std::move(accepted).value(), now);
  }
}

void FrameServer::refuseAtAccept(Fd fd, const std::string& address, RefusalReason reason,
                                 const std::string& detail) {
  noteRefusal(reason, address, peerName(fd.get()), detail);  // counted before the peer knows
  sendFinalFrame(fd.get(), control_wire::busyFrame(detail));
}

void FrameServer::admit(Fd fd, SteadyClock::time_point now) {
  std::string address = peerAddress(fd.get());
  if (std::optional<RefusalReason> refused = limiter_.admit(address)) {
    const bool per_peer = *refused == RefusalReason::kPeerLimit;
    refuseAtAccept(
        std::move(fd), address, *refused,
        "busy: " + std::to_string(per_peer ? limiter_.pendingFrom(address) : limiter_.pending()) +
            " connections already in the handshake" +
            (per_peer ? " from " + address + " (max_handshakes_per_peer)" : " (max_handshakes)"));
    return;
  }
  auto owned = std::make_unique<Connection>();
  Connection& c = *owned;
  c.fd = std::move(fd);
  c.peer = peerName(c.fd.get());
  c.address = std::move(address);
  c.accepted = now;
  c.deadline = now + options_.handshake_timeout;
  c.last_write_progress = now;
  c.last_read_progress = now;
  all_.emplace(&c, std::move(owned));
  // From here on the limiter counts c until kill() or the end of its handshake.
  Status nonce = randomBytes(c.server_nonce.data(), c.server_nonce.size());
  if (!nonce.isOk()) {
    kill(c, nonce);
    return;
  }
  c.reader.setLimits(control_wire::kMaxHandshakePayload, control_wire::kFlagHandshake);
  OutFrame hello;
  hello.payload = control_wire::serverHelloFrame(c.server_nonce);
  c.out_bytes = hello.size();
  c.out.push_back(std::move(hello));
  Status flushed = flush(c);
  if (!flushed.isOk()) kill(c, flushed);
}

SteadyClock::time_point FrameServer::handshakeDeadline(const Connection& c) const {
  if (c.reader.totalReceived() == 0) {
    return std::min(c.deadline, c.accepted + options_.idle_handshake_timeout);
  }
  return c.deadline;
}

void FrameServer::checkHandshakeDeadline(Connection& c, SteadyClock::time_point now) {
  if (now < handshakeDeadline(c)) return;
  if (c.reader.totalReceived() == 0 && now < c.deadline) {
    refuse(c, RefusalReason::kIdle,
           "sent nothing for " + milliseconds(options_.idle_handshake_timeout), false);
  } else {
    refuse(c, RefusalReason::kHandshakeTimeout,
           "did not finish the handshake within " + milliseconds(options_.handshake_timeout),
           false);
  }
}

void FrameServer::handleAuth(Connection& c, Frame&& frame) {
  using namespace control_wire;
  ByteReader r(frame.payload);
  uint32_t version = 0;
  Nonce client_nonce{};
  Tag tag{};
  if (frame.type != kClientAuth) {
    refuse(c, RefusalReason::kBadHandshake,
           "expected a client authentication frame, got type " + std::to_string(frame.type), true);
    return;
  }
  if (!r.fixed32(version)) {
    refuse(c, RefusalReason::kBadHandshake,
           "malformed client authentication frame (" + std::to_string(frame.payload.size()) +
               " bytes)",
           true);
    return;
  }
  if (version != kProtocolVersion) {
    refuse(c, RefusalReason::kBadHandshake,
           "client speaks control protocol version " + std::to_string(version) +
               ", this server version " + std::to_string(kProtocolVersion),
           true);
    return;
  }
  if (!r.bytes(client_nonce.data(), client_nonce.size()) || !r.bytes(tag.data(), tag.size()) ||
      !r.atEnd()) {
    refuse(c, RefusalReason::kBadHandshake,
           "malformed client authentication frame (" + std::to_string(frame.payload.size()) +
               " bytes)",
           true);
    return;
  }
  const Tag expected = clientTag(key_, c.server_nonce, client_nonce);
  if (!equalConstantTime(tag.data(), expected.data(), kTagBytes)) {
    refuse(c, RefusalReason::kWrongSecret, "authentication failed (wrong shared secret)", true);
    return;
  }
  OutFrame welcome;
  welcome.payload = welcomeFrame(serverTag(key_, c.server_nonce, client_nonce));
  if (c.out.empty()) c.last_write_progress = SteadyClock::now();
  c.out_bytes += welcome.size();
  c.out_queued.store(true);
  c.out.push_back(std::move(welcome));
  c.reader.setLimits(options_.max_frame_bytes, 0);
  c.phase = Phase::kOpen;
  c.id = next_id_++;
  limiter_.release(c.address);
  {
    std::lock_guard<std::mutex> lock(mu_);
    open_.emplace(c.id, &c);
    issued_ = c.id;
  }
  Status flushed = flush(c);
  if (!flushed.isOk()) {
    // Never announced: drop quietly.
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_.erase(c.id);
    }
    c.dead = true;
    c.fd.reset();
    return;
  }
  if (handlers_.on_connect) {
    try {
      handlers_.on_connect(c.id);
    } catch (...) {
      kill(c, internalError("the on_connect handler threw for " + c.who() + ": " +
                            describe(std::current_exception())));
    }
  }
}

void FrameServer::noteRefusal(RefusalReason reason, const std::string& address,
                              const std::string& peer, const std::string& detail) {
  if (handlers_.on_refused) {
    try {
      handlers_.on_refused(reason);
    } catch (...) {
      // A counter that throws must not take the server down; the refusal still happened.
    }
  }
  refusal_log_.record(reason, address, peer, detail, SteadyClock::now());
}

void FrameServer::refuse(Connection& c, RefusalReason reason, const std::string& detail,
                         bool tell_peer) {
  if (c.dead) return;
  c.refused = true;
  noteRefusal(reason, c.address, c.peer, detail);
  // One best-effort write (the frame is tiny), then close; the connection never reaches handlers.
  if (tell_peer) sendFinalFrame(c.fd.get(), control_wire::refusedFrame(detail));
  kill(c, protocolError(c.who() + ": handshake refused: " + detail));
}

}  // namespace wsync
