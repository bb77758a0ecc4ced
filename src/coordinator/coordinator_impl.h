// The coordinator's private state and event handlers (coordinator/coordinator.h), shared by
// coordinator.cc (events, the fixed membership's joining and planning, versions) and
// coordinator_membership.cc (drops, leaves, heartbeats, replicas joining the running job).
// Everything here runs on the coordinator's event thread unless said otherwise.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "control/frame_server.h"
#include "coordinator/admission.h"
#include "coordinator/broadcast_choice.h"
#include "coordinator/cold_start.h"
#include "coordinator/coordinator.h"
#include "coordinator/delivery_gate.h"
#include "coordinator/maxima_relay.h"
#include "coordinator/metrics.h"
#include "coordinator/version_sequencer.h"
#include "layout/registration.h"
#include "plan/plan.h"
#include "protocol/protocol.h"

namespace wsync {
namespace coordinator_internal {

using Clock = std::chrono::steady_clock;

enum class Phase { kJoining, kRegistering, kCommitting, kRunning, kDone, kFailed };

struct JoinerPlan;  // a joining replica's plan, as its planner thread made it

struct Event {
  // kTask: work a helper thread finished, continued on the event thread (`task`).
  enum Kind { kConnect, kFrame, kClose, kTask } kind = kFrame;
  ConnectionId conn = 0;
  Frame frame;
  Status status;
  std::function<void()> task;
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
  Clock::time_point last_heard;
};

// A replica joining the running job, from its first Hello until it is in the version sequencer:
// CommitOk once its ranks committed, then its peer cold start (if any, ColdStartTracker) while the
// trainers apply its plan extension.
struct JoiningReplica {
  int32_t id = -1;
  int32_t size = 0;
  Clock::time_point started;
  std::vector<int32_t> members;  // participants_ index by replica rank; -1: not arrived
  std::vector<int32_t> ranks;    // rollout ranks once welcomed
  bool welcomed = false;
  bool extended = false;  // the trainers got its PlanExtension
  std::set<int32_t> trainers_done;
  int32_t num_slots = 0;
  double plan_ms = 0;
  size_t write_ops = 0;
  // Its plan is computed on a planner thread (coordinator_join_plan.cc); the result applies only
  // while this token is the one it was started with (an aborted join's plan is dropped).
  uint64_t plan_token = 0;
  std::vector<Registration> registrations;  // of its ranks, by replica rank (for its cold start)
  bool committed_ok = false;                // CommitOk sent: its ranks run (and send heartbeats)
  bool cold_done = false;                   // the cold start ended (or none was possible)
  uint64_t ready_version = 0;               // what it ended with (0 / -1: no version)
  int32_t ready_slot = -1;
  // Catch-ups (cold starts again, from a version newer than ready_version) done, and whether the
  // last one found nothing newer to fill (no more are tried).
  int catch_ups = 0;
  bool catch_up_stuck = false;
};

// Trainer restart (coordinator_trainer_restart.cc): the trainers were lost; a new set registers.
struct TrainerRestart {
  std::string cause;             // why the trainers were lost
  Clock::time_point deadline;    // the new trainers must have committed by then
  std::vector<int32_t> members;  // participants_ index by trainer rank; -1: not arrived
  bool assigned = false;         // every member registered and got its PlanAssignment
  // After CommitOk: the joined replicas' plan extensions not applied yet, by (trainer rank,
  // replica); Publishes are held (trainer rank, payload) until every one is.
  bool extending = false;
  std::set<std::pair<int32_t, int32_t>> extensions_due;
  std::vector<std::pair<int32_t, std::vector<uint8_t>>> held_publishes;
};

}  // namespace coordinator_internal

class Coordinator::Impl {
 public:
  using Clock = coordinator_internal::Clock;
  using Event = coordinator_internal::Event;
  using Participant = coordinator_internal::Participant;
  using Phase = coordinator_internal::Phase;
  using JoiningReplica = coordinator_internal::JoiningReplica;
  using TrainerRestart = coordinator_internal::TrainerRestart;
  using JoinerPlan = coordinator_internal::JoinerPlan;

  explicit Impl(CoordinatorOptions options) : opt_(std::move(options)) {
    if (!opt_.metrics) opt_.metrics = std::make_shared<CoordinatorMetrics>();
    if (opt_.job.delta) opt_.job.checksums = true;  // delta versions are always verified
  }
  ~Impl() { stop(); }

  Status start();
  uint16_t port() const { return server_->port(); }
  Status wait(std::chrono::milliseconds timeout);
  void stop();

 private:
  // ---- event plumbing (coordinator.cc) ----
  void push(Event e);
  void run();
  Clock::time_point nextWakeup() const;
  // A version is in flight (busy polling applies, see run()).
  bool versionMoving() const { return sequencer_ && sequencer_->inFlightVersion() != 0; }
  void log(const std::string& line) {
    if (opt_.log) opt_.log("[wsync coordinator] " + line);
  }
  void finish(const Status& status);
  void fail(const Status& status);
  void sendTo(const Participant& p, MessageType type, const std::vector<uint8_t>& payload);
  void sendToTrainers(MessageType type, const std::vector<uint8_t>& payload);
  void refuse(ConnectionId conn, const Status& status);
  Participant& trainer(int32_t r) {
    return participants_[static_cast<size_t>(trainer_index_[static_cast<size_t>(r)])];
  }
  Participant& rollout(int32_t r) {
    return participants_[static_cast<size_t>(rollout_index_[static_cast<size_t>(r)])];
  }
  std::string nameOf(const Participant& p) const { return rankName(p.hello.role, p.role_rank); }
  int32_t numTrainers() const { return static_cast<int32_t>(trainer_index_.size()); }

  // ---- events (coordinator.cc) ----
  void handle(Event& e);
  void onClose(size_t index, const Status& status);
  Status dispatch(Participant& p, MessageType type, const std::vector<uint8_t>& payload);
  void maybeAllGone();
  // Every trainer said goodbye (the trainers finished cleanly): the rollouts still in the job get
  // TrainersDone(last started version), so their waits for newer versions end; a joining replica
  // gets it once its join completed (holding that version when a peer could fill it).
  void tellTrainersDone();
  void sendTrainersDone(std::optional<int32_t> replica);

  // ---- the fixed membership: joining, registering, planning, committing (coordinator.cc) ----
  JobShape jobShape() const {
    return {opt_.mpi_world_size, opt_.first_participant_world_rank, opt_.num_trainers,
            opt_.num_rollouts};
  }
  // An elastic job: explicit bootstrap with no fixed rollout rank (every replica joins at run time;
  // until one did, each version completes at once, ready on no replica).
  bool elastic() const { return opt_.mpi_world_size <= 0 && opt_.num_rollouts == 0; }
  std::vector<const HelloMsg*> joinedHellos() const;
  void onHello(ConnectionId conn, const std::vector<uint8_t>& payload);
  void admitAll();
  Status onRegister(Participant& p, const std::vector<uint8_t>& payload);
  // p's registration, decoded and checked against its identity (rollouts: slots and offsets);
  // a rollout's block-scaled tensors renamed (plan/block_scaling_plan.h) when `scaled`.
  Result<Registration> decodeRegistrationOf(const Participant& p, bool scaled = true) const;
  Status planAll();
  std::vector<RankBroadcastFacts> broadcastFacts();
  Status setupReplicas(const std::vector<Registration>& rollouts);
  void sendAssignments(const Plan& plan);
  Status onCommitDone(Participant& p);

  // ---- block-scaled rollout tensors (coordinator_block_scaling.cc) ----
  // Before planning: the job's table from the rollouts' scalings, their pieces renamed, the
  // trainers' quantized sources added, and the maxima relay for blocks that straddle trainers.
  Status planBlockScaling(std::vector<Registration>& trainers, std::vector<Registration>& rollouts);
  // A restarted trainer's registration as planning saw its predecessor's.
  Status addQuantizedSourcesTo(Registration& trainer) const;
  // A joining rank's scalings must be schemes planned at commit (UNSUPPORTED names the tensor).
  Status checkJoinerScalings(const Participant& p) const;
  // Trainer t's part of PlanAssignment: the table and its exchanged blocks.
  void addBlockScaling(int32_t t, PlanAssignmentMsg& msg) const;
  Status onPartialMaxima(const Participant& p, const std::vector<uint8_t>& payload);

  // ---- versions (coordinator.cc) ----
  Status onVersionMessage(const Participant& p, MessageType type,
                          const std::vector<uint8_t>& payload);
  Status apply(Result<SequencerOutput> output);
  void send(const OutgoingMessage& m);
  Status onReadied(const Participant& p, const std::vector<uint8_t>& payload);
  void checkTimers();

  // ---- membership of the running job (coordinator_membership.cc) ----
  // Drops the replica of rollout participant `p` (connection closed, silent, left): the
  // sequencer stops waiting for it, the trainers are told. `crashed`: its other ranks get an
  // Error saying why (a clean leave tells them nothing).
  void dropReplicaOf(Participant& p, const std::string& reason, bool crashed);
  void onLeave(Participant& p);
  void sendDueLefts();
  void checkHeartbeats(Clock::time_point now);
  // How long a version waits on one replica (or its confirmation of Ready) before the replica is
  // dropped as stalled: the heartbeat timeout, at most half the job's timeout (so the version
  // still completes for the others within it, whatever the two settings are).
  std::chrono::milliseconds replicaBound() const;
  // How often rollouts heartbeat (Welcome): a quarter of the heartbeat timeout, at most an eighth
  // of the job's timeout (so a stopped rank's silence shows within replicaBound()); 0: none.
  std::chrono::milliseconds heartbeatInterval() const;
  // Drops the replicas the version in flight waited on past replicaBound() (`stalled`, from the
  // sequencer) and those whose ranks did not confirm a Ready within it (the delivery gate).
  void dropStalled(const std::vector<int32_t>& stalled, Clock::time_point now);
  void onJoinHello(ConnectionId conn, const HelloMsg& hello);
  Status checkRanksJobSettings() const;  // at admission (coordinator/admission.h)
  Status checkJoinHello(const HelloMsg& hello) const;
  void welcomeJoiners(JoiningReplica& g);
  Status onJoinerRegister(Participant& p, const std::vector<uint8_t>& payload);
  // Starts planning the replica on a planner thread; finishPlanJoiner applies the result on the
  // event thread: versions keep being sequenced while a large plan is computed.
  void planJoiner(JoiningReplica& g);
  void finishPlanJoiner(int32_t replica, uint64_t token, const Status& status,
                        const std::shared_ptr<const JoinerPlan>& plan);
  Status onExtensionDone(const Participant& p, const std::vector<uint8_t>& payload);
  void maybeCompleteJoin(int32_t replica);
  // Whether the joiner, its cold start over, should be filled again from a newer version first
  // (a catch-up: a peer holds one, or one is in flight: `wait` is set, and a delivery resumes it);
  // bounded by kMaxCatchUps while the trainers run, unbounded once they finished.
  bool needsCatchUp(const JoiningReplica& g, bool* wait) const;
  // A version was delivered: joins that waited for it (needsCatchUp) go on.
  void resumeJoinsAfterDelivery();
  static constexpr int kMaxCatchUps = 2;
  // Ends a join that cannot complete: its ranks are dropped and get `status` (unless
  // `left_cleanly`: a rank of it said Leave, which Left answers); trainers that may have applied
  // its extension are told to forget it.
  void abortJoin(int32_t replica, const Status& status, bool left_cleanly = false);
  void checkJoinDeadlines(Clock::time_point now);
  bool replicaInUse(int32_t replica) const;
  // The joined replica enters the version sequencer (holding `ready_version` in `ready_slot` after
  // a cold start; 0 / -1: none) and leaves joining_.
  void completeJoin(int32_t replica, uint64_t ready_version, int32_t ready_slot);

  // ---- peer cold start of a joined replica (coordinator_cold_start.cc; cold_starts_) ----
  // Starts filling `g` from a running replica (or ends its cold start at once when none can).
  void startColdStart(JoiningReplica& g);
  // Sends and logs the tracker's output; each ended cold start may complete its join.
  void applyColdStart(const ColdStartOutput& out);
  // The running replicas as the tracker's sources (valid while this Impl is).
  ColdStartSources coldStartSources() const;
  bool inColdStart(const Participant& p) const;
  // Prepared / Readied from a rank of a replica in its cold start.
  Status onColdStartMessage(Participant& p, MessageType type, const std::vector<uint8_t>& payload);
  Status onColdFillDone(const Participant& p, const std::vector<uint8_t>& payload);
  // Source replica `replica` was dropped: cold starts reading from it try another source.
  void onColdStartSourceLost(int32_t replica);
  // The ranks of running replica `replica` that can serve as cold start sources, by rank.
  std::vector<int32_t> liveRanksOf(int32_t replica) const;

  // ---- trainer restart (coordinator_trainer_restart.cc) ----
  // Whether losing a trainer now starts a trainer restart rather than failing the job.
  bool canRestartTrainers() const;
  // The trainers were lost (`cause`): ends the version in flight (its replicas give their slots
  // back), tells every trainer still connected to stop, aborts joins, and waits for new trainers.
  void beginTrainerRestart(const Status& cause);
  void onRestartHello(ConnectionId conn, const HelloMsg& hello);
  void maybeWelcomeRestarted();
  Status onRestartRegister(Participant& p, const std::vector<uint8_t>& payload);
  void sendRestartAssignments();
  Status onRestartCommitDone(Participant& p);
  // While the restarted trainers apply the joined replicas' extensions: holds a Publish (true).
  bool holdPublish(const Participant& p, const std::vector<uint8_t>& payload);
  Status onRestartExtensionDone(const Participant& p, int32_t replica);
  void maybeFinishTrainerRestart();
  void checkTrainerRestart(Clock::time_point now);

  CoordinatorOptions opt_;
  std::unique_ptr<FrameServer> server_;
  std::thread thread_;

  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<Event> queue_;
  bool stopping_ = false;
  // Busy polling of the queue (options.control.spin_wait after the last event): events queued
  // and whether stop() was called, readable without the lock.
  std::atomic<size_t> queued_{0};
  std::atomic<bool> stop_requested_{false};

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
  std::vector<int32_t> replica_of_rollout_;
  std::optional<BroadcastOffer> broadcast_backend_;  // chosen at planning; none: writes only
  DeliveryGate delivery_gate_;                       // holds Delivered until Ready is confirmed
  uint64_t delta_first_go_ = 0;  // delta versions: the newest version whose first Go was sent
  std::optional<VersionSequencer> sequencer_;            // from planning on
  std::vector<Registration> trainer_registrations_;      // kept for planning joining replicas
  std::vector<ScaledTensor> scaling_table_;              // block-scaled tensors of the job
  std::vector<std::vector<uint64_t>> exchanged_blocks_;  // per trainer (PlanAssignment)
  std::optional<MaximaRelay> maxima_;                    // when some block straddles trainers
  std::map<int32_t, JoiningReplica> joining_;            // by replica id
  std::optional<uint64_t> trainers_finished_;  // the version the trainers finished at (all Bye)
  ColdStartTracker cold_starts_{ColdStartOptions{opt_.timeout}};  // of joining_ replicas
  // Trainer restart: the plan (kept when opt_.trainer_restart), each joined replica's plan
  // extension per trainer rank (encoded PlanExtensionMsg), and the restart under way.
  std::optional<Plan> plan_;
  std::map<int32_t, std::vector<std::vector<uint8_t>>> extensions_;
  std::optional<TrainerRestart> restart_;
  uint64_t last_plan_token_ = 0;
  // Planner threads of joining replicas (they read trainer_registrations_, which is not changed
  // once the job runs); finished ones are reaped when the next starts, the rest waited for by
  // stop(). Declared last: destroyed (waited for) before the state they read.
  std::vector<std::future<void>> planners_;
};

}  // namespace wsync
