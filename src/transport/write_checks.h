// The checks every WriteTransport backend makes before it posts a write (ids, pitches, bounds),
// and the peer lists of their flush errors: written once, so that every backend rejects the same
// writes with the same words. Plain functions, thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "transport/write_transport.h"

namespace wsync {

// The shape of a write (WriteTransport::write3d's arguments, bytes). write() is one plane of one
// row, write2d() one plane.
struct WriteShape {
  uint64_t remote_offset = 0;  // where the remote side starts
  uint64_t remote_pitch = 0;   // rows `*_pitch` apart, planes `*_plane_pitch` apart
  uint64_t remote_plane_pitch = 0;
  uint64_t src_pitch = 0;  // the source side starts at the source pointer
  uint64_t src_plane_pitch = 0;
  uint64_t row_bytes = 0;  // `planes` planes of `rows` rows of `row_bytes`
  uint64_t rows = 1;
  uint64_t planes = 1;

  // Nothing to copy: any offset and pitch will do.
  bool empty() const { return row_bytes == 0 || rows == 0 || planes == 0; }
  uint64_t bytes() const { return row_bytes * rows * planes; }  // valid once checked
};

// The attached memory a write goes to, as the messages name it.
struct WriteTarget {
  const char* backend = "";  // "UCX", "CUDA IPC", "staged UCX"
  int32_t peer = -1;         // < 0: not named
  RemoteMemoryId remote = -1;
  uint64_t exposed_size = 0;  // bytes
};

// INVALID_ARGUMENT "<backend> <what>: unknown remote memory id <remote> (<attached> attached)".
Status unknownRemoteError(const std::string& backend, const char* what, RemoteMemoryId remote,
                          size_t attached);

// Checks a write of `shape` from `src` into `target`. An empty shape passes (src unread).
// Otherwise INVALID_ARGUMENT "<backend> write to peer P, remote memory R: <why>" when src is null,
// when rows overlap on either side (a pitch smaller than row_bytes with rows > 1), when planes
// overlap on either side (a plane pitch smaller than one plane's extent, (rows - 1) * pitch +
// row_bytes, with planes > 1), when the source extent wraps around the address space, or when the
// target extent does not end inside exposed_size. On success `src_extent` (when non-null) is the
// bytes from src to the end of its last row (0 for an empty shape).
Status checkWrite(const WriteTarget& target, const WriteShape& shape, const void* src,
                  uint64_t* src_extent = nullptr);

// "peer 3", "peers 1, 3" (distinct, ascending), or "no peer" when `peers` is empty.
std::string peerListLabel(std::vector<int32_t> peers);

// peerListLabel of the peers of `remotes` (elements with `int32_t peer` and `bool written`) that
// have writes since the last successful flush: what flush errors name.
template <typename Remote>
std::string unflushedPeers(const std::vector<Remote>& remotes) {
  std::vector<int32_t> peers;
  for (const Remote& r : remotes) {
    if (r.written) peers.push_back(r.peer);
  }
  return peerListLabel(std::move(peers));
}

}  // namespace wsync
