#include "coordinator/replica_joins.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "coordinator/admission.h"
#include "coordinator/delta_assign.h"
#include "coordinator/join_plan.h"

namespace wsync {
namespace {

// Bounds on what a joining rank declares, before it sizes anything.
constexpr int32_t kMaxReplicaRanks = 1 << 12;
constexpr int32_t kMaxReplicaId = 1 << 20;

std::string replicaName(int32_t id) {
  return "replica " + std::to_string(id);
}

}  // namespace

ReplicaJoins::ReplicaJoins(ReplicaJoinsOptions options, ParticipantTable& participants,
                           CoordinatorWire& wire, ReplicaJoinsJob job)
    : options_(options),
      participants_(participants),
      wire_(wire),
      job_(std::move(job)),
      cold_starts_(ColdStartOptions{options_.timeout}) {}

ReplicaJoins::~ReplicaJoins() {
  stopPlanners();
}

void ReplicaJoins::stopPlanners() {
  planners_.clear();  // each future waits for its thread
}

bool ReplicaJoins::committedOk(int32_t replica) const {
  auto it = joins_.find(replica);
  return it != joins_.end() && it->second.committed_ok;
}

bool ReplicaJoins::inColdStart(const Participant& p) const {
  return p.joiner && cold_starts_.active(p.hello.replica);
}

// ---- Hello and Welcome ---------------------------------------------------------------------
bool ReplicaJoins::replicaInUse(int32_t replica) const {
  if (joins_.count(replica) != 0) return true;
  return std::any_of(participants_.begin(), participants_.end(), [&](const Participant& q) {
    return q.hello.role == Role::kRollout && q.hello.replica == replica && !q.dropped &&
           (q.connected || !q.said_bye);
  });
}

Status ReplicaJoins::checkHello(const HelloMsg& h) const {
  const std::string what = "joining " + replicaName(h.replica);
  if (options_.mpi_job && h.world_rank >= 0) {
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
  if (job_.ended()) return invalidUsage(what + ": the job has ended");
  auto it = joins_.find(h.replica);
  if (it == joins_.end()) {
    if (replicaInUse(h.replica)) return invalidArgument(what + ": the job already has it");
    return Status::ok();
  }
  const Join& g = it->second;
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

void ReplicaJoins::onHello(ConnectionId conn, const HelloMsg& hello) {
  Status s = checkHello(hello);
  if (s.isOk()) {
    s = checkExplicitJobSettings(
        options_.job, {{"the joining rank " + std::to_string(hello.replica_rank) + " of replica " +
                            std::to_string(hello.replica),
                        &hello}});
  }
  if (!s.isOk()) {
    wire_.log("refused a joining rank: " + s.toString());
    return wire_.refuse(conn, s);
  }
  const auto now = job_.now();
  Join& g = joins_[hello.replica];
  if (g.members.empty()) {
    g.id = hello.replica;
    g.size = hello.replica_size;
    g.started = now;
    g.members.assign(static_cast<size_t>(g.size), -1);
  }
  Participant p;
  p.conn = conn;
  p.hello = hello;
  p.joiner = true;
  p.last_heard = now;
  g.members[static_cast<size_t>(hello.replica_rank)] =
      static_cast<int32_t>(participants_.admit(std::move(p)));
  const bool complete = std::count(g.members.begin(), g.members.end(), -1) == 0;
  if (complete && job_.running()) welcome(g);
}

void ReplicaJoins::welcomeWaiting() {
  for (auto& [id, g] : joins_) {  // replicas that asked to join before the job ran
    if (!g.welcomed && std::count(g.members.begin(), g.members.end(), -1) == 0) welcome(g);
  }
}

// Every rank of the joining replica said Hello: they get the next rollout ranks of the job.
void ReplicaJoins::welcome(Join& g) {
  g.welcomed = true;
  WelcomeMsg welcome;
  welcome.num_trainers = participants_.numTrainers();
  welcome.num_rollouts = participants_.numRollouts() + g.size;
  welcome.heartbeat_interval_ms = options_.heartbeat_interval_ms;
  describeJobSettings(options_.job, welcome);  // checksums and delta versions, as for the others
  for (int32_t member : g.members) {
    const int32_t rank = participants_.addRollout(member, g.id);
    g.ranks.push_back(rank);
    welcome.role_rank = rank;
    wire_.sendTo(participants_[static_cast<size_t>(member)], MessageType::kWelcome,
                 encode(welcome));
  }
  wire_.log(replicaName(g.id) + " is joining with rollout ranks " +
            std::to_string(g.ranks.front()) + ".." + std::to_string(g.ranks.back()));
}

// ---- registering and planning ----------------------------------------------------------------
Status ReplicaJoins::onRegister(Participant& p, const std::vector<uint8_t>& payload) {
  auto it = joins_.find(p.hello.replica);
  if (it == joins_.end() || !it->second.welcomed || p.registered) {
    return invalidUsage("Register out of order (twice, or before the replica was welcomed)");
  }
  WSYNC_RETURN_IF_ERROR(decode(payload, p.reg));
  p.registered = true;
  Join& g = it->second;
  const bool all = std::all_of(g.members.begin(), g.members.end(), [this](int32_t m) {
    return participants_[static_cast<size_t>(m)].registered;
  });
  if (all) plan(g);
  return Status::ok();
}

// Plans the replica on a planner thread; finishPlan applies the result on the event thread.
void ReplicaJoins::plan(Join& g) {
  std::vector<Registration> rollouts;
  for (int32_t member : g.members) {
    const Participant& p = participants_[static_cast<size_t>(member)];
    if (Status s = job_.check_scalings(p); !s.isOk()) return abort(g.id, s);
    Result<Registration> reg = job_.registration(p);
    if (!reg.isOk()) return abort(g.id, reg.status());
    const auto slots = static_cast<int32_t>(p.reg.slot_descriptors.size());
    if (g.num_slots != 0 && slots != g.num_slots) {
      return abort(g.id, invalidArgument(participantName(p) + " has " + std::to_string(slots) +
                                         " slots, its replica's other ranks " +
                                         std::to_string(g.num_slots)));
    }
    g.num_slots = slots;
    rollouts.push_back(std::move(reg).value());
  }
  g.registrations = rollouts;  // a cold start plans against them again
  g.plan_token = ++last_plan_token_;
  // Reap planners that finished (their results are posted already).
  std::erase_if(planners_, [](const std::future<void>& f) {
    return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  });
  planners_.push_back(std::async(
      std::launch::async,
      [this, trainers = job_.trainer_registrations(), rollouts = std::move(rollouts), id = g.id,
       token = g.plan_token, ranks = g.ranks, n = participants_.numTrainers(),
       delay = options_.debug_plan_delay, post = job_.post]() mutable {
        if (delay.count() > 0) std::this_thread::sleep_for(delay);
        Result<JoinerPlan> result = planJoiningReplica(*trainers, std::move(rollouts), ranks, n);
        const Status status = result.status();
        std::shared_ptr<const JoinerPlan> plan;
        if (result.isOk()) plan = std::make_shared<const JoinerPlan>(std::move(result).value());
        post([this, id, token, status, plan] { finishPlan(id, token, status, plan); });
      }));
}

// Sends every trainer its extension and the replica's ranks their assignments.
void ReplicaJoins::finishPlan(int32_t replica, uint64_t token, const Status& status,
                              const std::shared_ptr<const JoinerPlan>& plan) {
  auto it = joins_.find(replica);
  if (it == joins_.end() || it->second.plan_token != token) return;  // aborted meanwhile
  if (job_.ended()) return;
  Join& g = it->second;
  if (!status.isOk()) return abort(g.id, status);
  g.plan_ms = plan->plan_ms;
  g.write_ops = plan->write_ops;
  for (int32_t t = 0; t < participants_.numTrainers(); ++t) {
    PlanExtensionMsg ext;
    ext.replica = g.id;
    ext.ranks = g.ranks;
    ext.rank_plan = plan->trainer_views[static_cast<size_t>(t)];
    const Participant& trainer = participants_.trainer(t);
    for (int32_t peer : plan->trainer_peers[static_cast<size_t>(t)])
      ext.peers.push_back(
          trainerPeerInfo(options_.job, plan->dense, t, peer, participants_.rollout(peer)));
    const std::vector<uint8_t> encoded = encode(ext);
    wire_.sendTo(trainer, MessageType::kPlanExtension, encoded);
    job_.extension_sent(g.id, t, encoded);
  }
  g.extended = true;
  for (size_t i = 0; i < g.ranks.size(); ++i) {
    PlanAssignmentMsg msg;
    msg.rank_plan = plan->rollout_views[i];
    msg.replica_of_rollout = participants_.replicaOfRollout();
    wire_.sendTo(participants_.rollout(g.ranks[i]), MessageType::kPlanAssignment, encode(msg));
  }
}

// ---- committing and completing -----------------------------------------------------------------
Status ReplicaJoins::onCommitDone(Participant& p) {
  if (p.committed || !p.registered) return invalidUsage("CommitDone out of order");
  p.committed = true;
  maybeComplete(p.hello.replica);
  return Status::ok();
}

Status ReplicaJoins::onExtensionDone(const Participant& p, int32_t replica) {
  auto it = joins_.find(replica);
  if (it == joins_.end()) return Status::ok();  // the join was aborted meanwhile
  if (!it->second.extended || !it->second.trainers_done.insert(p.role_rank).second) {
    return protocolError("ExtensionDone for " + replicaName(replica) + " out of order");
  }
  maybeComplete(replica);
  return Status::ok();
}

void ReplicaJoins::onTrainersFinished() {
  std::vector<int32_t> ids;  // joins that waited for the trainers' extension need it no more
  for (const auto& [id, g] : joins_)
    ids.push_back(id);
  for (int32_t id : ids)
    maybeComplete(id);
}

void ReplicaJoins::onDelivered() {
  std::vector<int32_t> ids;
  for (const auto& [id, g] : joins_) {
    if (g.cold_done) ids.push_back(id);
  }
  for (int32_t id : ids)
    maybeComplete(id);
}

// Every rank of the joining replica committed: its ranks start running (CommitOk) and it is filled
// from a peer replica that holds a version (peer cold start), while the trainers apply its plan
// extension. Once both are done it enters the sequencer: holding the cold start's version, or,
// when no peer could fill it, taking part from the next version.
void ReplicaJoins::maybeComplete(int32_t replica) {
  auto it = joins_.find(replica);
  if (it == joins_.end()) return;
  Join& g = it->second;
  for (int32_t member : g.members) {
    if (!participants_[static_cast<size_t>(member)].committed) return;
  }
  if (!g.committed_ok) {
    const auto now = job_.now();
    for (int32_t member : g.members) {
      Participant& p = participants_[static_cast<size_t>(member)];
      p.last_heard = now;
      wire_.sendTo(p, MessageType::kCommitOk, {});
    }
    g.committed_ok = true;
    return startColdStart(g);  // its end (applyColdStart) comes back here
  }
  if (!g.cold_done) return;
  // Trainers that finished apply no extension: no version comes from them any more.
  const bool finished = job_.trainers_finished().has_value();
  if (!finished && static_cast<int32_t>(g.trainers_done.size()) < participants_.numTrainers())
    return;
  bool wait = false;
  if (needsCatchUp(g, &wait)) {
    if (wait) return;  // onDelivered
    g.cold_done = false;
    g.catch_ups += 1;
    return startColdStart(g);
  }
  complete(g);
}

// Versions newer than the joiner's cold start that started before it enters the sequencer would
// pass it by; when the trainers finish before then, it would never get the last one.
bool ReplicaJoins::needsCatchUp(const Join& g, bool* wait) const {
  *wait = false;
  if (g.ready_version == 0 || g.num_slots < 2 || g.catch_up_stuck) return false;
  if (!job_.trainers_finished() && g.catch_ups >= kMaxCatchUps) return false;
  for (const auto& [version, holder] : coldStartSources().holders()) {
    if (version > g.ready_version) return true;
  }
  *wait = job_.in_flight_version() > g.ready_version;
  return *wait;
}

// The joined replica enters the version sequencer (holding the version its cold start filled, if
// any) and its join ends.
void ReplicaJoins::complete(Join& g) {
  const int32_t id = g.id;
  Status s = job_.add_replica({g.id, g.ranks, g.num_slots, g.ready_version, g.ready_slot});
  if (!s.isOk()) return abort(id, s);
  const double joined_ms =
      std::chrono::duration<double, std::milli>(job_.now() - g.started).count();
  wire_.log(replicaName(id) + " joined (" + std::to_string(g.size) + " ranks, " +
            std::to_string(g.write_ops) + " write ops): planned in " + std::to_string(g.plan_ms) +
            " ms, joined in " + std::to_string(joined_ms) + " ms" +
            (g.ready_version == 0 ? "; its first version comes from the trainers"
                                  : "; it holds version " + std::to_string(g.ready_version)));
  joins_.erase(id);
  // The trainers finished while it joined: TrainersDone was held back until now.
  if (const std::optional<uint64_t> last = job_.trainers_finished()) sendTrainersDone(id, *last);
}

void ReplicaJoins::sendTrainersDone(int32_t replica, uint64_t version) {
  const auto payload = encode(VersionMsg{version});
  for (const Participant& p : participants_) {
    if (p.hello.role != Role::kRollout || !p.connected || !p.committed || p.dropped) continue;
    if (p.hello.replica == replica) wire_.sendTo(p, MessageType::kTrainersDone, payload);
  }
}

// ---- ending a join
// -------------------------------------------------------------------------------
void ReplicaJoins::abort(int32_t replica, const Status& status, bool left_cleanly) {
  auto it = joins_.find(replica);
  if (it == joins_.end()) return;
  Join g = std::move(it->second);
  joins_.erase(it);
  cold_starts_.forget(replica);
  // Only this replica's join ended (not the job): REMOTE, which its ranks do not read as the
  // job failing. A rank that said Leave is dropped quietly (Left answers it), as a running
  // replica that leaves.
  wire_.log(replicaName(replica) + (left_cleanly
                                        ? " left before its join completed: " + status.message()
                                        : " could not join: " + status.toString()));
  const auto payload = encode(
      ErrorMsg{status.code() == WSYNC_ERR_TIMEOUT ? WSYNC_ERR_REMOTE : status.code(),
               status.message() + " (the job goes on without " + replicaName(replica) + ")"});
  for (int32_t member : g.members) {
    if (member < 0) continue;
    Participant& p = participants_[static_cast<size_t>(member)];
    p.dropped = true;
    if (p.connected && !left_cleanly) {
      wire_.sendTo(p, MessageType::kError, payload);
      wire_.close(p.conn);
    }
  }
  if (!g.extended) return;
  const auto dropped = encode(ReplicaMsg{g.id, g.ranks});
  for (int32_t t = 0; t < participants_.numTrainers(); ++t)
    wire_.sendTo(participants_.trainer(t), MessageType::kReplicaDropped, dropped);
}

void ReplicaJoins::abortAll(const std::function<Status(int32_t replica)>& status) {
  std::vector<int32_t> ids;
  for (const auto& [id, g] : joins_)
    ids.push_back(id);
  for (int32_t id : ids)
    abort(id, status(id));
}

// A join not complete within the timeout of its first Hello is aborted, naming why.
void ReplicaJoins::tick(CoordinatorClock::time_point now) {
  // Joins in their cold start: each attempt is bounded (overdue); sources holding a fill past
  // half the timeout are stalled (ColdStartTracker::tick).
  ColdStartOutput cold = cold_starts_.tick(now);
  std::vector<std::pair<int32_t, std::string>> late = std::move(cold.overdue);
  for (const auto& [id, g] : joins_) {
    if (cold_starts_.active(id)) continue;
    if (now - g.started < options_.timeout) continue;
    std::string why;
    if (!g.welcomed) {
      why = std::to_string(std::count_if(g.members.begin(), g.members.end(),
                                         [](int32_t m) { return m >= 0; })) +
            " of its " + std::to_string(g.size) + " ranks said Hello" +
            (job_.running() ? "" : " (the job is not running yet)");
    } else if (!g.extended) {
      why = "not every rank registered";
    } else {
      why = std::to_string(g.trainers_done.size()) + " of " +
            std::to_string(participants_.numTrainers()) +
            " trainers applied its plan extension (trainers apply it between versions)";
    }
    late.emplace_back(id, why);
  }
  std::sort(late.begin(), late.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });  // by replica id
  for (const auto& [id, why] : late) {
    abort(id, timeoutError(replicaName(id) + " did not join within " +
                           std::to_string(options_.timeout.count()) + " ms: " + why));
  }
  for (const auto& [id, why] : cold.stalled_sources) {
    if (!job_.running()) return;
    Participant* p = participants_.findCommittedRankOf(id);
    // MPI-bootstrap ranks cannot be dropped: their fills keep the attempt's bound.
    if (p == nullptr || (options_.mpi_job && !p->joiner)) continue;
    job_.drop_replica(*p, why);
  }
}

// ---- peer cold start (coordinator/cold_start.h) ---------------------------------------------
ColdStartSources ReplicaJoins::coldStartSources() const {
  ColdStartSources sources;
  sources.holders = [this] {
    std::set<std::pair<uint64_t, int32_t>> holders;  // (ready version, replica)
    for (const Participant& p : participants_) {
      const int32_t id = p.hello.replica;
      if (p.hello.role != Role::kRollout || p.dropped || !job_.has_replica(id)) continue;
      if (const uint64_t v = job_.ready_version(id); v > 0) holders.insert({v, id});
    }
    return holders;
  };
  sources.live_ranks = [this](int32_t replica) {
    std::vector<int32_t> ranks;
    for (const Participant& p : participants_) {
      if (p.hello.role == Role::kRollout && p.hello.replica == replica && !p.dropped &&
          p.connected && p.committed && p.role_rank >= 0)
        ranks.push_back(p.role_rank);
    }
    std::sort(ranks.begin(), ranks.end());
    return ranks;
  };
  sources.registration = [this](int32_t rank) {
    return job_.registration(participants_.rollout(rank));
  };
  return sources;
}

void ReplicaJoins::startColdStart(Join& g) {
  ColdStartJoiner joiner;
  joiner.replica = g.id;
  joiner.ranks = g.ranks;
  joiner.num_slots = g.num_slots;
  joiner.registrations = g.registrations;  // planned against once more per attempt
  joiner.held_version = g.ready_version;   // a catch-up keeps what it holds
  joiner.held_slot = g.ready_slot;
  for (int32_t r : g.ranks) {
    const RegisterMsg& reg = participants_.rollout(r).reg;
    joiner.peers[r] = {r,
                       reg.transport,
                       reg.transport_address,
                       reg.slot_descriptors,
                       reg.buffer_byte_offsets,
                       {},
                       0,
                       0};
  }
  Result<ColdStartOutput> out =
      cold_starts_.start(std::move(joiner), coldStartSources(), job_.now());
  if (!out.isOk()) return abort(g.id, out.status());
  applyColdStart(out.value());
}

// Sends and logs the tracker's output; each ended cold start may complete its join.
void ReplicaJoins::applyColdStart(const ColdStartOutput& out) {
  for (const ColdStartMessage& m : out.messages) {
    const std::vector<uint8_t> payload = m.encodedPayload();
    for (int32_t r : m.to)
      wire_.sendTo(participants_.rollout(r), m.type, payload);
  }
  for (const std::string& note : out.notes)
    wire_.log(note);
  for (const ColdStartResult& result : out.finished) {
    auto it = joins_.find(result.replica);
    if (it == joins_.end()) continue;
    Join& g = it->second;
    g.cold_done = true;
    if (g.catch_ups > 0 && result.version <= g.ready_version) g.catch_up_stuck = true;
    g.ready_version = result.version;
    g.ready_slot = result.slot;
    maybeComplete(g.id);
  }
}

Status ReplicaJoins::onColdStartMessage(Participant& p, MessageType type,
                                        const std::vector<uint8_t>& payload) {
  const int32_t replica = p.hello.replica;
  const auto refuse_join = [&](const Status& s) {
    abort(replica, s.withContext(participantName(p) + " in its cold start"));
    return Status::ok();  // the job goes on without the joiner
  };
  Result<ColdStartOutput> out = ColdStartOutput();
  if (type == MessageType::kPrepared) {
    SlotMsg m;
    if (Status s = decode(payload, m); !s.isOk()) return refuse_join(s);
    out = cold_starts_.onPrepared(replica, p.role_rank, m, coldStartSources(), job_.now());
  } else if (type == MessageType::kReadied) {
    VersionMsg m;
    if (Status s = decode(payload, m); !s.isOk()) return refuse_join(s);
    out = cold_starts_.onReadied(replica, p.role_rank, m, job_.now());
  } else {
    return refuse_join(protocolError(std::string("unexpected ") + messageTypeName(type)));
  }
  if (!out.isOk()) return refuse_join(out.status());
  applyColdStart(out.value());
  return Status::ok();
}

Status ReplicaJoins::onColdFillDone(const Participant& p, const std::vector<uint8_t>& payload) {
  if (p.hello.role != Role::kRollout) return protocolError("ColdFillDone from a trainer");
  ColdFillDoneMsg m;
  WSYNC_RETURN_IF_ERROR(decode(payload, m));
  Result<ColdStartOutput> out =
      cold_starts_.onFillDone(p.role_rank, m, coldStartSources(), job_.now());
  if (!out.isOk()) return out.status();
  applyColdStart(out.value());
  return Status::ok();
}

void ReplicaJoins::onSourceLost(int32_t replica) {
  applyColdStart(cold_starts_.onSourceLost(replica, coldStartSources(), job_.now()));
}

}  // namespace wsync
