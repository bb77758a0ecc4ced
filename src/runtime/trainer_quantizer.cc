#include "runtime/trainer_quantizer.h"

#include <cstring>

namespace wsync {
namespace {

constexpr size_t kAlign = 256;  // every quantized buffer starts aligned for vector access
size_t alignUp(size_t n) {
  return (n + kAlign - 1) / kAlign * kAlign;
}

}  // namespace

Result<TrainerQuantizer> TrainerQuantizer::create(const Registration& own,
                                                  const std::vector<ScaledTensor>& table,
                                                  std::vector<uint64_t> exchanged,
                                                  MemoryKind memory, int cuda_device,
                                                  std::chrono::milliseconds timeout) {
  TrainerQuantizer z;
  z.first_buffer_ = static_cast<int32_t>(own.buffers.size());
  z.memory_ = memory;
  z.cuda_device_ = cuda_device;
  z.timeout_ = timeout;
  if (table.empty()) return z;
  Registration expanded = own;
  WSYNC_ASSIGN_OR_RETURN(std::vector<QuantizedSource> sources,
                         addQuantizedSources(expanded, table));
  size_t grid = 0;
  for (const QuantizedSource& q : sources) {
    Source s;
    s.q = q;
    s.scaling = table[static_cast<size_t>(q.entry)].scaling;
    const LocalBuffer& b = own.buffers[static_cast<size_t>(q.source_buffer)];
    const Piece& p = b.pieces[static_cast<size_t>(q.source_piece)];
    s.view.dtype = b.dtype;
    s.view.box = q.box;  // the piece's, or a part of it (its first element further in)
    s.view.strides = p.local_strides.rank == 0 ? rowMajorStrides(p.box.extent) : p.local_strides;
    int64_t first = p.local_offset;
    for (int d = 0; d < q.box.rank(); ++d)
      first += (q.box.offset[d] - p.box.offset[d]) * s.view.strides[d];
    s.view.data = reinterpret_cast<const void*>(  // NOLINT(performance-no-int-to-ptr)
        static_cast<uintptr_t>(first) * dtypeSize(b.dtype));
    s.values_at = z.arena_bytes_;
    z.arena_bytes_ += alignUp(static_cast<size_t>(q.box.volume()));
    s.scales_at = z.arena_bytes_;
    z.arena_bytes_ +=
        alignUp(static_cast<size_t>(q.cover.volume()) * dtypeSize(scaleDType(s.scaling.format)));
    s.amax_at = grid;
    grid += static_cast<size_t>(q.cover.volume());
    z.buffer_at_.push_back(s.values_at);
    z.buffer_at_.push_back(s.scales_at);
    z.sources_.push_back(std::move(s));
  }
  for (uint64_t i : exchanged) {
    if (i >= grid)
      return protocolError("plan assignment: exchanged block " + std::to_string(i) +
                           " outside this trainer's " + std::to_string(grid) + " blocks");
  }
  z.exchanged_ = std::move(exchanged);
  z.grid_blocks_ = grid;
  if (memory == MemoryKind::kDevice) {
    WSYNC_ASSIGN_OR_RETURN(z.device_arena_, DeviceBuffer::allocate(z.arena_bytes_, cuda_device));
    if (!z.exchanged_.empty()) {  // the kernels compute the other blocks' maxima in place
      WSYNC_ASSIGN_OR_RETURN(z.device_amax_, DeviceBuffer::allocate(grid * 4, cuda_device));
    }
    WSYNC_RETURN_IF_ERROR(z.setUpDevice());
  } else {
    z.amax_.assign(grid, 0.0f);
    z.host_arena_.assign(z.arena_bytes_, 0);
  }
  return z;
}

uint8_t* TrainerQuantizer::bufferData(int32_t buffer) const {
  const int64_t i = static_cast<int64_t>(buffer) - first_buffer_;
  if (i < 0 || static_cast<size_t>(i) >= buffer_at_.size()) return nullptr;
  return const_cast<uint8_t*>(memory()) + buffer_at_[static_cast<size_t>(i)];
}

const uint8_t* TrainerQuantizer::memory() const {
  return memory_ == MemoryKind::kDevice ? device_arena_.data() : host_arena_.data();
}

PieceView TrainerQuantizer::viewOf(const Source& s, const SourceOf& source) const {
  PieceView v = s.view;
  v.data = source(s.q.source_buffer) + reinterpret_cast<uintptr_t>(s.view.data);
  return v;
}

Result<std::vector<uint8_t>> TrainerQuantizer::computeMaxima(const SourceOf& source,
                                                             CudaStreamHandle stream) {
  if (memory_ == MemoryKind::kDevice) return computeMaximaOnDevice(source, stream);
  for (const Source& s : sources_) {
    WSYNC_RETURN_IF_ERROR(
        blockAmaxHost(viewOf(s, source), s.q.shape, s.scaling, amax_.data() + s.amax_at));
  }
  std::vector<uint8_t> partial(exchanged_.size() * 4);
  for (size_t i = 0; i < exchanged_.size(); ++i)
    std::memcpy(partial.data() + 4 * i, &amax_[exchanged_[i]], 4);
  return partial;
}

Status TrainerQuantizer::quantize(const std::vector<uint8_t>& merged, const SourceOf& source,
                                  CudaStreamHandle stream,
                                  const std::vector<ValuesTarget>& targets) {
  if (!exchanged_.empty() && merged.size() != exchanged_.size() * 4) {
    return protocolError("BlockMaxima: " + std::to_string(merged.size()) + " bytes, expected " +
                         std::to_string(exchanged_.size() * 4));
  }
  if (!targets.empty() && (memory_ != MemoryKind::kDevice || targets.size() != sources_.size())) {
    return invalidArgument("block quantization in place: " + std::to_string(targets.size()) +
                           " targets for " + std::to_string(sources_.size()) + " sources in " +
                           (memory_ == MemoryKind::kDevice ? "device" : "host") + " memory");
  }
  if (memory_ == MemoryKind::kDevice) return quantizeOnDevice(merged, source, stream, targets);
  for (size_t i = 0; i < exchanged_.size(); ++i)
    std::memcpy(&amax_[exchanged_[i]], merged.data() + 4 * i, 4);
  uint8_t* base = host_arena_.data();
  for (const Source& s : sources_) {
    scalesFromAmax(amax_.data() + s.amax_at, s.q.cover.volume(), s.scaling.format,
                   base + s.scales_at);
    WSYNC_RETURN_IF_ERROR(quantizeBlocksHost(viewOf(s, source), s.q.shape, s.scaling,
                                             base + s.scales_at, base + s.values_at));
  }
  return Status::ok();
}

}  // namespace wsync
