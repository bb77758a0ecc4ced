// Trainer restart (CoordinatorOptions::trainer_restart; coordinator/coordinator.h): the running
// job outlives its trainers. Runs on the coordinator's event thread.
//
//   running --(a trainer lost: closed without goodbye, or an error)--> restarting:
//     the version in flight is aborted (replicas not ready give its slot back: Go(v, -1)),
//     published versions not started are forgotten, Delivered no longer goes out, joins under way
//     are aborted, and every trainer still connected gets an Error naming the lost one and is
//     dropped. Rollouts stay connected and keep serving their newest ready version.
//   restarting: new trainers (the same count) say Hello; once all of them did and every previous
//     trainer's connection closed (none of them can still write), each gets Welcome; their
//     registrations must be byte-identical to the previous trainers' (else the one that differs
//     gets MISMATCH naming its rank and tensor, and the others wait for a replacement); then each
//     gets the plan's PlanAssignment for the rollouts alive now; once all committed, CommitOk and
//     the plan extension of every replica that joined the running job (their Publishes are held
//     until every trainer applied every extension; a replica whose extension is not applied
//     within the job's timeout is dropped); the job runs again: versions must be above the last
//     one started.
//   Losing a new trainer before that starts the restart again; no complete set within
//   trainer_restart_timeout fails the job (TIMEOUT naming the missing ranks).
#include <algorithm>
#include <iterator>
#include <set>

#include "codec/plan_codec.h"
#include "codec/registration_codec.h"
#include "coordinator/coordinator_impl.h"
#include "coordinator/delta_assign.h"
#include "plan/planner.h"

namespace wsync {
namespace {

using coordinator_internal::Clock;

std::string trainerName(int32_t rank) {
  return "trainer " + std::to_string(rank);
}

// What differs between a trainer's registration before and after its restart (both decoded), to
// name in the MISMATCH error: the first tensor or buffer that differs.
std::string describeChange(const Registration& before, const Registration& after) {
  const size_t tensors = std::max(before.tensors.size(), after.tensors.size());
  for (size_t i = 0; i < tensors; ++i) {
    if (i >= before.tensors.size()) return "tensor '" + after.tensors[i].name + "' is new";
    if (i >= after.tensors.size()) return "tensor '" + before.tensors[i].name + "' is missing";
    const TensorDecl& b = before.tensors[i];
    const TensorDecl& a = after.tensors[i];
    if (b.name != a.name) return "tensor '" + a.name + "' where '" + b.name + "' was";
    if (b.shape != a.shape) {
      return "tensor '" + a.name + "': shape " + a.shape.toString() + ", was " + b.shape.toString();
    }
  }
  const size_t buffers = std::max(before.buffers.size(), after.buffers.size());
  for (size_t i = 0; i < buffers; ++i) {
    if (i >= before.buffers.size()) return "buffer '" + after.buffers[i].name + "' is new";
    if (i >= after.buffers.size()) return "buffer '" + before.buffers[i].name + "' is missing";
    const LocalBuffer& b = before.buffers[i];
    const LocalBuffer& a = after.buffers[i];
    if (b.name != a.name) return "buffer '" + a.name + "' where '" + b.name + "' was";
    if (b.dtype != a.dtype) {
      return "buffer '" + a.name + "': dtype " + dtypeName(a.dtype) + ", was " + dtypeName(b.dtype);
    }
    if (b.memory != a.memory) {
      return "buffer '" + a.name + "': " + memoryKindName(a.memory) + " memory, was " +
             memoryKindName(b.memory);
    }
  }
  return "the layout of its pieces (which elements each buffer holds) differs";
}

}  // namespace

bool Coordinator::Impl::canRestartTrainers() const {
  return opt_.trainer_restart && opt_.mpi_world_size == 0 && phase_ == Phase::kRunning &&
         plan_.has_value() && plan_->groups.empty();
}

void Coordinator::Impl::beginTrainerRestart(const Status& cause) {
  const Status stop = Status(cause.code(), "the trainers must restart: " + cause.message());
  const auto error = encode(ErrorMsg{stop.code(), stop.message()});
  for (Participant& p : participants_) {
    if (p.hello.role != Role::kTrainer || p.dropped) continue;
    p.dropped = true;  // its later messages and its close are ignored
    p.restarting = false;
    if (!p.said_bye) sendTo(p, MessageType::kError, error);
  }
  std::vector<int32_t> joins;
  for (const auto& [id, g] : joining_)
    joins.push_back(id);
  for (int32_t id : joins) {  // their plan extensions went to the lost trainers
    abortJoin(id, remoteError("the trainers were lost while replica " + std::to_string(id) +
                              " joined: " + cause.message()));
  }
  Status s = apply(sequencer_->abortVersions());
  if (!s.isOk()) return fail(s);
  delivery_gate_.abandonAll();
  if (maxima_) maxima_->reset();
  restart_.emplace();
  restart_->cause = cause.message();
  restart_->deadline = Clock::now() + opt_.trainer_restart_timeout;
  restart_->members.assign(static_cast<size_t>(numTrainers()), -1);
  log("trainers lost (" + cause.toString() + "); rollouts keep their newest ready version; " +
      "waiting up to " + std::to_string(opt_.trainer_restart_timeout.count()) + " ms for " +
      std::to_string(numTrainers()) + " trainers to register again, versions above " +
      std::to_string(sequencer_->lastStartedVersion()));
}

void Coordinator::Impl::onRestartHello(ConnectionId conn, const HelloMsg& hello) {
  const int32_t rank = hello.role_rank;
  Status s = Status::ok();
  if (rank < 0 || rank >= numTrainers()) {
    s = invalidArgument(trainerName(rank) + " is not in the job (" + std::to_string(numTrainers()) +
                        " trainers)");
  } else if (restart_->members[static_cast<size_t>(rank)] >= 0) {
    s = invalidArgument(trainerName(rank) + " already registered again after the restart");
  }
  if (!s.isOk()) {
    log("refused a restarted trainer: " + s.toString());
    return refuse(conn, s);
  }
  pending_.erase(std::remove(pending_.begin(), pending_.end(), conn), pending_.end());
  Participant p;
  p.conn = conn;
  p.hello = hello;
  p.role_rank = rank;
  p.restarting = true;
  restart_->members[static_cast<size_t>(rank)] = static_cast<int32_t>(participants_.size());
  by_conn_[conn] = participants_.size();
  participants_.push_back(std::move(p));
  log(trainerName(rank) + " (" + hello.host + ") is back");
  maybeWelcomeRestarted();
}

// Welcome goes out once every trainer rank is back and no previous trainer is still connected.
void Coordinator::Impl::maybeWelcomeRestarted() {
  if (!restart_) return;
  const auto& members = restart_->members;
  if (std::count(members.begin(), members.end(), -1) != 0) return;
  for (size_t i = 0; i < participants_.size(); ++i) {
    const Participant& q = participants_[i];
    const bool member =
        std::find(members.begin(), members.end(), static_cast<int32_t>(i)) != members.end();
    if (q.hello.role == Role::kTrainer && q.connected && !member) return;  // may still write
  }
  WelcomeMsg welcome;
  welcome.num_trainers = numTrainers();
  welcome.num_rollouts = static_cast<int32_t>(rollout_index_.size());
  welcome.heartbeat_interval_ms = static_cast<int32_t>(heartbeatInterval().count());
  describeJobSettings(opt_.job, welcome);
  for (int32_t index : members) {
    Participant& p = participants_[static_cast<size_t>(index)];
    if (p.welcomed) continue;
    p.welcomed = true;
    welcome.role_rank = p.role_rank;
    sendTo(p, MessageType::kWelcome, encode(welcome));
  }
}

Status Coordinator::Impl::onRestartRegister(Participant& p, const std::vector<uint8_t>& payload) {
  if (!p.welcomed || p.registered) return invalidUsage("Register out of order");
  WSYNC_RETURN_IF_ERROR(decode(payload, p.reg));
  const std::vector<uint8_t> before =
      encodeRegistration(trainer_registrations_[static_cast<size_t>(p.role_rank)]);
  Result<Registration> after =
      decodeRegistration(p.reg.registration.data(), p.reg.registration.size());
  WSYNC_RETURN_IF_ERROR(after.status().withContext(nameOf(p) + "'s registration"));
  // Compared as planning saw the predecessor's: with its quantized sources.
  WSYNC_RETURN_IF_ERROR(addQuantizedSourcesTo(*after).withContext(nameOf(p)));
  if (encodeRegistration(*after) != before) {
    const Status refused = mismatch(
        nameOf(p) + " registered differently than before the trainers restarted: " +
        describeChange(trainer_registrations_[static_cast<size_t>(p.role_rank)], *after) +
        " (a restarted trainer must register the same tensors, shapes, dtypes and layout)");
    log("refused a restarted trainer: " + refused.toString());
    sendTo(p, MessageType::kError, encode(ErrorMsg{refused.code(), refused.message()}));
    server_->close(p.conn);
    p.dropped = true;  // its close is ignored; a replacement may come
    restart_->members[static_cast<size_t>(p.role_rank)] = -1;
    return Status::ok();
  }
  p.registered = true;
  for (int32_t index : restart_->members) {
    if (index < 0 || !participants_[static_cast<size_t>(index)].registered) return Status::ok();
  }
  sendRestartAssignments();
  return Status::ok();
}

// Each new trainer's part of the plan, for the rollouts alive now (writes to dropped ones are
// left out); replicas that joined the running job follow as plan extensions after CommitOk.
void Coordinator::Impl::sendRestartAssignments() {
  restart_->assigned = true;
  for (int32_t t = 0; t < numTrainers(); ++t)
    trainer_index_[static_cast<size_t>(t)] = restart_->members[static_cast<size_t>(t)];
  const auto alive = [&](int32_t r) {
    return static_cast<size_t>(r) < rollout_index_.size() && !rollout(r).dropped &&
           sequencer_->replicaOf(r).has_value();
  };
  std::vector<int32_t> replica_of = replica_of_rollout_;
  for (size_t r = 0; r < replica_of.size(); ++r) {
    if (!alive(static_cast<int32_t>(r))) replica_of[r] = -1;
  }
  const DenseWriteBytes dense = denseWriteBytes(*plan_, numTrainers());
  for (int32_t t = 0; t < numTrainers(); ++t) {
    RankPlan view = rankView(*plan_, Role::kTrainer, t);
    view.writes.erase(std::remove_if(view.writes.begin(), view.writes.end(),
                                     [&](const WriteOp& op) { return !alive(op.dst_rank); }),
                      view.writes.end());
    view.peers.erase(
        std::remove_if(view.peers.begin(), view.peers.end(), [&](int32_t r) { return !alive(r); }),
        view.peers.end());
    PlanAssignmentMsg msg;
    msg.rank_plan = encodeRankPlan(view);
    for (int32_t peer : view.peers) {
      const Participant& q = rollout(peer);
      msg.peers.push_back({peer,
                           q.reg.transport,
                           q.reg.transport_address,
                           q.reg.slot_descriptors,
                           q.reg.buffer_byte_offsets,
                           {},
                           0,
                           0});
      assignDeltaLanding(opt_.job, dense, t, trainer(t).reg.device_id.empty(), q.reg.delta_landing,
                         msg.peers.back());
    }
    msg.replica_of_rollout = replica_of;
    addBlockScaling(t, msg);
    sendTo(trainer(t), MessageType::kPlanAssignment, encode(msg));
  }
}

// Once every new trainer committed: CommitOk, then the plan extension of every replica that
// joined the running job. Their Publishes are held until each of them applied every extension
// (ExtensionDone), so no version's Go gives such a replica a slot it would not write.
Status Coordinator::Impl::onRestartCommitDone(Participant& p) {
  if (!restart_->assigned || p.committed) return invalidUsage("CommitDone out of order");
  p.committed = true;
  for (int32_t index : restart_->members) {
    if (!participants_[static_cast<size_t>(index)].committed) return Status::ok();
  }
  const auto now = Clock::now();
  restart_->extending = true;
  restart_->deadline = now + opt_.timeout;
  for (int32_t t = 0; t < numTrainers(); ++t) {
    Participant& q = trainer(t);
    q.restarting = false;
    q.last_heard = now;
    sendTo(q, MessageType::kCommitOk, {});
    for (const auto& [replica, per_trainer] : extensions_) {
      if (!sequencer_->hasReplica(replica)) continue;
      sendTo(q, MessageType::kPlanExtension, per_trainer[static_cast<size_t>(t)]);
      restart_->extensions_due.insert({t, replica});
    }
  }
  maybeFinishTrainerRestart();
  return Status::ok();
}

bool Coordinator::Impl::holdPublish(const Participant& p, const std::vector<uint8_t>& payload) {
  if (!restart_ || !restart_->extending || p.hello.role != Role::kTrainer) return false;
  restart_->held_publishes.emplace_back(p.role_rank, payload);
  return true;
}

Status Coordinator::Impl::onRestartExtensionDone(const Participant& p, int32_t replica) {
  if (restart_->extensions_due.erase({p.role_rank, replica}) == 0) {
    return protocolError("ExtensionDone for replica " + std::to_string(replica) + " out of order");
  }
  maybeFinishTrainerRestart();
  return Status::ok();
}

// The restart ends once every due extension was applied, or its replica left the job; the held
// Publishes then go to the sequencer.
void Coordinator::Impl::maybeFinishTrainerRestart() {
  auto& due = restart_->extensions_due;
  for (auto it = due.begin(); it != due.end();)
    it = sequencer_->hasReplica(it->second) ? std::next(it) : due.erase(it);
  if (!due.empty()) return;
  log("trainers restarted (they were lost: " + restart_->cause + "); versions continue above " +
      std::to_string(sequencer_->lastStartedVersion()));
  const auto held = std::move(restart_->held_publishes);
  restart_.reset();
  for (const auto& [t, payload] : held) {
    Participant& q = trainer(t);
    if (q.dropped) continue;
    const Status s = onVersionMessage(q, MessageType::kPublish, payload);
    if (!s.isOk()) return beginTrainerRestart(s.withContext(nameOf(q)));
  }
}

void Coordinator::Impl::checkTrainerRestart(Clock::time_point now) {
  if (!restart_) return;
  if (restart_->extending && now < restart_->deadline) return maybeFinishTrainerRestart();
  if (now < restart_->deadline) return;
  if (restart_->extending) {  // a trainer did not apply an extension: its replica cannot be written
    std::set<int32_t> replicas;
    for (const auto& [t, replica] : restart_->extensions_due)
      replicas.insert(replica);
    for (int32_t replica : replicas) {
      auto p = std::find_if(participants_.begin(), participants_.end(), [&](const Participant& q) {
        return q.hello.role == Role::kRollout && q.hello.replica == replica && !q.dropped;
      });
      if (p != participants_.end()) {
        dropReplicaOf(*p,
                      "the restarted trainers did not apply its plan extension within " +
                          std::to_string(opt_.timeout.count()) + " ms",
                      /*crashed=*/true);
      }
    }
    if (restart_) maybeFinishTrainerRestart();
    return;
  }
  std::string missing;
  for (int32_t t = 0; t < numTrainers(); ++t) {
    const int32_t index = restart_->members[static_cast<size_t>(t)];
    const char* what = index < 0                                               ? "never came back"
                       : !participants_[static_cast<size_t>(index)].registered ? "not registered"
                                                                               : "not committed";
    if (index >= 0 && participants_[static_cast<size_t>(index)].committed) continue;
    missing += (missing.empty() ? "" : ", ") + trainerName(t) + " " + what;
  }
  fail(timeoutError("the trainers were lost (" + restart_->cause +
                    ") and did not come back within " +
                    std::to_string(opt_.trainer_restart_timeout.count()) + " ms: " + missing));
}

}  // namespace wsync
