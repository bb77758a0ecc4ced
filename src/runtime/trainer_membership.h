// The running job's membership as one trainer writes it: which replica each rollout rank belongs
// to (the plan assignment's; -1 once its replica was dropped; joined replicas' ranks added) and the
// joined replicas' plan extensions, each with this trainer's writes to that replica, their own
// conversion staging and delta state. A Go gives each replica a slot (or none: it skips the
// version); slotFor() says where a rank's writes go. Changed between versions only. Publisher
// thread; no sockets.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "common/status.h"
#include "plan/plan.h"
#include "protocol/protocol.h"
#include "runtime/conversion_staging.h"
#include "runtime/trainer_delta.h"

namespace wsync {

// A joined replica's part of this trainer's work (its PlanExtension).
struct ExtensionPart {
  int32_t replica = -1;
  std::vector<int32_t> ranks;
  RankPlan plan;              // writes only
  ConversionStaging staging;  // registered with every transport, like the plan's
  std::vector<float> scales;  // per plan tensor, taken from the tensor scales at each send
  TrainerDeltaState delta;    // delta versions: its writes' kept bytes and landing parts
  bool active = true;         // false once dropped (its staging stays registered)
};

class TrainerMembership {
 public:
  // Commit: the plan assignment's replica of each rollout rank.
  void reset(std::vector<int32_t> replica_of_rollout) {
    replica_of_rollout_ = std::move(replica_of_rollout);
  }
  // The replica `rollout` belongs to; -1 when none (dropped, or unknown).
  int32_t replicaOf(int32_t rollout) const;
  // The slot `rollout`'s replica writes `go`'s version into; -1 when it skips it (or left).
  int32_t slotFor(const GoMsg& go, int32_t rollout) const;
  // A group's replica takes `go` when Go gives it a slot and it is still the replica of the
  // group's ranks (not dropped; a later replica may reuse its id).
  bool replicaTakes(const GoMsg& go, const BroadcastGroup& group) const;

  // A dropped replica: writes to its ranks stop (its extension, if any, stays allocated: its
  // memory is registered with the transports until they go).
  void forget(const ReplicaMsg& dropped);
  // `extension`'s rank plan, checked: no broadcast groups, peers and writes only of the replica's
  // ranks, no peer already `connected`. PROTOCOL naming the replica otherwise.
  static Result<RankPlan> checkExtension(const PlanExtensionMsg& extension,
                                         const std::function<bool(int32_t rollout)>& connected);
  // A joined replica's part, set up: its ranks belong to its replica from now on.
  void add(std::unique_ptr<ExtensionPart> part);
  const std::vector<std::unique_ptr<ExtensionPart>>& extensions() const { return extensions_; }

 private:
  std::vector<int32_t> replica_of_rollout_;
  std::vector<std::unique_ptr<ExtensionPart>> extensions_;
};

}  // namespace wsync
