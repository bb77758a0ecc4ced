#include "control/handshake_admission.h"

#include <cstdio>
#include <utility>

namespace wsync {

const char* refusalReasonName(RefusalReason reason) {
  switch (reason) {
    case RefusalReason::kWrongSecret:
      return "wrong_secret";
    case RefusalReason::kBadHandshake:
      return "bad_handshake";
    case RefusalReason::kHandshakeTimeout:
      return "handshake_timeout";
    case RefusalReason::kIdle:
      return "idle";
    case RefusalReason::kPeerLimit:
      return "peer_limit";
    case RefusalReason::kServerLimit:
      return "server_limit";
    case RefusalReason::kAbandoned:
      return "abandoned";
  }
  return "?";
}

uint64_t RefusalCounts::total() const {
  uint64_t sum = 0;
  for (uint64_t n : by_reason)
    sum += n;
  return sum;
}

// ---- HandshakeLimiter -----------------------------------------------------------------------

std::optional<RefusalReason> HandshakeLimiter::admit(const std::string& address) {
  auto it = by_address_.find(address);
  const size_t from_peer = it == by_address_.end() ? 0 : it->second;
  if (from_peer >= per_peer_) return RefusalReason::kPeerLimit;
  if (total_ >= total_limit_) return RefusalReason::kServerLimit;
  if (it == by_address_.end()) it = by_address_.emplace(address, 0).first;
  ++it->second;
  ++total_;
  return std::nullopt;
}

void HandshakeLimiter::release(const std::string& address) {
  auto it = by_address_.find(address);
  if (it == by_address_.end()) return;
  --total_;
  if (--it->second == 0) by_address_.erase(it);
}

size_t HandshakeLimiter::pendingFrom(const std::string& address) const {
  auto it = by_address_.find(address);
  return it == by_address_.end() ? 0 : it->second;
}

// ---- RefusalLog -----------------------------------------------------------------------------

RefusalLog::RefusalLog(Sink sink, std::string server_name, Limits limits)
    : sink_(std::move(sink)), server_name_(std::move(server_name)), limits_(limits) {}

RefusalCounts RefusalLog::counts() const {
  RefusalCounts c;
  for (size_t i = 0; i < kRefusalReasons; ++i)
    c.by_reason[i] = counts_[i].load(std::memory_order_relaxed);
  return c;
}

void RefusalLog::write(const std::string& line) {
  ++lines_;
  if (sink_) sink_(line);
}

bool RefusalLog::admitLine(const std::string& address, Clock::time_point now) {
  if (now - second_start_ >= std::chrono::seconds(1)) {
    second_start_ = now;
    lines_this_second_ = 0;
  }
  if (lines_this_second_ >= limits_.max_lines_per_second) return false;
  auto it = last_line_.find(address);
  if (it != last_line_.end()) {
    if (now - it->second < limits_.per_peer_interval) return false;
    it->second = now;
  } else {
    if (last_line_.size() >= limits_.max_tracked_peers) {
      // Forget addresses whose interval has passed; when every tracked one is recent (a flood
      // from very many addresses), log nothing more for new ones until the summary.
      for (auto e = last_line_.begin(); e != last_line_.end();) {
        e = now - e->second >= limits_.per_peer_interval ? last_line_.erase(e) : std::next(e);
      }
      if (last_line_.size() >= limits_.max_tracked_peers) return false;
    }
    last_line_.emplace(address, now);
  }
  ++lines_this_second_;
  return true;
}

void RefusalLog::record(RefusalReason reason, const std::string& address, const std::string& peer,
                        const std::string& detail, Clock::time_point now) {
  const auto index = static_cast<size_t>(reason);
  counts_[index].fetch_add(1, std::memory_order_relaxed);
  if (reason == RefusalReason::kAbandoned) return;  // a client that gave up: nothing to report
  if (admitLine(address, now)) {
    write(server_name_ + ": refused " + peer + " (" + refusalReasonName(reason) + "): " + detail);
    return;
  }
  if (unlogged_total_ == 0) summary_window_start_ = now;
  ++unlogged_[index];
  ++unlogged_total_;
}

std::optional<RefusalLog::Clock::time_point> RefusalLog::nextDue() const {
  if (unlogged_total_ == 0) return std::nullopt;
  return summary_window_start_ + limits_.summary_interval;
}

void RefusalLog::tick(Clock::time_point now) {
  if (unlogged_total_ == 0 || now < summary_window_start_ + limits_.summary_interval) return;
  std::string by_reason;
  for (size_t i = 0; i < kRefusalReasons; ++i) {
    if (unlogged_[i] == 0) continue;
    by_reason += (by_reason.empty() ? "" : ", ") +
                 std::string(refusalReasonName(static_cast<RefusalReason>(i))) + " " +
                 std::to_string(unlogged_[i]);
  }
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.1f",
                std::chrono::duration<double>(now - summary_window_start_).count());
  write(server_name_ + ": " + std::to_string(unlogged_total_) +
        " more refused connections not logged in the last " + seconds + " s (" + by_reason + ")");
  unlogged_ = {};
  unlogged_total_ = 0;
}

}  // namespace wsync
