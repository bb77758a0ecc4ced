// The staged UCX backend of WriteTransport: device memory reached through UCX when the UCX in use
// cannot read or write CUDA memory itself (Debian's UCX, and any UCX built without CUDA). Every
// byte crosses pinned host memory:
//
//   writer: device source --cudaMemcpy2DAsync--> pinned chunk --UCX put--> target's landing area
//   target: landing area (pinned host, UCX-registered) --landArrived()/land(): cudaMemcpyAsync-->
//           device memory
//
// Writer side: sources in device memory are copied into a ring of pinned host chunks on the
// transport's own stream; a chunk is put through UCX as soon as its copy completed, while the copy
// engine fills the next chunks, so device->host copies overlap the wire. A chunk is reused only
// after a UCX flush covered its puts. Sources in host memory go to UCX directly.
// Target side: allocateExposed()/expose() memory is device memory (data()) paired with a landing
// area of the same size that UCX allocates (shared memory within a node, registered for RDMA
// across nodes) and CUDA pins. descriptor() is the landing area's UCX descriptor (with an
// extension naming the progress logs, which UCX ignores), so a writer needs nothing but UCX: a
// host-memory writer may use the plain UCX backend. needsLanding() is true: the owner calls land()
// for the ranges writers filled, after it learned (out of band) that they flushed and before
// anything reads data().
// Early landing: writers with a rank (options.writer_rank) also report each completed write into
// the target's progress log of that rank, after a UCX fence so that the report never overtakes
// the bytes; landArrived() starts moving reported writes to the device while later ones are still
// on the wire, so device->host, the wire and host->device overlap, and land() moves only what was
// not reported (everything, when any report is missing).
//
// With a UCX that handles CUDA memory (options.use_ucx_cuda and ucxHandlesCudaMemory()), nothing
// is staged: device memory is registered with UCX and written directly (see the option).
//
// Threads: as WriteTransport. Every entry point makes options.device current on the calling
// thread. Sources produced by other streams must be complete (or ordered before this transport's
// stream) when write() is called, as for the CUDA IPC backend.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>

#include "common/status.h"
#include "transport/write_transport.h"

namespace wsync {

struct StagedUcxTransportOptions {
  int device = 0;                 // CUDA ordinal of the stream, chunks and exposed memory
  size_t chunk_bytes = 8u << 20;  // pinned chunk size; a write larger than this is split
  int num_chunks = 4;             // chunks in the ring (>= 2 for any overlap)
  // How long a write waits for a chunk (its device copy, or the flush that frees it).
  std::chrono::milliseconds post_timeout{30000};
  // When the UCX this process loaded handles CUDA memory (ucxHandlesCudaMemory(), e.g. the
  // libucx-cu13 wheel), skip the staging: exposed device memory is registered with UCX itself
  // (no landing area, needsLanding() false) and device sources are put directly; name() is then
  // "ucx_cuda". false (the default) stages whatever UCX can do: UCX device puts go row by row,
  // which for layouts with short strided rows is far slower than staging (see benchmarks/).
  // Every rank of a job must load the same kind of UCX.
  bool use_ucx_cuda = false;
  // Early landing (targets): each exposed memory also exposes `progress_writers` progress logs of
  // `progress_records` records, where writers of rank below progress_writers report the writes
  // they delivered, so that landArrived() moves them to the device while later ones are still on
  // the wire; 0 turns the logs off (land() then moves everything after the writers flushed).
  // About 64 KiB per writer and exposed memory with the defaults.
  uint32_t progress_writers = 32;
  uint32_t progress_records = 2048;
  // Writers: the rank this process reports as in targets' progress logs; -1 reports nothing.
  int32_t writer_rank = -1;
};

Result<std::unique_ptr<WriteTransport>> createStagedUcxTransport(
    const StagedUcxTransportOptions& options);

// Whether the UCX this process loaded lists CUDA among the memory types it handles (a UCX built
// with CUDA support, e.g. the libucx-cu13 wheel). False on any error.
bool ucxHandlesCudaMemory();

}  // namespace wsync
