// A rollout rank's part in the running job's membership (docs/membership.md): the heartbeat thread
// that tells the coordinator the rank is alive, and leaving (Leave, answered by Left). No sockets
// of its own: `send` writes one message (no payload) on the control channel.
// Threads: the heartbeat thread sends; the receiver thread reports Left and its own end; the
// finalizing thread leaves and stops the heartbeats. Every method may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "common/status.h"
#include "protocol/protocol.h"

namespace wsync {

class RolloutMembership {
 public:
  using Send = std::function<Status(MessageType type)>;

  explicit RolloutMembership(Send send) : send_(std::move(send)) {}
  ~RolloutMembership() { stopHeartbeats(); }
  RolloutMembership(const RolloutMembership&) = delete;
  RolloutMembership& operator=(const RolloutMembership&) = delete;

  // A Heartbeat every `interval` (> 0; none otherwise) until stopHeartbeats() or a send fails
  // (the channel is gone: the receiver reports why). Once.
  void startHeartbeats(std::chrono::milliseconds interval);
  // Returns once the heartbeat thread ended (at once: it is woken). Idempotent.
  void stopHeartbeats();

  // The receiver thread: the coordinator answered Leave; the receiver returned.
  void onLeft();
  void onReceiverEnded();

  // Sends Leave and waits up to `timeout` for Left: OK once answered; the send's error; TIMEOUT
  // naming the wait; when the receiver ended first, `failure()` (the context's), or REMOTE when
  // that is OK.
  Status leave(std::chrono::milliseconds timeout, const std::function<Status()>& failure);

 private:
  void heartbeatLoop(std::chrono::milliseconds interval);

  Send send_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;        // heartbeats
  bool left_ = false;            // the coordinator answered Leave
  bool receiver_ended_ = false;  // the receiver thread returned
  std::thread heartbeat_;
};

}  // namespace wsync
