// The writer side of the staged UCX transport (staged_ucx_transport_impl.h): a ring of pinned host
// chunks that device sources are copied into on the transport's stream, each put through UCX once
// its copies completed and reused after a UCX flush covered its puts; writes to targets with a
// progress log are reported into it after their bytes.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "common/cuda_check.h"
#include "transport/ucx_staged/staged_ucx_transport_impl.h"

namespace wsync::staged_internal {

Status StagedUcxTransport::allocateChunks() {
  for (int i = 0; i < options_.num_chunks; ++i) {
    Chunk c;
    void* host = nullptr;
    WSYNC_CUDA_RETURN_IF_ERROR(
        cudaHostAlloc(&host, options_.chunk_bytes, cudaHostAllocDefault),
        "staged UCX: cudaHostAlloc of a " + std::to_string(options_.chunk_bytes) + "-byte chunk");
    c.host = static_cast<uint8_t*>(host);
    chunks_.push_back(std::move(c));
    WSYNC_ASSIGN_OR_RETURN(chunks_.back().registration,
                           ucx_->registerSource(host, options_.chunk_bytes));
    WSYNC_ASSIGN_OR_RETURN(chunks_.back().copied, makeEvent("staged UCX chunk"));
  }
  return Status::ok();
}

Result<StagedUcxTransport::Chunk*> StagedUcxTransport::chunkWithRoom(size_t bytes) {
  if (filling_ >= 0) {
    Chunk& c = chunks_[static_cast<size_t>(filling_)];
    if (options_.chunk_bytes - c.used >= bytes) return &c;
    seal();
  }
  const Clock::time_point deadline = Clock::now() + options_.post_timeout;
  while (true) {
    for (size_t i = 0; i < chunks_.size(); ++i) {
      if (chunks_[i].state == ChunkState::kFree) {
        chunks_[i].state = ChunkState::kFilling;
        chunks_[i].used = 0;
        chunks_[i].puts.clear();
        filling_ = static_cast<int>(i);
        return &chunks_[i];
      }
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      return timeoutError("staged UCX write: no free chunk after " +
                          std::to_string(options_.post_timeout.count()) + " ms");
    }
    if (!copying_.empty()) {
      WSYNC_RETURN_IF_ERROR(postOldest(left));  // its put runs while later copies continue
    } else {
      WSYNC_RETURN_IF_ERROR(ucx_->flush(left));  // frees every posted chunk
      releasePosted();
    }
  }
}

Status StagedUcxTransport::stage(Chunk& c, const Put& p, const uint8_t* src, size_t src_pitch) {
  WSYNC_CUDA_RETURN_IF_ERROR(
      cudaMemcpy2DAsync(c.host + p.chunk_offset, p.row_bytes, src, src_pitch, p.row_bytes, p.rows,
                        cudaMemcpyDeviceToHost, stream_.get()),
      "staged UCX write: device-to-host copy of " + std::to_string(p.rows) + " rows of " +
          std::to_string(p.row_bytes) + " bytes");
  c.puts.push_back(p);
  c.used = std::min(options_.chunk_bytes, alignUp(p.chunk_offset + p.rows * p.row_bytes));
  return Status::ok();
}

void StagedUcxTransport::seal() {
  if (filling_ < 0) return;
  Chunk& c = chunks_[static_cast<size_t>(filling_)];
  filling_ = -1;
  if (c.puts.empty()) {
    c.state = ChunkState::kFree;
    return;
  }
  c.state = ChunkState::kCopying;
  copying_.push_back(&c - chunks_.data());
  if (cudaEventRecord(c.copied.get(), stream_.get()) != cudaSuccess) {
    // Without the event, wait for the stream itself before posting (rare; keeps order).
    (void)cudaGetLastError();
    (void)cudaStreamSynchronize(stream_.get());
    (void)cudaEventRecord(c.copied.get(), nullptr);
  }
}

Status StagedUcxTransport::postOldest(std::chrono::milliseconds timeout) {
  Chunk& c = chunks_[static_cast<size_t>(copying_.front())];
  WSYNC_RETURN_IF_ERROR(waitEvent(c.copied.get(), timeout, "staged UCX write"));
  copying_.pop_front();
  return postChunk(c);
}

Status StagedUcxTransport::postCopied() {
  while (!copying_.empty()) {
    Chunk& c = chunks_[static_cast<size_t>(copying_.front())];
    const cudaError_t e = cudaEventQuery(c.copied.get());
    if (e == cudaErrorNotReady) break;
    if (e != cudaSuccess) return cudaCheck(e, "staged UCX write: cudaEventQuery");
    copying_.pop_front();
    WSYNC_RETURN_IF_ERROR(postChunk(c));
  }
  return Status::ok();
}

Status StagedUcxTransport::postChunk(Chunk& c) {
  c.state = ChunkState::kPosted;
  for (const Put& p : c.puts) {
    WSYNC_RETURN_IF_ERROR(ucx_->write2d(p.remote, p.remote_offset, p.remote_pitch,
                                        c.host + p.chunk_offset, p.row_bytes, p.row_bytes, p.rows));
  }
  std::vector<Report> reports;
  reports.swap(c.reports);
  return report(reports);
}

Status StagedUcxTransport::report(const std::vector<Report>& reports) {
  if (reports.empty()) return Status::ok();
  WSYNC_RETURN_IF_ERROR(ucx_->fence());
  std::vector<RemoteMemoryId> touched;
  for (const Report& r : reports) {
    ProgressLog& log = *attached_[static_cast<size_t>(r.remote)].log;
    if (log.count == log.capacity) continue;  // full: land() moves the rest
    uint64_t* words = log.records.data() + static_cast<size_t>(log.count) * kRecordWords;
    std::copy(r.words, r.words + kRecordWords, words);
    WSYNC_RETURN_IF_ERROR(ucx_->write(
        log.remote, log.offset + kLogHeaderBytes + log.count * kRecordBytes, words, kRecordBytes));
    ++log.count;
    if (std::find(touched.begin(), touched.end(), r.remote) == touched.end())
      touched.push_back(r.remote);
  }
  if (touched.empty()) return Status::ok();
  WSYNC_RETURN_IF_ERROR(ucx_->fence());
  for (const RemoteMemoryId remote : touched) {
    ProgressLog& log = *attached_[static_cast<size_t>(remote)].log;
    uint64_t& sealed = log.counts[log.count - 1];
    sealed = sealCount(log.count);
    WSYNC_RETURN_IF_ERROR(ucx_->write(log.remote, log.offset, &sealed, sizeof(sealed)));
  }
  return Status::ok();
}

void StagedUcxTransport::releasePosted() {
  for (Chunk& c : chunks_) {
    if (c.state == ChunkState::kPosted) c.state = ChunkState::kFree;
  }
}

}  // namespace wsync::staged_internal
