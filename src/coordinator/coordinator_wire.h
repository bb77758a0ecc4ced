// What the coordinator's components do to the outside world (coordinator/coordinator.h): frames to
// a connection, closing one, log lines. The coordinator's event loop implements it over its
// FrameServer; a unit test records the calls instead, so a component runs without sockets.
// Called on the coordinator's event thread only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "control/frame_server.h"
#include "coordinator/participants.h"
#include "protocol/protocol.h"

namespace wsync {

class CoordinatorWire {
 public:
  virtual ~CoordinatorWire() = default;
  // Queues one frame; a failure is the connection's (its close follows).
  virtual Status send(ConnectionId conn, MessageType type, const std::vector<uint8_t>& payload) = 0;
  virtual void close(ConnectionId conn) = 0;
  virtual void log(const std::string& line) = 0;

  // To a rank while it is connected; a failed send is logged.
  void sendTo(const Participant& p, MessageType type, const std::vector<uint8_t>& payload) {
    if (!p.connected) return;
    const Status s = send(p.conn, type, payload);
    if (!s.isOk()) log("send " + std::string(messageTypeName(type)) + " failed: " + s.toString());
  }
  // Error(`status`) to a connection the coordinator does not take, then its close.
  void refuse(ConnectionId conn, const Status& status) {
    (void)send(conn, MessageType::kError, encode(ErrorMsg{status.code(), status.message()}));
    close(conn);
  }
};

}  // namespace wsync
