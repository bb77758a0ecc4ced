// The coordinator's relay of block maxima (plan/block_scaling_plan.h): each version, every trainer
// with exchanged blocks sends its partial maxima (PartialMaxima); once all of them arrived, each
// gets the merged maxima of its blocks back (BlockMaxima). Event-thread only; no I/O.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "plan/block_scaling_plan.h"

namespace wsync {

class MaximaRelay {
 public:
  explicit MaximaRelay(MaximaExchange exchange);

  // Whether trainer `t` exchanges blocks (sends PartialMaxima every version).
  bool exchanges(int32_t t) const;
  // Bytes through the coordinator per version, in and out (4 per exchanged block and trainer,
  // each way).
  uint64_t bytesPerVersion() const;
  uint32_t numBlocks() const { return exchange_.num_blocks; }

  // A trainer's BlockMaxima payload (float32 little-endian maxima, in its exchanged order).
  using Reply = std::pair<int32_t, std::vector<uint8_t>>;
  // Trainer `t`'s partial maxima of `version` (float32 little-endian, its exchanged order). Once
  // every exchanging trainer sent them for `version`: the replies, one per exchanging trainer.
  // PROTOCOL for a trainer that exchanges nothing, a wrong length, or a second send.
  Result<std::vector<Reply>> onPartial(int32_t t, uint64_t version,
                                       const std::vector<uint8_t>& amax);
  // Forgets versions in flight (the trainers restarted).
  void reset() { pending_.clear(); }

 private:
  struct Pending {
    std::vector<float> merged;
    std::vector<bool> sent;  // per trainer
    size_t count = 0;
  };
  MaximaExchange exchange_;
  size_t exchanging_ = 0;  // trainers with exchanged blocks
  std::map<uint64_t, Pending> pending_;
};

}  // namespace wsync
