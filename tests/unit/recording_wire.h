// A CoordinatorWire (coordinator/coordinator_wire.h) that records what a coordinator component
// sends, closes and logs, so that the component runs in a unit test without sockets; and the ranks
// and registrations of the small jobs those tests share.
#pragma once

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "coordinator/coordinator_wire.h"
#include "coordinator/participants.h"
#include "layout/builders.h"
#include "layout/registration.h"

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

// The small job several component tests use: trainers 0 and 1 (connections 1, 2); rollouts 0 and
// 1 of replica 0 (connections 11, 12) and rollout 2 of replica 1 (connection 13), each made by
// `make` (committedParticipant, or a rank that has only joined), admitted and ranked.
template <typename Make>
void admitTwoTrainersThreeRollouts(ParticipantTable& participants, Make make) {
  participants.admit(make(1, Role::kTrainer, 0, -1));
  participants.admit(make(2, Role::kTrainer, 1, -1));
  participants.admit(make(11, Role::kRollout, 0, 0));
  participants.admit(make(12, Role::kRollout, 1, 0));
  participants.admit(make(13, Role::kRollout, 2, 1));
  participants.assignRanks({0, 1}, {2, 3, 4});
}

// Trainer `rank` of two, holding half of the rows of a 16 x 8 bf16 tensor "w".
inline Registration halfRowsTrainer(int32_t rank) {
  Registration reg;
  reg.role = Role::kTrainer;
  reg.rank = rank;
  EXPECT_TRUE(addSplit(reg, "w", Dims{16, 8}, DType::kBFloat16, 0, 2, rank).isOk());
  return reg;
}

}  // namespace wsync
