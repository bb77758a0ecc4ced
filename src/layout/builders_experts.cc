// Layout builders: MoE experts, stacked in one buffer or one buffer each.
#include <algorithm>
#include <string>
#include <utility>

#include "layout/builders.h"
#include "layout/builders_internal.h"

namespace wsync {
using namespace layout_internal;  // the builders' shared helpers (builders_internal.h)

namespace {

// Validates the expert arguments shared by addStackedExperts and addSeparateExperts; returns
// this EP rank's experts.
Result<IndexRange> localExperts(const char* fn, const std::string& name_template,
                                const Dims& expert_shape, int num_experts, DType dtype, int ep_size,
                                int ep_rank, MemoryKind memory) {
  auto invalid = [&](const std::string& why) {
    return invalidArgument(
        std::string(fn) + "(template " + quoted(name_template) + ", expert shape " +
        expert_shape.toString() + ", " + std::to_string(num_experts) + " experts, ep_size " +
        std::to_string(ep_size) + ", ep_rank " + std::to_string(ep_rank) + "): " + why);
  };
  if (name_template.find("{}") == std::string::npos) {
    return invalid("the name template has no \"{}\" for the expert index");
  }
  if (std::string why = kindProblem(dtype, memory); !why.empty()) return invalid(why);
  if (std::string why = shapeProblem(expert_shape, 0); !why.empty()) return invalid(why);
  if (num_experts < 1) return invalid("num_experts must be >= 1");
  if (ep_size < 1) return invalid("ep_size must be >= 1");
  if (ep_rank < 0 || ep_rank >= ep_size) return invalid("ep_rank outside [0, ep_size)");
  return splitRange(num_experts, ep_size, ep_rank, SplitRule::kBalanced);
}

// Declares the tensors of the experts in `local` into ids (ids[j]: expert local.begin + j), all
// of shape expert_shape; nothing stays declared on failure.
Status declareExperts(Registration& reg, const char* fn, const std::string& name_template,
                      const Dims& expert_shape, IndexRange local, IdList& ids) {
  std::string name;
  return declareAll(
      reg, fn, static_cast<size_t>(local.size),
      [&](size_t j) -> const std::string& {
        name = expertName(name_template, static_cast<int>(local.begin + static_cast<int64_t>(j)));
        return name;
      },
      [&](size_t) -> const Dims& { return expert_shape; }, ids);
}

}  // namespace

std::string expertName(const std::string& name_template, int expert) {
  const std::string index = std::to_string(expert);
  std::string name;
  name.reserve(name_template.size() + index.size());
  size_t from = 0;
  for (size_t at = name_template.find("{}"); at != std::string::npos;
       at = name_template.find("{}", from)) {
    name.append(name_template, from, at - from);
    name += index;
    from = at + 2;
  }
  name.append(name_template, from, std::string::npos);
  return name;
}

Result<int32_t> addStackedExperts(Registration& reg, const std::string& buffer_name,
                                  const std::string& name_template, const Dims& expert_shape,
                                  int num_experts, DType dtype, int ep_size, int ep_rank,
                                  MemoryKind memory) {
  constexpr const char* kFn = "addStackedExperts";
  if (buffer_name.empty()) {
    return invalidArgument(std::string(kFn) + "(template " + quoted(name_template) +
                           "): empty buffer name");
  }
  WSYNC_ASSIGN_OR_RETURN(
      const IndexRange local,
      localExperts(kFn, name_template, expert_shape, num_experts, dtype, ep_size, ep_rank, memory));
  const int64_t volume = expert_shape.product();
  int64_t num_elements = 0;
  if (mulOverflows(local.size, volume, &num_elements)) {
    return invalidArgument(std::string(kFn) + "(buffer " + quoted(buffer_name) +
                           "): local size overflows int64");
  }
  const auto n = static_cast<size_t>(local.size);
  IdList ids(n);
  WSYNC_RETURN_IF_ERROR(declareExperts(reg, kFn, name_template, expert_shape, local, ids));
  const Dims strides = rowMajorStrides(expert_shape);
  PieceList pieces(n);
  for (size_t j = 0; j < n; ++j) {
    pieces[j].tensor = ids[j];
    pieces[j].box = Box::whole(expert_shape);
    pieces[j].local_offset = static_cast<int64_t>(j) * volume;
    pieces[j].local_strides = strides;
  }
  return appendBuffer(reg, buffer_name, dtype, memory, num_elements, std::move(pieces));
}

Result<int32_t> addSeparateExperts(Registration& reg, const std::string& name_template,
                                   const Dims& expert_shape, int num_experts, DType dtype,
                                   int ep_size, int ep_rank, MemoryKind memory) {
  constexpr const char* kFn = "addSeparateExperts";
  WSYNC_ASSIGN_OR_RETURN(
      const IndexRange local,
      localExperts(kFn, name_template, expert_shape, num_experts, dtype, ep_size, ep_rank, memory));
  if (local.size == 0) {
    return invalidArgument(std::string(kFn) + "(template " + quoted(name_template) + ", " +
                           std::to_string(num_experts) + " experts, ep_size " +
                           std::to_string(ep_size) + ", ep_rank " + std::to_string(ep_rank) +
                           "): this EP rank holds no expert");
  }
  const auto n = static_cast<size_t>(local.size);
  IdList ids(n);
  WSYNC_RETURN_IF_ERROR(declareExperts(reg, kFn, name_template, expert_shape, local, ids));
  const auto first = static_cast<int32_t>(reg.buffers.size());
  const Dims strides = rowMajorStrides(expert_shape);
  const int64_t volume = expert_shape.product();
  for (size_t j = 0; j < n; ++j) {
    PieceList pieces(1);
    pieces[0].tensor = ids[j];
    pieces[0].box = Box::whole(expert_shape);
    pieces[0].local_strides = strides;
    // The tensor's declared name is the buffer's name (no second formatting).
    appendBuffer(reg, reg.tensors[static_cast<size_t>(ids[j])].name, dtype, memory, volume,
                 std::move(pieces));
  }
  return first;
}

}  // namespace wsync
