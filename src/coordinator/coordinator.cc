#include "coordinator/coordinator.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>

#include "codec/plan_codec.h"
#include "codec/registration_codec.h"
#include "control/frame_server.h"
#include "coordinator/broadcast_backend.h"
#include "coordinator/broadcast_comms.h"
#include "coordinator/protocol.h"
#include "plan/planner.h"

namespace wsync {
namespace {
// How long stopping a coordinator keeps flushing its last frames to the ranks.
constexpr std::chrono::milliseconds kFinalFlushTimeout{2000};
}  // namespace
namespace {

using Clock = std::chrono::steady_clock;

enum class Phase { kJoining, kRegistering, kCommitting, kRunning, kDone, kFailed };

struct Event {
  enum Kind { kConnect, kFrame, kClose } kind = kFrame;
  ConnectionId conn = 0;
  Frame frame;
  Status status;
};

struct Participant {
  ConnectionId conn = 0;
  bool connected = true;
  HelloMsg hello;
  int32_t role_rank = -1;
  bool registered = false;
  RegisterMsg reg;
  bool committed = false;
  bool said_bye = false;
};

struct ReplicaState {
  std::vector<int32_t> ranks;  // rollout ranks
  int32_t num_slots = 0;
  uint64_t ready_version = 0;  // 0: none yet
  int32_t ready_slot = -1;
  std::vector<uint64_t> slot_version;  // 0: empty
  // The version in flight:
  int32_t target_slot = -1;
  int32_t prepared = 0;
  bool skipped = false;
  int32_t received = 0;
  bool ready_sent = false;
};

std::string rankName(Role role, int32_t rank) {
  return std::string(roleName(role)) + " " + std::to_string(rank);
}

}  // namespace

class Coordinator::Impl {
 public:
  explicit Impl(CoordinatorOptions options) : opt_(std::move(options)) {}
  ~Impl() { stop(); }

  Status start() {
    FrameServerHandlers handlers;
    handlers.on_connect = [this](ConnectionId id) { push({Event::kConnect, id, {}, {}}); };
    handlers.on_frame = [this](ConnectionId id, Frame&& f) {
      push({Event::kFrame, id, std::move(f), {}});
    };
    handlers.on_close = [this](ConnectionId id, const Status& s) {
      push({Event::kClose, id, {}, s});
    };
    WSYNC_ASSIGN_OR_RETURN(
        server_, FrameServer::start(opt_.bind_host, opt_.port, opt_.control, std::move(handlers)));
    phase_deadline_ = Clock::now() + opt_.timeout;
    thread_ = std::thread([this] { run(); });
    return Status::ok();
  }

  uint16_t port() const { return server_->port(); }

  Status wait(std::chrono::milliseconds timeout) {
    std::unique_lock lock(done_mu_);
    if (!done_cv_.wait_for(lock, timeout, [this] { return finished_; })) {
      return timeoutError("coordinator: the job did not finish within " +
                          std::to_string(timeout.count()) + " ms");
    }
    return final_status_;
  }

  void stop() {
    {
      std::lock_guard lock(queue_mu_);
      stopping_ = true;
    }
    queue_cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    // The last frames (a failed job's Error) reach the ranks before the connections close.
    if (server_) server_->stop(kFinalFlushTimeout);
  }

 private:
  // ---- event plumbing ----------------------------------------------------------------------
  void push(Event e) {
    {
      std::lock_guard lock(queue_mu_);
      queue_.push_back(std::move(e));
    }
    queue_cv_.notify_one();
  }

  void run() {
    while (true) {
      std::optional<Event> event;
      {
        std::unique_lock lock(queue_mu_);
        queue_cv_.wait_until(lock, nextWakeup(), [this] { return stopping_ || !queue_.empty(); });
        if (stopping_) return;
        if (!queue_.empty()) {
          event = std::move(queue_.front());
          queue_.pop_front();
        }
      }
      if (event) handle(*event);
      checkTimers();
    }
  }

  Clock::time_point nextWakeup() const {
    auto t = Clock::now() + std::chrono::milliseconds(100);
    if (phase_ < Phase::kRunning) t = std::min(t, phase_deadline_);
    return t;
  }

  void log(const std::string& line) {
    if (opt_.log) opt_.log("[wsync coordinator] " + line);
  }

  void finish(const Status& status) {
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
  void fail(const Status& status) {
    if (phase_ == Phase::kDone || phase_ == Phase::kFailed) return;
    log("job failed: " + status.toString());
    const auto payload = encode(ErrorMsg{status.code(), status.message()});
    for (const Participant& p : participants_) {
      if (p.connected)
        (void)server_->send(p.conn, static_cast<uint16_t>(MessageType::kError), payload);
    }
    for (ConnectionId c : pending_) {
      (void)server_->send(c, static_cast<uint16_t>(MessageType::kError), payload);
    }
    finish(status);
  }

  void sendTo(const Participant& p, MessageType type, const std::vector<uint8_t>& payload) {
    if (!p.connected) return;
    Status s = server_->send(p.conn, static_cast<uint16_t>(type), payload);
    if (!s.isOk()) log("send " + std::string(messageTypeName(type)) + " failed: " + s.toString());
  }
  void refuse(ConnectionId conn, const Status& status) {
    (void)server_->send(conn, static_cast<uint16_t>(MessageType::kError),
                        encode(ErrorMsg{status.code(), status.message()}));
    server_->close(conn);
  }

  Participant& trainer(int32_t r) {
    return participants_[static_cast<size_t>(trainer_index_[static_cast<size_t>(r)])];
  }
  Participant& rollout(int32_t r) {
    return participants_[static_cast<size_t>(rollout_index_[static_cast<size_t>(r)])];
  }
  std::string nameOf(const Participant& p) const { return rankName(p.hello.role, p.role_rank); }

  // ---- events ------------------------------------------------------------------------------
  void handle(Event& e) {
    if (e.kind == Event::kConnect) {
      pending_.push_back(e.conn);
      return;
    }
    auto it = by_conn_.find(e.conn);
    if (e.kind == Event::kClose) {
      pending_.erase(std::remove(pending_.begin(), pending_.end(), e.conn), pending_.end());
      if (it == by_conn_.end()) return;
      Participant& p = participants_[it->second];
      p.connected = false;
      by_conn_.erase(it);
      if (!p.said_bye && phase_ != Phase::kFailed && phase_ != Phase::kDone) {
        fail(remoteError(nameOf(p) + " (" + p.hello.host + ") disconnected without saying goodbye" +
                         (e.status.isOk() ? "" : ": " + e.status.toString())));
      }
      maybeAllGone();
      return;
    }
    const auto type = static_cast<MessageType>(e.frame.type);
    if (it == by_conn_.end()) {
      if (type != MessageType::kHello) {
        refuse(e.conn, protocolError(std::string("expected Hello, got ") + messageTypeName(type)));
        return;
      }
      onHello(e.conn, e.frame.payload);
      return;
    }
    Participant& p = participants_[it->second];
    Status s = dispatch(p, type, e.frame.payload);
    if (!s.isOk()) fail(s.withContext(nameOf(p)));
  }

  Status dispatch(Participant& p, MessageType type, const std::vector<uint8_t>& payload) {
    switch (type) {
      case MessageType::kRegister:
        return onRegister(p, payload);
      case MessageType::kCommitDone:
        return onCommitDone(p);
      case MessageType::kPublish:
        return onPublish(p, payload);
      case MessageType::kPrepared:
        return onPrepared(p, payload);
      case MessageType::kSent:
        return onSent(p, payload);
      case MessageType::kReceived:
        return onReceived(p, payload);
      case MessageType::kBye:
        p.said_bye = true;
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

  void maybeAllGone() {
    if (participants_.empty()) return;
    for (const Participant& p : participants_) {
      if (!p.said_bye && p.connected) return;
    }
    if (phase_ == Phase::kFailed || phase_ == Phase::kDone) return;
    const bool all_bye = std::all_of(participants_.begin(), participants_.end(),
                                     [](const Participant& q) { return q.said_bye; });
    if (all_bye && phase_ >= Phase::kJoining) {
      log("every rank said goodbye");
      finish(Status::ok());
    }
  }

  // ---- joining -----------------------------------------------------------------------------
  int expectedParticipants() const {
    if (opt_.mpi_world_size > 0) return opt_.mpi_world_size - opt_.first_participant_world_rank;
    return opt_.num_trainers + opt_.num_rollouts;
  }

  void onHello(ConnectionId conn, const std::vector<uint8_t>& payload) {
    HelloMsg hello;
    Status s = decode(payload, hello);
    if (s.isOk() && phase_ != Phase::kJoining) {
      s = invalidUsage("the job is past joining; late ranks are not supported yet");
    }
    if (s.isOk() && hello.role == Role::kRollout && hello.replica < 0) {
      s = invalidArgument("rollout Hello without a replica index (set config.replica >= 0)");
    }
    if (s.isOk()) {
      for (const Participant& q : participants_) {
        const bool same = opt_.mpi_world_size > 0 ? q.hello.world_rank == hello.world_rank
                                                  : (q.hello.role == hello.role &&
                                                     q.hello.role_rank == hello.role_rank);
        if (same) {
          s = invalidArgument("a rank with the same identity already joined (" + nameOf(q) + ")");
        }
      }
    }
    if (s.isOk()) {
      if (opt_.mpi_world_size > 0) {
        if (hello.world_rank < opt_.first_participant_world_rank ||
            hello.world_rank >= opt_.mpi_world_size) {
          s = invalidArgument("world rank " + std::to_string(hello.world_rank) +
                              " is not in the job");
        }
      } else {
        const int count = hello.role == Role::kTrainer ? opt_.num_trainers : opt_.num_rollouts;
        if (hello.role_rank < 0 || hello.role_rank >= count) {
          s = invalidArgument(rankName(hello.role, hello.role_rank) +
                              " is out of range: the job has " + std::to_string(count) + " " +
                              roleName(hello.role) + " ranks");
        }
      }
    }
    if (!s.isOk()) {
      log("refused a connection: " + s.toString());
      refuse(conn, s);
      return;
    }
    pending_.erase(std::remove(pending_.begin(), pending_.end(), conn), pending_.end());
    Participant p;
    p.conn = conn;
    p.hello = hello;
    p.role_rank = hello.role_rank;
    by_conn_[conn] = participants_.size();
    participants_.push_back(std::move(p));
    if (static_cast<int>(participants_.size()) == expectedParticipants()) admitAll();
  }

  void admitAll() {
    std::vector<size_t> order(participants_.size());
    for (size_t i = 0; i < order.size(); ++i)
      order[i] = i;
    if (opt_.mpi_world_size > 0) {
      std::sort(order.begin(), order.end(), [this](size_t a, size_t b) {
        return participants_[a].hello.world_rank < participants_[b].hello.world_rank;
      });
      int32_t next[2] = {0, 0};
      for (size_t i : order) {
        Participant& p = participants_[i];
        p.role_rank = next[static_cast<int>(p.hello.role)]++;
      }
    }
    trainer_index_.clear();
    rollout_index_.clear();
    for (size_t i = 0; i < participants_.size(); ++i) {
      auto& index = participants_[i].hello.role == Role::kTrainer ? trainer_index_ : rollout_index_;
      const auto r = static_cast<size_t>(participants_[i].role_rank);
      if (index.size() <= r) index.resize(r + 1, -1);
      index[r] = static_cast<int32_t>(i);
    }
    if (trainer_index_.empty()) return fail(invalidUsage("the job has no trainer rank"));
    if (rollout_index_.empty()) return fail(invalidUsage("the job has no rollout rank"));
    WelcomeMsg welcome;
    welcome.num_trainers = static_cast<int32_t>(trainer_index_.size());
    welcome.num_rollouts = static_cast<int32_t>(rollout_index_.size());
    if (opt_.mpi_world_size > 0) {
      for (int32_t i : trainer_index_)
        welcome.trainer_world_ranks.push_back(
            participants_[static_cast<size_t>(i)].hello.world_rank);
      for (int32_t i : rollout_index_)
        welcome.rollout_world_ranks.push_back(
            participants_[static_cast<size_t>(i)].hello.world_rank);
    }
    for (Participant& p : participants_) {
      welcome.role_rank = p.role_rank;
      sendTo(p, MessageType::kWelcome, encode(welcome));
    }
    log("all " + std::to_string(participants_.size()) + " ranks joined (" +
        std::to_string(welcome.num_trainers) + " trainers, " +
        std::to_string(welcome.num_rollouts) + " rollouts)");
    phase_ = Phase::kRegistering;
  }

  // ---- registering and planning ------------------------------------------------------------
  Status onRegister(Participant& p, const std::vector<uint8_t>& payload) {
    if (phase_ != Phase::kRegistering || p.registered) {
      return invalidUsage("Register out of order (twice, or before every rank joined)");
    }
    WSYNC_RETURN_IF_ERROR(decode(payload, p.reg));
    p.registered = true;
    if (std::all_of(participants_.begin(), participants_.end(),
                    [](const Participant& q) { return q.registered; })) {
      return planAll();
    }
    return Status::ok();
  }

  Status planAll() {
    std::vector<Registration> trainers(trainer_index_.size());
    std::vector<Registration> rollouts(rollout_index_.size());
    for (Participant& p : participants_) {
      WSYNC_ASSIGN_OR_RETURN(Registration reg, decodeRegistration(p.reg.registration.data(),
                                                                  p.reg.registration.size()));
      if (reg.role != p.hello.role || reg.rank != p.role_rank) {
        return protocolError(nameOf(p) + " registered as " + rankName(reg.role, reg.rank));
      }
      if (reg.role == Role::kRollout) {
        reg.replica = p.hello.replica;
        if (p.reg.slot_descriptors.size() < 2) {
          return invalidArgument(nameOf(p) + " exposes " +
                                 std::to_string(p.reg.slot_descriptors.size()) +
                                 " slots; at least 2 are needed");
        }
        if (p.reg.buffer_byte_offsets.size() != reg.buffers.size()) {
          return protocolError(nameOf(p) + " sent buffer offsets that do not match its buffers");
        }
        rollouts[static_cast<size_t>(reg.rank)] = std::move(reg);
      } else {
        trainers[static_cast<size_t>(reg.rank)] = std::move(reg);
      }
    }
    const BroadcastDecision broadcast = decideBroadcastBackend(
        bufferPlaces(), opt_.mpi_world_size > 0, !trainer(0).reg.nccl_unique_id.empty());
    broadcast_backend_ = broadcast.backend;
    log(std::string("broadcast groups: ") + broadcastBackendName(broadcast.backend) + " (" +
        broadcast.reason + ")");
    PlannerOptions planner_options;
    planner_options.allow_broadcast = broadcast.backend != BroadcastBackend::kNone;
    const auto t0 = Clock::now();
    Result<Plan> plan = makePlan(trainers, rollouts, planner_options);
    if (!plan.isOk()) {
      fail(plan.status().withContext("planning"));
      return Status::ok();
    }
    const double plan_s = std::chrono::duration<double>(Clock::now() - t0).count();
    log("plan: " + std::to_string(plan->tensors.size()) + " tensors, " +
        std::to_string(plan->groups.size()) + " broadcast groups, " +
        std::to_string(plan->writes.size()) + " write ops, " +
        std::to_string(plan->stats.bytes_total) + " bytes per version, planned in " +
        std::to_string(plan_s) + " s");
    WSYNC_RETURN_IF_ERROR(setupReplicas(rollouts));
    sendAssignments(*plan);
    phase_ = Phase::kCommitting;
    return Status::ok();
  }

  // Every rank's memory place, trainers then rollouts, for decideBroadcastBackend.
  std::vector<RankBufferPlace> bufferPlaces() {
    std::vector<RankBufferPlace> places;
    places.reserve(participants_.size());
    for (int32_t t = 0; t < static_cast<int32_t>(trainer_index_.size()); ++t)
      places.push_back({nameOf(trainer(t)), trainer(t).reg.device_id});
    for (int32_t r = 0; r < static_cast<int32_t>(rollout_index_.size()); ++r)
      places.push_back({nameOf(rollout(r)), rollout(r).reg.device_id});
    return places;
  }

  Status setupReplicas(const std::vector<Registration>& rollouts) {
    std::map<int32_t, std::vector<int32_t>> members;
    for (const Registration& r : rollouts)
      members[r.replica].push_back(r.rank);
    int32_t max_replica = members.rbegin()->first;
    replicas_.assign(static_cast<size_t>(max_replica) + 1, {});
    replica_of_rollout_.assign(rollouts.size(), -1);
    for (auto& [id, ranks] : members) {
      ReplicaState& rs = replicas_[static_cast<size_t>(id)];
      rs.ranks = ranks;
      rs.num_slots = static_cast<int32_t>(rollout(ranks[0]).reg.slot_descriptors.size());
      for (int32_t r : ranks) {
        replica_of_rollout_[static_cast<size_t>(r)] = id;
        const auto n = static_cast<int32_t>(rollout(r).reg.slot_descriptors.size());
        if (n != rs.num_slots) {
          return invalidArgument("replica " + std::to_string(id) + ": rollout " +
                                 std::to_string(ranks[0]) + " has " + std::to_string(rs.num_slots) +
                                 " slots but rollout " + std::to_string(r) + " has " +
                                 std::to_string(n));
        }
      }
      rs.slot_version.assign(static_cast<size_t>(rs.num_slots), 0);
    }
    return Status::ok();
  }

  // Broadcast communicators: host (MPI) ones name MPI world ranks; device (NCCL) ones name NCCL
  // world ranks (numberNcclWorld), and every rank then joins the NCCL world.
  void sendAssignments(const Plan& plan) {
    const bool nccl = broadcast_backend_ == BroadcastBackend::kNcclDevice && !plan.groups.empty();
    const NcclWorldNumbering nccl_world = numberNcclWorld(
        static_cast<int32_t>(trainer_index_.size()), static_cast<int32_t>(rollout_index_.size()));
    std::vector<int32_t> trainer_world = nccl_world.trainer_ranks;
    std::vector<int32_t> rollout_world = nccl_world.rollout_ranks;
    if (!nccl) {
      for (int32_t t = 0; t < static_cast<int32_t>(trainer_index_.size()); ++t)
        trainer_world[static_cast<size_t>(t)] = trainer(t).hello.world_rank;
      for (int32_t r = 0; r < static_cast<int32_t>(rollout_index_.size()); ++r)
        rollout_world[static_cast<size_t>(r)] = rollout(r).hello.world_rank;
    }
    const BroadcastCommMap comm_map = mapBroadcastComms(plan, trainer_world, rollout_world);
    if (nccl) {
      log("NCCL world of " + std::to_string(nccl_world.size) + " ranks, " +
          std::to_string(comm_map.comms.size()) + " broadcast communicators");
    }
    auto assignment = [&](Role role, int32_t rank) {
      PlanAssignmentMsg msg;
      const RankPlan view = rankView(plan, role, rank);
      msg.rank_plan = encodeRankPlan(view);
      if (role == Role::kTrainer) {
        for (int32_t peer : view.peers) {
          const Participant& q = rollout(peer);
          msg.peers.push_back({peer, q.reg.transport, q.reg.transport_address,
                               q.reg.slot_descriptors, q.reg.buffer_byte_offsets});
        }
      }
      if (nccl) {
        assignNcclBroadcasts(plan, comm_map, nccl_world, trainer(0).reg.nccl_unique_id, role, rank,
                             &msg);
      } else {
        rankBroadcastComms(plan, comm_map, role, rank, &msg.comms, &msg.group_comm);
        if (!msg.comms.empty()) {  // host broadcast groups: MPI world ranks
          const Participant& self = role == Role::kTrainer ? trainer(rank) : rollout(rank);
          msg.broadcast.backend = "mpi";
          msg.broadcast.world_rank = self.hello.world_rank;
          msg.broadcast.world_size = opt_.mpi_world_size;
          msg.broadcast.root_ranks = trainer_world;
        }
      }
      msg.replica_of_rollout = replica_of_rollout_;
      return encode(msg);
    };
    for (int32_t t = 0; t < static_cast<int32_t>(trainer_index_.size()); ++t) {
      sendTo(trainer(t), MessageType::kPlanAssignment, assignment(Role::kTrainer, t));
    }
    for (int32_t r = 0; r < static_cast<int32_t>(rollout_index_.size()); ++r) {
      sendTo(rollout(r), MessageType::kPlanAssignment, assignment(Role::kRollout, r));
    }
  }

  Status onCommitDone(Participant& p) {
    if (phase_ != Phase::kCommitting || p.committed) return invalidUsage("CommitDone out of order");
    p.committed = true;
    if (std::all_of(participants_.begin(), participants_.end(),
                    [](const Participant& q) { return q.committed; })) {
      for (const Participant& q : participants_)
        sendTo(q, MessageType::kCommitOk, {});
      phase_ = Phase::kRunning;
      log("commit complete");
    }
    return Status::ok();
  }

  // ---- versions ----------------------------------------------------------------------------
  Status onPublish(Participant& p, const std::vector<uint8_t>& payload) {
    if (phase_ != Phase::kRunning) return invalidUsage("Publish before commit completed");
    VersionMsg m;
    WSYNC_RETURN_IF_ERROR(decode(payload, m));
    if (m.version < last_started_) {
      return invalidUsage(nameOf(p) + " published version " + std::to_string(m.version) +
                          " after version " + std::to_string(last_started_) +
                          " started: trainers must publish the same increasing versions");
    }
    if (m.version > last_started_) pending_versions_.insert(m.version);
    maybeStartNext();
    return Status::ok();
  }

  void maybeStartNext() {
    if (in_flight_ != 0 || pending_versions_.empty()) return;
    const uint64_t v = *pending_versions_.begin();
    pending_versions_.erase(pending_versions_.begin());
    in_flight_ = v;
    last_started_ = v;
    version_started_ = Clock::now();
    go_sent_ = false;
    sent_ = 0;
    for (size_t id = 0; id < replicas_.size(); ++id) {
      ReplicaState& rs = replicas_[id];
      if (rs.ranks.empty()) continue;
      // The slot to write: not the newest ready one; an empty one, else the oldest.
      int32_t best = -1;
      for (int32_t s = 0; s < rs.num_slots; ++s) {
        if (s == rs.ready_slot) continue;
        if (best < 0 ||
            rs.slot_version[static_cast<size_t>(s)] < rs.slot_version[static_cast<size_t>(best)])
          best = s;
      }
      rs.target_slot = best;
      rs.prepared = 0;
      rs.skipped = false;
      rs.received = 0;
      rs.ready_sent = false;
      const auto payload = encode(SlotMsg{v, best});
      for (int32_t r : rs.ranks)
        sendTo(rollout(r), MessageType::kPrepare, payload);
    }
  }

  Status onPrepared(Participant& p, const std::vector<uint8_t>& payload) {
    SlotMsg m;
    WSYNC_RETURN_IF_ERROR(decode(payload, m));
    if (m.version != in_flight_) return Status::ok();  // a skipped replica catching up late
    ReplicaState& rs =
        replicas_[static_cast<size_t>(replica_of_rollout_[static_cast<size_t>(p.role_rank)])];
    if (m.slot != rs.target_slot) {
      return protocolError("prepared slot " + std::to_string(m.slot) + " for version " +
                           std::to_string(m.version) + " but slot " +
                           std::to_string(rs.target_slot) + " was asked");
    }
    ++rs.prepared;
    if (!go_sent_) maybeGo(false);
    return Status::ok();
  }

  // Sends Go once every replica drained its target slot; after skip_grace, replicas that have not
  // are skipped when the staleness bound allows it.
  void maybeGo(bool grace_over) {
    std::vector<int32_t> slots(replicas_.size(), -1);
    for (size_t id = 0; id < replicas_.size(); ++id) {
      ReplicaState& rs = replicas_[id];
      if (rs.ranks.empty()) continue;
      if (rs.prepared == static_cast<int32_t>(rs.ranks.size())) {
        slots[id] = rs.target_slot;
        continue;
      }
      const bool can_skip =
          grace_over && rs.ready_version > 0 &&
          (opt_.max_staleness < 0 ||
           in_flight_ - rs.ready_version <= static_cast<uint64_t>(opt_.max_staleness));
      if (!can_skip) return;  // wait for it
    }
    for (size_t id = 0; id < replicas_.size(); ++id) {
      ReplicaState& rs = replicas_[id];
      if (!rs.ranks.empty() && slots[id] < 0) {
        rs.skipped = true;
        log("version " + std::to_string(in_flight_) + ": replica " + std::to_string(id) +
            " skipped (its readers still hold slot " + std::to_string(rs.target_slot) + ")");
      }
    }
    go_sent_ = true;
    const auto payload = encode(GoMsg{in_flight_, slots});
    for (const Participant& q : participants_)
      sendTo(q, MessageType::kGo, payload);
  }

  Status onSent(Participant& p, const std::vector<uint8_t>& payload) {
    VersionMsg m;
    WSYNC_RETURN_IF_ERROR(decode(payload, m));
    if (m.version != in_flight_ || !go_sent_) {
      return protocolError(nameOf(p) + " reported version " + std::to_string(m.version) +
                           " sent out of order");
    }
    ++sent_;
    checkReplicasReady();
    return Status::ok();
  }

  Status onReceived(Participant& p, const std::vector<uint8_t>& payload) {
    VersionMsg m;
    WSYNC_RETURN_IF_ERROR(decode(payload, m));
    if (m.version != in_flight_ || !go_sent_) {
      return protocolError(nameOf(p) + " reported version " + std::to_string(m.version) +
                           " received out of order");
    }
    ++replicas_[static_cast<size_t>(replica_of_rollout_[static_cast<size_t>(p.role_rank)])]
          .received;
    checkReplicasReady();
    return Status::ok();
  }

  void checkReplicasReady() {
    if (sent_ < static_cast<int32_t>(trainer_index_.size())) return;
    bool all = true;
    for (size_t id = 0; id < replicas_.size(); ++id) {
      ReplicaState& rs = replicas_[id];
      if (rs.ranks.empty() || rs.skipped || rs.ready_sent) continue;
      if (rs.received < static_cast<int32_t>(rs.ranks.size())) {
        all = false;
        continue;
      }
      rs.ready_sent = true;
      rs.ready_version = in_flight_;
      rs.ready_slot = rs.target_slot;
      rs.slot_version[static_cast<size_t>(rs.target_slot)] = in_flight_;
      const auto payload = encode(SlotMsg{in_flight_, rs.target_slot});
      for (int32_t r : rs.ranks)
        sendTo(rollout(r), MessageType::kReady, payload);
    }
    if (!all) return;
    const auto payload = encode(VersionMsg{in_flight_});
    for (int32_t t = 0; t < static_cast<int32_t>(trainer_index_.size()); ++t) {
      sendTo(trainer(t), MessageType::kDelivered, payload);
    }
    in_flight_ = 0;
    maybeStartNext();
  }

  // ---- timers ------------------------------------------------------------------------------
  void checkTimers() {
    const auto now = Clock::now();
    if (phase_ < Phase::kRunning && now >= phase_deadline_) {
      std::string missing;
      if (phase_ == Phase::kJoining) {
        missing = std::to_string(participants_.size()) + " of " +
                  std::to_string(expectedParticipants()) + " ranks joined";
        if (opt_.mpi_world_size > 0) {
          std::vector<bool> seen(static_cast<size_t>(opt_.mpi_world_size), false);
          for (const Participant& p : participants_)
            seen[static_cast<size_t>(p.hello.world_rank)] = true;
          std::string absent;
          for (int w = opt_.first_participant_world_rank; w < opt_.mpi_world_size; ++w) {
            if (!seen[static_cast<size_t>(w)])
              absent += (absent.empty() ? "" : ", ") + std::to_string(w);
          }
          missing += "; never arrived: MPI world rank(s) " + absent;
        } else {
          std::string absent;
          for (Role role : {Role::kTrainer, Role::kRollout}) {
            const int count = role == Role::kTrainer ? opt_.num_trainers : opt_.num_rollouts;
            for (int r = 0; r < count; ++r) {
              const bool seen = std::any_of(participants_.begin(), participants_.end(),
                                            [&](const Participant& p) {
                                              return p.hello.role == role && p.hello.role_rank == r;
                                            });
              if (!seen) absent += (absent.empty() ? "" : ", ") + rankName(role, r);
            }
          }
          missing += "; never arrived: " + absent;
        }
      } else {
        for (const Participant& p : participants_) {
          const bool waiting = phase_ == Phase::kRegistering ? !p.registered : !p.committed;
          if (waiting) missing += (missing.empty() ? "" : ", ") + nameOf(p);
        }
        missing = std::string("never ") +
                  (phase_ == Phase::kRegistering ? "registered" : "finished commit") + ": " +
                  missing;
      }
      fail(timeoutError("waited " + std::to_string(opt_.timeout.count()) +
                        " ms for every rank to " + (phase_ == Phase::kJoining ? "join" : "commit") +
                        "; " + missing));
      return;
    }
    if (phase_ == Phase::kRunning && in_flight_ != 0) {
      if (!go_sent_ && now - version_started_ >= opt_.skip_grace) maybeGo(true);
      if (now - version_started_ >= opt_.timeout) {
        std::string late;
        for (size_t id = 0; id < replicas_.size(); ++id) {
          const ReplicaState& rs = replicas_[id];
          if (rs.ranks.empty() || rs.skipped || rs.ready_sent) continue;
          late +=
              (late.empty() ? "" : ", ") + std::string("replica ") + std::to_string(id) +
              (go_sent_ ? "" : " (readers still hold slot " + std::to_string(rs.target_slot) + ")");
        }
        fail(timeoutError("version " + std::to_string(in_flight_) + " not delivered within " +
                          std::to_string(opt_.timeout.count()) + " ms; waiting on " + late +
                          (go_sent_ ? "; trainers done: " + std::to_string(sent_) : "")));
      }
    }
  }

  CoordinatorOptions opt_;
  std::unique_ptr<FrameServer> server_;
  std::thread thread_;

  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<Event> queue_;
  bool stopping_ = false;

  std::mutex done_mu_;
  std::condition_variable done_cv_;
  bool finished_ = false;
  Status final_status_;

  // Event-thread state.
  Phase phase_ = Phase::kJoining;
  Clock::time_point phase_deadline_;
  std::vector<Participant> participants_;
  std::unordered_map<ConnectionId, size_t> by_conn_;
  std::vector<ConnectionId> pending_;   // connected, no Hello yet
  std::vector<int32_t> trainer_index_;  // role rank -> participants_ index
  std::vector<int32_t> rollout_index_;
  std::vector<ReplicaState> replicas_;
  std::vector<int32_t> replica_of_rollout_;
  BroadcastBackend broadcast_backend_ = BroadcastBackend::kNone;
  std::set<uint64_t> pending_versions_;
  uint64_t in_flight_ = 0;
  uint64_t last_started_ = 0;
  Clock::time_point version_started_;
  bool go_sent_ = false;
  int32_t sent_ = 0;
};

Result<std::unique_ptr<Coordinator>> Coordinator::start(CoordinatorOptions options) {
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
