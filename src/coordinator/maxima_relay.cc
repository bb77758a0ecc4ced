#include "coordinator/maxima_relay.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

namespace wsync {
namespace {

// max of two maxima (each >= 0 or NaN), NaN when either is: as torch's amax over the block.
float mergeMax(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<float>::quiet_NaN();
  return a > b ? a : b;
}

}  // namespace

MaximaRelay::MaximaRelay(MaximaExchange exchange) : exchange_(std::move(exchange)) {
  for (const auto& e : exchange_.exchanged)
    exchanging_ += e.empty() ? 0 : 1;
}

bool MaximaRelay::exchanges(int32_t t) const {
  return t >= 0 && static_cast<size_t>(t) < exchange_.exchanged.size() &&
         !exchange_.exchanged[static_cast<size_t>(t)].empty();
}

uint64_t MaximaRelay::bytesPerVersion() const {
  uint64_t n = 0;
  for (const auto& e : exchange_.exchanged)
    n += e.size();
  return 2 * 4 * n;
}

Result<std::vector<MaximaRelay::Reply>> MaximaRelay::onPartial(int32_t t, uint64_t version,
                                                               const std::vector<uint8_t>& amax) {
  const std::string who = "trainer " + std::to_string(t);
  if (!exchanges(t)) return protocolError("PartialMaxima from " + who + ", which exchanges none");
  const auto& blocks = exchange_.block_of[static_cast<size_t>(t)];
  if (amax.size() != 4 * blocks.size()) {
    return protocolError("PartialMaxima of version " + std::to_string(version) + " from " + who +
                         ": " + std::to_string(amax.size()) + " bytes, expected " +
                         std::to_string(4 * blocks.size()));
  }
  Pending& p = pending_[version];
  if (p.sent.empty()) {
    p.sent.assign(exchange_.exchanged.size(), false);
    p.merged.assign(exchange_.num_blocks, 0.0f);
  }
  if (p.sent[static_cast<size_t>(t)]) {
    return protocolError("PartialMaxima of version " + std::to_string(version) + " twice from " +
                         who);
  }
  p.sent[static_cast<size_t>(t)] = true;
  for (size_t i = 0; i < blocks.size(); ++i) {
    float v;
    std::memcpy(&v, amax.data() + 4 * i, 4);
    float& m = p.merged[blocks[i]];
    m = mergeMax(m, v);
  }
  std::vector<Reply> replies;
  if (++p.count < exchanging_) return replies;
  for (size_t u = 0; u < exchange_.block_of.size(); ++u) {
    const auto& mine = exchange_.block_of[u];
    if (mine.empty()) continue;
    std::vector<uint8_t> bytes(4 * mine.size());
    for (size_t i = 0; i < mine.size(); ++i)
      std::memcpy(bytes.data() + 4 * i, &p.merged[mine[i]], 4);
    replies.emplace_back(static_cast<int32_t>(u), std::move(bytes));
  }
  pending_.erase(version);
  return replies;
}

}  // namespace wsync
