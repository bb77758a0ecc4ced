// TrainerContext: publishes versions of the trainer's buffers. publish() queues a request; one
// publisher thread runs them in order: Publish -> (coordinator) Go -> broadcasts and one-sided
// writes -> flush -> Sent -> Delivered, which completes the request and says which replicas took
// the version. The publisher thread also applies membership news between versions (and polls for
// it while idle): a dropped replica is written no more; a joining replica's plan extension
// connects its ranks and adds its writes (src/runtime/trainer_membership.cc).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "runtime/context.h"
#include "runtime/device_ops.h"
#include "runtime/trainer_delta.h"
#include "runtime/trainer_quantizer.h"
#include "runtime/version_checksums.h"
#include "runtime/version_stats.h"
#include "transport/backend.h"

namespace wsync {

// An asynchronous publish; shared by the publisher thread and the caller's handle.
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

class TrainerContext final : public Context {
 public:
  explicit TrainerContext(ContextOptions options) : Context(std::move(options)) {}
  ~TrainerContext() override;

  // Queues version `version` (strictly increasing). Snapshot mode copies the buffers first (waiting
  // for the previous version's transfer to leave the staging buffer). Device memory: the version is
  // what `stream` (null: the legacy default stream) has produced when publish is called; in
  // snapshot mode, work the caller enqueues on `stream` afterwards starts after the snapshot copy,
  // and publish returns without waiting for the device.
  Result<std::shared_ptr<PublishRequest>> publish(uint64_t version,
                                                  CudaStreamHandle stream = nullptr);

  // Conversions of tensor `name` (declared on this rank) into float8 compute fp8(x * scale) from
  // the next publish on; `scale` finite and > 0 (1 until set). Other conversions ignore it.
  Status setTensorScale(const std::string& name, float scale);

  // The last delivered version with the coordinator's stats; none before the first (any thread).
  std::optional<DeliveredMsg> lastDelivered() const { return delivered_.last(); }

  void abort() override;
  Status finalize() override;

 private:
  struct ExtensionPart;
  Status prepareRegistration(RegisterMsg& msg) override;
  Status applyPlan(RankPlan plan, PlanAssignmentMsg assignment) override;
  Status startRunning() override;

  void publisherLoop();
  Status publishOne(uint64_t version, DeliveredMsg* outcome);
  void printTiming(const std::string& what, double to_go_ms, double transfer_ms,
                   double to_delivered_ms) const;
  void stopPublisher();
  const uint8_t* sourceOf(int32_t buffer) const;
  bool onDevice() const { return memory_ == MemoryKind::kDevice; }
  // The float8 scale of plan tensor `tensor` for the version being sent.
  float activeScale(int32_t tensor) const {
    const auto t = static_cast<size_t>(tensor);
    return t < active_scales_.size() ? active_scales_[t] : 1.0f;
  }
  uint8_t* stagingAt(size_t offset) const;
  bool replicaTakes(const GoMsg& go, const BroadcastGroup& group) const;
  int32_t slotFor(const GoMsg& go, int32_t rollout) const;

  // Commit, step by step (applyPlan).
  void adoptScales();
  Status sizeConversionStaging();
  Status connectPeers(const std::vector<PeerInfo>& peers);
  Result<WriteTransport*> transportFor(const WriteBackend* backend);
  Status registerSources(WriteTransport& transport);

  // One version, step by step (transfer).
  Status transfer(const GoMsg& go);
  Status convertIntoStaging(const GoMsg& go);
  Status convertWriteAsync(const RankPlan& plan, const WriteOp& op, uint8_t* staged, float scale);
  Status postGroups(const GoMsg& go);
  // Posts `op` of `plan` into `slot` of its rollout; `staged`: where a converting op's region is
  // (to be) converted, packed.
  // `converted`: host memory already converted the op into `staged` for this send.
  Status postWrite(const RankPlan& plan, const WriteOp& op, uint8_t* staged, int32_t slot,
                   bool converted = false);
  // Host memory: converts `op`'s source region into `staged`, packed.
  Status convertHostStaging(const RankPlan& plan, const WriteOp& op, uint8_t* staged) const;
  Status flushWrites();
  Status waitGroups();

  // Membership (trainer_membership.cc). The next frame of type `expected` from the coordinator
  // (frames read while idle first), applying membership frames on the way; Error -> its status.
  // `also`: a second type accepted (the caller reads frame.type).
  Result<Frame> nextFrame(MessageType expected, std::chrono::milliseconds timeout,
                          std::optional<MessageType> also = std::nullopt);
  Status handleMembership(const Frame& frame);
  Status applyExtension(PlanExtensionMsg extension);
  void forgetReplica(const ReplicaMsg& dropped);
  // Publisher thread, no request queued: reads what the coordinator sent (membership news, or a
  // Go that another trainer's publish started, kept for publishOne).
  void pollControlWhileIdle();
  Status sizePartStaging(ExtensionPart& part);
  Status postExtensionWrites(const GoMsg& go);
  Status convertExtensionsIntoStaging(const GoMsg& go);

  // Block-scaled rollout tensors (trainer_quantize.cc): the quantized sources of the job's table;
  // per version, their maxima before Go (PartialMaxima sent, or quantized at once when no block
  // straddles trainers), then Go (after BlockMaxima, with which the rest is quantized).
  Status setUpQuantizer(const PlanAssignmentMsg& assignment);
  Status startQuantizing(uint64_t version);
  Result<GoMsg> awaitGo(uint64_t version);

  // Checksums (trainer_checksums.cc, Welcome::checksums): what this trainer sends, summed per
  // rollout rank; Sent or SentChecksums after each transfer; re-sends until Delivered.
  Status buildChecksums();
  ChecksumSpan sentSpan(const RankPlan& plan, const WriteOp& op, const uint8_t* staged) const;
  Status sendSent(const GoMsg& go);
  Result<DeliveredMsg> awaitDelivered(uint64_t version);
  Status corruptOneWrite(const GoMsg& go);  // WSYNC_DEBUG_CORRUPT_EVERY

  // Delta versions (trainer_delta.cc, runtime/trainer_delta.h): the plan's writes in delta_, each
  // joined replica's (ExtensionPart::delta) in its own state. `staged(i)`: write i's conversion
  // staging in its plan.
  using StagingOf = std::function<uint8_t*(size_t)>;
  Status setupDelta(const RankPlan& plan, const std::vector<PeerInfo>& peers,
                    TrainerDeltaState& state) const;
  static Status attachDeltaLanding(const PeerInfo& p, WriteTransport& transport,
                                   TrainerDeltaState& state);
  Result<const uint8_t*> deltaBytesOf(const RankPlan& plan, TrainerDeltaState& state, size_t write,
                                      uint8_t* staged);
  Status sendDeltas(const GoMsg& go);  // every state's patches (the plan's, then extensions')
  Status sendPartDeltas(const GoMsg& go, const RankPlan& plan, TrainerDeltaState& state,
                        const StagingOf& staged);
  Result<bool> corruptOnePatch(const GoMsg& go);
  Status allocateCorruptByte();  // its source, before the transports exist

  RankPlan plan_;
  std::vector<int32_t> replica_of_rollout_;
  std::vector<int32_t> group_comm_;

  MemoryKind memory_ = MemoryKind::kHost;  // of every buffer of this rank
  DeviceStream stream_;                    // device memory: snapshot copies and conversions
  // The write backends this trainer uses, one transport each, created as peers need them.
  struct Backend {
    const WriteBackend* backend = nullptr;
    std::unique_ptr<WriteTransport> transport;
  };
  std::vector<Backend> transports_;

  struct Peer {
    WriteTransport* transport = nullptr;
    std::vector<RemoteMemoryId> slot_memory;  // per slot
    std::vector<uint64_t> buffer_byte_offsets;
  };
  std::vector<int32_t> peer_of_rollout_;  // rollout rank -> index into peers_, -1 if none
  std::vector<Peer> peers_;
  // Connects `p` (once) and attaches its slots, and its landing area to `delta`'s pair.
  Status connectPeer(const PeerInfo& p, TrainerDeltaState& delta);

  // Replicas that joined the running job: their writes from this trainer, each with its own
  // conversion staging (registered with every transport, like the plan's).
  struct ExtensionPart {
    int32_t replica = -1;
    std::vector<int32_t> ranks;
    RankPlan plan;
    std::vector<size_t> staging_offsets;  // per write
    std::vector<uint8_t> host_staging;
    DeviceBuffer device_staging;
    std::vector<float> scales;  // per plan tensor, from scale_by_name_ at each transfer
    TrainerDeltaState delta;    // delta versions: its writes' kept bytes and landing parts
    bool active = true;         // false once dropped (its staging stays registered)
    uint8_t* stagingAt(size_t offset) {
      return (device_staging.data() != nullptr ? device_staging.data() : host_staging.data()) +
             offset;
    }
  };
  std::vector<std::unique_ptr<ExtensionPart>> extensions_;
  std::deque<Frame> stashed_;  // frames pollControlWhileIdle read for publishOne

  TrainerDeltaState delta_;         // delta versions: kept bytes, landing parts
  VersionChecksums checksums_;      // of plan_'s and the first checksum_extensions_ extensions
  size_t checksum_extensions_ = 0;  // extensions_ that checksums_ covers
  int transfer_attempt_ = 0;        // sends of the version in flight so far (re-sends: > 0)
  // WSYNC_DEBUG_CORRUPT_EVERY: the flipped byte, written from memory the transports know.
  std::vector<uint8_t> corrupt_byte_;
  DeviceBuffer device_corrupt_byte_;

  // float8 scales: by tensor name (set any time), and per plan tensor (after commit).
  std::mutex scale_mu_;
  std::unordered_map<std::string, float> scale_by_name_;
  std::vector<float> plan_scales_;
  std::vector<float> active_scales_;  // the version being sent (publisher thread only)
  TrainerQuantizer quantizer_;        // block-scaled rollout tensors: the float8 values and scales
  // Later Gos of the version in flight (a busy replica's late Go) that arrived before BlockMaxima:
  // sent after the first transfer, in order (awaitDelivered).
  std::vector<GoMsg> held_gos_;
  std::vector<std::unique_ptr<SourceRegistration>> source_registrations_;
  std::vector<uint8_t> snapshot_;              // snapshot mode, host memory: a copy of every buffer
  DeviceBuffer device_snapshot_;               // snapshot mode, device memory
  std::vector<size_t> snapshot_offsets_;       // per buffer, bytes into the snapshot
  std::vector<uint8_t> convert_staging_;       // host: converted bytes of converting ops and groups
  DeviceBuffer device_convert_staging_;        // device: the same
  std::vector<size_t> write_staging_offsets_;  // per plan write: bytes into convert_staging_
  std::vector<size_t> group_staging_offsets_;  // per plan group
  // Broadcast groups (device backends launch on stream_). Declared after the memory it reads and
  // the stream it runs on: it is destroyed (waiting for in-flight work) before them.
  std::unique_ptr<Broadcaster> broadcaster_;

  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<std::shared_ptr<PublishRequest>> queue_;
  bool stopping_ = false;
  bool transfer_busy_ = false;  // the snapshot buffer is being sent
  uint64_t last_version_ = 0;
  DeliveredLog delivered_;
  std::thread publisher_;
};

}  // namespace wsync
