#include "runtime/plan_names.h"

#include <algorithm>
#include <vector>

namespace wsync {

std::string groupReceivers(const BroadcastGroup& group) {
  std::string s = "{";
  for (size_t i = 0; i < group.dst.size(); ++i)
    s += (i > 0 ? "," : "") + std::to_string(group.dst[i].rank);
  return s + "}";
}

std::string groupTensors(const RankPlan& plan) {
  constexpr size_t kNamed = 3;
  std::vector<int32_t> tensors;
  for (const BroadcastGroup& g : plan.groups) {
    if (std::find(tensors.begin(), tensors.end(), g.tensor) == tensors.end())
      tensors.push_back(g.tensor);
  }
  std::string s = tensors.size() == 1 ? "tensor " : "tensors ";
  for (size_t i = 0; i < tensors.size() && i < kNamed; ++i)
    s += (i > 0 ? ", '" : "'") + plan.tensors[static_cast<size_t>(tensors[i])].name + "'";
  if (tensors.size() > kNamed) s += " and " + std::to_string(tensors.size() - kNamed) + " more";
  return s;
}

}  // namespace wsync
