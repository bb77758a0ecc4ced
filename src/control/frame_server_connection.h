// The FrameServer's per-connection state, shared by frame_server.cc (the loop, reading and
// writing) and frame_server_handshake.cc (admission and authentication). Server thread only,
// except the members marked as guarded by FrameServer::mu_.
#pragma once

#include <array>
#include <atomic>
#include <deque>
#include <exception>
#include <string>
#include <vector>

#include "control/frame_server.h"

namespace wsync {

struct FrameServer::OutFrame {
  std::array<uint8_t, control_wire::kHeaderBytes> header{};
  size_t header_len = 0;  // 0 when `payload` is a whole pre-encoded frame
  std::vector<uint8_t> payload;
  size_t offset = 0;  // bytes of header+payload already written
  size_t size() const { return header_len + payload.size(); }
};

namespace frame_server_internal {

enum class Phase { kAwaitAuth, kOpen, kDraining };

// The message of an exception caught with catch (...).
inline std::string describe(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown exception";
  }
}

}  // namespace frame_server_internal

struct FrameServer::Connection {
  Fd fd;
  std::string peer;     // "address:port"
  std::string address;  // the peer's address: the unit of max_handshakes_per_peer
  frame_server_internal::Phase phase = frame_server_internal::Phase::kAwaitAuth;
  ConnectionId id = 0;  // set when the handshake succeeds
  bool dead = false;
  bool refused = false;  // kAwaitAuth: the refusal is already counted
  control_wire::FrameReader reader;
  control_wire::Nonce server_nonce{};
  SteadyClock::time_point accepted{};
  SteadyClock::time_point deadline{};  // kAwaitAuth: handshake; kDraining: give up
  bool fin_sent = false;               // kDraining: our side is shut down for writing

  std::deque<OutFrame> out;  // server thread only
  // !out.empty(), readable by send() under FrameServer::mu_: set (by the server thread) before
  // anything enters `out`, cleared once flush() wrote all of it. While clear and `pending` is
  // empty, send() writes a frame straight into the socket (under mu_) instead of waking the
  // server thread to do it.
  std::atomic<bool> out_queued{false};
  size_t out_bytes = 0;
  SteadyClock::time_point last_write_progress{};
  SteadyClock::time_point last_read_progress{};

  // Guarded by FrameServer::mu_.
  std::deque<OutFrame> pending;
  bool dirty = false;
  bool close_requested = false;
  std::atomic<bool> close_flag{false};  // close_requested, readable without the lock

  std::string who() const {
    return id != 0 ? "connection " + std::to_string(id) + " (" + peer + ")" : peer;
  }
};

}  // namespace wsync
