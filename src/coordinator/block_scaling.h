// Block-scaled rollout tensors on the coordinator (plan/block_scaling_plan.h): the job's table of
// scaled tensors, made from the rollouts' registrations before planning, each trainer's quantized
// sources, and the relay of the maxima of blocks that straddle trainers (MaximaRelay). A
// component of the coordinator's event loop; it reads the ranks' registrations from the
// participant table and sends through a CoordinatorWire. Not thread-safe: the event thread owns
// it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "common/status.h"
#include "coordinator/coordinator_wire.h"
#include "coordinator/maxima_relay.h"
#include "coordinator/participants.h"
#include "layout/registration.h"
#include "plan/block_scaling_plan.h"
#include "protocol/protocol.h"

namespace wsync {

class CoordinatorBlockScaling {
 public:
  CoordinatorBlockScaling(const ParticipantTable& participants, CoordinatorWire& wire)
      : participants_(participants), wire_(wire) {}

  // Before planning: the job's table from the rollouts' scalings (rollout rank r's registration
  // is rollouts[r]), their pieces renamed, the trainers' quantized sources added, and the maxima
  // relay for blocks that straddle trainers.
  Status plan(std::vector<Registration>& trainers, std::vector<Registration>& rollouts);
  // A restarted trainer's registration as planning saw its predecessor's.
  Status addQuantizedSourcesTo(Registration& trainer) const;
  // A joining rank's scalings must be schemes planned at commit (UNSUPPORTED names the tensor);
  // `elastic`: the job had no fixed rollout rank at commit (said in the error).
  Status checkJoiner(const Participant& p, bool elastic) const;
  // Trainer t's part of PlanAssignment: the table and its exchanged blocks.
  void addTo(int32_t t, PlanAssignmentMsg& msg) const;
  // A trainer's PartialMaxima: once every trainer's part of a version is in, BlockMaxima to each.
  Status onPartialMaxima(const Participant& p, const std::vector<uint8_t>& payload);
  void forgetVersions();  // the trainers were lost: partial maxima received are dropped

 private:
  const ParticipantTable& participants_;
  CoordinatorWire& wire_;
  std::vector<ScaledTensor> scaling_table_;              // block-scaled tensors of the job
  std::vector<std::vector<uint64_t>> exchanged_blocks_;  // per trainer (PlanAssignment)
  std::optional<MaximaRelay> maxima_;                    // when some block straddles trainers
};

}  // namespace wsync
