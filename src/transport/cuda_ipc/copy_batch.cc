#include "transport/cuda_ipc/copy_batch.h"

#include <cstring>
#include <string>
#include <utility>

#include "common/cuda_check.h"

namespace wsync {

Result<std::unique_ptr<CopyBatch>> CopyBatch::create(bool timed) {
  const std::string what = "batched device copy";
  WSYNC_ASSIGN_OR_RETURN(CudaEventPtr done, makeCudaEvent(/*timing=*/false, what));
  CudaEventPtr started;
  CudaEventPtr ended;
  if (timed) {
    WSYNC_ASSIGN_OR_RETURN(started, makeCudaEvent(/*timing=*/true, what));
    WSYNC_ASSIGN_OR_RETURN(ended, makeCudaEvent(/*timing=*/true, what));
  }
  return std::unique_ptr<CopyBatch>(
      new CopyBatch(std::move(done), std::move(started), std::move(ended)));
}

CopyBatch::~CopyBatch() {
  // A launch still running (the transport gave up waiting for its stream) may read the tables.
  if (!launched_ || cudaEventQuery(done_.get()) != cudaErrorNotReady) freeTables();
  (void)cudaGetLastError();
}

void CopyBatch::freeTables() {
  if (host_tasks_ != nullptr) (void)cudaCheck(cudaFreeHost(host_tasks_), "cudaFreeHost");
  host_tasks_ = nullptr;
  host_capacity_ = 0;
  for (DeviceTable& t : tables_) {
    if (t.data != nullptr) (void)cudaCheck(cudaFree(t.data), "cudaFree");
    t = DeviceTable{};
  }
}

void CopyBatch::add(const CopyTask& task) {
  tasks_.push_back(task);
  queued_bytes_ += task.row_bytes * task.rows * task.planes;
}

Status CopyBatch::launch(cudaStream_t stream, std::chrono::milliseconds timeout) {
  if (tasks_.empty()) return Status::ok();
  last_ = Timing{tasks_.size(), queued_bytes_, -1};
  queued_bytes_ = 0;
  timed_launch_ = false;
  // The queue is emptied also when the enqueue fails: those writes fail with this flush, and the
  // next round starts from an empty batch.
  Status launched = enqueue(stream, timeout);
  tasks_.clear();
  return launched;
}

Status CopyBatch::enqueue(cudaStream_t stream, std::chrono::milliseconds timeout) {
  if (launched_) {  // normally complete: the flush that launched it waited for it
    const Status idle = waitCudaEvent(done_.get(), timeout);
    if (!idle.isOk()) {
      return idle.withContext("batched device copy: the previous batch (its tables are reused)");
    }
  }
  const uint64_t tiles = planBatchedCopy(tasks_);
  WSYNC_ASSIGN_OR_RETURN(const CopyTask* table, tableFor(stream));
  // From here on done_ is recorded whatever fails, so that the next launch waits for the upload.
  Status kernel = started_ ? cudaCheck(cudaEventRecord(started_.get(), stream),
                                       "batched device copy: cudaEventRecord")
                           : Status::ok();
  if (kernel.isOk()) {
    kernel = launchBatchedCopy(table, static_cast<int64_t>(tasks_.size()), tiles, stream);
  }
  const cudaError_t marked = cudaEventRecord(done_.get(), stream);
  launched_ = launched_ || marked == cudaSuccess;
  WSYNC_RETURN_IF_ERROR(kernel);
  WSYNC_CUDA_RETURN_IF_ERROR(marked, "batched device copy: cudaEventRecord");
  if (ended_) {
    WSYNC_CUDA_RETURN_IF_ERROR(cudaEventRecord(ended_.get(), stream),
                               "batched device copy: cudaEventRecord");
    timed_launch_ = true;
  }
  return Status::ok();
}

// Called once the previous launch completed (enqueue waited for it): every table may be rewritten.
Result<const CopyTask*> CopyBatch::tableFor(cudaStream_t stream) {
  ++launches_;
  const size_t bytes = tasks_.size() * sizeof(CopyTask);
  DeviceTable* oldest = &tables_[0];
  for (DeviceTable& t : tables_) {
    if (t.tasks.size() == tasks_.size() && std::memcmp(t.tasks.data(), tasks_.data(), bytes) == 0) {
      t.used = launches_;
      return static_cast<const CopyTask*>(t.data);
    }
    if (t.used < oldest->used) oldest = &t;
  }
  const std::string what = "batched device copy: task table of " + std::to_string(bytes) + " bytes";
  DeviceTable& t = *oldest;
  t.tasks.clear();  // holds nothing valid until the upload below is enqueued
  if (bytes > t.capacity) {
    if (t.data != nullptr) (void)cudaCheck(cudaFree(t.data), "cudaFree");
    t.data = nullptr;
    t.capacity = 0;
    void* device = nullptr;
    WSYNC_CUDA_RETURN_IF_ERROR(cudaMalloc(&device, bytes), what + ": cudaMalloc");
    t.data = static_cast<CopyTask*>(device);
    t.capacity = bytes;
  }
  if (bytes > host_capacity_) {
    if (host_tasks_ != nullptr) (void)cudaCheck(cudaFreeHost(host_tasks_), "cudaFreeHost");
    host_tasks_ = nullptr;
    host_capacity_ = 0;
    void* host = nullptr;
    WSYNC_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&host, bytes, cudaHostAllocDefault),
                               what + ": cudaHostAlloc");
    host_tasks_ = static_cast<CopyTask*>(host);
    host_capacity_ = bytes;
  }
  std::memcpy(host_tasks_, tasks_.data(), bytes);
  WSYNC_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(t.data, host_tasks_, bytes, cudaMemcpyHostToDevice, stream),
      what + ": upload");
  t.tasks = tasks_;
  t.used = launches_;
  return static_cast<const CopyTask*>(t.data);
}

CopyBatch::Timing CopyBatch::lastLaunch() const {
  Timing timing = last_;
  float ms = 0;
  if (timed_launch_ && cudaEventElapsedTime(&ms, started_.get(), ended_.get()) == cudaSuccess) {
    timing.device_ms = ms;
  }
  (void)cudaGetLastError();  // cudaErrorNotReady while the kernel runs
  return timing;
}

}  // namespace wsync
