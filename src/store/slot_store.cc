#include "store/slot_store.h"

#include <algorithm>
#include <utility>

namespace wsync {

namespace {

// Deadline for a wait of `timeout` from now: non-positive polls, huge ones are capped (a year) so
// that steady_clock arithmetic cannot overflow.
std::chrono::steady_clock::time_point deadlineAfter(std::chrono::milliseconds timeout) {
  constexpr std::chrono::milliseconds kMaxWait = std::chrono::hours(24 * 365);
  const auto clamped = std::clamp(timeout, std::chrono::milliseconds(0), kMaxWait);
  return std::chrono::steady_clock::now() + clamped;
}

std::string versionString(uint64_t version) {
  return "v" + std::to_string(version);
}

}  // namespace

const char* slotStateName(SlotState state) {
  switch (state) {
    case SlotState::kEmpty:
      return "EMPTY";
    case SlotState::kWriting:
      return "WRITING";
    case SlotState::kReady:
      return "READY";
  }
  return "?";
}

// ---- Lease
// ---------------------------------------------------------------------------------------

Lease::Lease(Lease&& other) noexcept
    : store_(std::exchange(other.store_, nullptr)), slot_(other.slot_), version_(other.version_) {}

Lease& Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    release();
    store_ = std::exchange(other.store_, nullptr);
    slot_ = other.slot_;
    version_ = other.version_;
  }
  return *this;
}

void Lease::release() {
  if (SlotStore* store = std::exchange(store_, nullptr)) store->releaseLease(slot_, version_);
}

// ---- SlotStore
// -----------------------------------------------------------------------------------

Result<std::unique_ptr<SlotStore>> SlotStore::create(int numSlots) {
  if (numSlots < kMinSlots || numSlots > kMaxSlots) {
    return invalidArgument("slot store: " + std::to_string(numSlots) +
                           " slots requested; need between " + std::to_string(kMinSlots) + " and " +
                           std::to_string(kMaxSlots) +
                           " (readers hold one slot while another is written)");
  }
  return std::unique_ptr<SlotStore>(new SlotStore(numSlots));
}

Status SlotStore::checkSlot(int slot, const char* what) const {
  if (slot < 0 || slot >= numSlots()) {
    return invalidArgument(std::string(what) + ": slot " + std::to_string(slot) +
                           " is out of range [0, " + std::to_string(numSlots()) + ")");
  }
  return Status::ok();
}

std::string SlotStore::describeLocked() const {
  std::string s;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& sl = slots_[i];
    if (i) s += ", ";
    s += "slot " + std::to_string(i) + ": " + slotStateName(sl.state);
    if (sl.state != SlotState::kEmpty) s += " " + versionString(sl.version);
    if (sl.leases) {
      s += " (" + std::to_string(sl.leases) + (sl.leases == 1 ? " lease)" : " leases)");
    }
  }
  return s;
}

std::optional<uint64_t> SlotStore::newestLocked() const {
  if (newest_ < 0) return std::nullopt;
  return slots_[static_cast<size_t>(newest_)].version;
}

std::string SlotStore::describe() const {
  std::lock_guard lock(mu_);
  return describeLocked();
}

Result<Lease> SlotStore::acquire(uint64_t version) {
  std::lock_guard lock(mu_);
  int index = -1;
  if (version == kNewestVersion) {
    index = newest_;
    if (index < 0) {
      return Status(WSYNC_ERR_NOT_READY,
                    "acquire: no version is ready yet (" + describeLocked() + ")");
    }
  } else {
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (slots_[i].state == SlotState::kReady && slots_[i].version == version) {
        index = static_cast<int>(i);
        break;
      }
    }
    if (index < 0) {
      return Status(WSYNC_ERR_NOT_READY, "acquire: version " + std::to_string(version) +
                                             " is not ready on this rank (" + describeLocked() +
                                             ")");
    }
  }
  Slot& s = slots_[static_cast<size_t>(index)];
  ++s.leases;
  return Lease(this, index, s.version);
}

void SlotStore::releaseLease(int slot, uint64_t version) {
  (void)version;  // the lease's version; the slot may since be WRITING another (never written)
  bool notify = false;
  {
    std::lock_guard lock(mu_);
    Slot& s = slots_[static_cast<size_t>(slot)];
    assert(s.leases > 0 && "lease released twice");
    --s.leases;
    notify = s.leases == 0 && s.state == SlotState::kWriting;
  }
  if (notify) drainedCv_.notify_all();
}

std::optional<uint64_t> SlotStore::newestReady() const {
  std::lock_guard lock(mu_);
  return newestLocked();
}

Result<uint64_t> SlotStore::waitLocked(std::unique_lock<std::mutex>& lock,
                                       const std::optional<uint64_t>& after,
                                       std::chrono::milliseconds timeout) {
  const auto deadline = deadlineAfter(timeout);
  auto newer = [&] {
    const std::optional<uint64_t> newest = newestLocked();
    return newest.has_value() && (!after.has_value() || *newest > *after);
  };
  const bool done = readyCv_.wait_until(
      lock, deadline, [&] { return aborted_ || trainers_done_.has_value() || newer(); });
  if (aborted_) {
    return Status(WSYNC_ERR_ABORTED, "slot store aborted while waiting for a version newer than " +
                                         (after ? std::to_string(*after) : "none"));
  }
  if (done && !newer()) {
    return Status(WSYNC_ERR_TRAINERS_DONE,
                  "the trainers finished at version " + std::to_string(*trainers_done_) +
                      "; no version " +
                      (after ? "newer than " + std::to_string(*after) : std::string("at all")) +
                      " will come to this rank");
  }
  if (!done) {
    const std::optional<uint64_t> newest = newestLocked();
    return timeoutError("no version " +
                        (after ? "newer than " + std::to_string(*after) : std::string("at all")) +
                        " became ready within " + std::to_string(timeout.count()) +
                        " ms (newest ready: " + (newest ? versionString(*newest) : "none") + "; " +
                        describeLocked() + ")");
  }
  return *newestLocked();
}

Result<uint64_t> SlotStore::waitForNewer(uint64_t version, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return waitLocked(lock, version, timeout);
}

Result<uint64_t> SlotStore::waitForAny(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return waitLocked(lock, std::nullopt, timeout);
}

Result<int> SlotStore::pickSlotForWrite() const {
  std::lock_guard lock(mu_);
  if (aborted_) return Status(WSYNC_ERR_ABORTED, "pickSlotForWrite: slot store aborted");
  int oldestFree = -1;  // oldest READY (not newest) with no lease
  int oldest = -1;      // oldest READY (not newest)
  for (int i = 0; i < numSlots(); ++i) {
    const Slot& s = slots_[static_cast<size_t>(i)];
    if (s.state == SlotState::kEmpty) return i;
    if (s.state != SlotState::kReady || i == newest_) continue;
    auto older = [&](int j) { return j < 0 || s.version < slots_[static_cast<size_t>(j)].version; };
    if (older(oldest)) oldest = i;
    if (s.leases == 0 && older(oldestFree)) oldestFree = i;
  }
  if (oldestFree >= 0) return oldestFree;
  if (oldest >= 0) return oldest;
  return invalidUsage(
      "pickSlotForWrite: every slot other than the newest ready one is WRITING; mark one ready "
      "or abandon it first (" +
      describeLocked() + ")");
}

Status SlotStore::beginWrite(int slot, uint64_t version, std::chrono::milliseconds timeout) {
  WSYNC_RETURN_IF_ERROR(checkSlot(slot, "beginWrite"));
  if (version == kNewestVersion) {
    return invalidArgument("beginWrite: slot " + std::to_string(slot) + ": version " +
                           std::to_string(version) + " is reserved (kNewestVersion)");
  }
  std::unique_lock lock(mu_);
  const std::string where =
      "beginWrite(slot " + std::to_string(slot) + ", " + versionString(version) + ")";
  if (aborted_) return Status(WSYNC_ERR_ABORTED, where + ": slot store aborted");
  if (slot == newest_) {
    return invalidUsage(where + ": slot " + std::to_string(slot) + " holds the newest ready " +
                        versionString(slots_[static_cast<size_t>(slot)].version) +
                        ", which readers must always find (" + describeLocked() + ")");
  }
  if (const std::optional<uint64_t> newest = newestLocked(); newest && version <= *newest) {
    return invalidUsage(where + ": " + versionString(version) +
                        " is not newer than the newest ready " + versionString(*newest) +
                        " (slot " + std::to_string(newest_) + ")");
  }
  for (int i = 0; i < numSlots(); ++i) {
    const Slot& other = slots_[static_cast<size_t>(i)];
    if (i != slot && other.state == SlotState::kWriting && other.version == version) {
      return invalidUsage(where + ": " + versionString(version) +
                          " is already being written into slot " + std::to_string(i));
    }
  }

  Slot& s = slots_[static_cast<size_t>(slot)];
  s.state = SlotState::kWriting;  // from here on no lease can be taken on this slot
  s.version = version;
  s.drained = false;

  const auto deadline = deadlineAfter(timeout);
  const bool drained = drainedCv_.wait_until(lock, deadline, [&] {
    return aborted_ || s.leases == 0 || s.state != SlotState::kWriting || s.version != version;
  });
  if (aborted_) {
    return Status(WSYNC_ERR_ABORTED, where + ": slot store aborted while waiting for " +
                                         std::to_string(s.leases) + " lease(s) to be released");
  }
  if (s.state != SlotState::kWriting || s.version != version) {
    return invalidUsage(where + ": the slot changed while waiting for its leases (now " +
                        slotStateName(s.state) + " " + versionString(s.version) + ")");
  }
  if (!drained) {
    return timeoutError(where + ": " + std::to_string(s.leases) + " lease(s) still held on slot " +
                        std::to_string(slot) + " after " + std::to_string(timeout.count()) +
                        " ms; the slot stays WRITING, retry beginWrite or abandonWrite");
  }
  s.drained = true;
  return Status::ok();
}

Status SlotStore::markReady(int slot, uint64_t version) {
  WSYNC_RETURN_IF_ERROR(checkSlot(slot, "markReady"));
  std::shared_ptr<const std::function<void(uint64_t)>> callback;
  {
    std::lock_guard lock(mu_);
    const std::string where =
        "markReady(slot " + std::to_string(slot) + ", " + versionString(version) + ")";
    if (aborted_) return Status(WSYNC_ERR_ABORTED, where + ": slot store aborted");
    Slot& s = slots_[static_cast<size_t>(slot)];
    if (s.state != SlotState::kWriting || s.version != version) {
      std::string now = slotStateName(s.state);
      if (s.state != SlotState::kEmpty) now += " " + versionString(s.version);
      return invalidUsage(where + ": slot " + std::to_string(slot) + " is " + now +
                          ", not WRITING " + versionString(version));
    }
    if (!s.drained) {
      return invalidUsage(where + ": beginWrite on slot " + std::to_string(slot) +
                          " has not succeeded (" + std::to_string(s.leases) +
                          " lease(s) still held); the slot may not have been written");
    }
    s.state = SlotState::kReady;
    s.drained = false;
    if (newest_ < 0 || version > slots_[static_cast<size_t>(newest_)].version) newest_ = slot;
    if (trainers_done_ && version > *trainers_done_) trainers_done_.reset();  // trainers came back
    callback = onReady_;
  }
  readyCv_.notify_all();
  if (callback && *callback) (*callback)(version);
  return Status::ok();
}

Status SlotStore::abandonWrite(int slot) {
  WSYNC_RETURN_IF_ERROR(checkSlot(slot, "abandonWrite"));
  {
    std::lock_guard lock(mu_);
    Slot& s = slots_[static_cast<size_t>(slot)];
    if (s.state != SlotState::kWriting) {
      std::string now = slotStateName(s.state);
      if (s.state != SlotState::kEmpty) now += " " + versionString(s.version);
      return invalidUsage("abandonWrite: slot " + std::to_string(slot) + " is " + now +
                          ", not WRITING");
    }
    s.state = SlotState::kEmpty;
    s.drained = false;
  }
  drainedCv_.notify_all();  // a beginWrite still waiting on this slot sees it change
  return Status::ok();
}

void SlotStore::setOnReady(std::function<void(uint64_t)> callback) {
  auto shared = callback
                    ? std::make_shared<const std::function<void(uint64_t)>>(std::move(callback))
                    : nullptr;
  std::lock_guard lock(mu_);
  onReady_ = std::move(shared);
}

void SlotStore::trainersDone(uint64_t last_version) {
  {
    std::lock_guard lock(mu_);
    trainers_done_ = last_version;
  }
  readyCv_.notify_all();
}

void SlotStore::abort() {
  {
    std::lock_guard lock(mu_);
    aborted_ = true;
  }
  drainedCv_.notify_all();
  readyCv_.notify_all();
}

bool SlotStore::aborted() const {
  std::lock_guard lock(mu_);
  return aborted_;
}

int SlotStore::leasesHeld(int slot) const {
  if (slot < 0 || slot >= numSlots()) return -1;
  std::lock_guard lock(mu_);
  return slots_[static_cast<size_t>(slot)].leases;
}

std::optional<SlotInfo> SlotStore::slotInfo(int slot) const {
  if (slot < 0 || slot >= numSlots()) return std::nullopt;
  std::lock_guard lock(mu_);
  const Slot& s = slots_[static_cast<size_t>(slot)];
  return SlotInfo{s.state, s.version, s.leases};
}

}  // namespace wsync
