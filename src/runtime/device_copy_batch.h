// DeviceCopyBatch: the same-dtype writes of one version from device memory into CUDA IPC peers,
// copied by one kernel (kernels/batched_copy.h) instead of one cudaMemcpy2DAsync per write op.
// (Sending long contiguous writes to the driver's cudaMemcpyAsync instead was measured on the H200
// and was not faster end to end: benchmarks/README.md.)
// Plain C++ so the runtime builds without CUDA (create() is then UNSUPPORTED).
//
// Use, per version: add() every write, then launch(); the CUDA IPC transport's next flush()
// completes the copies (they run on its stream). Sources must be device memory of the transport's
// device, ready when launch() is called. One thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/status.h"
#include "transport/write_transport.h"

namespace wsync {

class DeviceCopyBatch {
 public:
  // `transport`: a CUDA IPC backend (INVALID_ARGUMENT for another; UNSUPPORTED without CUDA).
  // `timed`: each launch's kernel is bracketed by CUDA events (see lastLaunch()).
  static Result<std::unique_ptr<DeviceCopyBatch>> create(WriteTransport* transport,
                                                         bool timed = false);
  virtual ~DeviceCopyBatch() = default;

  // Queues `planes` x `rows` rows of `row_bytes` from `src` into `remote` at `remote_offset`
  // (pitches in bytes; unused ones may be 0). The target range is bounds-checked now
  // (INVALID_ARGUMENT naming the peer and remote id; nothing queued then).
  virtual Status add(RemoteMemoryId remote, uint64_t remote_offset, uint64_t remote_pitch,
                     uint64_t remote_plane_pitch, const void* src, size_t src_pitch,
                     size_t src_plane_pitch, size_t row_bytes, size_t rows, size_t planes) = 0;

  // Enqueues every queued copy as one kernel on the transport's stream and empties the queue (also
  // when it fails).
  virtual Status launch() = 0;

  // The previous launch: bytes it copies, and its kernel's device time in milliseconds once the
  // kernel completed (after the transport's flush); -1 when not timed or not complete.
  struct LaunchTiming {
    uint64_t bytes = 0;
    double device_ms = -1;
  };
  virtual LaunchTiming lastLaunch() const = 0;
};

}  // namespace wsync
