// The queue between TrainerContext::publish (the caller's thread) and the publisher thread:
// requests in version order (each above the last), the snapshot's occupancy (snapshot mode: a
// version's copy may be taken only once the previous version's transfer left the snapshot), the
// publisher's idle time and its stop. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "common/status.h"
#include "runtime/publish_request.h"

namespace wsync {

class PublishQueue {
 public:
  // OK, or the failure of the job (then waits end and publishes fail with it).
  using Health = std::function<Status()>;
  explicit PublishQueue(Health health) : health_(std::move(health)) {}

  // Caller's thread, one publish at a time: checks `version` (above the last, which starts at 0),
  // in `snapshot` mode waits up to `timeout` for the snapshot to be free, runs `first` (the
  // snapshot copy, Publish to the coordinator), then queues a request carrying `scales`.
  Result<std::shared_ptr<PublishRequest>> push(uint64_t version, bool snapshot,
                                               std::chrono::milliseconds timeout,
                                               const std::function<Status()>& first,
                                               std::vector<float> scales);

  // Publisher thread: the oldest request (it stays queued until pop()), or null once stopped and
  // empty. While there is none, `idle` runs every `idle_period` (without the lock).
  std::shared_ptr<PublishRequest> next(std::chrono::milliseconds idle_period,
                                       const std::function<void()>& idle);
  // The version in flight left the snapshot: the next publish may copy into it.
  void snapshotFree();
  // The oldest request is done (its snapshot is free too).
  void pop();

  // Waits up to `timeout` until every request is done or the job failed.
  void drain(std::chrono::milliseconds timeout);
  // next() returns null once the queue is empty.
  void stop();
  // The job failed or was aborted: waiters look again.
  void wake() { cv_.notify_all(); }

 private:
  Status healthy() const { return health_(); }

  const Health health_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<PublishRequest>> queue_;
  bool stopping_ = false;
  bool snapshot_busy_ = false;  // the snapshot is being sent
  uint64_t last_version_ = 0;
};

}  // namespace wsync
