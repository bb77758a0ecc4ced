// RolloutContext: receives versions into its slots. Slots are allocated once at commit (through
// the write transport, so trainers write into them one-sidedly); a receiver thread follows the
// coordinator (Prepare: drain leases on the target slot; Go: take part in broadcasts; Ready: make
// the version readable) while readers take leases from any thread. A heartbeat thread tells the
// coordinator this rank is alive (Welcome::heartbeat_interval_ms). finalize() leaves the job
// first: the coordinator takes the replica out at once and answers Left once no trainer writes
// into this rank any more, and only then are the slots freed.
// Components (each its own .h/.cc, testable without sockets): the checksum verification
// (RolloutChecksums), peer cold starts as a source (ColdFiller: the receiver takes a lease on the
// version a ColdFill names and hands the fill to the cold fill thread, which writes this rank's
// slot into a joining replica's slots and answers ColdFillDone), delta versions (RolloutDelta),
// and heartbeats and leaving (RolloutMembership). As a joiner, the first version may arrive from a
// peer replica (Prepare then Ready, with no Go), and staleness() tells whether it did.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "layout/block_scaling.h"
#include "runtime/context.h"
#include "runtime/device_ops.h"
#include "runtime/rollout_checksums.h"
#include "runtime/rollout_cold_fill.h"
#include "runtime/rollout_delta.h"
#include "runtime/rollout_membership.h"
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
  bool beingWritten(uint64_t version) const;  // a slot is WRITING `version`
  std::vector<ScaledTensor> block_scalings_;  // setBlockScaling, sent with Register
  // Context's steps (context.h).
  Status prepareRegistration(RegisterMsg& msg) override;
  Status applyPlan(RankPlan plan, PlanAssignmentMsg assignment) override;
  Status startRunning() override;

  void receiverLoop();
  // A message to the coordinator failed with `failure` (REMOTE): when the coordinator said why
  // before it closed the connection (an Error: this rank's replica was dropped), that error.
  Status coordinatorVerdict(const Status& failure);
  Status handle(const Frame& frame);
  Status receiveBroadcasts(const GoMsg& go);
  Status continueDraining(std::chrono::milliseconds wait);
  // Verify -> the staged slot landed, delta patches applied, Verified or ChecksumFailed.
  Status verifyVersion(const VerifyMsg& verify);
  void stopReceiver();

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
  // Receiver thread: the sums of what each trainer delivers (set up at commit), and the version a
  // staged slot was landed for at its Verify (Ready then lands nothing).
  std::optional<RolloutChecksums> checksums_;
  RolloutDelta delta_;  // delta versions: receiver thread (set up at registration and commit)
  uint64_t landed_version_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread receiver_;

  // Membership: the heartbeat thread, and the receiver's news for leaveJob().
  RolloutMembership membership_{[this](MessageType type) { return sendMessage(type, {}); }};

  // Peer cold starts as a source (created at commit; its leases are on store_'s slots).
  std::unique_ptr<ColdFiller> cold_filler_;
  uint64_t go_version_ = 0;  // receiver thread: the last Go's version (a Ready without: a peer's)
};

}  // namespace wsync
