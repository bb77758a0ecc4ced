// The batched device copies of the CUDA IPC backend: the writes whose source is registered device
// memory are queued here by write() and run at flush() as one kernel (kernels/batched_copy.h) on
// the transport's stream, instead of one driver copy each: a version of a large model is thousands
// of writes, and enqueuing them one by one costs more host time than the copies take on the
// device. (Sending long contiguous writes to cudaMemcpyAsync instead was measured on the H200 and
// was not faster end to end: benchmarks/README.md.)
//
// Owns the task tables (a pinned staging table for the upload, and kCachedTables tables on the
// device for the kernel: a batch equal to one already uploaded, as every version's is once each
// slot was written, launches from it without an upload) and the events that mark a launch's end
// and, when timed, bracket its kernel.
// Callers make the transport's device current. One thread (the transport's owner).
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "kernels/batched_copy.h"
#include "transport/cuda_ipc/cuda_handles.h"

namespace wsync {

class CopyBatch {
 public:
  // `timed`: each launch's kernel is bracketed by timing events (see lastLaunch()).
  static Result<std::unique_ptr<CopyBatch>> create(bool timed);
  // Frees the tables once the last launch completed; leaks them while it still runs (a hung
  // kernel may still read them).
  ~CopyBatch();
  CopyBatch(const CopyBatch&) = delete;
  CopyBatch& operator=(const CopyBatch&) = delete;

  // Queues one copy (device addresses valid on the transport's device; see CopyTask).
  void add(const CopyTask& task);
  bool empty() const { return tasks_.empty(); }

  // Enqueues every queued copy on `stream` as one kernel, after the upload of its task table, and
  // empties the queue (also when it fails). Before rewriting the tables it waits, at most
  // `timeout`, for the previous launch to complete (TIMEOUT then, nothing enqueued).
  Status launch(cudaStream_t stream, std::chrono::milliseconds timeout);

  // The previous launch: its copies and bytes, and its kernel's device time in milliseconds once
  // the kernel completed (-1 when not timed or still running).
  struct Timing {
    uint64_t copies = 0;
    uint64_t bytes = 0;
    double device_ms = -1;
  };
  Timing lastLaunch() const;

 private:
  CopyBatch(CudaEventPtr done, CudaEventPtr started, CudaEventPtr ended)
      : done_(std::move(done)), started_(std::move(started)), ended_(std::move(ended)) {}
  // One task table on the device: the tasks it holds (first_tile set) and when it was last used.
  struct DeviceTable {
    std::vector<CopyTask> tasks;
    CopyTask* data = nullptr;
    size_t capacity = 0;  // bytes
    uint64_t used = 0;    // launches_ at its last use
  };
  static constexpr size_t kCachedTables = 4;

  // The device table holding tasks_ (uploaded on `stream` when no table holds it yet, into the
  // least recently used one).
  Result<const CopyTask*> tableFor(cudaStream_t stream);
  void freeTables();
  Status enqueue(cudaStream_t stream, std::chrono::milliseconds timeout);

  CudaEventPtr done_;     // recorded after each launch's kernel
  CudaEventPtr started_;  // timing events (null when not timed)
  CudaEventPtr ended_;
  bool launched_ = false;      // done_ was recorded
  bool timed_launch_ = false;  // the last launch recorded both timing events
  uint64_t queued_bytes_ = 0;
  Timing last_;
  std::vector<CopyTask> tasks_;
  CopyTask* host_tasks_ = nullptr;  // pinned upload staging
  size_t host_capacity_ = 0;        // bytes
  std::array<DeviceTable, kCachedTables> tables_;
  uint64_t launches_ = 0;
};

}  // namespace wsync
