// The running job's membership (coordinator/coordinator.h): rollouts that die, go silent or leave,
// and replicas that join. Runs on the coordinator's event thread.
#include <algorithm>

#include "codec/plan_codec.h"
#include "codec/registration_codec.h"
#include "coordinator/coordinator_impl.h"
#include "coordinator/delta_assign.h"
#include "plan/planner.h"
#include "plan/replica_plan.h"

namespace wsync {
namespace {

using coordinator_internal::Clock;

// Bounds on what a joining rank declares, before it sizes anything.
constexpr int32_t kMaxReplicaRanks = 1 << 12;
constexpr int32_t kMaxReplicaId = 1 << 20;

double msSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

std::string replicaName(int32_t id) {
  return "replica " + std::to_string(id);
}

}  // namespace

// ---- leaving and dropping --------------------------------------------------------------------
bool Coordinator::Impl::replicaInUse(int32_t replica) const {
  if (joining_.count(replica) != 0) return true;
  return std::any_of(participants_.begin(), participants_.end(), [&](const Participant& q) {
    return q.hello.role == Role::kRollout && q.hello.replica == replica && !q.dropped &&
           (q.connected || !q.said_bye);
  });
}

void Coordinator::Impl::dropReplicaOf(Participant& p, const std::string& reason, bool crashed) {
  const int32_t id = p.hello.replica;
  if (joining_.count(id) != 0) return abortJoin(id, remoteError(reason), /*left_cleanly=*/!crashed);
  if (crashed && opt_.mpi_world_size > 0 && !p.joiner) {
    // A rank of the mpirun job: it may be in broadcasts that cannot complete without it, and the
    // launcher ends the job when a process dies. Fail at once rather than leave anyone waiting.
    return fail(remoteError(reason + " (ranks of an MPI-bootstrap job are not dropped; replicas "
                                     "that can be are started with explicit bootstrap)"));
  }
  // Trainers may write into the replica until the version in flight now is delivered.
  const uint64_t in_flight = sequencer_ ? sequencer_->inFlightVersion() : 0;
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
  for (int32_t rank : dropped.ranks) {  // no confirmation of Ready is awaited from it any more
    for (const OutgoingMessage& released : delivery_gate_.forget(rank))
      send(released);
  }
  if (sequencer_ && sequencer_->hasReplica(id)) {
    Status s = apply(sequencer_->removeReplica(id, Clock::now()));
    if (!s.isOk()) fail(s);
  }
  onColdStartSourceLost(id);
}

// Leave (finalize): the replica leaves at once; Left follows once no trainer can still be writing
// into it (sendDueLefts), so the rank may free its slots.
void Coordinator::Impl::onLeave(Participant& p) {
  if (!p.dropped) dropReplicaOf(p, nameOf(p) + " left", /*crashed=*/false);
  p.awaiting_left = true;
  sendDueLefts();
}

void Coordinator::Impl::sendDueLefts() {
  const uint64_t in_flight = sequencer_ ? sequencer_->inFlightVersion() : 0;
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
    auto joining = joining_.find(p.hello.replica);  // heartbeats start at CommitOk
    if (joining != joining_.end() && !joining->second.committed_ok) continue;
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
  const uint64_t version = sequencer_->inFlightVersion();
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
    for (int32_t id : sequencer_->holdingGo(now)) {
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
  for (int32_t r : delivery_gate_.overdueRanks(now, replicaBound())) {
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

// ---- joining the running job -----------------------------------------------------------------
Status Coordinator::Impl::checkJoinHello(const HelloMsg& h) const {
  const std::string what = "joining " + replicaName(h.replica);
  if (opt_.mpi_world_size > 0 && h.world_rank >= 0) {
    return invalidArgument(what + ": a rank of the MPI job cannot join as a new replica");
  }
  if (h.replica < 0 || h.replica >= kMaxReplicaId) {
    return invalidArgument(what + ": replica ids are in [0, " + std::to_string(kMaxReplicaId) +
                           ")");
  }
  if (h.replica_size > kMaxReplicaRanks) {
    return invalidArgument(what + ": replica_size " + std::to_string(h.replica_size) +
                           " is above " + std::to_string(kMaxReplicaRanks));
  }
  if (h.replica_rank < 0 || h.replica_rank >= h.replica_size) {
    return invalidArgument(what + ": replica_rank " + std::to_string(h.replica_rank) +
                           " is outside [0, " + std::to_string(h.replica_size) + ")");
  }
  if (phase_ == Phase::kDone || phase_ == Phase::kFailed) {
    return invalidUsage(what + ": the job has ended");
  }
  auto it = joining_.find(h.replica);
  if (it == joining_.end()) {
    if (replicaInUse(h.replica)) return invalidArgument(what + ": the job already has it");
    return Status::ok();
  }
  const JoiningReplica& g = it->second;
  if (g.size != h.replica_size) {
    return invalidArgument(what + ": replica_size " + std::to_string(h.replica_size) +
                           ", but another of its ranks said " + std::to_string(g.size));
  }
  if (g.welcomed || g.members[static_cast<size_t>(h.replica_rank)] >= 0) {
    return invalidArgument(what + ": replica rank " + std::to_string(h.replica_rank) +
                           " already joined");
  }
  return Status::ok();
}

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

void Coordinator::Impl::onJoinHello(ConnectionId conn, const HelloMsg& hello) {
  Status s = checkJoinHello(hello);
  if (s.isOk()) {
    s = checkExplicitJobSettings(
        opt_.job, {{"the joining rank " + std::to_string(hello.replica_rank) + " of replica " +
                        std::to_string(hello.replica),
                    &hello}});
  }
  if (!s.isOk()) {
    log("refused a joining rank: " + s.toString());
    return refuse(conn, s);
  }
  JoiningReplica& g = joining_[hello.replica];
  if (g.members.empty()) {
    g.id = hello.replica;
    g.size = hello.replica_size;
    g.started = Clock::now();
    g.members.assign(static_cast<size_t>(g.size), -1);
  }
  Participant p;
  p.conn = conn;
  p.hello = hello;
  p.joiner = true;
  p.last_heard = Clock::now();
  g.members[static_cast<size_t>(hello.replica_rank)] =
      static_cast<int32_t>(participants_.admit(std::move(p)));
  const bool complete = std::count(g.members.begin(), g.members.end(), -1) == 0;
  if (complete && phase_ == Phase::kRunning) welcomeJoiners(g);
}

// Every rank of the joining replica said Hello: they get the next rollout ranks of the job.
void Coordinator::Impl::welcomeJoiners(JoiningReplica& g) {
  g.welcomed = true;
  WelcomeMsg welcome;
  welcome.num_trainers = numTrainers();
  welcome.num_rollouts = participants_.numRollouts() + g.size;
  welcome.heartbeat_interval_ms = static_cast<int32_t>(heartbeatInterval().count());
  describeJobSettings(opt_.job, welcome);  // checksums and delta versions, as for the others
  for (int32_t member : g.members) {
    Participant& p = participants_[static_cast<size_t>(member)];
    g.ranks.push_back(participants_.addRollout(member, g.id));
    welcome.role_rank = p.role_rank;
    sendTo(p, MessageType::kWelcome, encode(welcome));
  }
  log(replicaName(g.id) + " is joining with rollout ranks " + std::to_string(g.ranks.front()) +
      ".." + std::to_string(g.ranks.back()));
}

Status Coordinator::Impl::onJoinerRegister(Participant& p, const std::vector<uint8_t>& payload) {
  auto it = joining_.find(p.hello.replica);
  if (it == joining_.end() || !it->second.welcomed || p.registered) {
    return invalidUsage("Register out of order (twice, or before the replica was welcomed)");
  }
  WSYNC_RETURN_IF_ERROR(decode(payload, p.reg));
  p.registered = true;
  JoiningReplica& g = it->second;
  const bool all = std::all_of(g.members.begin(), g.members.end(), [this](int32_t m) {
    return participants_[static_cast<size_t>(m)].registered;
  });
  if (all) planJoiner(g);
  return Status::ok();
}

Status Coordinator::Impl::onExtensionDone(const Participant& p,
                                          const std::vector<uint8_t>& payload) {
  if (p.hello.role != Role::kTrainer) return protocolError("ExtensionDone from a rollout");
  ReplicaMsg m;
  WSYNC_RETURN_IF_ERROR(decode(payload, m));
  if (restart_.extending()) return restart_.onExtensionDone(p, m.replica);
  auto it = joining_.find(m.replica);
  if (it == joining_.end()) return Status::ok();  // the join was aborted meanwhile
  if (!it->second.extended || !it->second.trainers_done.insert(p.role_rank).second) {
    return protocolError("ExtensionDone for " + replicaName(m.replica) + " out of order");
  }
  maybeCompleteJoin(m.replica);
  return Status::ok();
}

// Every rank of the joining replica committed: its ranks start running (CommitOk) and it is filled
// from a peer replica that holds a version (peer cold start), while the trainers apply its plan
// extension. Once both are done it enters the sequencer: holding the cold start's version, or,
// when no peer could fill it, taking part from the next version.
void Coordinator::Impl::maybeCompleteJoin(int32_t replica) {
  auto it = joining_.find(replica);
  if (it == joining_.end()) return;
  JoiningReplica& g = it->second;
  for (int32_t member : g.members) {
    if (!participants_[static_cast<size_t>(member)].committed) return;
  }
  if (!g.committed_ok) {
    const auto now = Clock::now();
    for (int32_t member : g.members) {
      Participant& p = participants_[static_cast<size_t>(member)];
      p.last_heard = now;
      sendTo(p, MessageType::kCommitOk, {});
    }
    g.committed_ok = true;
    return startColdStart(g);  // its end (applyColdStart) comes back here
  }
  if (!g.cold_done) return;
  // Trainers that finished apply no extension: no version comes from them any more.
  if (!trainers_finished_ && static_cast<int32_t>(g.trainers_done.size()) < numTrainers()) return;
  bool wait = false;
  if (needsCatchUp(g, &wait)) {
    if (wait) return;  // resumeJoinsAfterDelivery
    g.cold_done = false;
    g.catch_ups += 1;
    return startColdStart(g);
  }
  completeJoin(replica, g.ready_version, g.ready_slot);
}

// Versions newer than the joiner's cold start that started before it enters the sequencer would
// pass it by; when the trainers finish before then, it would never get the last one.
bool Coordinator::Impl::needsCatchUp(const JoiningReplica& g, bool* wait) const {
  *wait = false;
  if (g.ready_version == 0 || g.num_slots < 2 || g.catch_up_stuck) return false;
  if (!trainers_finished_ && g.catch_ups >= kMaxCatchUps) return false;
  for (const auto& [version, holder] : coldStartSources().holders()) {
    if (version > g.ready_version) return true;
  }
  const uint64_t in_flight = sequencer_ ? sequencer_->inFlightVersion() : 0;
  *wait = in_flight > g.ready_version;
  return *wait;
}

void Coordinator::Impl::resumeJoinsAfterDelivery() {
  std::vector<int32_t> ids;
  for (const auto& [id, g] : joining_) {
    if (g.cold_done) ids.push_back(id);
  }
  for (int32_t id : ids)
    maybeCompleteJoin(id);
}

void Coordinator::Impl::completeJoin(int32_t replica, uint64_t ready_version, int32_t ready_slot) {
  auto it = joining_.find(replica);
  if (it == joining_.end()) return;
  JoiningReplica& g = it->second;
  Status s = sequencer_->addReplica({g.id, g.ranks, g.num_slots, ready_version, ready_slot});
  if (!s.isOk()) return abortJoin(g.id, s);
  log(replicaName(g.id) + " joined (" + std::to_string(g.size) + " ranks, " +
      std::to_string(g.write_ops) + " write ops): planned in " + std::to_string(g.plan_ms) +
      " ms, joined in " + std::to_string(msSince(g.started)) + " ms" +
      (ready_version == 0 ? "; its first version comes from the trainers"
                          : "; it holds version " + std::to_string(ready_version)));
  joining_.erase(it);
  if (trainers_finished_) sendTrainersDone(replica);  // held back until now (tellTrainersDone)
}

void Coordinator::Impl::abortJoin(int32_t replica, const Status& status, bool left_cleanly) {
  auto it = joining_.find(replica);
  if (it == joining_.end()) return;
  JoiningReplica g = std::move(it->second);
  joining_.erase(it);
  cold_starts_.forget(replica);
  // Only this replica's join ended (not the job): REMOTE, which its ranks do not read as the
  // job failing. A rank that said Leave is dropped quietly (Left answers it), as a running
  // replica that leaves.
  log(replicaName(replica) + (left_cleanly ? " left before its join completed: " + status.message()
                                           : " could not join: " + status.toString()));
  const auto payload = encode(
      ErrorMsg{status.code() == WSYNC_ERR_TIMEOUT ? WSYNC_ERR_REMOTE : status.code(),
               status.message() + " (the job goes on without " + replicaName(replica) + ")"});
  for (int32_t member : g.members) {
    if (member < 0) continue;
    Participant& p = participants_[static_cast<size_t>(member)];
    p.dropped = true;
    if (p.connected && !left_cleanly) {
      sendTo(p, MessageType::kError, payload);
      server_->close(p.conn);
    }
  }
  if (g.extended) sendToTrainers(MessageType::kReplicaDropped, encode(ReplicaMsg{g.id, g.ranks}));
}

// A join not complete within the job's timeout of its first Hello is aborted, naming why.
void Coordinator::Impl::checkJoinDeadlines(Clock::time_point now) {
  // Joins in their cold start: each attempt is bounded (overdue); sources holding a fill past
  // half the job's timeout are stalled (ColdStartTracker::tick).
  ColdStartOutput cold = cold_starts_.tick(now);
  std::vector<std::pair<int32_t, std::string>> late = std::move(cold.overdue);
  for (const auto& [id, g] : joining_) {
    if (cold_starts_.active(id)) continue;
    if (now - g.started < opt_.timeout) continue;
    std::string why;
    if (!g.welcomed) {
      why = std::to_string(std::count_if(g.members.begin(), g.members.end(),
                                         [](int32_t m) { return m >= 0; })) +
            " of its " + std::to_string(g.size) + " ranks said Hello" +
            (phase_ == Phase::kRunning ? "" : " (the job is not running yet)");
    } else if (!g.extended) {
      why = "not every rank registered";
    } else {
      why = std::to_string(g.trainers_done.size()) + " of " + std::to_string(numTrainers()) +
            " trainers applied its plan extension (trainers apply it between versions)";
    }
    late.emplace_back(id, why);
  }
  std::sort(late.begin(), late.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });  // by replica id
  for (const auto& [id, why] : late) {
    abortJoin(id, timeoutError(replicaName(id) + " did not join within " +
                               std::to_string(opt_.timeout.count()) + " ms: " + why));
  }
  for (const auto& source : cold.stalled_sources) {
    if (phase_ != Phase::kRunning) return;
    const int32_t id = source.first;
    auto p = std::find_if(participants_.begin(), participants_.end(), [&](const Participant& q) {
      return q.hello.role == Role::kRollout && q.hello.replica == id && !q.dropped && q.committed;
    });
    // MPI-bootstrap ranks cannot be dropped: their fills keep the attempt's bound.
    if (p == participants_.end() || (opt_.mpi_world_size > 0 && !p->joiner)) continue;
    dropReplicaOf(*p, source.second, /*crashed=*/true);
  }
}

}  // namespace wsync
