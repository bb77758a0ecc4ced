// The running job's membership (coordinator/coordinator.h): rollouts that die, go silent or leave
// (replicas that join: coordinator/replica_joins.h). Runs on the coordinator's event thread.
#include <algorithm>

#include "coordinator/coordinator_impl.h"

namespace wsync {
namespace {

using coordinator_internal::Clock;

std::string replicaName(int32_t id) {
  return "replica " + std::to_string(id);
}

}  // namespace

// ---- leaving and dropping --------------------------------------------------------------------
void Coordinator::Impl::dropReplicaOf(Participant& p, const std::string& reason, bool crashed) {
  const int32_t id = p.hello.replica;
  if (joins_.joining(id)) return joins_.abort(id, remoteError(reason), /*left_cleanly=*/!crashed);
  if (crashed && opt_.mpi_world_size > 0 && !p.joiner) {
    // A rank of the mpirun job: it may be in broadcasts that cannot complete without it, and the
    // launcher ends the job when a process dies. Fail at once rather than leave anyone waiting.
    return fail(remoteError(reason + " (ranks of an MPI-bootstrap job are not dropped; replicas "
                                     "that can be are started with explicit bootstrap)"));
  }
  // Trainers may write into the replica until the version in flight now is delivered.
  const uint64_t in_flight = versions_.inFlightVersion();
  ReplicaMsg dropped{id, {}};
  const Status notice = remoteError(replicaName(id) + " was dropped from the job: " + reason);
  for (Participant& q : participants_) {
    if (q.hello.role != Role::kRollout || q.hello.replica != id || q.dropped) continue;
    q.dropped = true;
    q.written_until = in_flight;
    dropped.ranks.push_back(q.role_rank);
    if (crashed) sendTo(q, MessageType::kError, encode(ErrorMsg{notice.code(), notice.message()}));
  }
  if (crashed && p.connected) server_->close(p.conn);
  log(replicaName(id) + " (rollout ranks " +
      [&] {
        std::string list;
        for (int32_t r : dropped.ranks)
          list += (list.empty() ? "" : ", ") + std::to_string(r);
        return list;
      }() +
      ") " + (crashed ? "dropped: " : "left: ") + reason);
  if (crashed) opt_.metrics->onReplicaDropped();
  sendToTrainers(MessageType::kReplicaDropped, encode(dropped));
  if (Status s = versions_.dropReplica(id, dropped.ranks); !s.isOk()) fail(s);
  joins_.onSourceLost(id);
}

// Leave (finalize): the replica leaves at once; Left follows once no trainer can still be writing
// into it (sendDueLefts), so the rank may free its slots.
void Coordinator::Impl::onLeave(Participant& p) {
  if (!p.dropped) dropReplicaOf(p, nameOf(p) + " left", /*crashed=*/false);
  p.awaiting_left = true;
  sendDueLefts();
}

void Coordinator::Impl::sendDueLefts() {
  const uint64_t in_flight = versions_.inFlightVersion();
  for (Participant& p : participants_) {
    if (!p.awaiting_left) continue;
    if (p.written_until != 0 && p.written_until == in_flight) continue;  // still being written
    p.awaiting_left = false;
    sendTo(p, MessageType::kLeft, {});
  }
}

// Rollouts of the running job that have been silent past the heartbeat timeout are dropped (a
// stopped or hung process keeps its connection open).
void Coordinator::Impl::checkHeartbeats(Clock::time_point now) {
  if (opt_.job.heartbeatTimeout().count() <= 0) return;
  for (Participant& p : participants_) {
    if (p.hello.role != Role::kRollout || p.dropped || !p.connected || !p.committed) continue;
    // A joining replica's heartbeats start at CommitOk.
    if (joins_.joining(p.hello.replica) && !joins_.committedOk(p.hello.replica)) continue;
    if (now - p.last_heard < opt_.job.heartbeatTimeout()) continue;
    dropReplicaOf(p,
                  nameOf(p) + " (" + p.hello.host + ") sent no heartbeat for " +
                      std::to_string(opt_.job.heartbeatTimeout().count()) + " ms",
                  /*crashed=*/true);
  }
}

std::chrono::milliseconds Coordinator::Impl::replicaBound() const {
  const std::chrono::milliseconds half = opt_.timeout / 2;
  if (opt_.job.heartbeatTimeout().count() <= 0) return half;
  return std::min(opt_.job.heartbeatTimeout(), half);
}

std::chrono::milliseconds Coordinator::Impl::heartbeatInterval() const {
  if (opt_.job.heartbeatTimeout().count() <= 0) return std::chrono::milliseconds(0);
  return std::max(std::chrono::milliseconds(1),
                  std::min(opt_.job.heartbeatTimeout() / 4, opt_.timeout / 8));
}

// A replica whose ranks owe the version in flight a message past replicaBound() is dropped like a
// silent one (a stopped process may keep heartbeating from before, or the heartbeat timeout may
// exceed the job's timeout): the version completes for the others and the trainers go on.
void Coordinator::Impl::dropStalled(const std::vector<int32_t>& stalled, Clock::time_point now) {
  const std::string bound = std::to_string(replicaBound().count()) + " ms";
  const uint64_t version = versions_.inFlightVersion();
  std::vector<std::pair<int32_t, std::string>> drops;  // replica, reason
  drops.reserve(stalled.size());
  for (int32_t id : stalled) {
    drops.emplace_back(id, "it held version " + std::to_string(version) + " for " + bound +
                               " (stalled: its ranks did not answer; the bound is the heartbeat "
                               "timeout, at most half the job's timeout)");
  }
  // A replica holding Go past the bound whose rank is silent (two heartbeats missed) is stopped,
  // not busy with readers: it is dropped too.
  if (opt_.job.heartbeatTimeout().count() > 0) {
    const std::chrono::milliseconds silence = 2 * heartbeatInterval();
    for (int32_t id : versions_.sequencer()->holdingGo(now)) {
      for (const Participant& q : participants_) {
        if (q.hello.role != Role::kRollout || q.hello.replica != id || q.dropped ||
            now - q.last_heard < silence)
          continue;
        drops.emplace_back(id, "it held version " + std::to_string(version) + "'s start for " +
                                   bound + " and " + nameOf(q) + " sent nothing for " +
                                   std::to_string(silence.count()) + " ms (stalled)");
        break;
      }
    }
  }
  for (int32_t r : versions_.overdueRanks(now, replicaBound())) {
    const std::vector<int32_t>& replica_of = participants_.replicaOfRollout();
    if (static_cast<size_t>(r) >= replica_of.size()) continue;
    drops.emplace_back(replica_of[static_cast<size_t>(r)],
                       "rollout " + std::to_string(r) + " did not confirm a ready version within " +
                           bound + " (stalled)");
  }
  for (const auto& drop : drops) {
    if (phase_ != Phase::kRunning) return;
    const int32_t id = drop.first;
    auto p = std::find_if(participants_.begin(), participants_.end(), [&](const Participant& q) {
      return q.hello.role == Role::kRollout && q.hello.replica == id && !q.dropped && q.committed;
    });
    // Ranks of an MPI-bootstrap job cannot be dropped (dropReplicaOf would fail the job): their
    // versions keep the job's own timeout, as before.
    if (p == participants_.end() || (opt_.mpi_world_size > 0 && !p->joiner)) continue;
    dropReplicaOf(*p, drop.second, /*crashed=*/true);
  }
}

// ---- admission and plan extensions ------------------------------------------------------------
// The job-wide settings the admitted ranks set explicitly against the coordinator's (trainers,
// then rollouts, by rank).
Status Coordinator::Impl::checkRanksJobSettings() const {
  std::vector<std::pair<std::string, const HelloMsg*>> named;
  for (const auto* index : {&participants_.trainerIndices(), &participants_.rolloutIndices()}) {
    for (int32_t i : *index) {
      if (i >= 0)
        named.emplace_back(nameOf(participants_[static_cast<size_t>(i)]),
                           &participants_[static_cast<size_t>(i)].hello);
    }
  }
  return checkExplicitJobSettings(opt_.job, named);
}

Status Coordinator::Impl::onExtensionDone(const Participant& p,
                                          const std::vector<uint8_t>& payload) {
  if (p.hello.role != Role::kTrainer) return protocolError("ExtensionDone from a rollout");
  ReplicaMsg m;
  WSYNC_RETURN_IF_ERROR(decode(payload, m));
  if (restart_.extending()) return restart_.onExtensionDone(p, m.replica);
  return joins_.onExtensionDone(p, m.replica);
}

}  // namespace wsync
