#include "runtime/device_copy_batch.h"

#ifdef WSYNC_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/cuda_check.h"
#include "kernels/batched_copy.h"
#include "transport/cuda_ipc/cuda_ipc_transport.h"
#endif

namespace wsync {

#ifdef WSYNC_HAVE_CUDA
namespace {

class CudaDeviceCopyBatch final : public DeviceCopyBatch {
 public:
  CudaDeviceCopyBatch(CudaIpcTransport* transport, cudaEvent_t started, cudaEvent_t ended)
      : transport_(transport), started_(started), ended_(ended) {}
  ~CudaDeviceCopyBatch() override {
    if (started_ != nullptr) (void)cudaEventDestroy(started_);
    if (ended_ != nullptr) (void)cudaEventDestroy(ended_);
    // The transport's flush (or destructor) completed every launch reading these buffers.
    if (host_tasks_ != nullptr) (void)cudaFreeHost(host_tasks_);
    if (device_tasks_ != nullptr) (void)cudaFree(device_tasks_);
    (void)cudaGetLastError();
  }
  CudaDeviceCopyBatch(const CudaDeviceCopyBatch&) = delete;
  CudaDeviceCopyBatch& operator=(const CudaDeviceCopyBatch&) = delete;

  Status add(RemoteMemoryId remote, uint64_t remote_offset, uint64_t remote_pitch,
             uint64_t remote_plane_pitch, const void* src, size_t src_pitch, size_t src_plane_pitch,
             size_t row_bytes, size_t rows, size_t planes) override {
    if (row_bytes == 0 || rows == 0 || planes == 0) return Status::ok();
    const uint64_t extent =
        (planes - 1) * remote_plane_pitch + (rows - 1) * remote_pitch + row_bytes;
    WSYNC_ASSIGN_OR_RETURN(void* dst, transport_->remoteAddress(remote, remote_offset, extent));
    queued_bytes_ += static_cast<uint64_t>(row_bytes) * rows * planes;
    CopyTask t;
    t.src = static_cast<const uint8_t*>(src);
    t.dst = static_cast<uint8_t*>(dst);
    t.row_bytes = row_bytes;
    t.rows = rows;
    t.planes = planes;
    t.src_pitch = src_pitch;
    t.dst_pitch = remote_pitch;
    t.src_plane_pitch = src_plane_pitch;
    t.dst_plane_pitch = remote_plane_pitch;
    tasks_.push_back(t);
    return Status::ok();
  }

  Status launch() override {
    if (tasks_.empty()) return Status::ok();
    last_bytes_ = queued_bytes_;
    queued_bytes_ = 0;
    timed_launch_ = false;
    if (started_ != nullptr) {
      WSYNC_CUDA_RETURN_IF_ERROR(cudaEventRecord(started_, transport_->stream()),
                                 "batched device copy: cudaEventRecord");
    }
    // The queue is emptied also when the enqueue fails: the version fails, and the next starts
    // from an empty batch.
    const Status launched = launchKernel();
    tasks_.clear();
    WSYNC_RETURN_IF_ERROR(launched);
    if (ended_ != nullptr) {
      WSYNC_CUDA_RETURN_IF_ERROR(cudaEventRecord(ended_, transport_->stream()),
                                 "batched device copy: cudaEventRecord");
      timed_launch_ = true;
    }
    return Status::ok();
  }

  LaunchTiming lastLaunch() const override {
    LaunchTiming timing;
    timing.bytes = last_bytes_;
    float ms = 0;
    if (timed_launch_ && cudaEventElapsedTime(&ms, started_, ended_) == cudaSuccess) {
      timing.device_ms = ms;
    }
    (void)cudaGetLastError();  // cudaErrorNotReady while the kernel runs
    return timing;
  }

 private:
  Status launchKernel() {
    if (tasks_.empty()) return Status::ok();
    const uint64_t tiles = planBatchedCopy(tasks_);
    const size_t bytes = tasks_.size() * sizeof(CopyTask);
    if (bytes > capacity_) {
      if (host_tasks_ != nullptr) (void)cudaFreeHost(host_tasks_);
      if (device_tasks_ != nullptr) (void)cudaFree(device_tasks_);
      host_tasks_ = nullptr;
      device_tasks_ = nullptr;
      capacity_ = 0;
      const std::string what =
          "batched device copy: task table of " + std::to_string(bytes) + " bytes";
      void* host = nullptr;
      WSYNC_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&host, bytes, cudaHostAllocDefault),
                                 what + ": cudaHostAlloc");
      host_tasks_ = static_cast<CopyTask*>(host);
      void* device = nullptr;
      WSYNC_CUDA_RETURN_IF_ERROR(cudaMalloc(&device, bytes), what + ": cudaMalloc");
      device_tasks_ = static_cast<CopyTask*>(device);
      capacity_ = bytes;
    }
    // The previous version's flush completed the copy that read the pinned table.
    std::memcpy(host_tasks_, tasks_.data(), bytes);
    WSYNC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device_tasks_, host_tasks_, bytes,
                                               cudaMemcpyHostToDevice, transport_->stream()),
                               "batched device copy: task table upload");
    const auto count = static_cast<int64_t>(tasks_.size());
    return launchBatchedCopy(device_tasks_, count, tiles, transport_->stream());
  }

  CudaIpcTransport* transport_;
  cudaEvent_t started_ = nullptr;  // timing events (owned; null when not timed)
  cudaEvent_t ended_ = nullptr;
  bool timed_launch_ = false;  // the last launch recorded both events
  uint64_t queued_bytes_ = 0;
  uint64_t last_bytes_ = 0;
  std::vector<CopyTask> tasks_;
  CopyTask* host_tasks_ = nullptr;    // pinned
  CopyTask* device_tasks_ = nullptr;  // what the kernel reads
  size_t capacity_ = 0;               // bytes of each table
};

}  // namespace

Result<std::unique_ptr<DeviceCopyBatch>> DeviceCopyBatch::create(WriteTransport* transport,
                                                                 bool timed) {
  auto* ipc = dynamic_cast<CudaIpcTransport*>(transport);
  if (ipc == nullptr) {
    return invalidArgument(std::string("a batched device copy needs the CUDA IPC backend, not ") +
                           (transport != nullptr ? transport->name() : "none"));
  }
  cudaEvent_t started = nullptr;
  cudaEvent_t ended = nullptr;
  if (timed) {
    WSYNC_CUDA_RETURN_IF_ERROR(cudaEventCreate(&started), "batched device copy: cudaEventCreate");
    const cudaError_t e = cudaEventCreate(&ended);
    if (e != cudaSuccess) {
      (void)cudaEventDestroy(started);
      return cudaCheck(e, "batched device copy: cudaEventCreate");
    }
  }
  return std::unique_ptr<DeviceCopyBatch>(new CudaDeviceCopyBatch(ipc, started, ended));
}
#else
Result<std::unique_ptr<DeviceCopyBatch>> DeviceCopyBatch::create(WriteTransport* transport,
                                                                 bool timed) {
  (void)transport;
  (void)timed;
  return Status(WSYNC_ERR_UNSUPPORTED, "this build of wsync has no CUDA");
}
#endif

}  // namespace wsync
