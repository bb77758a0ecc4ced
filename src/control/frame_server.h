// FrameServer: the listening side of the control-plane transport (see frame_channel.h for the wire
// format and handshake). One internal thread polls the listening socket and every connection;
// sockets are nonblocking and each connection has its own output queue, flushed when the socket
// is writable, so a slow or stuck peer (or a frame of hundreds of MB) never stalls the others.
//
// Robustness against hostile or broken peers:
//  - a connection must send its first byte within idle_handshake_timeout and finish the handshake
//    within handshake_timeout, with frames of at most control_wire::kMaxHandshakePayload bytes;
//    otherwise it is dropped and never reaches handlers. One peer address may have at most
//    max_handshakes_per_peer connections in the handshake, all together at most max_handshakes;
//    a connection over either limit gets kBusy and is closed at once (clients retry), so a host
//    that floods the port never locks out the others. A connection in the handshake holds about
//    2 KiB (its state, a 524-byte read stage, two empty queues), so all of them at most ~1 MiB
//    by default. Every refusal is counted by reason and logged through handlers.log,
//    rate-limited (see handshake_admission.h).
//  - after the handshake, a frame over max_frame_bytes or with a bad header closes the connection
//    (on_close with PROTOCOL); payload memory grows only as bytes arrive.
//  - a connection that stops mid-frame, or stops reading what is queued for it, for io_timeout is
//    closed (on_close with TIMEOUT). Output queues are otherwise unbounded: the owner decides what
//    to send.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "control/frame_channel.h"
#include "control/handshake_admission.h"
#include "control/socket.h"

namespace wsync {

using ConnectionId = uint64_t;  // 1, 2, 3, ... in handshake order; never reused by one server

struct FrameServerHandlers {
  std::function<void(ConnectionId)> on_connect;  // after a successful handshake
  std::function<void(ConnectionId, Frame&&)> on_frame;
  // Called exactly once per connection that reached on_connect: REMOTE (peer closed or reset),
  // PROTOCOL (malformed frame), TIMEOUT (stalled), ABORTED (close() or stop()), SYSTEM.
  std::function<void(ConnectionId, const Status&)> on_close;
  // Refused connections (never announced to the handlers above), on the server thread:
  // on_refused for every one (counters), `log` for a rate-limited few plus periodic summaries
  // (RefusalLog), and for the server's own troubles (accept failing). Either may be empty; with
  // no `log`, nothing is printed.
  std::function<void(RefusalReason)> on_refused;
  std::function<void(const std::string&)> log;
};

// Listens and serves many connections from ONE internal thread (poll over all sockets). Handlers
// run on that thread, one at a time, and must not block for long. send() and close() are
// thread-safe and may be called from handlers. A connection that fails the handshake (wrong
// secret, garbage, too slow) is dropped and never reaches the handlers. A handler that throws
// closes its connection (INTERNAL); the server keeps serving.
class FrameServer {
 public:
  // Binds bind_host:port (port 0: ephemeral; see port()) and starts the thread. INVALID_ARGUMENT
  // for an empty secret; SYSTEM when the address cannot be bound.
  static Result<std::unique_ptr<FrameServer>> start(const std::string& bind_host, uint16_t port,
                                                    const ControlOptions& options,
                                                    FrameServerHandlers handlers);
  ~FrameServer();  // calls stop()
  FrameServer(const FrameServer&) = delete;
  FrameServer& operator=(const FrameServer&) = delete;

  uint16_t port() const { return port_; }
  // Connections refused so far, by reason. Thread-safe.
  RefusalCounts refusals() const { return refusal_log_.counts(); }

  // Sends one frame to connection `id` without blocking: written into the socket at once when
  // nothing is queued for it and the socket takes it, else queued for the server thread. Frames
  // to one connection go out in the order of send() calls. INVALID_ARGUMENT for an unknown
  // id or a payload above max_frame_bytes; REMOTE when the connection has closed; ABORTED after
  // stop(). The rvalue overload avoids copying the payload.
  Status send(ConnectionId id, uint16_t type, const std::vector<uint8_t>& payload);
  Status send(ConnectionId id, uint16_t type, std::vector<uint8_t>&& payload);

  // Closes connection `id`: frames already queued are still flushed (for up to io_timeout), later
  // sends fail, no more on_frame; on_close(id, ABORTED) follows on the server thread. No-op for an
  // unknown or already closed id.
  void close(ConnectionId id);

  // Closes every connection (on_close(ABORTED) for each open one, on the server thread) and joins
  // the thread. Idempotent. From a handler it only requests the stop; the destructor joins.
  void stop();
  // Like stop(), after flushing what is queued for every connection (frames sent before this
  // call), for at most `drain_timeout`: so that a final Error reaches the peers.
  void stop(std::chrono::milliseconds drain_timeout);

  // Busy polling: until `until` the loop polls without sleeping (yielding between polls), so that
  // frames and send requests are served at once instead of after a wake-up. The owner sets it
  // while latency matters (the coordinator: while a version is in flight). Thread-safe.
  void spinUntil(SteadyClock::time_point until) {
    spin_until_.store(until.time_since_epoch().count());
  }

 private:
  struct Connection;
  struct OutFrame;

  FrameServer(Fd listen_fd, uint16_t port, WakeFd wake, const ControlOptions& options,
              FrameServerHandlers handlers);
  void run();
  void applyRequests();
  void acceptNew();
  void service(Connection& c, short revents);
  void readFrames(Connection& c);
  Status flush(Connection& c);
  // The handshake (frame_server_handshake.cc).
  void admit(Fd fd, SteadyClock::time_point now);
  void refuseAtAccept(Fd fd, const std::string& address, RefusalReason reason,
                      const std::string& detail);
  void handleAuth(Connection& c, Frame&& frame);
  // Ends a connection in the handshake: counts and logs the refusal, tells the peer `detail`
  // (a kRefused frame) when `tell_peer`, and closes it.
  void refuse(Connection& c, RefusalReason reason, const std::string& detail, bool tell_peer);
  // Counts (on_refused, refusals()) and maybe logs one refused connection.
  void noteRefusal(RefusalReason reason, const std::string& address, const std::string& peer,
                   const std::string& detail);
  void checkHandshakeDeadline(Connection& c, SteadyClock::time_point now);
  SteadyClock::time_point handshakeDeadline(const Connection& c) const;
  void logLine(const std::string& line);
  void beginDrain(Connection& c);
  void kill(Connection& c, const Status& status);
  void checkDeadlines(SteadyClock::time_point now);
  SteadyClock::time_point nextDeadline() const;
  void callOnClose(ConnectionId id, const Status& status);
  Status frameTooLarge(ConnectionId id, uint16_t type, size_t size) const;

  Fd listen_fd_;
  const uint16_t port_;
  WakeFd wake_;
  const ControlOptions options_;
  const control_wire::AuthKey key_;
  FrameServerHandlers handlers_;

  // Server-thread only.
  std::unordered_map<Connection*, std::unique_ptr<Connection>> all_;
  HandshakeLimiter limiter_;
  RefusalLog refusal_log_;  // counts() from any thread
  SteadyClock::time_point accept_error_logged_{};
  ConnectionId next_id_ = 1;
  SteadyClock::time_point accept_paused_until_{};

  // Guarded by mu_: the open connections (as seen by send/close) and their request queues.
  std::mutex mu_;
  std::unordered_map<ConnectionId, Connection*> open_;
  std::vector<ConnectionId> dirty_;  // open connections with queued frames or a close request
  ConnectionId issued_ = 0;          // highest id handed out
  bool stopped_ = false;

  std::atomic<bool> stop_requested_{false};
  std::atomic<SteadyClock::rep> spin_until_{0};  // see spinUntil()
  std::atomic<SteadyClock::rep> drain_until_{
      0};  // stop(drain): flush until then (time_since_epoch)
  bool hasQueuedOutput() const;
  std::atomic<std::thread::id> loop_id_{};
  std::mutex stop_mu_;  // serializes joins
  std::thread thread_;
};

}  // namespace wsync
