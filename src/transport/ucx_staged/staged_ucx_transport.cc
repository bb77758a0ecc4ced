// The staged UCX transport (staged_ucx_transport_impl.h): its WriteTransport methods, the exposed
// memory it creates for targets, and its factory.
#include "transport/ucx_staged/staged_ucx_transport.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "common/cuda_check.h"
#include "transport/ucx/ucx_handles.h"
#include "transport/ucx/ucx_transport.h"
#include "transport/ucx_staged/staged_exposed_memory.h"
#include "transport/ucx_staged/staged_ucx_transport_impl.h"
#include "transport/write_checks.h"

namespace wsync::staged_internal {
namespace {

// Device memory is copied by cudaMemcpy, never registered with UCX: nothing to hold.
class NoSourceRegistration final : public SourceRegistration {};

}  // namespace

StagedUcxTransport::~StagedUcxTransport() {
  (void)cudaUseDevice(options_.device);
  (void)cudaStreamSynchronize(stream_.get());
  (void)ucx_->flush(std::chrono::milliseconds(5000));
  for (Chunk& c : chunks_) {
    c.registration.reset();  // the UCX registration goes before the memory it covers
    if (c.host != nullptr) (void)cudaFreeHost(c.host);
  }
  (void)cudaGetLastError();
}

Result<std::unique_ptr<ExposedMemory>> StagedUcxTransport::allocateExposed(size_t bytes) {
  const std::string what = "staged UCX allocateExposed(" + std::to_string(bytes) + " bytes)";
  if (bytes == 0) return invalidArgument(what + ": 0 bytes asked for");
  WSYNC_RETURN_IF_ERROR(cudaUseDevice(options_.device));
  void* device_data = nullptr;
  WSYNC_CUDA_RETURN_IF_ERROR(cudaMalloc(&device_data, bytes), what + ": cudaMalloc");
  auto memory = direct_ ? exposeDirect(static_cast<uint8_t*>(device_data), bytes, true)
                        : pairWithLanding(static_cast<uint8_t*>(device_data), bytes, true, what);
  if (!memory.isOk()) (void)cudaFree(device_data);
  return memory;
}

Result<std::unique_ptr<ExposedMemory>> StagedUcxTransport::expose(void* base, size_t bytes) {
  const std::string what = "staged UCX expose(" + std::to_string(bytes) + " bytes)";
  if (base == nullptr || bytes == 0) return invalidArgument(what + ": null base or 0 bytes");
  WSYNC_RETURN_IF_ERROR(cudaUseDevice(options_.device));
  if (!isDeviceMemory(base)) return invalidArgument(what + ": the memory is not device memory");
  if (direct_) return exposeDirect(static_cast<uint8_t*>(base), bytes, false);
  return pairWithLanding(static_cast<uint8_t*>(base), bytes, false, what);
}

Result<std::unique_ptr<SourceRegistration>> StagedUcxTransport::registerSource(const void* base,
                                                                               size_t bytes) {
  if (base == nullptr || bytes == 0) {
    return invalidArgument("staged UCX registerSource: null base or 0 bytes");
  }
  WSYNC_RETURN_IF_ERROR(cudaUseDevice(options_.device));
  if (isDeviceMemory(base) && !direct_) {
    return std::unique_ptr<SourceRegistration>(new NoSourceRegistration);
  }
  return ucx_->registerSource(base, bytes);
}

Result<RemoteMemoryId> StagedUcxTransport::attach(int32_t peer,
                                                  const std::vector<uint8_t>& descriptor) {
  WSYNC_ASSIGN_OR_RETURN(const RemoteMemoryId inner, ucx_->attach(peer, descriptor));
  Attached a;
  a.peer = peer;
  a.inner = inner;
  // This writer reports into the target's progress log of its rank, when the target has one.
  ProgressLayout layout;
  if (!direct_ && options_.writer_rank >= 0 &&
      decodeProgressLayout(descriptorExtension(descriptor), layout) &&
      static_cast<uint32_t>(options_.writer_rank) < layout.writers) {
    WSYNC_ASSIGN_OR_RETURN(const RemoteMemoryId log_remote,
                           ucx_->attach(peer, layout.log_descriptor));
    auto log = std::make_unique<ProgressLog>();
    log->remote = log_remote;
    log->offset = static_cast<uint64_t>(options_.writer_rank) * logBytes(layout.records);
    log->capacity = layout.records;
    // Sources of the log writes: each record and each count has its own words, unchanged
    // until the flush that ends the round.
    log->records.assign(static_cast<size_t>(layout.records) * kRecordWords, 0);
    log->counts.assign(layout.records, 0);
    WSYNC_ASSIGN_OR_RETURN(
        log->records_registration,
        ucx_->registerSource(log->records.data(), log->records.size() * sizeof(uint64_t)));
    WSYNC_ASSIGN_OR_RETURN(
        log->counts_registration,
        ucx_->registerSource(log->counts.data(), log->counts.size() * sizeof(uint64_t)));
    a.log = std::move(log);
  }
  attached_.push_back(std::move(a));
  return static_cast<RemoteMemoryId>(attached_.size() - 1);
}

Result<uint64_t> StagedUcxTransport::attachedSize(RemoteMemoryId remote) const {
  WSYNC_ASSIGN_OR_RETURN(const Attached* a, attachedAt(remote, "staged UCX"));
  return ucx_->attachedSize(a->inner);
}

Status StagedUcxTransport::write2d(RemoteMemoryId remote, uint64_t remote_offset,
                                   uint64_t remote_pitch, const void* src, size_t src_pitch,
                                   size_t row_bytes, size_t rows) {
  if (rows == 0 || row_bytes == 0) return Status::ok();
  WSYNC_RETURN_IF_ERROR(cudaUseDevice(options_.device));
  // Host sources (and bad input) go to UCX as is; so do device sources when UCX handles CUDA.
  WSYNC_ASSIGN_OR_RETURN(const Attached* target, attachedAt(remote, "staged UCX write"));
  if (direct_ || src == nullptr || !isDeviceMemory(src)) {
    return ucx_->write2d(target->inner, remote_offset, remote_pitch, src, src_pitch, row_bytes,
                         rows);
  }
  // Checks the write the way UCX would, before any piece is staged, so a bad write posts
  // nothing; messages name the peer and this transport's remote id.
  WSYNC_ASSIGN_OR_RETURN(const uint64_t size, ucx_->attachedSize(target->inner));
  const WriteShape shape{remote_offset, remote_pitch, 0, src_pitch, 0, row_bytes, rows, 1};
  WSYNC_RETURN_IF_ERROR(checkWrite({"staged UCX", target->peer, remote, size}, shape, src));
  const RemoteMemoryId inner = target->inner;
  const auto* s = static_cast<const uint8_t*>(src);
  Chunk* last = nullptr;  // holds the write's last piece
  for (size_t row = 0; row < rows;) {
    if (row_bytes <= options_.chunk_bytes) {  // whole rows, as many as the chunk holds
      WSYNC_ASSIGN_OR_RETURN(last, chunkWithRoom(row_bytes));
      const size_t n = std::min(rows - row, (options_.chunk_bytes - last->used) / row_bytes);
      WSYNC_RETURN_IF_ERROR(
          stage(*last,
                {inner, remote_offset + row * remote_pitch, remote_pitch, last->used, row_bytes, n},
                s + row * src_pitch, src_pitch));
      row += n;
      continue;
    }
    for (size_t col = 0; col < row_bytes;) {  // a row larger than a chunk goes in pieces
      WSYNC_ASSIGN_OR_RETURN(last, chunkWithRoom(1));
      const size_t n = std::min(row_bytes - col, options_.chunk_bytes - last->used);
      WSYNC_RETURN_IF_ERROR(
          stage(*last, {inner, remote_offset + row * remote_pitch + col, n, last->used, n, 1},
                s + row * src_pitch + col, n));
      col += n;
    }
    ++row;
  }
  // Reported once the chunk with its last piece is posted (the earlier pieces went before).
  if (target->log) {
    last->reports.push_back({remote, {remote_offset, remote_pitch, row_bytes, rows}});
  }
  return postCopied();
}

Status StagedUcxTransport::flush(std::chrono::milliseconds timeout) {
  WSYNC_RETURN_IF_ERROR(cudaUseDevice(options_.device));
  seal();
  const Clock::time_point deadline = Clock::now() + timeout;
  while (!copying_.empty()) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    WSYNC_RETURN_IF_ERROR(postOldest(std::max(left, std::chrono::milliseconds(0))));
  }
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  WSYNC_RETURN_IF_ERROR(ucx_->flush(std::max(left, std::chrono::milliseconds(1))));
  releasePosted();
  // A round ends: every log write completed, the next round starts its logs afresh.
  for (Attached& a : attached_) {
    if (a.log) a.log->count = 0;
  }
  return Status::ok();
}

Result<std::unique_ptr<ExposedMemory>> StagedUcxTransport::exposeDirect(uint8_t* device_data,
                                                                        size_t bytes, bool owns) {
  WSYNC_ASSIGN_OR_RETURN(std::unique_ptr<ExposedMemory> registered,
                         ucx_->expose(device_data, bytes));
  return std::unique_ptr<ExposedMemory>(
      new DirectExposedMemory(options_.device, std::move(registered), owns));
}

Result<std::unique_ptr<ExposedMemory>> StagedUcxTransport::pairWithLanding(
    uint8_t* device_data, size_t bytes, bool owns, const std::string& what) {
  WSYNC_ASSIGN_OR_RETURN(std::unique_ptr<ExposedMemory> landing, ucx_->allocateExposed(bytes));
  const bool pinned =
      cudaHostRegister(landing->data(), landing->size(), cudaHostRegisterDefault) == cudaSuccess;
  if (!pinned) (void)cudaGetLastError();
  auto stream = makeStream(what);
  auto event = makeEvent(what);
  if (!stream.isOk() || !event.isOk()) {
    if (pinned) (void)cudaHostUnregister(landing->data());
    return stream.isOk() ? event.status() : stream.status();
  }
  // Progress logs: without them (options, or UCX refusing the memory) land() moves everything.
  std::unique_ptr<ExposedMemory> logs;
  if (options_.progress_writers > 0 && options_.progress_records > 0) {
    auto allocated =
        ucx_->allocateExposed(options_.progress_writers * logBytes(options_.progress_records));
    if (allocated.isOk()) logs = std::move(allocated).value();
  }
  return std::unique_ptr<ExposedMemory>(
      new StagedExposedMemory(options_.device, std::move(landing), device_data, owns, pinned,
                              std::move(stream).value(), std::move(event).value(), std::move(logs),
                              options_.progress_writers, options_.progress_records));
}

Result<const StagedUcxTransport::Attached*> StagedUcxTransport::attachedAt(
    RemoteMemoryId remote, const std::string& what) const {
  if (remote < 0 || static_cast<size_t>(remote) >= attached_.size()) {
    return invalidArgument(what + ": unknown remote memory id " + std::to_string(remote) + " (" +
                           std::to_string(attached_.size()) + " attached)");
  }
  return &attached_[static_cast<size_t>(remote)];
}

}  // namespace wsync::staged_internal

namespace wsync {
using staged_internal::kChunkAlign;
using staged_internal::makeStream;
using staged_internal::StagedUcxTransport;
using staged_internal::StreamPtr;

Result<std::unique_ptr<WriteTransport>> createStagedUcxTransport(
    const StagedUcxTransportOptions& options) {
  const std::string what = "staged UCX transport on CUDA device " + std::to_string(options.device);
  if (options.chunk_bytes < kChunkAlign || options.num_chunks < 1) {
    return invalidArgument(what + ": chunk_bytes must be >= " + std::to_string(kChunkAlign) +
                           " and num_chunks >= 1");
  }
  if (!cudaDeviceAvailable(options.device)) {
    return Status(WSYNC_ERR_UNSUPPORTED, what + ": no such usable device");
  }
  WSYNC_RETURN_IF_ERROR(cudaUseDevice(options.device));
  const bool direct = options.use_ucx_cuda && ucxHandlesCudaMemory();
  UcxTransportOptions ucx_options;
  ucx_options.host_memory_only = !direct;  // direct: device sources and targets, puts only
  WSYNC_ASSIGN_OR_RETURN(std::unique_ptr<WriteTransport> ucx, createUcxTransport(ucx_options));
  WSYNC_ASSIGN_OR_RETURN(StreamPtr stream, makeStream(what));
  auto transport =
      std::make_unique<StagedUcxTransport>(options, std::move(ucx), std::move(stream), direct);
  if (!direct) WSYNC_RETURN_IF_ERROR(transport->allocateChunks());
  return std::unique_ptr<WriteTransport>(std::move(transport));
}

bool ucxHandlesCudaMemory() {
  auto context = ucx::createContext();
  if (!context.isOk()) return false;
  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  if (ucp_context_query(context.value().get(), &attr) != UCS_OK) return false;
  return (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
}

}  // namespace wsync
