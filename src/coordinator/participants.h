// The coordinator's ranks (coordinator/coordinator.h): one Participant per connection that said a
// Hello it admitted, and the table that finds them by connection and by role rank. A plain data
// model that the coordinator's components share; it has no sockets. Not thread-safe: the event
// thread owns it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "control/frame_server.h"
#include "protocol/protocol.h"

namespace wsync {

using CoordinatorClock = std::chrono::steady_clock;

struct Participant {
  ConnectionId conn = 0;
  bool connected = true;
  HelloMsg hello;
  int32_t role_rank = -1;
  bool registered = false;
  RegisterMsg reg;
  bool committed = false;
  bool said_bye = false;
  // Rollouts of the running job: out of it (died, silent, left, or a replica peer's fate); its
  // later messages and its close are ignored.
  bool dropped = false;
  // Trainers may still write into this dropped rank while this version is in flight (0: none).
  uint64_t written_until = 0;
  bool awaiting_left = false;  // sent Leave; Left not sent yet
  bool joiner = false;         // joined the running job (HelloMsg::replica_size > 0)
  // A trainer registering again after the trainers were lost (trainer restart), until CommitOk.
  bool restarting = false;
  bool welcomed = false;  // restarting: sent Welcome
  CoordinatorClock::time_point last_heard;
};

// "trainer 3", "rollout 5" (its role rank; -1 before it has one).
std::string participantName(const Participant& p);

class ParticipantTable {
 public:
  // ---- connections ----
  void connected(ConnectionId conn) { pending_.push_back(conn); }  // no Hello yet
  // Adds an admitted rank (its connection no longer pending); returns its index.
  size_t admit(Participant p);
  // The connection closed: its participant's index (no longer found by connection), if any.
  std::optional<size_t> closed(ConnectionId conn);
  std::optional<size_t> indexOf(ConnectionId conn) const;
  const std::vector<ConnectionId>& pending() const { return pending_; }

  // ---- every participant, by index (admission order) ----
  Participant& operator[](size_t index) { return participants_[index]; }
  const Participant& operator[](size_t index) const { return participants_[index]; }
  size_t size() const { return participants_.size(); }
  bool empty() const { return participants_.empty(); }
  auto begin() { return participants_.begin(); }
  auto end() { return participants_.end(); }
  auto begin() const { return participants_.begin(); }
  auto end() const { return participants_.end(); }

  // ---- role ranks: participants' indices by trainer rank and by rollout rank ----
  void assignRanks(std::vector<int32_t> trainer_indices, std::vector<int32_t> rollout_indices);
  void replaceTrainer(int32_t rank, int32_t index);  // a restarted trainer takes the rank
  // The participant at `index` becomes the next rollout rank, of `replica`; returns the rank.
  int32_t addRollout(int32_t index, int32_t replica);
  const std::vector<int32_t>& trainerIndices() const { return trainer_index_; }
  const std::vector<int32_t>& rolloutIndices() const { return rollout_index_; }
  int32_t numTrainers() const { return static_cast<int32_t>(trainer_index_.size()); }
  int32_t numRollouts() const { return static_cast<int32_t>(rollout_index_.size()); }
  Participant& trainer(int32_t rank) { return at(trainer_index_, rank); }
  Participant& rollout(int32_t rank) { return at(rollout_index_, rank); }
  const Participant& trainer(int32_t rank) const { return at(trainer_index_, rank); }
  const Participant& rollout(int32_t rank) const { return at(rollout_index_, rank); }

  // ---- replicas: the replica id of each rollout rank ----
  void setReplicaOfRollout(std::vector<int32_t> replica_of_rollout);
  const std::vector<int32_t>& replicaOfRollout() const { return replica_of_rollout_; }
  // A rollout rank of `replica` that is still in the job, committed or not.
  Participant* findLiveRankOf(int32_t replica);
  Participant* findCommittedRankOf(int32_t replica);  // ... and committed

 private:
  Participant& at(const std::vector<int32_t>& index, int32_t rank) {
    return participants_[static_cast<size_t>(index[static_cast<size_t>(rank)])];
  }
  const Participant& at(const std::vector<int32_t>& index, int32_t rank) const {
    return participants_[static_cast<size_t>(index[static_cast<size_t>(rank)])];
  }

  std::vector<Participant> participants_;
  std::unordered_map<ConnectionId, size_t> by_conn_;
  std::vector<ConnectionId> pending_;   // connected, no Hello yet
  std::vector<int32_t> trainer_index_;  // role rank -> participants_ index
  std::vector<int32_t> rollout_index_;
  std::vector<int32_t> replica_of_rollout_;
};

}  // namespace wsync
