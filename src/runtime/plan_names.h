// Names of plan parts for error messages about broadcast groups.
#pragma once

#include <string>

#include "plan/plan.h"

namespace wsync {

// "{0,1}": the rollout ranks a group broadcasts to.
std::string groupReceivers(const BroadcastGroup& group);
// "tensors 'a', 'b', 'c' and 4 more": the tensors of a rank's groups.
std::string groupTensors(const RankPlan& plan);

}  // namespace wsync
