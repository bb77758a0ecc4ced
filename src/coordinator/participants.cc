#include "coordinator/participants.h"

#include <algorithm>
#include <utility>

#include "coordinator/admission.h"

namespace wsync {

std::string participantName(const Participant& p) {
  return rankName(p.hello.role, p.role_rank);
}

size_t ParticipantTable::admit(Participant p) {
  pending_.erase(std::remove(pending_.begin(), pending_.end(), p.conn), pending_.end());
  const size_t index = participants_.size();
  by_conn_[p.conn] = index;
  participants_.push_back(std::move(p));
  return index;
}

std::optional<size_t> ParticipantTable::closed(ConnectionId conn) {
  pending_.erase(std::remove(pending_.begin(), pending_.end(), conn), pending_.end());
  auto it = by_conn_.find(conn);
  if (it == by_conn_.end()) return std::nullopt;
  const size_t index = it->second;
  by_conn_.erase(it);
  return index;
}

std::optional<size_t> ParticipantTable::indexOf(ConnectionId conn) const {
  auto it = by_conn_.find(conn);
  if (it == by_conn_.end()) return std::nullopt;
  return it->second;
}

void ParticipantTable::assignRanks(std::vector<int32_t> trainer_indices,
                                   std::vector<int32_t> rollout_indices) {
  trainer_index_ = std::move(trainer_indices);
  rollout_index_ = std::move(rollout_indices);
}

void ParticipantTable::replaceTrainer(int32_t rank, int32_t index) {
  trainer_index_[static_cast<size_t>(rank)] = index;
}

int32_t ParticipantTable::addRollout(int32_t index, int32_t replica) {
  const auto rank = static_cast<int32_t>(rollout_index_.size());
  participants_[static_cast<size_t>(index)].role_rank = rank;
  rollout_index_.push_back(index);
  replica_of_rollout_.push_back(replica);
  return rank;
}

void ParticipantTable::setReplicaOfRollout(std::vector<int32_t> replica_of_rollout) {
  replica_of_rollout_ = std::move(replica_of_rollout);
}

Participant* ParticipantTable::findLiveRankOf(int32_t replica) {
  for (Participant& q : participants_) {
    if (q.hello.role == Role::kRollout && q.hello.replica == replica && !q.dropped) return &q;
  }
  return nullptr;
}

Participant* ParticipantTable::findCommittedRankOf(int32_t replica) {
  for (Participant& q : participants_) {
    if (q.hello.role == Role::kRollout && q.hello.replica == replica && !q.dropped && q.committed)
      return &q;
  }
  return nullptr;
}

}  // namespace wsync
