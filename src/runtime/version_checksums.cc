#include "runtime/version_checksums.h"

#include <algorithm>
#include <utility>

#ifdef WSYNC_HAVE_CUDA
#include "kernels/checksum_kernels.h"
#endif

namespace wsync {

ChecksumSpan landingSpan(const Region& region, int32_t dst_buffer, DType dst_dtype,
                         uint32_t output) {
  const uint64_t dsz = dtypeSize(dst_dtype);
  ChecksumSpan s;
  s.row_bytes = static_cast<uint64_t>(region.count[0]) * dsz;
  s.rows = static_cast<uint64_t>(region.count[1]);
  s.planes = static_cast<uint64_t>(region.count[2]);
  s.src_pitch = s.row_bytes;
  s.src_plane_pitch = s.row_bytes * s.rows;
  s.dst_buffer = static_cast<uint64_t>(dst_buffer);
  s.dst_offset = static_cast<uint64_t>(region.dst_offset) * dsz;
  s.dst_pitch = static_cast<uint64_t>(region.dst_stride[0]) * dsz;
  s.dst_plane_pitch = static_cast<uint64_t>(region.dst_stride[1]) * dsz;
  s.output = output;
  return s;
}

ChecksumSpan groupLandingSpan(const BroadcastGroup& g, const BufferSpan& dst, uint32_t output) {
  Region run;
  run.count[0] = g.num_elements;
  run.dst_offset = dst.offset;
  return landingSpan(run, dst.buffer, g.dst_dtype, output);
}

Result<VersionChecksums> VersionChecksums::create(std::vector<ChecksumSpan> spans,
                                                  MemoryKind memory, int device) {
  uint32_t outputs = 0;
  for (const ChecksumSpan& s : spans)
    outputs = std::max(outputs, s.output + 1);
  return create(std::move(spans), outputs, memory, device);
}

Result<VersionChecksums> VersionChecksums::create(std::vector<ChecksumSpan> spans,
                                                  uint32_t num_outputs, MemoryKind memory,
                                                  int device) {
  VersionChecksums c;
  c.num_outputs_ = num_outputs;
  c.has_spans_.assign(num_outputs, 0);
  for (const ChecksumSpan& s : spans) {
    if (s.output >= num_outputs) {
      return internalError("checksum span adds to output " + std::to_string(s.output) + " of " +
                           std::to_string(num_outputs));
    }
    c.has_spans_[s.output] = 1;
  }
  c.memory_ = memory;
  c.device_ = device;
  if (memory != MemoryKind::kDevice) {
    c.host_ = HostChecksumPlan(std::move(spans));
    return c;
  }
  c.spans_ = std::move(spans);
  if (c.spans_.empty()) return c;
#ifdef WSYNC_HAVE_CUDA
  c.total_tiles_ = planChecksumTiles(c.spans_);
  WSYNC_ASSIGN_OR_RETURN(c.stream_, DeviceStream::create(device));
  const size_t span_bytes = c.spans_.size() * sizeof(ChecksumSpan);
  WSYNC_ASSIGN_OR_RETURN(c.device_spans_, DeviceBuffer::allocate(span_bytes, device));
  WSYNC_ASSIGN_OR_RETURN(c.device_active_, DeviceBuffer::allocate(num_outputs, device));
  WSYNC_ASSIGN_OR_RETURN(c.device_sums_,
                         DeviceBuffer::allocate(num_outputs * sizeof(uint64_t), device));
  WSYNC_RETURN_IF_ERROR(
      copyAsync(c.device_spans_.data(), c.spans_.data(), span_bytes, c.stream_.get()));
  WSYNC_RETURN_IF_ERROR(streamSync(c.stream_.get(), std::chrono::milliseconds(60000))
                            .withContext("uploading the checksum spans"));
  return c;
#else
  return Status(WSYNC_ERR_UNSUPPORTED, "device checksums: this build of wsync has no CUDA");
#endif
}

Result<std::vector<uint64_t>> VersionChecksums::compute(const uint8_t* base,
                                                        const std::vector<uint8_t>& active,
                                                        CudaStreamHandle after,
                                                        std::chrono::milliseconds timeout) {
  if (active.size() != num_outputs_) {
    return internalError("checksums: " + std::to_string(active.size()) + " active flags for " +
                         std::to_string(num_outputs_) + " outputs");
  }
  active_ = active;
  if (memory_ == MemoryKind::kDevice && !spans_.empty())
    return computeOnDevice(base, after, timeout);
  std::vector<uint64_t> sums(num_outputs_, 0);
  host_.accumulate(base, active_, sums);
  return sums;
}

Result<std::vector<uint64_t>> VersionChecksums::computeOnDevice(const uint8_t* base,
                                                                CudaStreamHandle after,
                                                                std::chrono::milliseconds timeout) {
#ifdef WSYNC_HAVE_CUDA
  std::vector<uint64_t> sums(num_outputs_, 0);
  const size_t sum_bytes = sums.size() * sizeof(uint64_t);
  cudaStream_t stream = stream_.get();
  WSYNC_RETURN_IF_ERROR(setDevice(device_));
  WSYNC_RETURN_IF_ERROR(streamWaitFor(stream, after));
  WSYNC_RETURN_IF_ERROR(copyAsync(device_active_.data(), active_.data(), active_.size(), stream));
  WSYNC_RETURN_IF_ERROR(copyAsync(device_sums_.data(), sums.data(), sum_bytes, stream));
  WSYNC_RETURN_IF_ERROR(launchChecksums(reinterpret_cast<const ChecksumSpan*>(device_spans_.data()),
                                        static_cast<int64_t>(spans_.size()), total_tiles_, base,
                                        device_active_.data(),
                                        reinterpret_cast<uint64_t*>(device_sums_.data()), stream));
  // Bounded: the kernel first, then the (then immediate) copy of the sums into pageable memory.
  WSYNC_RETURN_IF_ERROR(streamSync(stream, timeout).withContext("device checksums"));
  WSYNC_RETURN_IF_ERROR(copyAsync(sums.data(), device_sums_.data(), sum_bytes, stream));
  WSYNC_RETURN_IF_ERROR(streamSync(stream, timeout).withContext("device checksums"));
  return sums;
#else
  (void)base;
  (void)after;
  (void)timeout;
  return Status(WSYNC_ERR_UNSUPPORTED, "device checksums: this build of wsync has no CUDA");
#endif
}

}  // namespace wsync
