// RolloutContext: receives versions into its slots. Slots are allocated once at commit (through
// the write transport, so trainers write into them one-sidedly); a receiver thread follows the
// coordinator (Prepare: drain leases on the target slot; Go: take part in broadcasts; Ready: make
// the version readable) while readers take leases from any thread. A heartbeat thread tells the
// coordinator this rank is alive (Welcome::heartbeat_interval_ms). finalize() leaves the job
// first: the coordinator takes the replica out at once and answers Left once no trainer writes
// into this rank any more, and only then are the slots freed.
// Peer cold start (rollout_cold_fill.cc): as a source, the receiver takes a lease on the version
// a ColdFill names and hands the fill to a cold fill thread, which writes this rank's slot into a
// joining replica's slots and answers ColdFillDone; as a joiner, the first version may arrive from
// a peer replica (Prepare then Ready, with no Go), and staleness() tells whether it did.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "layout/block_scaling.h"
#include "runtime/context.h"
#include "runtime/device_ops.h"
#include "runtime/rollout_delta.h"
#include "runtime/version_checksums.h"
#include "runtime/version_stats.h"
#include "store/slot_store.h"
#include "transport/backend.h"

namespace wsync {

class RolloutContext final : public Context {
 public:
  explicit RolloutContext(ContextOptions options) : Context(std::move(options)) {}
  ~RolloutContext() override;

  // Readers (thread-safe). acquire(kNewestVersion) never waits; acquire(v) of a version this
  // rank is receiving waits (up to the timeout) for its Ready, since a peer rank of the replica
  // may have acquired v already.
  Result<Lease> acquire(uint64_t version);
  std::optional<uint64_t> newestVersion() const;
  Result<uint64_t> waitVersion(uint64_t newer_than, std::chrono::milliseconds timeout);
  // The address of buffer `index` in the slot a lease holds; nullptr when out of range.
  void* bufferData(const Lease& lease, int32_t index) const;
  int32_t numBuffers() const { return static_cast<int32_t>(buffer_byte_offsets_.size()); }
  // Some registered buffer (with elements) has live memory: copyFlip has something to copy into.
  bool hasLiveMemory() const;
  // How stale this rank is: the newest version started and the newest ready here, and when.
  RolloutStaleness::View staleness() const { return staleness_.view(); }

  // Copy flip: copies `version` (kNewestVersion: the newest ready) from its slot into the live
  // memory registered with each buffer, under a lease, and returns the version copied. Device
  // memory: the copies run on `stream` (null: an internal stream) and have finished when this
  // returns; buffers registered without live memory are skipped.
  Result<uint64_t> copyFlip(uint64_t version, CudaStreamHandle stream);

  // Before commit: global tensor `tensor` is held block-scaled (float8 e4m3 values, scales in
  // scaling.scale_tensor); plan/block_scaling_plan.h. INVALID_ARGUMENT for a bad scheme or a
  // tensor (or scale tensor) scaled twice differently; INVALID_USAGE after commit.
  Status setBlockScaling(const std::string& tensor, const BlockScaling& scaling);

  void abort() override;
  Status finalize() override;

 private:
  Status prepareRegistration(RegisterMsg& msg) override;
  Status applyPlan(RankPlan plan, PlanAssignmentMsg assignment) override;
  Status startRunning() override;
  bool beingWritten(uint64_t version) const;  // a slot is WRITING `version`
  std::vector<ScaledTensor> block_scalings_;  // setBlockScaling, sent with Register

  void receiverLoop();
  // A message to the coordinator failed with `failure` (REMOTE): when the coordinator said why
  // before it closed the connection (an Error: this rank's replica was dropped), that error.
  Status coordinatorVerdict(const Status& failure);
  Status handle(const Frame& frame);
  Status receiveBroadcasts(const GoMsg& go);
  Status continueDraining(std::chrono::milliseconds wait);
  // Checksums (rollout_checksums.cc): Verify -> Verified or ChecksumFailed.
  Status verifyVersion(const VerifyMsg& verify);
  Status buildChecksums();
  std::string tensorsFrom(int32_t trainer) const;
  // Delta versions (rollout_delta.cc, runtime/rollout_delta.h).
  Status exposeDeltaLanding(uint64_t slot_bytes, RegisterMsg& msg);
  void planDeltaParts();
  std::vector<std::pair<int32_t, std::string>> applyDeltas(uint64_t version, int32_t slot);
  void stopReceiver();
  void heartbeatLoop(std::chrono::milliseconds interval);
  void stopHeartbeats();

  // Peer cold start as a source (rollout_cold_fill.cc). Receiver thread: leases the version
  // (else answers ColdFillDone with NOT_READY at once) and queues the fill.
  Status startColdFill(const Frame& frame);
  void coldFillLoop();  // the cold fill thread: one fill at a time, in order
  // Writes this rank's part of `fill` from the leased slot; returns the bytes written.
  Result<uint64_t> runColdFill(const ColdFillMsg& fill, const Lease& lease);
  void stopColdFills();
  // Leave, then wait (bounded by the timeout) for Left or for the receiver to end.
  Status leaveJob();

  std::unique_ptr<WriteTransport> transport_;  // exposes the slots to the trainers
  DeviceStream flip_stream_;                   // copy flips without a caller stream
  std::unique_ptr<SlotStore> store_;
  std::vector<std::unique_ptr<ExposedMemory>> slots_;
  std::vector<uint64_t> buffer_byte_offsets_;
  // Staged slots (ExposedMemory::needsLanding): the slot bytes this rank's writes fill, merged;
  // moved into the slot's device memory as writers report them (landArrived) and when the version
  // is ready (land), before readers see it.
  std::vector<ByteRange> landing_ranges_;
  RankPlan plan_;
  std::vector<int32_t> group_comm_;
  // Broadcast groups: the receiver thread runs them (device backends on broadcast_stream_, while
  // generation keeps reading other slots on its own streams). Declared after the slots and the
  // stream: destroyed (waiting for in-flight work) before them.
  DeviceStream broadcast_stream_;
  std::unique_ptr<Broadcaster> broadcaster_;
  int32_t prepared_slot_ = -1;  // receiver thread: the slot drained for the version in flight
  uint64_t prepared_version_ = 0;
  bool draining_ = false;      // receiver thread: prepared_slot_ still has leases (no Prepared yet)
  int32_t landing_slot_ = -1;  // receiver thread: a staged slot being written (Go to Ready)
  RolloutStaleness staleness_;  // receiver thread writes
  // Receiver thread: the sums of what each trainer delivers (built at the first Verify), and the
  // version a staged slot was landed for at its Verify (Ready then lands nothing).
  VersionChecksums checksums_;
  bool checksums_built_ = false;
  RolloutDeltaState delta_;  // receiver thread (set up at registration and commit)
  uint64_t landed_version_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread receiver_;

  // Membership: the heartbeat thread, and the receiver's news for leaveJob().
  std::mutex membership_mu_;
  std::condition_variable membership_cv_;
  bool heartbeats_stopping_ = false;
  bool left_ = false;            // the coordinator answered Leave
  bool receiver_ended_ = false;  // the receiver thread returned
  std::thread heartbeat_;

  // Peer cold start: fills queued by the receiver, run by the cold fill thread (started with the
  // first one). Each holds a lease on its version until its writes are flushed.
  struct ColdFillJob {
    ColdFillMsg fill;
    Lease lease;
  };
  std::mutex fill_mu_;
  std::condition_variable fill_cv_;
  std::deque<ColdFillJob> fill_queue_;
  bool fill_stopping_ = false;
  std::thread cold_filler_;
  uint64_t go_version_ =
      0;  // receiver thread: the last Go's version (a Ready without it: a peer's)
};

}  // namespace wsync
