#include "layout/registration.h"

namespace wsync {

const char* roleName(Role r) {
  return r == Role::kTrainer ? "trainer" : "rollout";
}

int32_t Registration::declareTensor(const std::string& name, const Dims& shape) {
  if (tensor_index_.size() != tensors.size()) {
    tensor_index_.clear();
    for (size_t i = 0; i < tensors.size(); ++i) {
      tensor_index_.emplace(tensors[i].name, static_cast<int32_t>(i));
    }
  }
  auto [it, inserted] = tensor_index_.emplace(name, static_cast<int32_t>(tensors.size()));
  if (!inserted) return tensors[static_cast<size_t>(it->second)].shape == shape ? it->second : -1;
  tensors.push_back({name, shape});
  return it->second;
}

}  // namespace wsync
