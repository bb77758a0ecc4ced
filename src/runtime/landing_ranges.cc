#include "runtime/landing_ranges.h"

#include <algorithm>

namespace wsync {

std::vector<ByteRange> landingRanges(const RankPlan& plan,
                                     const std::vector<uint64_t>& buffer_byte_offsets,
                                     const std::vector<bool>& skipped) {
  std::vector<ByteRange> rows;
  for (size_t i = 0; i < plan.writes.size(); ++i) {
    if (i < skipped.size() && skipped[i]) continue;
    const WriteOp& op = plan.writes[i];
    const Region r = plan.region(op);
    const uint64_t dsz = dtypeSize(op.dst_dtype);
    const uint64_t base = buffer_byte_offsets[static_cast<size_t>(op.dst_buffer)];
    for (int64_t plane = 0; plane < r.count[2]; ++plane) {
      for (int64_t row = 0; row < r.count[1]; ++row) {
        const int64_t first = r.dst_offset + plane * r.dst_stride[1] + row * r.dst_stride[0];
        rows.push_back(
            {base + static_cast<uint64_t>(first) * dsz, static_cast<uint64_t>(r.count[0]) * dsz});
      }
    }
  }
  std::sort(rows.begin(), rows.end(),
            [](const ByteRange& a, const ByteRange& b) { return a.offset < b.offset; });
  std::vector<ByteRange> merged;
  for (const ByteRange& r : rows) {
    if (r.bytes == 0) continue;
    if (!merged.empty() && r.offset <= merged.back().offset + merged.back().bytes) {
      ByteRange& last = merged.back();
      last.bytes = std::max(last.bytes, r.offset + r.bytes - last.offset);
    } else {
      merged.push_back(r);
    }
  }
  return merged;
}

}  // namespace wsync
