// TrainerContext: publishes versions of the trainer's buffers. publish() queues a request; one
// publisher thread runs them in order: Publish -> (coordinator) Go -> broadcasts and one-sided
// writes -> flush -> Sent -> Delivered, which completes the request.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/context.h"
#include "transport/mpi/host_broadcast.h"

namespace wsync {

// An asynchronous publish; shared by the publisher thread and the caller's handle.
class PublishRequest {
 public:
  explicit PublishRequest(uint64_t version) : version_(version) {}
  uint64_t version() const { return version_; }
  // SUCCESS once delivered, IN_PROGRESS before, or the publish's error.
  Status test() const;
  // Like test(), waiting up to `timeout` (TIMEOUT when still in progress).
  Status wait(std::chrono::milliseconds timeout) const;
  void complete(const Status& status);

 private:
  const uint64_t version_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool done_ = false;
  Status status_;
};

class TrainerContext final : public Context {
 public:
  explicit TrainerContext(ContextOptions options) : Context(std::move(options)) {}
  ~TrainerContext() override;

  // Queues version `version` (strictly increasing). Snapshot mode copies the buffers first (waiting
  // for the previous version's transfer to leave the staging buffer).
  Result<std::shared_ptr<PublishRequest>> publish(uint64_t version);

  void abort() override;
  Status finalize() override;

 private:
  Status prepareRegistration(RegisterMsg& msg) override;
  Status applyPlan(RankPlan plan, PlanAssignmentMsg assignment) override;
  Status startRunning() override;

  void publisherLoop();
  Status publishOne(uint64_t version);
  Status transfer(const GoMsg& go);
  void stopPublisher();
  const uint8_t* sourceOf(int32_t buffer) const;

  RankPlan plan_;
  std::vector<int32_t> replica_of_rollout_;
  std::vector<int32_t> group_comm_;
  std::unique_ptr<HostBroadcaster> broadcaster_;

  struct Peer {
    std::vector<RemoteMemoryId> slot_memory;  // per slot
    std::vector<uint64_t> buffer_byte_offsets;
  };
  std::vector<int32_t> peer_of_rollout_;  // rollout rank -> index into peers_, -1 if none
  std::vector<Peer> peers_;

  std::vector<std::unique_ptr<SourceRegistration>> source_registrations_;
  std::vector<uint8_t> snapshot_;              // snapshot mode: a copy of every buffer
  std::vector<size_t> snapshot_offsets_;       // per buffer, bytes into snapshot_
  std::vector<uint8_t> convert_staging_;       // converted bytes of converting ops and groups
  std::vector<size_t> write_staging_offsets_;  // per plan write: bytes into convert_staging_
  std::vector<size_t> group_staging_offsets_;  // per plan group
  int debug_send_delay_ms_ = 0;                // WSYNC_DEBUG_SEND_DELAY_MS, for tests

  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<std::shared_ptr<PublishRequest>> queue_;
  bool stopping_ = false;
  bool transfer_busy_ = false;  // the snapshot buffer is being sent
  uint64_t last_version_ = 0;
  std::thread publisher_;
};

}  // namespace wsync
