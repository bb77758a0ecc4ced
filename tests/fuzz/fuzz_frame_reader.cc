// Fuzz target: the control plane's frame reassembly (control_wire::FrameReader over a socket),
// header parsing and limits included. Input: a mode byte (bit 0: handshake limits or application
// limits; bits 1-7: the size of each write to the socket, 1..128 bytes, so reads stop mid-header
// and mid-payload), then the byte stream a peer sends. Checks: every frame handed out has the
// announced length and at most the limit; the reader ends in a frame, kAgain, kClosed or a
// PROTOCOL error, never anything else.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "control/frame_channel.h"
#include "fuzz_check.h"

namespace {

namespace cw = wsync::control_wire;

// Drains every frame buffered or readable now. False once the reader failed or the peer closed.
bool drain(cw::FrameReader& reader, int fd, size_t limit) {
  for (;;) {
    wsync::Frame frame;
    wsync::Result<cw::FrameReader::Event> event = reader.read(fd, "fuzz peer", &frame);
    if (!event.isOk()) {
      WSYNC_FUZZ_CHECK(event.status().code() == WSYNC_ERR_PROTOCOL);
      return false;
    }
    if (*event == cw::FrameReader::Event::kAgain) return true;
    if (*event == cw::FrameReader::Event::kClosed) return false;
    WSYNC_FUZZ_CHECK(frame.payload.size() <= limit);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > (64 << 10)) return 0;  // the whole stream must fit the socket buffer
  const bool handshake = (data[0] & 1) != 0;
  const size_t chunk = static_cast<size_t>(data[0] >> 1) + 1;
  const size_t limit = handshake ? cw::kMaxHandshakePayload : 1024;
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return 0;
  cw::FrameReader reader;
  reader.setLimits(limit, handshake ? cw::kFlagHandshake : 0);
  bool open = true;
  for (size_t at = 1; at < size && open; at += chunk) {
    const size_t n = std::min(chunk, size - at);
    WSYNC_FUZZ_CHECK(::send(fds[1], data + at, n, 0) == static_cast<ssize_t>(n));
    open = drain(reader, fds[0], limit);
  }
  ::close(fds[1]);
  if (open) drain(reader, fds[0], limit);
  ::close(fds[0]);
  return 0;
}
