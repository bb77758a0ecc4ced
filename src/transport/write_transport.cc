#include "transport/write_transport.h"

#include <limits>
#include <string>

#include "transport/write_checks.h"

namespace wsync {

Result<std::unique_ptr<ExposedMemory>> WriteTransport::allocateExposedHost(size_t bytes) {
  return Status(WSYNC_ERR_UNSUPPORTED, std::string("the ") + name() +
                                           " backend exposes no host memory (asked for " +
                                           std::to_string(bytes) + " bytes)");
}

Status WriteTransport::write3d(RemoteMemoryId remote, uint64_t remote_offset, uint64_t remote_pitch,
                               uint64_t remote_plane_pitch, const void* src, size_t src_pitch,
                               size_t src_plane_pitch, size_t row_bytes, size_t rows,
                               size_t planes) {
  if (rows == 1) {  // unused row pitches become row_bytes, what every backend takes for them
    remote_pitch = row_bytes;
    src_pitch = row_bytes;
  }
  if (planes == 1) {
    return write2d(remote, remote_offset, remote_pitch, src, src_pitch, row_bytes, rows);
  }
  const WriteShape shape{remote_offset, remote_pitch,    remote_plane_pitch,
                         src_pitch,     src_plane_pitch, row_bytes,
                         rows,          planes};
  if (shape.empty()) return Status::ok();
  // The pitches, the null source and wrap-around here (no peer to name: write2d() names it); the
  // exposed size below, through the last plane.
  const WriteTarget unbounded{name(), -1, remote, std::numeric_limits<uint64_t>::max()};
  WSYNC_RETURN_IF_ERROR(checkWrite(unbounded, shape, src));
  const auto* s = static_cast<const uint8_t*>(src);
  const size_t last = planes - 1;
  WSYNC_RETURN_IF_ERROR(write2d(remote, remote_offset + last * remote_plane_pitch, remote_pitch,
                                s + last * src_plane_pitch, src_pitch, row_bytes, rows));
  for (size_t plane = 0; plane < last; ++plane) {
    WSYNC_RETURN_IF_ERROR(write2d(remote, remote_offset + plane * remote_plane_pitch, remote_pitch,
                                  s + plane * src_plane_pitch, src_pitch, row_bytes, rows));
  }
  return Status::ok();
}

}  // namespace wsync
