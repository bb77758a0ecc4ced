#include "coordinator/coordinator.h"

#include <algorithm>
#include <map>
#include <thread>

#include "coordinator/coordinator_impl.h"
#include "coordinator/delta_assign.h"

namespace wsync {
namespace {
// How long stopping a coordinator keeps flushing its last frames to the ranks.
constexpr std::chrono::milliseconds kFinalFlushTimeout{2000};
}  // namespace

using coordinator_internal::Clock;

// ---- event plumbing ------------------------------------------------------------------------
Status Coordinator::Impl::start() {
  FrameServerHandlers handlers;
  handlers.on_connect = [this](ConnectionId id) { push({Event::kConnect, id, {}, {}, {}}); };
  handlers.on_frame = [this](ConnectionId id, Frame&& f) {
    push({Event::kFrame, id, std::move(f), {}, {}});
  };
  handlers.on_close = [this](ConnectionId id, const Status& s) {
    push({Event::kClose, id, {}, s, {}});
  };
  // Refused connections (the server thread): counted, and logged rate-limited.
  handlers.on_refused = [metrics = opt_.metrics](RefusalReason r) { metrics->onControlRefused(r); };
  if (opt_.log) handlers.log = [this](const std::string& line) { log(line); };
  WSYNC_ASSIGN_OR_RETURN(
      server_, FrameServer::start(opt_.bind_host, opt_.port, opt_.control, std::move(handlers)));
  wire_.attach(server_.get());
  phase_deadline_ = Clock::now() + opt_.timeout;
  thread_ = std::thread([this] { run(); });
  return Status::ok();
}

Status Coordinator::Impl::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(done_mu_);
  if (!done_cv_.wait_for(lock, timeout, [this] { return finished_; })) {
    return timeoutError("coordinator: the job did not finish within " +
                        std::to_string(timeout.count()) + " ms");
  }
  return final_status_;
}

void Coordinator::Impl::stop() {
  {
    std::lock_guard lock(queue_mu_);
    stopping_ = true;
  }
  stop_requested_.store(true);
  queue_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  joins_.stopPlanners();  // their results are not handled any more
  // The last frames (a failed job's Error) reach the ranks before the connections close.
  if (server_) server_->stop(kFinalFlushTimeout);
}

void Coordinator::Impl::finish(const Status& status) {
  if (phase_ == Phase::kDone || phase_ == Phase::kFailed) return;
  phase_ = status.isOk() ? Phase::kDone : Phase::kFailed;
  {
    std::lock_guard lock(done_mu_);
    final_status_ = status;
    finished_ = true;
  }
  done_cv_.notify_all();
}

// Sends Error to every connected rank and ends the job with `status`.
void Coordinator::Impl::fail(const Status& status) {
  if (phase_ == Phase::kDone || phase_ == Phase::kFailed) return;
  log("job failed: " + status.toString());
  const auto payload = encode(ErrorMsg{status.code(), status.message()});
  for (const Participant& p : participants_) {
    if (p.connected)
      (void)server_->send(p.conn, static_cast<uint16_t>(MessageType::kError), payload);
  }
  for (ConnectionId c : participants_.pending()) {
    (void)server_->send(c, static_cast<uint16_t>(MessageType::kError), payload);
  }
  finish(status);
}

void Coordinator::Impl::sendToTrainers(MessageType type, const std::vector<uint8_t>& payload) {
  for (int32_t t = 0; t < numTrainers(); ++t)
    sendTo(trainer(t), type, payload);
}

void Coordinator::Impl::push(Event e) {
  {
    std::lock_guard lock(queue_mu_);
    queue_.push_back(std::move(e));
    queued_.fetch_add(1);
  }
  queue_cv_.notify_one();
}

void Coordinator::Impl::run() {
  // Busy polling (ControlOptions::spin_wait) while versions move: from each event handled while a
  // version was in flight (or that started or ended one), this thread and the server's loop poll
  // without sleeping for spin_wait, so each message is taken at once instead of after a wake-up.
  Clock::time_point spin_until{};
  while (true) {
    std::optional<Event> event;
    const Clock::time_point wakeup = nextWakeup();
    while (queued_.load() == 0 && !stop_requested_.load() &&
           Clock::now() < std::min(spin_until, wakeup))
      std::this_thread::yield();
    {
      std::unique_lock lock(queue_mu_);
      queue_cv_.wait_until(lock, wakeup, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      if (!queue_.empty()) {
        event = std::move(queue_.front());
        queue_.pop_front();
        queued_.fetch_sub(1);
      }
    }
    if (event) {
      const bool moving = versionMoving();
      handle(*event);
      if ((moving || versionMoving()) && opt_.control.spin_wait.count() > 0) {
        spin_until = Clock::now() + opt_.control.spin_wait;
        if (server_) server_->spinUntil(spin_until);
      }
    }
    checkTimers();
  }
}

Clock::time_point Coordinator::Impl::nextWakeup() const {
  auto t = Clock::now() + std::chrono::milliseconds(100);
  if (phase_ < Phase::kRunning) t = std::min(t, phase_deadline_);
  if (phase_ == Phase::kRunning) {
    if (std::optional<Clock::time_point> d = versions_.sequencer()->nextDeadline())
      t = std::min(t, *d);
  }
  return t;
}

// ---- events --------------------------------------------------------------------------------
void Coordinator::Impl::handle(Event& e) {
  if (e.kind == Event::kConnect) return participants_.connected(e.conn);
  if (e.kind == Event::kTask) return e.task();
  if (e.kind == Event::kClose) {
    if (std::optional<size_t> index = participants_.closed(e.conn)) onClose(*index, e.status);
    return;
  }
  const auto type = static_cast<MessageType>(e.frame.type);
  const std::optional<size_t> index = participants_.indexOf(e.conn);
  if (!index) {
    if (type != MessageType::kHello) {
      refuse(e.conn, protocolError(std::string("expected Hello, got ") + messageTypeName(type)));
      return;
    }
    onHello(e.conn, e.frame.payload);
    return;
  }
  Participant& p = participants_[*index];
  p.last_heard = Clock::now();
  if (p.dropped && type != MessageType::kLeave && type != MessageType::kBye) return;
  Status s = dispatch(p, type, e.frame.payload);
  if (!s.isOk()) {
    if (p.joiner && !p.committed) return joins_.abort(p.hello.replica, s.withContext(nameOf(p)));
    if (p.hello.role == Role::kTrainer && canRestartTrainers())
      return beginTrainerRestart(s.withContext(nameOf(p)));
    fail(s.withContext(nameOf(p)));
  }
}

// A connection closed: a rollout of the running job (or a joining one) is dropped with its
// replica; any other rank that did not say goodbye fails the job.
void Coordinator::Impl::onClose(size_t index, const Status& status) {
  Participant& p = participants_[index];
  p.connected = false;
  const bool finished = phase_ == Phase::kFailed || phase_ == Phase::kDone;
  if (!p.said_bye && !p.dropped && !finished) {
    const std::string why = nameOf(p) + " (" + p.hello.host + ") disconnected without saying " +
                            "goodbye" + (status.isOk() ? "" : ": " + status.toString());
    if (p.hello.role == Role::kRollout && p.joiner && !p.committed) {
      joins_.abort(p.hello.replica, remoteError(why));
    } else if (p.hello.role == Role::kRollout && phase_ == Phase::kRunning) {
      dropReplicaOf(p, why, /*crashed=*/true);
    } else if (p.hello.role == Role::kTrainer && canRestartTrainers()) {
      beginTrainerRestart(remoteError(why));
    } else {
      fail(remoteError(why));
    }
  }
  if (p.hello.role == Role::kTrainer) restart_.onTrainerClosed();
  maybeAllGone();
}

Status Coordinator::Impl::dispatch(Participant& p, MessageType type,
                                   const std::vector<uint8_t>& payload) {
  if (!maySend(Sender::kRank, type)) {  // the table's sender column
    return protocolError(std::string(messageTypeName(type)) + " (type " +
                         std::to_string(static_cast<unsigned>(type)) +
                         ") is not a message a rank sends");
  }
  switch (type) {
    case MessageType::kRegister:
      if (p.restarting) return restart_.onRegister(p, payload);
      return p.joiner ? joins_.onRegister(p, payload) : onRegister(p, payload);
    case MessageType::kCommitDone:
      if (p.restarting) return restart_.onCommitDone(p, Clock::now());
      return onCommitDone(p);
    case MessageType::kPublish:
      if (restart_.holdPublish(p, payload)) return Status::ok();
      [[fallthrough]];
    case MessageType::kPrepared:
    case MessageType::kSent:
    case MessageType::kReceived:
    case MessageType::kSentChecksums:
    case MessageType::kVerified:
    case MessageType::kChecksumFailed:
      if (joins_.inColdStart(p)) return joins_.onColdStartMessage(p, type, payload);
      return onVersionMessage(p, type, payload);
    case MessageType::kPartialMaxima:
      if (phase_ != Phase::kRunning || p.hello.role != Role::kTrainer)
        return protocolError("unexpected PartialMaxima from " + nameOf(p));
      return block_scaling_.onPartialMaxima(p, payload);
    case MessageType::kSlotBusy:  // advisory; a joiner's cold start waits for Prepared alone
      if (joins_.inColdStart(p)) return Status::ok();
      return onVersionMessage(p, type, payload);
    case MessageType::kReadied:
      if (joins_.inColdStart(p)) return joins_.onColdStartMessage(p, type, payload);
      return onReadied(p, payload);
    case MessageType::kColdFillDone:
      return joins_.onColdFillDone(p, payload);
    case MessageType::kHeartbeat:
      return Status::ok();  // last_heard is all it changes
    case MessageType::kLeave:
      if (p.hello.role != Role::kRollout) return protocolError("Leave from a trainer");
      onLeave(p);
      return Status::ok();
    case MessageType::kExtensionDone:
      return onExtensionDone(p, payload);
    case MessageType::kBye:
      p.said_bye = true;
      if (p.hello.role == Role::kRollout && phase_ == Phase::kRunning && !p.dropped) {
        dropReplicaOf(p, nameOf(p) + " said goodbye", /*crashed=*/false);
      }
      if (p.hello.role == Role::kTrainer) tellTrainersDone();
      maybeAllGone();
      return Status::ok();
    case MessageType::kError: {
      ErrorMsg m;
      WSYNC_RETURN_IF_ERROR(decode(payload, m));
      return Status(m.code, "reported: " + m.message);
    }
    default:
      return protocolError(std::string("unexpected message ") + messageTypeName(type));
  }
}

void Coordinator::Impl::tellTrainersDone() {
  if (phase_ != Phase::kRunning || restart_.active() || participants_.numTrainers() == 0) return;
  for (int32_t t = 0; t < numTrainers(); ++t) {
    if (!trainer(t).said_bye) return;
  }
  if (trainers_finished_) return;
  const uint64_t last = versions_.sequencer() ? versions_.sequencer()->lastStartedVersion() : 0;
  trainers_finished_ = last;
  log("the trainers finished at version " + std::to_string(last));
  sendTrainersDone();
  joins_.onTrainersFinished();  // a joining replica gets TrainersDone once its join completed
}

// TrainersDone(trainers_finished_) to the running rollouts of every replica not joining (a
// joining one gets it once its join completed: ReplicaJoins).
void Coordinator::Impl::sendTrainersDone() {
  const auto payload = encode(VersionMsg{*trainers_finished_});
  for (const Participant& p : participants_) {
    if (p.hello.role != Role::kRollout || !p.connected || !p.committed || p.dropped) continue;
    if (!(p.joiner && joins_.joining(p.hello.replica)))
      sendTo(p, MessageType::kTrainersDone, payload);
  }
}

// The job ends once every rank said goodbye or disconnected; well when each of them said goodbye
// or was dropped.
void Coordinator::Impl::maybeAllGone() {
  if (participants_.empty()) return;
  for (const Participant& p : participants_) {
    if (!p.said_bye && p.connected) return;
  }
  if (phase_ == Phase::kFailed || phase_ == Phase::kDone) return;
  const bool all_gone = std::all_of(participants_.begin(), participants_.end(),
                                    [](const Participant& q) { return q.said_bye || q.dropped; });
  if (all_gone && phase_ >= Phase::kJoining) {
    log("every rank said goodbye");
    finish(Status::ok());
  }
}

// ---- registering and planning (coordinator/job_planning.h) ----------------------------------
Status Coordinator::Impl::onRegister(Participant& p, const std::vector<uint8_t>& payload) {
  if (phase_ != Phase::kRegistering) {
    return invalidUsage("Register out of order (twice, or before every rank joined)");
  }
  WSYNC_ASSIGN_OR_RETURN(const bool all_registered, planning_.onRegister(p, payload));
  return all_registered ? planAll() : Status::ok();
}

Status Coordinator::Impl::planAll() {
  Result<Plan> plan = planning_.plan();
  if (!plan.isOk()) {  // blame the rank that sent it, not the one whose message came last
    fail(plan.status());
    return Status::ok();
  }
  WSYNC_ASSIGN_OR_RETURN(std::vector<ReplicaSpec> replicas, planning_.replicas());
  SequencerOptions options{opt_.timeout, opt_.skip_grace, opt_.max_staleness, opt_.job,
                           /*prepare_ahead=*/true};
  options.replica_timeout = membership_.replicaBound();
  WSYNC_RETURN_IF_ERROR(versions_.start(options, numTrainers(), replicas));
  opt_.metrics->setReplicaBytes(replicaBytes(*plan, participants_.replicaOfRollout()));
  planning_.sendAssignments(*plan);
  restart_.keepPlan(std::move(plan).value(), &planning_.trainerRegistrations());
  phase_ = Phase::kCommitting;
  return Status::ok();
}

Status Coordinator::Impl::onCommitDone(Participant& p) {
  if (p.joiner) return joins_.onCommitDone(p);
  if (phase_ != Phase::kCommitting || p.committed) return invalidUsage("CommitDone out of order");
  p.committed = true;
  if (std::all_of(participants_.begin(), participants_.end(),
                  [](const Participant& q) { return q.joiner || q.committed; })) {
    const auto now = Clock::now();
    for (Participant& q : participants_) {
      if (q.joiner) continue;
      q.last_heard = now;
      sendTo(q, MessageType::kCommitOk, {});
    }
    phase_ = Phase::kRunning;
    log("commit complete");
    joins_.welcomeWaiting();  // replicas that asked to join before the job ran
  }
  return Status::ok();
}

// ---- versions (coordinator/running_versions.h) ---------------------------------------------
Status Coordinator::Impl::onVersionMessage(const Participant& p, MessageType type,
                                           const std::vector<uint8_t>& payload) {
  if (phase_ != Phase::kRunning) {
    return invalidUsage(std::string(messageTypeName(type)) + " before commit completed");
  }
  return versions_.onMessage(p, type, payload);
}

// A rollout rank can now acquire the version: the last confirmation releases Delivered.
Status Coordinator::Impl::onReadied(const Participant& p, const std::vector<uint8_t>& payload) {
  if (phase_ != Phase::kRunning || p.hello.role != Role::kRollout) {
    return protocolError("unexpected Readied");
  }
  return versions_.onReadied(p, payload);
}

// ---- joining (coordinator/job_admission.h) ---------------------------------------------
void Coordinator::Impl::onHello(ConnectionId conn, const std::vector<uint8_t>& payload) {
  HelloMsg hello;
  Status s = decode(payload, hello);
  const bool restarting = restart_.active();
  if (s.isOk() && restarting && hello.role == Role::kTrainer) return restart_.onHello(conn, hello);
  if (s.isOk() && restarting && hello.replica_size > 0) {
    s = remoteError("the trainers are restarting (" + restart_.cause() + "); join again later");
  }
  if (s.isOk() && hello.role == Role::kRollout && hello.replica_size > 0) {
    return joins_.onHello(conn, hello);
  }
  if (s.isOk() && phase_ != Phase::kJoining && hello.role == Role::kTrainer) {
    s = invalidUsage(rankName(Role::kTrainer, hello.role_rank) +
                     " is taken: the job is past joining and has its trainers (a trainer "
                     "cannot join a running job; wsync-coordinator --trainer-restart lets "
                     "restarted trainers replace lost ones)");
  }
  if (s.isOk() && phase_ != Phase::kJoining) {
    s = invalidUsage(
        "the job is past joining; a rollout replica joins a running job with "
        "config.replica_size > 0 (explicit bootstrap)");
  }
  if (!s.isOk()) {
    log("refused a connection: " + s.toString());
    refuse(conn, s);
    return;
  }
  if (!admission_.onHello(conn, hello)) return;
  if (Status admitted = admission_.admitAll(); !admitted.isOk()) return fail(admitted);
  phase_ = Phase::kRegistering;
}

// ---- timers ------------------------------------------------------------------------------
void Coordinator::Impl::checkTimers() {
  const auto now = Clock::now();
  if (phase_ < Phase::kRunning && now >= phase_deadline_) {
    std::string missing;
    if (phase_ == Phase::kJoining) {
      missing = admission_.absentRanks();
    } else {
      for (const Participant& p : participants_) {
        if (p.joiner) continue;
        const bool waiting = phase_ == Phase::kRegistering ? !p.registered : !p.committed;
        if (waiting) missing += (missing.empty() ? "" : ", ") + nameOf(p);
      }
      missing = std::string("never ") +
                (phase_ == Phase::kRegistering ? "registered" : "finished commit") + ": " + missing;
    }
    fail(timeoutError("waited " + std::to_string(opt_.timeout.count()) + " ms for every rank to " +
                      (phase_ == Phase::kJoining ? "join" : "commit") + "; " + missing));
    return;
  }
  if (phase_ == Phase::kRunning) {
    Result<std::vector<int32_t>> stalled = versions_.advance(now);
    if (!stalled.isOk()) return fail(stalled.status());
    dropStalled(*stalled, now);
    if (phase_ != Phase::kRunning) return;
    if (auto late = versions_.overdue(now, opt_.timeout)) return fail(timeoutError(*late));
    checkHeartbeats(now);
    membership_.sendDueLefts(versions_.inFlightVersion());
    if (Status s = restart_.tick(now); !s.isOk()) return fail(s);
  }
  if (phase_ != Phase::kDone && phase_ != Phase::kFailed) joins_.tick(now);
}

// ---- membership of the running job (coordinator/job_membership.h) ---------------------------
void Coordinator::Impl::dropReplicaOf(Participant& p, const std::string& reason, bool crashed) {
  const int32_t id = p.hello.replica;
  if (joins_.joining(id)) return joins_.abort(id, remoteError(reason), /*left_cleanly=*/!crashed);
  Result<std::vector<int32_t>> ranks =
      membership_.drop(p, reason, crashed, versions_.inFlightVersion());
  if (!ranks.isOk()) return fail(ranks.status());
  if (Status s = versions_.dropReplica(id, *ranks); !s.isOk()) fail(s);
  joins_.onSourceLost(id);
}

// Leave (finalize): the replica leaves at once; Left follows once no trainer can still be writing
// into it (JobMembership::sendDueLefts), so the rank may free its slots.
void Coordinator::Impl::onLeave(Participant& p) {
  if (!p.dropped) dropReplicaOf(p, nameOf(p) + " left", /*crashed=*/false);
  p.awaiting_left = true;
  membership_.sendDueLefts(versions_.inFlightVersion());
}

void Coordinator::Impl::checkHeartbeats(Clock::time_point now) {
  for (Participant& p : participants_) {
    // A joining replica's heartbeats start at CommitOk.
    if (joins_.joining(p.hello.replica) && !joins_.committedOk(p.hello.replica)) continue;
    if (std::optional<std::string> why = membership_.silence(p, now))
      dropReplicaOf(p, *why, /*crashed=*/true);
  }
}

void Coordinator::Impl::dropStalled(const std::vector<int32_t>& stalled, Clock::time_point now) {
  const std::chrono::milliseconds bound = membership_.replicaBound();
  const auto drops = membership_.stalledReplicas(stalled, versions_.inFlightVersion(),
                                                 versions_.sequencer()->holdingGo(now),
                                                 versions_.overdueRanks(now, bound), now);
  for (const auto& [id, reason] : drops) {
    if (phase_ != Phase::kRunning) return;
    if (Participant* p = membership_.stalledRank(id)) dropReplicaOf(*p, reason, /*crashed=*/true);
  }
}

Status Coordinator::Impl::onExtensionDone(const Participant& p,
                                          const std::vector<uint8_t>& payload) {
  if (p.hello.role != Role::kTrainer) return protocolError("ExtensionDone from a rollout");
  ReplicaMsg m;
  WSYNC_RETURN_IF_ERROR(decode(payload, m));
  if (restart_.extending()) return restart_.onExtensionDone(p, m.replica);
  return joins_.onExtensionDone(p, m.replica);
}

// ---- trainer restart (coordinator/trainer_restart.h) ----------------------------------------
TrainerRestartOptions Coordinator::Impl::restartOptions() const {
  TrainerRestartOptions options;
  options.enabled = opt_.trainer_restart && opt_.mpi_world_size == 0;
  options.restart_timeout = opt_.trainer_restart_timeout;
  options.timeout = opt_.timeout;
  options.job = opt_.job;
  options.heartbeat_interval_ms = static_cast<int32_t>(membership_.heartbeatInterval().count());
  return options;
}

TrainerRestartJob Coordinator::Impl::restartJob() {
  TrainerRestartJob job;
  job.has_replica = [this](int32_t replica) { return versions_.sequencer()->hasReplica(replica); };
  job.rollout_in_versions = [this](int32_t r) {
    return versions_.sequencer()->replicaOf(r).has_value();
  };
  job.last_started_version = [this] { return versions_.sequencer()->lastStartedVersion(); };
  job.as_planned = [this](Registration& reg) { return block_scaling_.addQuantizedSourcesTo(reg); };
  job.complete_assignment = [this](int32_t t, PlanAssignmentMsg& msg) {
    block_scaling_.addTo(t, msg);
  };
  job.publish = [this](int32_t t, const std::vector<uint8_t>& payload) {
    Participant& q = trainer(t);
    const Status s = onVersionMessage(q, MessageType::kPublish, payload);
    if (!s.isOk()) beginTrainerRestart(s.withContext(nameOf(q)));
  };
  job.drop_replica = [this](Participant& p, const std::string& reason) {
    dropReplicaOf(p, reason, /*crashed=*/true);
  };
  return job;
}

void Coordinator::Impl::beginTrainerRestart(const Status& cause) {
  restart_.begin(cause, Clock::now());
  joins_.abortAll([&](int32_t id) {  // their plan extensions went to the lost trainers
    return remoteError("the trainers were lost while replica " + std::to_string(id) +
                       " joined: " + cause.message());
  });
  Status s = versions_.abort();
  if (!s.isOk()) return fail(s);
  block_scaling_.forgetVersions();
}

// ---- replicas joining the running job (coordinator/replica_joins.h) --------------------------
ReplicaJoinsOptions Coordinator::Impl::joinOptions() const {
  ReplicaJoinsOptions options;
  options.timeout = opt_.timeout;
  options.job = opt_.job;
  options.heartbeat_interval_ms = static_cast<int32_t>(membership_.heartbeatInterval().count());
  options.mpi_job = opt_.mpi_world_size > 0;
  options.debug_plan_delay = opt_.debug_join_plan_delay;
  return options;
}

ReplicaJoinsJob Coordinator::Impl::joinJob() {
  ReplicaJoinsJob job;
  job.running = [this] { return phase_ == Phase::kRunning; };
  job.ended = [this] { return phase_ == Phase::kDone || phase_ == Phase::kFailed; };
  job.has_replica = [this](int32_t id) {
    return versions_.sequencer() && versions_.sequencer()->hasReplica(id);
  };
  job.ready_version = [this](int32_t id) { return versions_.sequencer()->readyVersion(id); };
  job.in_flight_version = [this] { return versions_.inFlightVersion(); };
  job.add_replica = [this](const ReplicaSpec& spec) { return versions_.addReplica(spec); };
  job.trainers_finished = [this] { return trainers_finished_; };
  job.trainer_registrations = [this] { return &planning_.trainerRegistrations(); };
  job.registration = [this](const Participant& p) { return planning_.registrationOf(p); };
  job.check_scalings = [this](const Participant& p) {
    return block_scaling_.checkJoiner(p, elastic());
  };
  job.extension_sent = [this](int32_t replica, int32_t t, const std::vector<uint8_t>& encoded) {
    restart_.keepExtension(replica, t, encoded);
  };
  job.drop_replica = [this](Participant& p, const std::string& reason) {
    dropReplicaOf(p, reason, /*crashed=*/true);
  };
  job.post = [this](std::function<void()> task) {  // from a planner thread
    Event e;
    e.kind = Event::kTask;
    e.task = std::move(task);
    push(std::move(e));
  };
  job.now = [] { return Clock::now(); };
  return job;
}

Result<std::unique_ptr<Coordinator>> Coordinator::start(CoordinatorOptions options) {
  if (options.mpi_world_size <= 0 && (options.num_trainers <= 0 || options.num_rollouts < 0)) {
    return invalidArgument(
        "coordinator: explicit bootstrap needs num_trainers > 0 and num_rollouts >= 0 (0: every "
        "replica joins at run time), got num_trainers " +
        std::to_string(options.num_trainers) + ", num_rollouts " +
        std::to_string(options.num_rollouts));
  }
  auto impl = std::make_unique<Impl>(std::move(options));
  WSYNC_RETURN_IF_ERROR(impl->start());
  return std::unique_ptr<Coordinator>(new Coordinator(std::move(impl)));
}

Coordinator::Coordinator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Coordinator::~Coordinator() = default;
uint16_t Coordinator::port() const {
  return impl_->port();
}
Status Coordinator::wait(std::chrono::milliseconds timeout) {
  return impl_->wait(timeout);
}
void Coordinator::stop() {
  impl_->stop();
}

}  // namespace wsync
