#include "runtime/trainer_sources.h"

#include <algorithm>
#include <cstring>

#include "runtime/host_convert.h"

namespace wsync {

Status TrainerSources::setUp(const std::vector<LocalBuffer>& buffers,
                             const std::vector<void*>& data, const TrainerQuantizer& quantizer,
                             MemoryKind memory, int device, bool snapshot) {
  buffers_ = &buffers;
  data_ = &data;
  quantizer_ = &quantizer;
  snapshot_ = snapshot;
  if (!snapshot) return Status::ok();
  size_t total = 0;
  for (const LocalBuffer& b : buffers) {
    total = (total + 15) / 16 * 16;  // each buffer aligned for the element-wise kernels
    snapshot_offsets_.push_back(total);
    total += static_cast<size_t>(b.num_elements) * dtypeSize(b.dtype);
  }
  if (memory == MemoryKind::kDevice) {
    WSYNC_ASSIGN_OR_RETURN(device_snapshot_, DeviceBuffer::allocate(total, device));
  } else {
    host_snapshot_.resize(std::max<size_t>(total, 1));
  }
  return Status::ok();
}

const uint8_t* TrainerSources::snapshotData() const {
  if (!snapshot_) return nullptr;
  return device_snapshot_.data() != nullptr ? device_snapshot_.data() : host_snapshot_.data();
}

size_t TrainerSources::snapshotBytes() const {
  if (!snapshot_) return 0;
  return device_snapshot_.data() != nullptr ? device_snapshot_.size() : host_snapshot_.size();
}

Status TrainerSources::takeSnapshot(CudaStreamHandle stream) {
  const bool on_device = device_snapshot_.data() != nullptr;
  for (size_t i = 0; i < buffers_->size(); ++i) {
    const LocalBuffer& b = (*buffers_)[i];
    const size_t bytes = static_cast<size_t>(b.num_elements) * dtypeSize(b.dtype);
    if (on_device) {
      WSYNC_RETURN_IF_ERROR(
          copyAsync(device_snapshot_.data() + snapshot_offsets_[i], (*data_)[i], bytes, stream));
    } else if (bytes > 0) {  // an empty buffer may have no data pointer
      std::memcpy(host_snapshot_.data() + snapshot_offsets_[i], (*data_)[i], bytes);
    }
  }
  return Status::ok();
}

const uint8_t* TrainerSources::of(int32_t buffer) const {
  if (quantizer_ != nullptr && !quantizer_->empty() && buffer >= quantizer_->firstBuffer()) {
    return quantizer_->bufferData(buffer);
  }
  const auto b = static_cast<size_t>(buffer);
  if (snapshot_) return snapshotData() + snapshot_offsets_[b];
  return static_cast<const uint8_t*>((*data_)[b]);
}

Status TrainerSources::convertHost(const RankPlan& plan, const WriteOp& op, uint8_t* staged) const {
  const Region r = plan.region(op);
  const size_t ssz = dtypeSize(op.src_dtype);
  const size_t row_bytes = static_cast<size_t>(r.count[0]) * dtypeSize(op.dst_dtype);
  const uint8_t* src_base = of(op.src_buffer) + static_cast<size_t>(r.src_offset) * ssz;
  for (int64_t row = 0; row < r.count[1] * r.count[2]; ++row) {
    const int64_t plane = row / r.count[1];
    const int64_t at = plane * r.src_stride[1] + (row % r.count[1]) * r.src_stride[0];
    WSYNC_RETURN_IF_ERROR(::wsync::convertHost(
        src_base + static_cast<size_t>(at) * ssz, op.src_dtype,
        staged + static_cast<size_t>(row) * row_bytes, op.dst_dtype, r.count[0]));
  }
  return Status::ok();
}

Status TrainerSources::convertAsync(const RankPlan& plan, const WriteOp& op, uint8_t* staged,
                                    float scale, CudaStreamHandle stream) const {
  Region packed = plan.region(op);  // the source region, written contiguously into staging
  packed.dst_offset = 0;
  packed.dst_stride[0] = packed.count[0];
  packed.dst_stride[1] = packed.count[0] * packed.count[1];
  const uint8_t* src =
      of(op.src_buffer) + static_cast<size_t>(op.src_offset) * dtypeSize(op.src_dtype);
  packed.src_offset = 0;
  return convertRegionAsync(src, op.src_dtype, staged, op.dst_dtype, packed, scale, stream);
}

}  // namespace wsync
