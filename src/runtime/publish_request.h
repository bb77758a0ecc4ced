// PublishRequest: the completion a trainer's wsync_publish returns (TrainerContext::publish),
// shared by the publisher thread, which completes it, and the caller's handle (any thread).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "common/status.h"
#include "protocol/protocol.h"

namespace wsync {

class PublishRequest {
 public:
  // `scales`: per plan tensor, the float8 conversion scale in force when the version was published.
  PublishRequest(uint64_t version, std::vector<float> scales)
      : version_(version), scales_(std::move(scales)) {}
  uint64_t version() const { return version_; }
  const std::vector<float>& scales() const { return scales_; }
  // SUCCESS once delivered, IN_PROGRESS before, or the publish's error.
  Status test() const;
  // Like test(), waiting up to `timeout` (TIMEOUT when still in progress).
  Status wait(std::chrono::milliseconds timeout) const;
  void complete(const Status& status, DeliveredMsg outcome = {});
  // Which replicas took the version, were skipped or lost; set once delivered (SUCCESS).
  DeliveredMsg outcome() const;

 private:
  const uint64_t version_;
  const std::vector<float> scales_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool done_ = false;
  Status status_;
  DeliveredMsg outcome_;
};

}  // namespace wsync
