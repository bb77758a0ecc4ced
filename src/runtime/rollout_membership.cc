#include "runtime/rollout_membership.h"

#include <string>

namespace wsync {

void RolloutMembership::startHeartbeats(std::chrono::milliseconds interval) {
  if (interval.count() <= 0 || heartbeat_.joinable()) return;
  heartbeat_ = std::thread([this, interval] { heartbeatLoop(interval); });
}

void RolloutMembership::heartbeatLoop(std::chrono::milliseconds interval) {
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, interval, [this] { return stopping_; })) {
    lock.unlock();
    const Status s = send_(MessageType::kHeartbeat);
    lock.lock();
    if (!s.isOk()) return;  // the channel is gone; the receiver reports why
  }
}

void RolloutMembership::stopHeartbeats() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
}

void RolloutMembership::onLeft() {
  {
    std::lock_guard lock(mu_);
    left_ = true;
  }
  cv_.notify_all();
}

void RolloutMembership::onReceiverEnded() {
  {
    std::lock_guard lock(mu_);
    receiver_ended_ = true;
  }
  cv_.notify_all();
}

Status RolloutMembership::leave(std::chrono::milliseconds timeout,
                                const std::function<Status()>& failure) {
  WSYNC_RETURN_IF_ERROR(send_(MessageType::kLeave));
  std::unique_lock lock(mu_);
  const bool answered = cv_.wait_for(lock, timeout, [this] { return left_ || receiver_ended_; });
  if (left_) return Status::ok();
  if (!answered) {
    return timeoutError("leaving the job: the coordinator did not answer Leave within " +
                        std::to_string(timeout.count()) + " ms");
  }
  lock.unlock();
  const Status why = failure();
  return why.isOk() ? remoteError("leaving the job: the control channel ended") : why;
}

}  // namespace wsync
