// SlotStore: the versioned slot state machine of one rollout rank (docs/threading.md: "Who may
// write a slot", "Skipping and staleness"). It tracks which version each slot holds and who reads
// it; the slot memory itself is owned elsewhere (a slot index names it).
//
// Guarantees:
//  - a reader only ever gets a lease on a READY slot, i.e. a complete version (never torn);
//  - a slot is written only after beginWrite() returned OK, which happens only once no lease is
//  held
//    on it and no new lease can be taken on it until markReady();
//  - the newest READY slot is never written, so acquire(kNewestVersion) never waits for a writer.
//
// Per slot: EMPTY | WRITING(version) | READY(version), plus a lease count.
//
//   EMPTY/READY --beginWrite--> WRITING --markReady--> READY
//                                  |  \--abandonWrite--> EMPTY
//                                  \--beginWrite (retry after TIMEOUT)--> WRITING
//
// Threads: any number of readers (acquire, newestReady, waitFor*, Lease::release) and one writer
// (pickSlotForWrite, beginWrite, markReady, abandonWrite). Every method is thread-safe; one mutex
// guards all state and is held only for O(1)/O(slots) bookkeeping, never across a wait or a
// callback.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace wsync {

// acquire(kNewestVersion): the newest READY version. Not a valid version to write.
inline constexpr uint64_t kNewestVersion = std::numeric_limits<uint64_t>::max();

enum class SlotState : uint8_t { kEmpty, kWriting, kReady };
const char* slotStateName(SlotState state);  // "EMPTY", "WRITING", "READY"

// A snapshot of one slot, for tests, benchmarks and diagnostics.
struct SlotInfo {
  SlotState state = SlotState::kEmpty;
  uint64_t version = 0;  // meaningful when state != kEmpty
  int leases = 0;
};

class SlotStore;

// A reader's hold on one READY slot. Move-only RAII: release() or the destructor gives it back;
// releasing twice, or releasing a moved-from or default-constructed lease, does nothing.
// The SlotStore must outlive its leases. A Lease is not itself thread-safe (one owner at a time).
class Lease {
 public:
  Lease() = default;
  Lease(Lease&& other) noexcept;
  Lease& operator=(Lease&& other) noexcept;
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  ~Lease() { release(); }

  bool valid() const { return store_ != nullptr; }
  // The slot and version held; after release() they keep their last values (for logging).
  int slot() const { return slot_; }
  uint64_t version() const { return version_; }

  void release();

 private:
  friend class SlotStore;
  Lease(SlotStore* store, int slot, uint64_t version)
      : store_(store), slot_(slot), version_(version) {}

  SlotStore* store_ = nullptr;
  int slot_ = -1;
  uint64_t version_ = 0;
};

class SlotStore {
 public:
  static constexpr int kMinSlots = 2;
  static constexpr int kMaxSlots = 64;

  // numSlots in [kMinSlots, kMaxSlots], else INVALID_ARGUMENT. All slots start EMPTY.
  static Result<std::unique_ptr<SlotStore>> create(int numSlots);
  ~SlotStore() = default;
  SlotStore(const SlotStore&) = delete;
  SlotStore& operator=(const SlotStore&) = delete;

  int numSlots() const { return static_cast<int>(slots_.size()); }

  // ---- readers (any thread) ------------------------------------------------------------------
  // version == kNewestVersion: a lease on the newest READY slot; otherwise on the slot READY with
  // exactly `version`. NOT_READY (naming the resident versions) when there is none. Never waits
  // for a writer; works after abort().
  Result<Lease> acquire(uint64_t version = kNewestVersion);

  // The newest READY version, or nullopt when none is ready.
  std::optional<uint64_t> newestReady() const;

  // Blocks until a version > `version` is READY and returns the newest READY version then.
  // TIMEOUT after `timeout` (a non-positive timeout polls once); ABORTED once abort() was called;
  // TRAINERS_DONE after trainersDone() when no READY version is newer.
  Result<uint64_t> waitForNewer(uint64_t version, std::chrono::milliseconds timeout);

  // Blocks until any version is READY (the first one may be version 0) and returns the newest.
  // Same errors as waitForNewer.
  Result<uint64_t> waitForAny(std::chrono::milliseconds timeout);

  // ---- writer (one thread) -------------------------------------------------------------------
  // The slot to write the next version into. Never the newest READY slot. Preference: an EMPTY
  // slot (lowest index); else the READY slot with the oldest version among those with no lease
  // held; else the READY slot with the oldest version (beginWrite will wait for its leases).
  // WRITING slots are never returned (a slot left WRITING by a timed-out beginWrite is retried
  // with beginWrite or freed with abandonWrite by the caller, who knows it).
  // INVALID_USAGE when every slot but the newest is WRITING; ABORTED after abort().
  Result<int> pickSlotForWrite() const;

  // Marks `slot` WRITING(version): from now on no new lease can be taken on it, and a version it
  // held is gone. Then waits until its lease count is 0. OK means the caller may write the slot.
  // INVALID_ARGUMENT: slot out of range, or version == kNewestVersion.
  // INVALID_USAGE: the slot holds the newest READY version; version is not greater than the newest
  //   READY one; version is already being written into another slot.
  // TIMEOUT: leases still held after `timeout` (message names the slot and the count); the slot
  //   stays WRITING and a later beginWrite on it may retry. ABORTED: abort() before or during.
  Status beginWrite(int slot, uint64_t version, std::chrono::milliseconds timeout);

  // WRITING(version) whose beginWrite returned OK -> READY(version). It becomes the newest when its
  // version is the highest READY one. Wakes waiters, then calls the onReady callback (outside the
  // lock, on this thread). INVALID_USAGE when the slot is not WRITING this version or its
  // beginWrite has not succeeded; ABORTED after abort() (the slot stays WRITING).
  Status markReady(int slot, uint64_t version);

  // WRITING -> EMPTY (a transfer failed). INVALID_USAGE when the slot is not WRITING. Works after
  // abort().
  Status abandonWrite(int slot);

  // Called with the version after every successful markReady, outside the lock, on the thread
  // that called markReady. The version is the one just made READY; it may be older than
  // newestReady() when writes completed out of order. May call back into this store. An empty
  // function removes the callback.
  void setOnReady(std::function<void(uint64_t)> callback);

  // ---- lifecycle -----------------------------------------------------------------------------
  // The trainers finished at `last_version`: no newer version will come. Every blocked and later
  // waitForNewer/waitForAny that no READY version satisfies returns TRAINERS_DONE at once. A later
  // markReady of a version above `last_version` (restarted trainers) clears it.
  void trainersDone(uint64_t last_version);

  // Every blocked and later waitForNewer/waitForAny/beginWrite (and later pickSlotForWrite,
  // markReady) returns ABORTED. acquire, newestReady, Lease::release and abandonWrite keep working.
  void abort();
  bool aborted() const;

  // ---- observation (tests, benchmarks, diagnostics) ------------------------------------------
  int leasesHeld(int slot) const;  // -1 for a slot out of range
  std::optional<SlotInfo> slotInfo(int slot) const;
  std::string describe() const;  // "slot 0: READY v5 (2 leases), slot 1: WRITING v6"

 private:
  struct Slot {
    SlotState state = SlotState::kEmpty;
    uint64_t version = 0;
    int leases = 0;
    bool drained = false;  // WRITING and beginWrite returned OK: the writer may fill it
  };

  explicit SlotStore(int numSlots) : slots_(static_cast<size_t>(numSlots)) {}

  friend class Lease;
  void releaseLease(int slot, uint64_t version);

  Status checkSlot(int slot, const char* what) const;
  std::string describeLocked() const;
  std::optional<uint64_t> newestLocked() const;
  Result<uint64_t> waitLocked(std::unique_lock<std::mutex>& lock,
                              const std::optional<uint64_t>& after,
                              std::chrono::milliseconds timeout);

  mutable std::mutex mu_;
  std::condition_variable drainedCv_;  // a WRITING slot's lease count reached 0, or abort
  std::condition_variable readyCv_;    // a slot became READY, or abort
  std::vector<Slot> slots_;            // size fixed at creation
  int newest_ = -1;                    // index of the newest READY slot, -1 when none
  bool aborted_ = false;
  std::optional<uint64_t> trainers_done_;  // trainersDone()'s version until a newer one is READY
  std::shared_ptr<const std::function<void(uint64_t)>> onReady_;
};

}  // namespace wsync
