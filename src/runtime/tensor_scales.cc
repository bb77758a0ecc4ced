#include "runtime/tensor_scales.h"

namespace wsync {

void TensorScales::set(const std::string& name, float scale) {
  std::lock_guard lock(mu_);
  by_name_[name] = scale;
  for (size_t i = 0; i < plan_names_.size(); ++i) {
    if (plan_names_[i] == name) plan_scales_[i] = scale;
  }
}

void TensorScales::adoptPlan(const std::vector<PlanTensor>& tensors) {
  std::lock_guard lock(mu_);
  plan_names_.clear();
  for (const PlanTensor& t : tensors)
    plan_names_.push_back(t.name);
  plan_scales_ = scalesLocked(tensors);
}

std::vector<float> TensorScales::planScales() const {
  std::lock_guard lock(mu_);
  return plan_scales_;
}

std::vector<float> TensorScales::scalesFor(const std::vector<PlanTensor>& tensors) const {
  std::lock_guard lock(mu_);
  return scalesLocked(tensors);
}

std::vector<float> TensorScales::scalesLocked(const std::vector<PlanTensor>& tensors) const {
  std::vector<float> scales(tensors.size(), 1.0f);
  for (size_t t = 0; t < tensors.size(); ++t) {
    auto it = by_name_.find(tensors[t].name);
    if (it != by_name_.end()) scales[t] = it->second;
  }
  return scales;
}

}  // namespace wsync
