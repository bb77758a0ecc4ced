// TrainerContext: publishes versions of the trainer's buffers. publish() queues a request; one
// publisher thread runs them in order: Publish -> (coordinator) Go -> broadcasts and one-sided
// writes -> flush -> Sent -> Delivered, which completes the request and says which replicas took
// the version. The publisher thread also applies membership news between versions (and polls for
// it while idle): a dropped replica is written no more; a joining replica's plan extension
// connects its ranks and adds its writes.
//
// The context runs the steps; components own their state behind narrow interfaces, each its own
// .h/.cc, testable without sockets: PublishQueue (publish() -> the publisher thread),
// TrainerControl (the coordinator's messages: Go, BlockMaxima,
// Delivered, membership news), TrainerMembership (replicas, plan extensions), TrainerPeers
// (transports, source registrations, connected rollout ranks), ConversionStaging, TensorScales,
// TrainerSources (what sends read: buffers, snapshot), DebugCorruption, TrainerChecksums,
// TrainerQuantizer (block-scaled rollout tensors) and the delta versions' state
// (TrainerDeltaState, trainer_delta.cc).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "runtime/context.h"
#include "runtime/conversion_staging.h"
#include "runtime/debug_corruption.h"
#include "runtime/device_ops.h"
#include "runtime/in_place_quantization.h"
#include "runtime/publish_queue.h"
#include "runtime/publish_request.h"
#include "runtime/tensor_scales.h"
#include "runtime/trainer_checksums.h"
#include "runtime/trainer_control.h"
#include "runtime/trainer_delta.h"
#include "runtime/trainer_membership.h"
#include "runtime/trainer_peers.h"
#include "runtime/trainer_quantizer.h"
#include "runtime/trainer_sources.h"
#include "runtime/version_stats.h"

namespace wsync {

class TrainerContext final : public Context {
 public:
  explicit TrainerContext(ContextOptions options);
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
  Status prepareRegistration(RegisterMsg& msg) override;
  Status applyPlan(RankPlan plan, PlanAssignmentMsg assignment) override;
  Status startRunning() override;
  Status addSources();  // every memory writes read from, to the transports (commit)
  Status connectPeers(const std::vector<PeerInfo>& peers);

  void publisherLoop();
  Status publishOne(uint64_t version, DeliveredMsg* outcome);
  void printTiming(const std::string& what, double to_go_ms, double transfer_ms,
                   double to_delivered_ms) const;
  void stopPublisher();
  bool onDevice() const { return memory_ == MemoryKind::kDevice; }

  // One send of a Go (the version's first, or a re-send), step by step.
  Status transfer(const GoMsg& go);
  Status startQuantizing(uint64_t version);  // block maxima sent, or quantized at once
  // Device memory: conversions of the writes of `plan` whose replica takes `go` into `staging`.
  Status convertWrites(const GoMsg& go, const RankPlan& plan, const ConversionStaging& staging,
                       const std::function<float(int32_t tensor)>& scale_of);
  Status convertIntoStaging(const GoMsg& go);  // device memory: every conversion, then a sync
  Status postGroups(const GoMsg& go);
  Status waitGroups();
  Status quantizeInPlace(const GoMsg& go);  // in place where it can, before the writes
  // The writes of `plan` whose replica takes `go`, except those `delta` sends as patches and those
  // `in_place` (may be null) wrote.
  Status postWrites(const GoMsg& go, const RankPlan& plan, const ConversionStaging& staging,
                    const TrainerDeltaState& delta, const InPlaceQuantization* in_place);
  // Posts `op` of `plan` into `slot` of its rollout; `staged`: where a converting op's region is
  // (to be) converted, packed; `converted`: host memory already converted it for this send.
  Status postWrite(const RankPlan& plan, const WriteOp& op, uint8_t* staged, int32_t slot,
                   bool converted = false);
  Status sendSent(const GoMsg& go);  // Sent, or SentChecksums (TrainerChecksums)
  Status resend(const GoMsg& go);    // a Go of the version in flight after Sent
  Status rebuildChecksums();         // the plan's spans and every extension's

  // Membership news (TrainerControl's handler): a dropped replica, or a joining replica's plan
  // extension connected and set up, answered ExtensionDone.
  Status handleMembership(const Frame& frame);
  Status applyExtension(const PlanExtensionMsg& extension);

  // WSYNC_DEBUG_CORRUPT_EVERY (DebugCorruption): a byte of a write corrupted after the flush.
  Status corruptOneWrite(const GoMsg& go);

  // Delta versions (runtime/trainer_delta.h): the plan's writes' patches (delta_), then each
  // joined replica's (ExtensionPart::delta).
  Status sendDeltas(const GoMsg& go);

  RankPlan plan_;
  std::vector<int32_t> group_comm_;
  MemoryKind memory_ = MemoryKind::kHost;  // of every buffer of this rank
  DeviceStream stream_;                    // device memory: snapshot copies and conversions

  PublishQueue queue_;                // publish() -> the publisher thread
  TrainerControl control_;            // the coordinator's messages (publisher thread)
  TrainerMembership membership_;      // replicas and joined replicas' extensions
  TensorScales scales_;               // float8 scales (any thread)
  std::vector<float> active_scales_;  // per plan tensor, of the version being sent
  TrainerQuantizer quantizer_;        // block-scaled rollout tensors: the float8 values and scales
  // In-place quantization (in_place_quantization.h): eligible (commit); the version's BlockMaxima
  // kept for its sends; the send's in-place sources.
  bool quantize_in_place_ = false;
  std::vector<uint8_t> pending_maxima_;
  InPlaceQuantization in_place_;
  TrainerDeltaState delta_;     // delta versions: kept bytes, landing parts
  TrainerChecksums checksums_;  // of the plan and the extensions it covers
  int transfer_attempt_ = 0;    // sends of the version in flight so far (re-sends: > 0)
  DebugCorruption corruption_;  // WSYNC_DEBUG_CORRUPT_EVERY
  TrainerSources sources_;      // what sends read (buffers, snapshot, quantized sources)
  ConversionStaging staging_;   // the plan's converting writes and groups
  // Transports and connected rollout ranks. Declared after the memory the transports read:
  // deregistered and destroyed before it goes.
  TrainerPeers peers_;
  // Broadcast groups (device backends launch on stream_). Declared after the memory it reads and
  // the stream it runs on: it is destroyed (waiting for in-flight work) before them.
  std::unique_ptr<Broadcaster> broadcaster_;

  DeliveredLog delivered_;
  std::thread publisher_;
};

}  // namespace wsync
