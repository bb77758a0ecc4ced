#include "runtime/publish_queue.h"

#include <string>
#include <utility>

namespace wsync {

Result<std::shared_ptr<PublishRequest>> PublishQueue::push(uint64_t version, bool snapshot,
                                                           std::chrono::milliseconds timeout,
                                                           const std::function<Status()>& first,
                                                           std::vector<float> scales) {
  std::unique_lock lock(mu_);
  if (version == 0 || version <= last_version_) {
    return invalidUsage("version " + std::to_string(version) +
                        " is not greater than the last published version " +
                        std::to_string(last_version_) + " (versions start at 1 and increase)");
  }
  if (snapshot) {
    // The snapshot may be overwritten only once the previous version left it.
    const bool free = cv_.wait_for(
        lock, timeout, [this] { return (queue_.empty() && !snapshot_busy_) || !healthy().isOk(); });
    WSYNC_RETURN_IF_ERROR(healthy());
    if (!free) {
      return timeoutError("publish " + std::to_string(version) +
                          ": the previous version still occupies the snapshot buffer after " +
                          std::to_string(timeout.count()) + " ms");
    }
  }
  WSYNC_RETURN_IF_ERROR(first());
  if (snapshot) snapshot_busy_ = true;
  auto request = std::make_shared<PublishRequest>(version, std::move(scales));
  last_version_ = version;
  queue_.push_back(request);
  cv_.notify_all();
  return request;
}

std::shared_ptr<PublishRequest> PublishQueue::next(std::chrono::milliseconds idle_period,
                                                   const std::function<void()>& idle) {
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, idle_period, [this] { return stopping_ || !queue_.empty(); })) {
    lock.unlock();
    idle();
    lock.lock();
  }
  return queue_.empty() ? nullptr : queue_.front();
}

void PublishQueue::snapshotFree() {
  {
    std::lock_guard lock(mu_);
    snapshot_busy_ = false;
  }
  cv_.notify_all();
}

void PublishQueue::pop() {
  {
    std::lock_guard lock(mu_);
    queue_.pop_front();
    snapshot_busy_ = false;
  }
  cv_.notify_all();
}

void PublishQueue::drain(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [this] { return queue_.empty() || !healthy().isOk(); });
}

void PublishQueue::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
}

}  // namespace wsync
