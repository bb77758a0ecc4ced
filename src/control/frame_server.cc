#include "control/frame_server.h"

#include <linux/sockios.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <thread>

#include "common/wire.h"
#include "control/frame_server_connection.h"

namespace wsync {

using frame_server_internal::describe;
using frame_server_internal::Phase;

namespace {

constexpr size_t kReadBudgetBytes = 4 << 20;  // per connection per poll round: fairness
constexpr int kMaxIovecs = 64;
constexpr auto kLinger = std::chrono::milliseconds(2000);  // longest wait for our FIN's ack
constexpr auto kDrainPoll = std::chrono::milliseconds(5);  // how often a closing socket is checked

// True when the peer has acknowledged every byte we sent (and our FIN): closing now cannot lose
// data, even if the peer's unread bytes make our close() send a reset.
bool allAcknowledged(int fd) {
  int unacked = 0;
  return ::ioctl(fd, SIOCOUTQ, &unacked) != 0 || unacked <= 0;
}

}  // namespace

// ---- public API ------------------------------------------------------------------------------

Status FrameServer::frameTooLarge(ConnectionId id, uint16_t type, size_t size) const {
  return invalidArgument("frame of type " + std::to_string(type) + " for connection " +
                         std::to_string(id) + " has " + std::to_string(size) +
                         " bytes, above max_frame_bytes " +
                         std::to_string(options_.max_frame_bytes));
}

Result<std::unique_ptr<FrameServer>> FrameServer::start(const std::string& bind_host, uint16_t port,
                                                        const ControlOptions& options,
                                                        FrameServerHandlers handlers) {
  if (options.secret.empty()) {
    return invalidArgument("FrameServer on " + bind_host + ":" + std::to_string(port) +
                           ": ControlOptions.secret is empty");
  }
  if (options.max_frame_bytes > control_wire::kMaxFrameLimit) {
    return invalidArgument("FrameServer: max_frame_bytes " +
                           std::to_string(options.max_frame_bytes) +
                           " exceeds the 32-bit frame length field");
  }
  WSYNC_ASSIGN_OR_RETURN(Fd listen_fd, tcpListen(bind_host, port));
  WSYNC_ASSIGN_OR_RETURN(uint16_t bound, localPort(listen_fd.get()));
  WSYNC_ASSIGN_OR_RETURN(WakeFd wake, WakeFd::create());
  std::unique_ptr<FrameServer> server(
      new FrameServer(std::move(listen_fd), bound, std::move(wake), options, std::move(handlers)));
  server->thread_ = std::thread([s = server.get()] { s->run(); });
  return server;
}

FrameServer::FrameServer(Fd listen_fd, uint16_t port, WakeFd wake, const ControlOptions& options,
                         FrameServerHandlers handlers)
    : listen_fd_(std::move(listen_fd)),
      port_(port),
      wake_(std::move(wake)),
      options_(options),
      key_(control_wire::deriveAuthKey(options.secret)),
      handlers_(std::move(handlers)),
      limiter_(options.max_handshakes_per_peer, options.max_handshakes),
      refusal_log_(handlers_.log, "control server on port " + std::to_string(port)) {}

FrameServer::~FrameServer() {
  stop();
  // Destroyed from one of its own handlers (a contract violation): do not self-join.
  if (thread_.joinable()) thread_.detach();
}

Status FrameServer::send(ConnectionId id, uint16_t type, const std::vector<uint8_t>& payload) {
  if (payload.size() > options_.max_frame_bytes) return frameTooLarge(id, type, payload.size());
  return send(id, type, std::vector<uint8_t>(payload));
}

Status FrameServer::send(ConnectionId id, uint16_t type, std::vector<uint8_t>&& payload) {
  if (payload.size() > options_.max_frame_bytes) return frameTooLarge(id, type, payload.size());
  OutFrame frame;
  frame.header = control_wire::encodeHeader(type, 0, static_cast<uint32_t>(payload.size()));
  frame.header_len = control_wire::kHeaderBytes;
  frame.payload = std::move(payload);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return {WSYNC_ERR_ABORTED, "the control server was stopped"};
    auto it = open_.find(id);
    if (it == open_.end() || it->second->close_requested) {
      if (id == 0 || id > issued_) {
        return invalidArgument("send: no control connection " + std::to_string(id));
      }
      return remoteError("send: control connection " + std::to_string(id) + " is closed");
    }
    Connection& c = *it->second;
    if (c.pending.empty() && !c.out_queued.load()) {
      // Nothing queued before it: write it now, without a wake-up of the server thread (a
      // frame the socket takes only in part is finished by that thread; a failed write is
      // left to it too, which sees the connection fail).
      iovec iov[2] = {{frame.header.data(), frame.header_len},
                      {frame.payload.data(), frame.payload.size()}};
      Result<size_t> sent = sendSome(c.fd.get(), iov, 2);
      if (sent.isOk() && *sent == frame.size()) return Status::ok();
      if (sent.isOk()) frame.offset = *sent;
    }
    c.pending.push_back(std::move(frame));
    if (!c.dirty) {
      c.dirty = true;
      dirty_.push_back(id);
    }
  }
  wake_.notify();
  return Status::ok();
}

void FrameServer::close(ConnectionId id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = open_.find(id);
    if (it == open_.end() || it->second->close_requested) return;
    Connection& c = *it->second;
    c.close_requested = true;
    c.close_flag.store(true);
    if (!c.dirty) {
      c.dirty = true;
      dirty_.push_back(id);
    }
  }
  wake_.notify();
}

void FrameServer::stop() {
  stop(std::chrono::milliseconds(0));
}

void FrameServer::stop(std::chrono::milliseconds drain_timeout) {
  drain_until_.store((SteadyClock::now() + drain_timeout).time_since_epoch().count());
  stop_requested_.store(true);
  wake_.notify();
  if (std::this_thread::get_id() == loop_id_.load()) return;  // from a handler: no self-join
  std::lock_guard<std::mutex> lock(stop_mu_);
  if (thread_.joinable()) thread_.join();
}

// ---- server thread ---------------------------------------------------------------------------

void FrameServer::callOnClose(ConnectionId id, const Status& status) {
  if (!handlers_.on_close) return;
  try {
    handlers_.on_close(id, status);
  } catch (...) {
    logLine("control server on port " + std::to_string(port_) + ": on_close(" + std::to_string(id) +
            ") threw: " + describe(std::current_exception()));
  }
}

void FrameServer::run() {
  loop_id_.store(std::this_thread::get_id());
  std::vector<pollfd> fds;
  std::vector<Connection*> owners;
  while (true) {
    applyRequests();
    if (stop_requested_.load()) {
      const SteadyClock::time_point drain_until{SteadyClock::duration(drain_until_.load())};
      if (!hasQueuedOutput() || SteadyClock::now() >= drain_until) break;
    }

    fds.clear();
    owners.clear();
    fds.push_back({wake_.fd(), POLLIN, 0});
    const bool accepting = SteadyClock::now() >= accept_paused_until_;
    fds.push_back({accepting ? listen_fd_.get() : -1, POLLIN, 0});
    for (auto& [ptr, owned] : all_) {
      Connection& c = *ptr;
      short events = POLLIN;
      if (!c.out.empty()) events |= POLLOUT;
      fds.push_back({c.fd.get(), events, 0});
      owners.push_back(&c);
    }

    const bool spinning =
        SteadyClock::now() < SteadyClock::time_point(SteadyClock::duration(spin_until_.load()));
    const int timeout = spinning ? 0 : std::min(pollTimeoutMs(nextDeadline()), 1000);
    const int rc = ::poll(fds.data(), fds.size(), timeout);
    if (rc == 0 && spinning) std::this_thread::yield();
    if (rc < 0 && errno != EINTR) {
      logLine("control server on port " + std::to_string(port_) +
              ": poll failed: " + std::strerror(errno) + "; stopping");
      break;
    }
    if (rc > 0) {
      if (fds[0].revents != 0) wake_.drain();
      if (fds[1].revents != 0) acceptNew();
      for (size_t i = 0; i < owners.size(); ++i) {
        if (fds[i + 2].revents != 0 && !owners[i]->dead) service(*owners[i], fds[i + 2].revents);
      }
    }
    checkDeadlines(SteadyClock::now());
    refusal_log_.tick(SteadyClock::now());
    for (auto it = all_.begin(); it != all_.end();) {
      it = it->second->dead ? all_.erase(it) : std::next(it);
    }
  }

  // Stopping: tell the owner about every open connection, then close everything.
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
  }
  for (auto& [ptr, owned] : all_) {
    if (!ptr->dead) kill(*ptr, {WSYNC_ERR_ABORTED, "the control server was stopped"});
  }
  all_.clear();
}

bool FrameServer::hasQueuedOutput() const {
  for (const auto& [ptr, owned] : all_)
    if (!ptr->dead && !ptr->out.empty()) return true;
  return false;
}

void FrameServer::applyRequests() {
  std::vector<Connection*> to_close;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (ConnectionId id : dirty_) {
      auto it = open_.find(id);
      if (it == open_.end()) continue;
      Connection& c = *it->second;
      c.dirty = false;
      if (!c.pending.empty()) {
        if (c.out.empty()) c.last_write_progress = SteadyClock::now();
        c.out_queued.store(true);
        for (OutFrame& f : c.pending) {
          c.out_bytes += f.size() - f.offset;  // a frame send() began has offset > 0
          c.out.push_back(std::move(f));
        }
        c.pending.clear();
      }
      if (c.close_requested) to_close.push_back(&c);
    }
    dirty_.clear();
  }
  for (Connection* c : to_close)
    beginDrain(*c);
}

void FrameServer::service(Connection& c, short revents) {
  if ((revents & POLLOUT) != 0 || ((revents & (POLLERR | POLLHUP)) != 0 && !c.out.empty())) {
    Status flushed = flush(c);
    if (!flushed.isOk()) {
      kill(c, flushed);
      return;
    }
  }
  if ((revents & (POLLIN | POLLHUP | POLLERR)) != 0 && !c.dead) readFrames(c);
}

Status FrameServer::flush(Connection& c) {
  iovec iov[kMaxIovecs];
  while (!c.out.empty()) {
    int n = 0;
    for (auto it = c.out.begin(); it != c.out.end() && n + 2 <= kMaxIovecs; ++it) {
      size_t skip = it->offset;
      if (skip < it->header_len) {
        iov[n++] = {it->header.data() + skip, it->header_len - skip};
        skip = 0;
      } else {
        skip -= it->header_len;
      }
      if (skip < it->payload.size())
        iov[n++] = {it->payload.data() + skip, it->payload.size() - skip};
    }
    Result<size_t> sent = sendSome(c.fd.get(), iov, n);
    if (!sent.isOk()) return sent.status().withContext(c.who());
    size_t left = *sent;
    if (left == 0) return Status::ok();  // socket full: wait for POLLOUT
    c.last_write_progress = SteadyClock::now();
    c.out_bytes -= left;
    while (left > 0) {
      OutFrame& f = c.out.front();
      const size_t rest = f.size() - f.offset;
      if (left >= rest) {
        left -= rest;
        c.out.pop_front();
      } else {
        f.offset += left;
        left = 0;
      }
    }
  }
  c.out_queued.store(false);  // all written: send() may write directly again
  if (c.phase == Phase::kDraining && !c.fin_sent) {
    ::shutdown(c.fd.get(), SHUT_WR);
    c.fin_sent = true;
    c.deadline = std::min(c.deadline, SteadyClock::now() + kLinger);
  }
  return Status::ok();
}

void FrameServer::readFrames(Connection& c) {
  if (c.phase == Phase::kDraining) {
    // Discard whatever comes: we only wait until our bytes are acknowledged or the peer's FIN.
    uint8_t scratch[16 << 10];
    for (size_t total = 0; total < kReadBudgetBytes;) {
      const ssize_t n = ::recv(c.fd.get(), scratch, sizeof(scratch), MSG_DONTWAIT);
      if (n > 0) {
        total += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      kill(c, Status::ok());
      return;
    }
    return;
  }
  const uint64_t start = c.reader.totalReceived();
  while (!c.dead && c.phase != Phase::kDraining) {
    // Past the budget the reader still hands out frames it already holds (the socket may have
    // no more bytes, so poll would not bring us back), but reads nothing new.
    const uint64_t used = c.reader.totalReceived() - start;
    const size_t budget = used >= kReadBudgetBytes ? 0 : kReadBudgetBytes - used;
    Frame frame;
    Result<control_wire::FrameReader::Event> event =
        c.reader.read(c.fd.get(), c.who(), &frame, budget);
    if (c.reader.totalReceived() != start) c.last_read_progress = SteadyClock::now();
    if (!event.isOk()) {
      if (c.phase == Phase::kAwaitAuth) {
        // A PROTOCOL error is garbage, a truncated or oversized frame: say so; a reset is the
        // client giving up.
        const bool garbage = event.status().code() == WSYNC_ERR_PROTOCOL;
        refuse(c, garbage ? RefusalReason::kBadHandshake : RefusalReason::kAbandoned,
               event.status().message(), garbage);
      } else {
        kill(c, event.status());
      }
      return;
    }
    if (*event == control_wire::FrameReader::Event::kAgain) return;
    if (*event == control_wire::FrameReader::Event::kClosed) {
      if (c.phase == Phase::kAwaitAuth) {
        refuse(c, RefusalReason::kAbandoned, "closed the connection", false);
      } else {
        kill(c, remoteError(c.who() + " closed the connection"));
      }
      return;
    }
    if (c.phase == Phase::kAwaitAuth) {
      handleAuth(c, std::move(frame));
      continue;
    }
    if (c.close_flag.load()) return;  // close() requested: no more frames for the owner
    if (!handlers_.on_frame) continue;
    try {
      handlers_.on_frame(c.id, std::move(frame));
    } catch (...) {
      kill(c, internalError("the on_frame handler threw for " + c.who() + ": " +
                            describe(std::current_exception())));
      return;
    }
  }
}

void FrameServer::beginDrain(Connection& c) {
  if (c.dead || c.phase != Phase::kOpen) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    open_.erase(c.id);
  }
  c.phase = Phase::kDraining;
  c.deadline = SteadyClock::now() + options_.io_timeout;
  callOnClose(c.id, {WSYNC_ERR_ABORTED, c.who() + " was closed by this side"});
  if (c.out.empty()) {
    Status flushed = flush(c);  // sends our FIN
    if (!flushed.isOk()) kill(c, flushed);
  }
}

void FrameServer::kill(Connection& c, const Status& status) {
  if (c.dead) return;
  c.dead = true;
  if (c.phase == Phase::kAwaitAuth) {
    limiter_.release(c.address);
    // Ended by the peer (closed, reset) unless refused, or by stop().
    if (!c.refused && status.code() != WSYNC_ERR_ABORTED) {
      c.refused = true;
      noteRefusal(RefusalReason::kAbandoned, c.address, c.peer, status.message());
    }
  }
  const bool announce = c.phase == Phase::kOpen;
  if (announce) {
    std::lock_guard<std::mutex> lock(mu_);
    open_.erase(c.id);
  }
  c.fd.reset();
  c.out.clear();
  if (announce) callOnClose(c.id, status);
}

SteadyClock::time_point FrameServer::nextDeadline() const {
  auto next = SteadyClock::now() + std::chrono::hours(1);
  if (SteadyClock::now() < accept_paused_until_) next = std::min(next, accept_paused_until_);
  if (auto summary = refusal_log_.nextDue()) next = std::min(next, *summary);
  for (const auto& [ptr, owned] : all_) {
    const Connection& c = *ptr;
    if (c.dead) continue;
    if (c.phase == Phase::kAwaitAuth) next = std::min(next, handshakeDeadline(c));
    if (c.phase == Phase::kDraining) next = std::min(next, c.deadline);
    if (c.phase == Phase::kDraining && c.fin_sent)
      next = std::min(next, SteadyClock::now() + kDrainPoll);
    if (!c.out.empty()) next = std::min(next, c.last_write_progress + options_.io_timeout);
    if (c.phase == Phase::kOpen && c.reader.midFrame()) {
      next = std::min(next, c.last_read_progress + options_.io_timeout);
    }
  }
  return next;
}

void FrameServer::checkDeadlines(SteadyClock::time_point now) {
  for (auto& [ptr, owned] : all_) {
    Connection& c = *ptr;
    if (c.dead) continue;
    const auto io_ms = std::to_string(options_.io_timeout.count());
    if (c.phase == Phase::kAwaitAuth) {
      checkHandshakeDeadline(c, now);
    } else if (c.phase == Phase::kDraining &&
               (now >= c.deadline || (c.fin_sent && allAcknowledged(c.fd.get())))) {
      kill(c, Status::ok());
    } else if (!c.out.empty() && now >= c.last_write_progress + options_.io_timeout) {
      kill(c, timeoutError(c.who() + " read nothing for " + io_ms + " ms with " +
                           std::to_string(c.out_bytes) + " bytes queued for it"));
    } else if (c.phase == Phase::kOpen && c.reader.midFrame() &&
               now >= c.last_read_progress + options_.io_timeout) {
      kill(c,
           timeoutError(c.who() + " sent part of a frame and then nothing for " + io_ms + " ms"));
    }
  }
}

}  // namespace wsync
