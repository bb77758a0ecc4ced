#include "runtime/conversion_staging.h"

#include <string>

#include "runtime/host_convert.h"

namespace wsync {

Result<ConversionStaging> ConversionStaging::create(const RankPlan& plan, bool with_groups,
                                                    MemoryKind memory, int device) {
  const bool on_device = memory == MemoryKind::kDevice;
  auto convertible = [on_device](DType from, DType to) {
    return on_device ? deviceCanConvertTypes(from, to) : hostCanConvert(from, to);
  };
  auto unsupported = [&](int32_t tensor, DType from, DType to, const char* what) {
    return Status(WSYNC_ERR_UNSUPPORTED,
                  "tensor '" + plan.tensors[static_cast<size_t>(tensor)].name +
                      "': " + memoryKindName(memory) + " memory cannot convert " + dtypeName(from) +
                      " to " + dtypeName(to) + what);
  };
  ConversionStaging staging;
  size_t bytes = 0;
  // Every range starts 16-byte aligned: kernels read and write it in the range's dtype (and the
  // device delta encoder reads it as elements), whatever the dtypes of the ranges before it.
  const auto aligned = [&bytes] { return bytes = (bytes + 15) / 16 * 16; };
  for (const WriteOp& op : plan.writes) {
    staging.write_offsets_.push_back(aligned());
    if (!op.converts()) continue;
    if (!convertible(op.src_dtype, op.dst_dtype))
      return unsupported(op.tensor, op.src_dtype, op.dst_dtype, "");
    bytes += static_cast<size_t>(plan.numElements(op)) * dtypeSize(op.dst_dtype);
  }
  if (with_groups) {
    for (const BroadcastGroup& g : plan.groups) {
      staging.group_offsets_.push_back(aligned());
      if (g.src_dtype == g.dst_dtype) continue;
      if (!convertible(g.src_dtype, g.dst_dtype))
        return unsupported(g.tensor, g.src_dtype, g.dst_dtype, " for a broadcast");
      bytes += static_cast<size_t>(g.num_elements) * dtypeSize(g.dst_dtype);
    }
  }
  if (bytes == 0) return staging;
  if (on_device) {
    WSYNC_ASSIGN_OR_RETURN(staging.device_, DeviceBuffer::allocate(bytes, device));
  } else {
    staging.host_.resize(bytes);
  }
  return staging;
}

}  // namespace wsync
