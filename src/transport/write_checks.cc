#include "transport/write_checks.h"

#include <algorithm>
#include <limits>

namespace wsync {
namespace {

// Bytes from the first byte of `count` runs of `run_bytes`, `pitch` apart, to the end of the last
// (rows of a plane, or planes of a write); false when that overflows. One run: run_bytes, whatever
// the pitch.
bool spanBytes(uint64_t count, uint64_t pitch, uint64_t run_bytes, uint64_t& extent) {
  if (count == 1) {
    extent = run_bytes;
    return true;
  }
  return !__builtin_mul_overflow(count - 1, pitch, &extent) &&
         !__builtin_add_overflow(extent, run_bytes, &extent);
}

// "3 planes of 64 rows of 16 bytes at offset 0, pitch 1024, plane pitch 65536 (source pitch 16,
// plane pitch 1024)", as much of it as the shape has.
std::string describe(const WriteShape& s) {
  std::string out =
      std::to_string(s.row_bytes) + " bytes at offset " + std::to_string(s.remote_offset);
  if (s.rows > 1) {
    out = std::to_string(s.rows) + " rows of " + out + ", pitch " + std::to_string(s.remote_pitch);
  }
  if (s.planes > 1) {
    out = std::to_string(s.planes) + " planes of " + out + ", plane pitch " +
          std::to_string(s.remote_plane_pitch);
  }
  if (s.rows > 1 || s.planes > 1) {
    out += " (source pitch " + std::to_string(s.src_pitch);
    if (s.planes > 1) out += ", plane pitch " + std::to_string(s.src_plane_pitch);
    out += ")";
  }
  return out;
}

}  // namespace

Status unknownRemoteError(const std::string& backend, const char* what, RemoteMemoryId remote,
                          size_t attached) {
  return invalidArgument(backend + " " + what + ": unknown remote memory id " +
                         std::to_string(remote) + " (" + std::to_string(attached) + " attached)");
}

Status checkWrite(const WriteTarget& target, const WriteShape& shape, const void* src,
                  uint64_t* src_extent) {
  if (src_extent != nullptr) *src_extent = 0;
  if (shape.empty()) return Status::ok();
  auto fail = [&](const std::string& why) {
    const std::string peer =
        target.peer >= 0 ? "peer " + std::to_string(target.peer) + ", " : std::string();
    return invalidArgument(std::string(target.backend) + " write to " + peer + "remote memory " +
                           std::to_string(target.remote) + ": " + why);
  };
  if (src == nullptr) return fail("null source");
  if (shape.rows > 1 &&
      (shape.remote_pitch < shape.row_bytes || shape.src_pitch < shape.row_bytes)) {
    return fail("pitches (remote " + std::to_string(shape.remote_pitch) + ", source " +
                std::to_string(shape.src_pitch) + ") smaller than the row (" +
                std::to_string(shape.row_bytes) + " bytes) of a " + std::to_string(shape.rows) +
                "-row write");
  }
  const std::string doesNotFit =
      describe(shape) + " do not fit the exposed size " + std::to_string(target.exposed_size);
  uint64_t remote_plane = 0;
  uint64_t src_plane = 0;
  if (!spanBytes(shape.rows, shape.remote_pitch, shape.row_bytes, remote_plane)) {
    return fail(doesNotFit);
  }
  if (!spanBytes(shape.rows, shape.src_pitch, shape.row_bytes, src_plane)) {
    return fail("the source extent of " + describe(shape) + " wraps around");
  }
  if (shape.planes > 1 &&
      (shape.remote_plane_pitch < remote_plane || shape.src_plane_pitch < src_plane)) {
    return fail("plane pitches (remote " + std::to_string(shape.remote_plane_pitch) + ", source " +
                std::to_string(shape.src_plane_pitch) + ") smaller than a plane (remote " +
                std::to_string(remote_plane) + ", source " + std::to_string(src_plane) +
                " bytes) of a " + std::to_string(shape.planes) + "-plane write");
  }
  uint64_t remote_total = 0;
  uint64_t src_total = 0;
  uint64_t end = 0;
  if (!spanBytes(shape.planes, shape.src_plane_pitch, src_plane, src_total) ||
      src_total - 1 > std::numeric_limits<uintptr_t>::max() - reinterpret_cast<uintptr_t>(src)) {
    return fail("the source extent of " + describe(shape) + " wraps around");
  }
  if (!spanBytes(shape.planes, shape.remote_plane_pitch, remote_plane, remote_total) ||
      __builtin_add_overflow(shape.remote_offset, remote_total, &end) ||
      end > target.exposed_size) {
    return fail(doesNotFit);
  }
  if (src_extent != nullptr) *src_extent = src_total;
  return Status::ok();
}

std::string peerListLabel(std::vector<int32_t> peers) {
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  if (peers.empty()) return "no peer";
  std::string out = peers.size() == 1 ? "peer " : "peers ";
  for (size_t i = 0; i < peers.size(); ++i)
    out += (i ? ", " : "") + std::to_string(peers[i]);
  return out;
}

}  // namespace wsync
