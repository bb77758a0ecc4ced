#include "runtime/debug_corruption.h"

namespace wsync {

Result<DebugCorruption> DebugCorruption::create(int every, int32_t trainer_rank, MemoryKind memory,
                                                int device) {
  DebugCorruption c;
  if (every <= 0 || trainer_rank != 0) return c;
  c.every_ = every;
  if (memory == MemoryKind::kDevice) {
    WSYNC_ASSIGN_OR_RETURN(c.device_, DeviceBuffer::allocate(8, device));
  } else {
    c.host_.assign(8, 0);
  }
  return c;
}

Result<const uint8_t*> DebugCorruption::flip(const uint8_t* sent, CudaStreamHandle stream,
                                             std::chrono::milliseconds timeout) {
  if (device_.data() == nullptr) {
    host_[0] = static_cast<uint8_t>(*sent ^ 0xFF);
    return host_.data();
  }
  uint8_t byte = 0;
  WSYNC_RETURN_IF_ERROR(copyAsync(&byte, sent, 1, stream));
  WSYNC_RETURN_IF_ERROR(streamSync(stream, timeout));
  byte ^= 0xFF;
  WSYNC_RETURN_IF_ERROR(copyAsync(device_.data(), &byte, 1, stream));
  WSYNC_RETURN_IF_ERROR(streamSync(stream, timeout));
  return device_.data();
}

}  // namespace wsync
