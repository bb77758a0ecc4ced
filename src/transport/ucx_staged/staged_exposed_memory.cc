// The staged UCX backend's exposed memory (staged_exposed_memory.h): landing areas, their progress
// logs and the moves to the device.
#include "transport/ucx_staged/staged_exposed_memory.h"

#include <atomic>
#include <cstring>
#include <string>
#include <utility>

#include "common/cuda_check.h"
#include "transport/ucx/ucx_transport.h"
#include "transport/ucx_staged/progress_log.h"

namespace wsync::staged_internal {

StagedExposedMemory::StagedExposedMemory(int device, std::unique_ptr<ExposedMemory> landing,
                                         uint8_t* device_data, bool owns_device_data, bool pinned,
                                         StreamPtr stream, EventPtr event,
                                         std::unique_ptr<ExposedMemory> logs, uint32_t writers,
                                         uint32_t records)
    : device_(device),
      landing_(std::move(landing)),
      device_data_(device_data),
      owns_device_data_(owns_device_data),
      pinned_(pinned),
      stream_(std::move(stream)),
      event_(std::move(event)),
      logs_(std::move(logs)),
      writers_(logs_ ? writers : 0),
      records_(records),
      consumed_(writers_, 0) {
  descriptor_ = landing_->descriptor();
  if (logs_) {
    std::memset(logs_->data(), 0, logs_->size());
    descriptor_ = withDescriptorExtension(
        descriptor_, encodeProgressLayout({writers_, records_, logs_->descriptor()}));
  }
}

StagedExposedMemory::~StagedExposedMemory() {
  (void)cudaUseDevice(device_);
  (void)cudaStreamSynchronize(stream_.get());
  if (pinned_) (void)cudaHostUnregister(landing_->data());
  if (owns_device_data_) (void)cudaFree(device_data_);
  (void)cudaGetLastError();
}

Status StagedExposedMemory::landArrived() {
  if (writers_ == 0) return Status::ok();
  WSYNC_RETURN_IF_ERROR(cudaUseDevice(device_));
  auto* logs = static_cast<uint8_t*>(logs_->data());
  for (uint32_t w = 0; w < writers_; ++w) {
    uint8_t* log = logs + w * logBytes(records_);
    uint32_t count = 0;
    const uint64_t header = std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(log))
                                .load(std::memory_order_acquire);
    if (!unsealCount(header, count) || count <= consumed_[w]) continue;
    if (count > records_) {  // not a count this log can hold: land() moves everything
      complete_ = false;
      consumed_[w] = count;
      continue;
    }
    for (uint32_t i = consumed_[w]; i < count; ++i) {
      uint64_t rec[kRecordWords];
      std::memcpy(rec, log + kLogHeaderBytes + i * kRecordBytes, kRecordBytes);
      WSYNC_RETURN_IF_ERROR(landRecord(rec[0], rec[1], rec[2], rec[3]));
    }
    consumed_[w] = count;
  }
  return Status::ok();
}

Status StagedExposedMemory::land(const std::vector<ByteRange>& ranges,
                                 std::chrono::milliseconds timeout) {
  const std::string what = "staged UCX landing";
  WSYNC_RETURN_IF_ERROR(cudaUseDevice(device_));
  // What the writers reported is (being) moved already; when it is all of `ranges`, only the
  // wait is left. Otherwise every range is moved (again): correct whatever was reported.
  WSYNC_RETURN_IF_ERROR(landArrived());
  uint64_t expected = 0;
  for (const ByteRange& r : ranges)
    expected += r.bytes;
  const bool all_reported = complete_ && writers_ > 0 && early_bytes_ == expected;
  resetLogs();
  const auto* from = static_cast<const uint8_t*>(landing_->data());
  for (const ByteRange& r : all_reported ? std::vector<ByteRange>{} : ranges) {
    if (r.bytes == 0) continue;
    if (r.offset > size() || r.bytes > size() - r.offset) {
      return invalidArgument(what + ": range [" + std::to_string(r.offset) + ", +" +
                             std::to_string(r.bytes) + ") outside the " + std::to_string(size()) +
                             " bytes exposed");
    }
    WSYNC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device_data_ + r.offset, from + r.offset, r.bytes,
                                               cudaMemcpyHostToDevice, stream_.get()),
                               what + ": cudaMemcpyAsync of " + std::to_string(r.bytes) + " bytes");
  }
  WSYNC_CUDA_RETURN_IF_ERROR(cudaEventRecord(event_.get(), stream_.get()),
                             what + ": cudaEventRecord");
  return waitEvent(event_.get(), timeout, what);
}

Status StagedExposedMemory::landRecord(uint64_t offset, uint64_t pitch, uint64_t row_bytes,
                                       uint64_t rows) {
  uint64_t extent = 0;
  uint64_t end = 0;
  if (row_bytes == 0 || rows == 0 || (rows > 1 && pitch < row_bytes) ||
      __builtin_mul_overflow(rows - 1, pitch, &extent) ||
      __builtin_add_overflow(extent, row_bytes, &extent) ||
      __builtin_add_overflow(offset, extent, &end) || end > size()) {
    complete_ = false;
    return Status::ok();
  }
  const auto* from = static_cast<const uint8_t*>(landing_->data());
  const size_t p = rows > 1 ? pitch : row_bytes;
  WSYNC_CUDA_RETURN_IF_ERROR(
      cudaMemcpy2DAsync(device_data_ + offset, p, from + offset, p, row_bytes, rows,
                        cudaMemcpyHostToDevice, stream_.get()),
      "staged UCX early landing: cudaMemcpy2DAsync of " + std::to_string(rows) + " rows of " +
          std::to_string(row_bytes) + " bytes");
  early_bytes_ += row_bytes * rows;
  return Status::ok();
}

void StagedExposedMemory::resetLogs() {
  auto* logs = static_cast<uint8_t*>(writers_ > 0 ? logs_->data() : nullptr);
  for (uint32_t w = 0; w < writers_; ++w) {
    std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(logs + w * logBytes(records_)))
        .store(0, std::memory_order_release);
    consumed_[w] = 0;
  }
  early_bytes_ = 0;
  complete_ = true;
}

DirectExposedMemory::~DirectExposedMemory() {
  void* data = registered_->data();
  registered_.reset();  // the UCX registration goes before the memory it covers
  if (owns_) {
    (void)cudaUseDevice(device_);
    (void)cudaFree(data);
    (void)cudaGetLastError();
  }
}

}  // namespace wsync::staged_internal
