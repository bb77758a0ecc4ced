#include "coordinator/job_membership.h"

#include <algorithm>

#include "protocol/protocol.h"

namespace wsync {
namespace {

std::string replicaName(int32_t id) {
  return "replica " + std::to_string(id);
}

}  // namespace

JobMembership::JobMembership(JobMembershipOptions options, ParticipantTable& participants,
                             CoordinatorWire& wire, CoordinatorMetrics& metrics)
    : options_(options), participants_(participants), wire_(wire), metrics_(metrics) {}

std::chrono::milliseconds JobMembership::replicaBound() const {
  const std::chrono::milliseconds half = options_.timeout / 2;
  if (options_.job.heartbeatTimeout().count() <= 0) return half;
  return std::min(options_.job.heartbeatTimeout(), half);
}

std::chrono::milliseconds JobMembership::heartbeatInterval() const {
  if (options_.job.heartbeatTimeout().count() <= 0) return std::chrono::milliseconds(0);
  return std::max(std::chrono::milliseconds(1),
                  std::min(options_.job.heartbeatTimeout() / 4, options_.timeout / 8));
}

Result<std::vector<int32_t>> JobMembership::drop(Participant& p, const std::string& reason,
                                                 bool crashed, uint64_t in_flight) {
  const int32_t id = p.hello.replica;
  if (crashed && options_.mpi_job && !p.joiner) {
    // A rank of the mpirun job: it may be in broadcasts that cannot complete without it, and the
    // launcher ends the job when a process dies. Fail at once rather than leave anyone waiting.
    return remoteError(reason +
                       " (ranks of an MPI-bootstrap job are not dropped; replicas "
                       "that can be are started with explicit bootstrap)");
  }
  ReplicaMsg dropped{id, {}};
  const Status notice = remoteError(replicaName(id) + " was dropped from the job: " + reason);
  for (Participant& q : participants_) {
    if (q.hello.role != Role::kRollout || q.hello.replica != id || q.dropped) continue;
    q.dropped = true;
    q.written_until = in_flight;  // trainers may write into it until this version is delivered
    dropped.ranks.push_back(q.role_rank);
    if (crashed)
      wire_.sendTo(q, MessageType::kError, encode(ErrorMsg{notice.code(), notice.message()}));
  }
  if (crashed && p.connected) wire_.close(p.conn);
  std::string list;
  for (int32_t r : dropped.ranks)
    list += (list.empty() ? "" : ", ") + std::to_string(r);
  wire_.log(replicaName(id) + " (rollout ranks " + list + ") " +
            (crashed ? "dropped: " : "left: ") + reason);
  if (crashed) metrics_.onReplicaDropped();
  const std::vector<uint8_t> payload = encode(dropped);
  for (int32_t t = 0; t < participants_.numTrainers(); ++t)
    wire_.sendTo(participants_.trainer(t), MessageType::kReplicaDropped, payload);
  return dropped.ranks;
}

void JobMembership::sendDueLefts(uint64_t in_flight) {
  for (Participant& p : participants_) {
    if (!p.awaiting_left) continue;
    if (p.written_until != 0 && p.written_until == in_flight) continue;  // still being written
    p.awaiting_left = false;
    wire_.sendTo(p, MessageType::kLeft, {});
  }
}

// A stopped or hung process keeps its connection open: its silence shows it.
std::optional<std::string> JobMembership::silence(const Participant& p,
                                                  CoordinatorClock::time_point now) const {
  const std::chrono::milliseconds timeout = options_.job.heartbeatTimeout();
  if (timeout.count() <= 0) return std::nullopt;
  if (p.hello.role != Role::kRollout || p.dropped || !p.connected || !p.committed)
    return std::nullopt;
  if (now - p.last_heard < timeout) return std::nullopt;
  return participantName(p) + " (" + p.hello.host + ") sent no heartbeat for " +
         std::to_string(timeout.count()) + " ms";
}

// A replica whose ranks owe the version in flight a message past replicaBound() is dropped like a
// silent one (a stopped process may keep heartbeating from before, or the heartbeat timeout may
// exceed the job's timeout): the version completes for the others and the trainers go on.
std::vector<std::pair<int32_t, std::string>> JobMembership::stalledReplicas(
    const std::vector<int32_t>& stalled, uint64_t version, const std::vector<int32_t>& holding_go,
    const std::vector<int32_t>& overdue_ranks, CoordinatorClock::time_point now) const {
  const std::string bound = std::to_string(replicaBound().count()) + " ms";
  std::vector<std::pair<int32_t, std::string>> drops;  // replica, reason
  drops.reserve(stalled.size());
  for (int32_t id : stalled) {
    drops.emplace_back(id, "it held version " + std::to_string(version) + " for " + bound +
                               " (stalled: its ranks did not answer; the bound is the heartbeat "
                               "timeout, at most half the job's timeout)");
  }
  // A replica holding Go past the bound whose rank is silent (two heartbeats missed) is stopped,
  // not busy with readers: it is dropped too.
  if (options_.job.heartbeatTimeout().count() > 0) {
    const std::chrono::milliseconds silence = 2 * heartbeatInterval();
    for (int32_t id : holding_go) {
      for (const Participant& q : participants_) {
        if (q.hello.role != Role::kRollout || q.hello.replica != id || q.dropped ||
            now - q.last_heard < silence)
          continue;
        drops.emplace_back(id, "it held version " + std::to_string(version) + "'s start for " +
                                   bound + " and " + participantName(q) + " sent nothing for " +
                                   std::to_string(silence.count()) + " ms (stalled)");
        break;
      }
    }
  }
  const std::vector<int32_t>& replica_of = participants_.replicaOfRollout();
  for (int32_t r : overdue_ranks) {
    if (static_cast<size_t>(r) >= replica_of.size()) continue;
    drops.emplace_back(replica_of[static_cast<size_t>(r)],
                       "rollout " + std::to_string(r) + " did not confirm a ready version within " +
                           bound + " (stalled)");
  }
  return drops;
}

Participant* JobMembership::stalledRank(int32_t replica) {
  auto p = std::find_if(participants_.begin(), participants_.end(), [&](const Participant& q) {
    return q.hello.role == Role::kRollout && q.hello.replica == replica && !q.dropped &&
           q.committed;
  });
  // Ranks of an MPI-bootstrap job cannot be dropped (drop() would fail the job): their versions
  // keep the job's own timeout, as before.
  if (p == participants_.end() || (options_.mpi_job && !p->joiner)) return nullptr;
  return &*p;
}

}  // namespace wsync
