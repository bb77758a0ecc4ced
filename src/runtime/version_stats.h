// What a context knows about its versions, for wsync_version_stats(): a trainer keeps the last
// Delivered message (with the coordinator's stats, coordinator/metrics.h); a rollout rank keeps
// the newest version the coordinator started (its Prepare) and the newest that became ready here,
// with the time it did. Written by the context's own thread (publisher / receiver), read from
// any thread: every method is thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>

#include "protocol/protocol.h"

namespace wsync {

class DeliveredLog {
 public:
  void record(const DeliveredMsg& delivered) {
    std::lock_guard lock(mu_);
    last_ = delivered;
  }
  std::optional<DeliveredMsg> last() const {  // none before the first delivery
    std::lock_guard lock(mu_);
    return last_;
  }

 private:
  mutable std::mutex mu_;
  std::optional<DeliveredMsg> last_;
};

class RolloutStaleness {
 public:
  using Clock = std::chrono::steady_clock;
  struct View {
    uint64_t newest_started = 0;  // newest version the coordinator started (0: none)
    uint64_t newest_ready = 0;    // newest version ready on this rank (0: none)
    Clock::time_point ready_at;   // when newest_ready became ready here
    // The first version that became ready here (0: none yet), how long after this object was
    // created (the context's creation), and whether a peer replica wrote it (peer cold start).
    uint64_t first_version = 0;
    double first_ready_seconds = 0;
    bool first_from_peer = false;
    // Versions the ready one is behind the newest started one (0 when it is the newest).
    uint64_t lag() const {
      return newest_started > newest_ready ? newest_started - newest_ready : 0;
    }
  };

  void onStarted(uint64_t version) {
    std::lock_guard lock(mu_);
    if (version > view_.newest_started) view_.newest_started = version;
  }
  void onReady(uint64_t version, Clock::time_point now, bool from_peer = false) {
    std::lock_guard lock(mu_);
    if (view_.first_version == 0) {
      view_.first_version = version;
      view_.first_ready_seconds = std::chrono::duration<double>(now - created_).count();
      view_.first_from_peer = from_peer;
    }
    if (version <= view_.newest_ready) return;
    view_.newest_ready = version;
    view_.ready_at = now;
    if (version > view_.newest_started) view_.newest_started = version;
  }
  View view() const {
    std::lock_guard lock(mu_);
    return view_;
  }

 private:
  const Clock::time_point created_ = Clock::now();
  mutable std::mutex mu_;
  View view_;
};

}  // namespace wsync
