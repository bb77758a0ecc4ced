#include "coordinator/delivery_gate.h"

#include <iterator>

namespace wsync {

void DeliveryGate::readySent(uint64_t version, int32_t rollout, SequencerTime now) {
  auto [it, inserted] = pending_.try_emplace(version);
  if (inserted) it->second.first_ready = now;
  it->second.waiting.insert(rollout);
  it->second.ready_at[rollout] = now;
}

std::optional<OutgoingMessage> DeliveryGate::deliver(OutgoingMessage delivered) {
  const uint64_t version = std::get<DeliveredMsg>(delivered.payload).version;
  auto it = pending_.find(version);
  if (it == pending_.end()) return delivered;
  if (it->second.waiting.empty()) {
    pending_.erase(it);
    return delivered;
  }
  it->second.delivered = std::move(delivered);
  return std::nullopt;
}

Result<std::optional<OutgoingMessage>> DeliveryGate::readied(uint64_t version, int32_t rollout) {
  auto it = pending_.find(version);
  if (it == pending_.end() || it->second.waiting.erase(rollout) == 0) {
    return protocolError("rollout " + std::to_string(rollout) + " confirmed version " +
                         std::to_string(version) + ", which it was not sent Ready for");
  }
  if (it->second.waiting.empty() && it->second.abandoned) {
    pending_.erase(it);
    return std::optional<OutgoingMessage>();
  }
  if (!it->second.waiting.empty() || !it->second.delivered) return std::optional<OutgoingMessage>();
  std::optional<OutgoingMessage> released = std::move(it->second.delivered);
  pending_.erase(it);
  return released;
}

std::vector<OutgoingMessage> DeliveryGate::forget(int32_t rollout) {
  std::vector<OutgoingMessage> released;
  for (auto it = pending_.begin(); it != pending_.end();) {
    it->second.waiting.erase(rollout);
    if (it->second.waiting.empty() && it->second.delivered) {
      released.push_back(std::move(*it->second.delivered));
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
  return released;
}

void DeliveryGate::abandonAll() {
  for (auto it = pending_.begin(); it != pending_.end();) {
    it->second.abandoned = true;
    it->second.delivered.reset();
    it = it->second.waiting.empty() ? pending_.erase(it) : std::next(it);
  }
}

std::optional<std::string> DeliveryGate::overdue(SequencerTime now,
                                                 std::chrono::milliseconds timeout) const {
  for (const auto& [version, p] : pending_) {
    if (p.waiting.empty() || p.abandoned || now - p.first_ready < timeout) continue;
    std::string ranks;
    for (int32_t r : p.waiting)
      ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    return "version " + std::to_string(version) + ": rollout rank(s) " + ranks +
           " never confirmed Ready within " + std::to_string(timeout.count()) + " ms";
  }
  return std::nullopt;
}

std::vector<int32_t> DeliveryGate::overdueRanks(SequencerTime now,
                                                std::chrono::milliseconds bound) const {
  std::set<int32_t> ranks;
  for (const auto& [version, p] : pending_) {
    if (p.abandoned) continue;
    for (int32_t r : p.waiting) {
      auto at = p.ready_at.find(r);
      if (at != p.ready_at.end() && now - at->second >= bound) ranks.insert(r);
    }
  }
  return {ranks.begin(), ranks.end()};
}

}  // namespace wsync
