// A trainer's float8 conversion scales (wsync_set_tensor_scale): set by tensor name at any time
// (any thread); conversions into float8 compute fp8(x * scale), 1 until set. A version converts
// with the scales in force when it was published (planScales(), taken by publish); a joined
// replica's writes with those in force at each send (scalesFor()).
#pragma once

#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "plan/plan.h"

namespace wsync {

class TensorScales {
 public:
  // Tensor `name`'s scale from now on (the caller checked it: finite, > 0, declared).
  void set(const std::string& name, float scale);
  // Commit: the plan's tensors, each with the scale set for its name (1 otherwise).
  void adoptPlan(const std::vector<PlanTensor>& tensors);
  // Per plan tensor, the scales in force now.
  std::vector<float> planScales() const;
  // Per tensor of `tensors` (another plan's table), the scales in force now.
  std::vector<float> scalesFor(const std::vector<PlanTensor>& tensors) const;

 private:
  std::vector<float> scalesLocked(const std::vector<PlanTensor>& tensors) const;  // mu_ held

  mutable std::mutex mu_;
  std::unordered_map<std::string, float> by_name_;
  std::vector<std::string> plan_names_;  // the plan's tensors (after commit)
  std::vector<float> plan_scales_;       // per plan tensor
};

}  // namespace wsync
