#include "runtime/publish_request.h"

#include <mutex>
#include <string>
#include <utility>

namespace wsync {

Status PublishRequest::test() const {
  std::lock_guard lock(mu_);
  if (!done_) return {WSYNC_IN_PROGRESS, "version " + std::to_string(version_) + " is in flight"};
  return status_;
}

Status PublishRequest::wait(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, timeout, [this] { return done_; })) {
    return timeoutError("version " + std::to_string(version_) + " not delivered within " +
                        std::to_string(timeout.count()) + " ms (still in flight)");
  }
  return status_;
}

void PublishRequest::complete(const Status& status, DeliveredMsg outcome) {
  {
    std::lock_guard lock(mu_);
    if (done_) return;
    done_ = true;
    status_ = status;
    outcome_ = std::move(outcome);
  }
  cv_.notify_all();
}

DeliveredMsg PublishRequest::outcome() const {
  std::lock_guard lock(mu_);
  return outcome_;
}

}  // namespace wsync
