#include "coordinator/trainer_restart.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "codec/plan_codec.h"
#include "codec/registration_codec.h"
#include "coordinator/delta_assign.h"
#include "plan/planner.h"

namespace wsync {
namespace {

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

TrainerRestart::TrainerRestart(TrainerRestartOptions options, ParticipantTable& participants,
                               CoordinatorWire& wire, TrainerRestartJob job)
    : options_(options), participants_(participants), wire_(wire), job_(std::move(job)) {}

void TrainerRestart::keepPlan(Plan plan, const std::vector<Registration>* trainers) {
  if (!options_.enabled) return;
  plan_ = std::move(plan);
  trainer_registrations_ = trainers;
}

void TrainerRestart::keepExtension(int32_t replica, int32_t trainer, std::vector<uint8_t> encoded) {
  if (!options_.enabled) return;  // restarted trainers get it again
  auto& per_trainer = extensions_[replica];
  per_trainer.resize(static_cast<size_t>(participants_.numTrainers()));
  per_trainer[static_cast<size_t>(trainer)] = std::move(encoded);
}

bool TrainerRestart::canBegin(bool job_running) const {
  return options_.enabled && job_running && plan_.has_value() && plan_->groups.empty();
}

void TrainerRestart::begin(const Status& cause, CoordinatorClock::time_point now) {
  const Status stop = Status(cause.code(), "the trainers must restart: " + cause.message());
  const auto error = encode(ErrorMsg{stop.code(), stop.message()});
  for (Participant& p : participants_) {
    if (p.hello.role != Role::kTrainer || p.dropped) continue;
    p.dropped = true;  // its later messages and its close are ignored
    p.restarting = false;
    if (!p.said_bye) wire_.sendTo(p, MessageType::kError, error);
  }
  const int32_t num_trainers = participants_.numTrainers();
  state_.emplace();
  state_->cause = cause.message();
  state_->deadline = now + options_.restart_timeout;
  state_->members.assign(static_cast<size_t>(num_trainers), -1);
  wire_.log("trainers lost (" + cause.toString() + "); rollouts keep their newest ready version; " +
            "waiting up to " + std::to_string(options_.restart_timeout.count()) + " ms for " +
            std::to_string(num_trainers) + " trainers to register again, versions above " +
            std::to_string(job_.last_started_version()));
}

void TrainerRestart::onHello(ConnectionId conn, const HelloMsg& hello) {
  const int32_t rank = hello.role_rank;
  const int32_t num_trainers = participants_.numTrainers();
  Status s = Status::ok();
  if (rank < 0 || rank >= num_trainers) {
    s = invalidArgument(trainerName(rank) + " is not in the job (" + std::to_string(num_trainers) +
                        " trainers)");
  } else if (state_->members[static_cast<size_t>(rank)] >= 0) {
    s = invalidArgument(trainerName(rank) + " already registered again after the restart");
  }
  if (!s.isOk()) {
    wire_.log("refused a restarted trainer: " + s.toString());
    return wire_.refuse(conn, s);
  }
  Participant p;
  p.conn = conn;
  p.hello = hello;
  p.role_rank = rank;
  p.restarting = true;
  state_->members[static_cast<size_t>(rank)] =
      static_cast<int32_t>(participants_.admit(std::move(p)));
  wire_.log(trainerName(rank) + " (" + hello.host + ") is back");
  maybeWelcome();
}

void TrainerRestart::onTrainerClosed() {
  if (state_) maybeWelcome();
}

// Welcome goes out once every trainer rank is back and no previous trainer is still connected.
void TrainerRestart::maybeWelcome() {
  const auto& members = state_->members;
  if (std::count(members.begin(), members.end(), -1) != 0) return;
  for (size_t i = 0; i < participants_.size(); ++i) {
    const Participant& q = participants_[i];
    const bool member =
        std::find(members.begin(), members.end(), static_cast<int32_t>(i)) != members.end();
    if (q.hello.role == Role::kTrainer && q.connected && !member) return;  // may still write
  }
  WelcomeMsg welcome;
  welcome.num_trainers = participants_.numTrainers();
  welcome.num_rollouts = participants_.numRollouts();
  welcome.heartbeat_interval_ms = options_.heartbeat_interval_ms;
  describeJobSettings(options_.job, welcome);
  for (int32_t index : members) {
    Participant& p = participants_[static_cast<size_t>(index)];
    if (p.welcomed) continue;
    p.welcomed = true;
    welcome.role_rank = p.role_rank;
    wire_.sendTo(p, MessageType::kWelcome, encode(welcome));
  }
}

Status TrainerRestart::onRegister(Participant& p, const std::vector<uint8_t>& payload) {
  if (!state_ || !p.welcomed || p.registered) return invalidUsage("Register out of order");
  WSYNC_RETURN_IF_ERROR(decode(payload, p.reg));
  const Registration& planned = (*trainer_registrations_)[static_cast<size_t>(p.role_rank)];
  const std::vector<uint8_t> before = encodeRegistration(planned);
  Result<Registration> after =
      decodeRegistration(p.reg.registration.data(), p.reg.registration.size());
  WSYNC_RETURN_IF_ERROR(after.status().withContext(participantName(p) + "'s registration"));
  // Compared as planning saw the predecessor's: with its quantized sources.
  WSYNC_RETURN_IF_ERROR(job_.as_planned(*after).withContext(participantName(p)));
  if (encodeRegistration(*after) != before) {
    const Status refused = mismatch(
        participantName(p) + " registered differently than before the trainers restarted: " +
        describeChange(planned, *after) +
        " (a restarted trainer must register the same tensors, shapes, dtypes and layout)");
    wire_.log("refused a restarted trainer: " + refused.toString());
    wire_.sendTo(p, MessageType::kError, encode(ErrorMsg{refused.code(), refused.message()}));
    wire_.close(p.conn);
    p.dropped = true;  // its close is ignored; a replacement may come
    state_->members[static_cast<size_t>(p.role_rank)] = -1;
    return Status::ok();
  }
  p.registered = true;
  for (int32_t index : state_->members) {
    if (index < 0 || !participants_[static_cast<size_t>(index)].registered) return Status::ok();
  }
  sendAssignments();
  return Status::ok();
}

// Each new trainer's part of the plan, for the rollouts alive now (writes to dropped ones are
// left out); replicas that joined the running job follow as plan extensions after CommitOk.
void TrainerRestart::sendAssignments() {
  state_->assigned = true;
  const int32_t num_trainers = participants_.numTrainers();
  for (int32_t t = 0; t < num_trainers; ++t)
    participants_.replaceTrainer(t, state_->members[static_cast<size_t>(t)]);
  const auto alive = [&](int32_t r) {
    return r < participants_.numRollouts() && !participants_.rollout(r).dropped &&
           job_.rollout_in_versions(r);
  };
  std::vector<int32_t> replica_of = participants_.replicaOfRollout();
  for (size_t r = 0; r < replica_of.size(); ++r) {
    if (!alive(static_cast<int32_t>(r))) replica_of[r] = -1;
  }
  const DenseWriteBytes dense = denseWriteBytes(*plan_, num_trainers);
  for (int32_t t = 0; t < num_trainers; ++t) {
    RankPlan view = rankView(*plan_, Role::kTrainer, t);
    view.writes.erase(std::remove_if(view.writes.begin(), view.writes.end(),
                                     [&](const WriteOp& op) { return !alive(op.dst_rank); }),
                      view.writes.end());
    view.peers.erase(
        std::remove_if(view.peers.begin(), view.peers.end(), [&](int32_t r) { return !alive(r); }),
        view.peers.end());
    PlanAssignmentMsg msg;
    msg.rank_plan = encodeRankPlan(view);
    const Participant& self = participants_.trainer(t);
    for (int32_t peer : view.peers)
      msg.peers.push_back(
          trainerPeerInfo(options_.job, dense, t, peer, participants_.rollout(peer)));
    msg.replica_of_rollout = replica_of;
    job_.complete_assignment(t, msg);
    wire_.sendTo(self, MessageType::kPlanAssignment, encode(msg));
  }
}

// Once every new trainer committed: CommitOk, then the plan extension of every replica that
// joined the running job. Their Publishes are held until each of them applied every extension
// (ExtensionDone), so no version's Go gives such a replica a slot it would not write.
Status TrainerRestart::onCommitDone(Participant& p, CoordinatorClock::time_point now) {
  if (!state_ || !state_->assigned || p.committed) return invalidUsage("CommitDone out of order");
  p.committed = true;
  for (int32_t index : state_->members) {
    if (!participants_[static_cast<size_t>(index)].committed) return Status::ok();
  }
  state_->extending = true;
  state_->deadline = now + options_.timeout;
  for (int32_t t = 0; t < participants_.numTrainers(); ++t) {
    Participant& q = participants_.trainer(t);
    q.restarting = false;
    q.last_heard = now;
    wire_.sendTo(q, MessageType::kCommitOk, {});
    for (const auto& [replica, per_trainer] : extensions_) {
      if (!job_.has_replica(replica)) continue;
      wire_.sendTo(q, MessageType::kPlanExtension, per_trainer[static_cast<size_t>(t)]);
      state_->extensions_due.insert({t, replica});
    }
  }
  maybeFinish();
  return Status::ok();
}

bool TrainerRestart::holdPublish(const Participant& p, const std::vector<uint8_t>& payload) {
  if (!extending() || p.hello.role != Role::kTrainer) return false;
  state_->held_publishes.emplace_back(p.role_rank, payload);
  return true;
}

Status TrainerRestart::onExtensionDone(const Participant& p, int32_t replica) {
  if (!extending() || state_->extensions_due.erase({p.role_rank, replica}) == 0) {
    return protocolError("ExtensionDone for replica " + std::to_string(replica) + " out of order");
  }
  maybeFinish();
  return Status::ok();
}

// The restart ends once every due extension was applied, or its replica left the job; the held
// Publishes then go to the sequencer.
void TrainerRestart::maybeFinish() {
  auto& due = state_->extensions_due;
  for (auto it = due.begin(); it != due.end();)
    it = job_.has_replica(it->second) ? std::next(it) : due.erase(it);
  if (!due.empty()) return;
  wire_.log("trainers restarted (they were lost: " + state_->cause + "); versions continue above " +
            std::to_string(job_.last_started_version()));
  const auto held = std::move(state_->held_publishes);
  state_.reset();
  for (const auto& [t, payload] : held) {
    if (participants_.trainer(t).dropped) continue;
    job_.publish(t, payload);
    if (state_) return;  // that Publish failed: the trainers restart again
  }
}

Status TrainerRestart::tick(CoordinatorClock::time_point now) {
  if (!state_) return Status::ok();
  if (state_->extending && now < state_->deadline) {
    maybeFinish();
    return Status::ok();
  }
  if (now < state_->deadline) return Status::ok();
  if (state_->extending) {  // a trainer did not apply an extension: its replica cannot be written
    std::set<int32_t> replicas;
    for (const auto& [t, replica] : state_->extensions_due)
      replicas.insert(replica);
    for (int32_t replica : replicas) {
      if (Participant* p = participants_.findLiveRankOf(replica)) {
        job_.drop_replica(*p, "the restarted trainers did not apply its plan extension within " +
                                  std::to_string(options_.timeout.count()) + " ms");
      }
    }
    if (state_) maybeFinish();
    return Status::ok();
  }
  std::string missing;
  for (int32_t t = 0; t < participants_.numTrainers(); ++t) {
    const int32_t index = state_->members[static_cast<size_t>(t)];
    const char* what = index < 0                                               ? "never came back"
                       : !participants_[static_cast<size_t>(index)].registered ? "not registered"
                                                                               : "not committed";
    if (index >= 0 && participants_[static_cast<size_t>(index)].committed) continue;
    missing += (missing.empty() ? "" : ", ") + trainerName(t) + " " + what;
  }
  return timeoutError("the trainers were lost (" + state_->cause +
                      ") and did not come back within " +
                      std::to_string(options_.restart_timeout.count()) + " ms: " + missing);
}

}  // namespace wsync
