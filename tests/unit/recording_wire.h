// A CoordinatorWire (coordinator/coordinator_wire.h) that records what a coordinator component
// sends, closes and logs, so that the component runs in a unit test without sockets.
#pragma once

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "coordinator/coordinator_wire.h"
#include "coordinator/participants.h"

namespace wsync {

class RecordingWire final : public CoordinatorWire {
 public:
  struct Sent {
    ConnectionId conn = 0;
    MessageType type = MessageType::kError;
    std::vector<uint8_t> payload;
  };

  Status send(ConnectionId conn, MessageType type, const std::vector<uint8_t>& payload) override {
    sent.push_back({conn, type, payload});
    return Status::ok();
  }
  void close(ConnectionId conn) override { closed.insert(conn); }
  void log(const std::string& line) override { lines.push_back(line); }

  // The frames of `type` sent to `conn`, in order.
  std::vector<Sent> to(ConnectionId conn, MessageType type) const {
    std::vector<Sent> out;
    for (const Sent& s : sent) {
      if (s.conn == conn && s.type == type) out.push_back(s);
    }
    return out;
  }
  size_t count(MessageType type) const {
    return static_cast<size_t>(
        std::count_if(sent.begin(), sent.end(), [&](const Sent& s) { return s.type == type; }));
  }
  bool logged(const std::string& text) const {
    return std::any_of(lines.begin(), lines.end(),
                       [&](const std::string& l) { return l.find(text) != std::string::npos; });
  }
  void clear() {
    sent.clear();
    closed.clear();
    lines.clear();
  }

  std::vector<Sent> sent;
  std::set<ConnectionId> closed;
  std::vector<std::string> lines;
};

// A rank that said Hello, registered and committed (`replica` -1 for a trainer), as the components
// see the ranks of a running job.
inline Participant committedParticipant(ConnectionId conn, Role role, int32_t rank,
                                        int32_t replica) {
  Participant p;
  p.conn = conn;
  p.hello.role = role;
  p.hello.role_rank = rank;
  p.hello.replica = replica;
  p.role_rank = rank;
  p.registered = true;
  p.committed = true;
  return p;
}

}  // namespace wsync
