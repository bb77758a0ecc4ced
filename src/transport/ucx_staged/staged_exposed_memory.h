// Private to the staged UCX backend: its targets' exposed memory (the target side). Staged: device
// memory behind a UCX landing area, moved to the device by landArrived()/land(), with the writers'
// progress logs. Direct: device memory that a CUDA-capable UCX registered itself.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "transport/ucx_staged/staged_cuda.h"
#include "transport/write_transport.h"

namespace wsync::staged_internal {

// Device memory (owned, or the caller's) behind a UCX landing area of the same size, with the
// writers' progress logs when `logs` is set (`writers` logs of `records` records).
class StagedExposedMemory final : public ExposedMemory {
 public:
  StagedExposedMemory(int device, std::unique_ptr<ExposedMemory> landing, uint8_t* device_data,
                      bool owns_device_data, bool pinned, StreamPtr stream, EventPtr event,
                      std::unique_ptr<ExposedMemory> logs, uint32_t writers, uint32_t records);
  ~StagedExposedMemory() override;
  StagedExposedMemory(const StagedExposedMemory&) = delete;
  StagedExposedMemory& operator=(const StagedExposedMemory&) = delete;

  void* data() const override { return device_data_; }
  size_t size() const override { return landing_->size(); }
  const std::vector<uint8_t>& descriptor() const override { return descriptor_; }
  bool needsLanding() const override { return true; }

  Status beginLanding() override {
    resetLogs();
    return Status::ok();
  }

  Status landArrived() override;
  Status land(const std::vector<ByteRange>& ranges, std::chrono::milliseconds timeout) override;

 private:
  // Starts moving one reported write (rows of the landing area to the same place in data()). A
  // record outside the memory (a writer bug) is not moved and makes land() move everything.
  Status landRecord(uint64_t offset, uint64_t pitch, uint64_t row_bytes, uint64_t rows);

  // A new round: empty logs (their headers zeroed), nothing reported.
  void resetLogs();

  int device_;
  std::unique_ptr<ExposedMemory> landing_;
  uint8_t* device_data_;
  bool owns_device_data_;
  bool pinned_;  // the landing area is page-locked for CUDA (cudaHostRegister)
  StreamPtr stream_;
  EventPtr event_;
  std::unique_ptr<ExposedMemory> logs_;  // UCX memory of the progress logs, or null
  uint32_t writers_;                     // logs (0 without logs)
  uint32_t records_;                     // records per log
  std::vector<uint32_t> consumed_;       // records of each log already moved this round
  uint64_t early_bytes_ = 0;             // bytes moved from reports this round
  bool complete_ = true;                 // no report this round was unusable
  std::vector<uint8_t> descriptor_;
};

// Device memory that a CUDA-capable UCX registered itself (writes land in data() directly); owns
// the cudaMalloc allocation when `owns`.
class DirectExposedMemory final : public ExposedMemory {
 public:
  DirectExposedMemory(int device, std::unique_ptr<ExposedMemory> registered, bool owns)
      : device_(device), registered_(std::move(registered)), owns_(owns) {}
  ~DirectExposedMemory() override;
  DirectExposedMemory(const DirectExposedMemory&) = delete;
  DirectExposedMemory& operator=(const DirectExposedMemory&) = delete;
  void* data() const override { return registered_->data(); }
  size_t size() const override { return registered_->size(); }
  const std::vector<uint8_t>& descriptor() const override { return registered_->descriptor(); }

 private:
  int device_;
  std::unique_ptr<ExposedMemory> registered_;
  bool owns_;
};

}  // namespace wsync::staged_internal
