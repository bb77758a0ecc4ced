// The coordinator's event loop (coordinator/coordinator.h; all of it in coordinator.cc): its
// queue, the job's phase and the dispatch of events to its components (JobAdmission, JobPlanning,
// RunningVersions, JobMembership, ReplicaJoins, TrainerRestart, CoordinatorBlockScaling;
// docs/architecture.md), each owning its state; the glue between them.
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
#include "coordinator/block_scaling.h"
#include "coordinator/broadcast_choice.h"
#include "coordinator/cold_start.h"
#include "coordinator/coordinator.h"
#include "coordinator/coordinator_wire.h"
#include "coordinator/job_admission.h"
#include "coordinator/job_membership.h"
#include "coordinator/job_planning.h"
#include "coordinator/metrics.h"
#include "coordinator/participants.h"
#include "coordinator/replica_joins.h"
#include "coordinator/running_versions.h"
#include "coordinator/trainer_restart.h"
#include "coordinator/version_sequencer.h"
#include "layout/registration.h"
#include "plan/plan.h"
#include "protocol/protocol.h"

namespace wsync {
namespace coordinator_internal {

using Clock = CoordinatorClock;

enum class Phase { kJoining, kRegistering, kCommitting, kRunning, kDone, kFailed };

struct Event {
  // kTask: work a helper thread finished, continued on the event thread (`task`).
  enum Kind { kConnect, kFrame, kClose, kTask } kind = kFrame;
  ConnectionId conn = 0;
  Frame frame;
  Status status;
  std::function<void()> task;
};

// The coordinator's wire (coordinator/coordinator_wire.h): frames through its FrameServer, log
// lines to CoordinatorOptions::log.
class ServerWire final : public CoordinatorWire {
 public:
  explicit ServerWire(std::function<void(const std::string&)> log) : log_(std::move(log)) {}
  void attach(FrameServer* server) { server_ = server; }
  Status send(ConnectionId conn, MessageType type, const std::vector<uint8_t>& payload) override {
    return server_->send(conn, static_cast<uint16_t>(type), payload);
  }
  void close(ConnectionId conn) override { server_->close(conn); }
  void log(const std::string& line) override {
    if (log_) log_("[wsync coordinator] " + line);
  }

 private:
  std::function<void(const std::string&)> log_;
  FrameServer* server_ = nullptr;
};

}  // namespace coordinator_internal

class Coordinator::Impl {
 public:
  using Clock = coordinator_internal::Clock;
  using Event = coordinator_internal::Event;
  using ServerWire = coordinator_internal::ServerWire;
  using Participant = wsync::Participant;
  using Phase = coordinator_internal::Phase;

  explicit Impl(CoordinatorOptions options) : opt_(withDefaults(std::move(options))) {}
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
  bool versionMoving() const { return versions_.inFlightVersion() != 0; }
  void log(const std::string& line) { wire_.log(line); }
  void finish(const Status& status);
  void fail(const Status& status);
  void sendTo(const Participant& p, MessageType type, const std::vector<uint8_t>& payload) {
    wire_.sendTo(p, type, payload);
  }
  void sendToTrainers(MessageType type, const std::vector<uint8_t>& payload);
  void refuse(ConnectionId conn, const Status& status) { wire_.refuse(conn, status); }
  Participant& trainer(int32_t r) { return participants_.trainer(r); }
  Participant& rollout(int32_t r) { return participants_.rollout(r); }
  const Participant& trainer(int32_t r) const { return participants_.trainer(r); }
  const Participant& rollout(int32_t r) const { return participants_.rollout(r); }
  static std::string nameOf(const Participant& p) { return participantName(p); }
  int32_t numTrainers() const { return participants_.numTrainers(); }

  // ---- events (coordinator.cc) ----
  void handle(Event& e);
  void onClose(size_t index, const Status& status);
  Status dispatch(Participant& p, MessageType type, const std::vector<uint8_t>& payload);
  void maybeAllGone();
  // Every trainer said goodbye (the trainers finished cleanly): the rollouts still in the job get
  // TrainersDone(last started version), so their waits for newer versions end; a joining replica
  // gets it once its join completed (holding that version when a peer could fill it).
  void tellTrainersDone();
  void sendTrainersDone();  // TrainersDone to every running rollout not joining

  // ---- the fixed membership: joining, registering, planning, committing ----
  // An elastic job: explicit bootstrap with no fixed rollout rank (every replica joins at run time;
  // until one did, each version completes at once, ready on no replica).
  bool elastic() const { return opt_.mpi_world_size <= 0 && opt_.num_rollouts == 0; }
  void onHello(ConnectionId conn, const std::vector<uint8_t>& payload);
  // Register, the plan once every fixed rank registered (coordinator/job_planning.h), CommitDone.
  Status onRegister(Participant& p, const std::vector<uint8_t>& payload);
  Status planAll();
  Status onCommitDone(Participant& p);

  // ---- versions (coordinator/running_versions.h; timers: coordinator.cc) ----
  Status onVersionMessage(const Participant& p, MessageType type,
                          const std::vector<uint8_t>& payload);
  Status onReadied(const Participant& p, const std::vector<uint8_t>& payload);
  void checkTimers();

  // ---- membership of the running job (coordinator/job_membership.h) ----
  // Drops the replica of rollout participant `p` (connection closed, silent, left): the
  // sequencer stops waiting for it, the trainers are told. `crashed`: its other ranks get an
  // Error saying why (a clean leave tells them nothing).
  void dropReplicaOf(Participant& p, const std::string& reason, bool crashed);
  void onLeave(Participant& p);
  void checkHeartbeats(Clock::time_point now);
  // Drops the replicas the version in flight waited on past the replica bound (`stalled`, from
  // the sequencer) and those whose ranks did not confirm a Ready within it (the delivery gate).
  void dropStalled(const std::vector<int32_t>& stalled, Clock::time_point now);
  // A trainer applied a joining (or, after a trainer restart, joined) replica's plan extension.
  Status onExtensionDone(const Participant& p, const std::vector<uint8_t>& payload);

  // ---- replicas joining the running job (coordinator/replica_joins.h; glue in coordinator.cc) --
  ReplicaJoinsOptions joinOptions() const;
  ReplicaJoinsJob joinJob();

  // ---- trainer restart (coordinator/trainer_restart.h; the glue in coordinator.cc) ----
  TrainerRestartOptions restartOptions() const;
  TrainerRestartJob restartJob();
  // The trainers were lost (`cause`): the restart begins (the trainers still connected are told
  // to stop), the version in flight ends (its replicas give their slots back), joins are aborted.
  void beginTrainerRestart(const Status& cause);
  bool canRestartTrainers() const { return restart_.canBegin(phase_ == Phase::kRunning); }

  static CoordinatorOptions withDefaults(CoordinatorOptions options) {
    if (!options.metrics) options.metrics = std::make_shared<CoordinatorMetrics>();
    if (options.job.delta) options.job.checksums = true;  // delta versions are always verified
    return options;
  }

  CoordinatorOptions opt_;
  std::unique_ptr<FrameServer> server_;
  ServerWire wire_{opt_.log};  // over server_ once started
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
  ParticipantTable participants_;
  // Drops, leaves, heartbeats and the liveness bounds.
  JobMembership membership_{
      {opt_.timeout, opt_.job, opt_.mpi_world_size > 0}, participants_, wire_, *opt_.metrics};
  // The fixed ranks' Hellos, their role ranks and Welcome.
  JobAdmission admission_{{{opt_.mpi_world_size, opt_.first_participant_world_rank,
                            opt_.num_trainers, opt_.num_rollouts},
                           opt_.job,
                           static_cast<int32_t>(membership_.heartbeatInterval().count())},
                          participants_,
                          wire_};
  // The sequencer (from planning on), the delivery gate, delta bases.
  RunningVersions versions_{opt_.job,
                            *opt_.metrics,
                            participants_,
                            wire_,
                            [this] {
                              if (!joins_.empty()) joins_.onDelivered();
                            },
                            [] { return Clock::now(); }};
  CoordinatorBlockScaling block_scaling_{participants_, wire_};
  // The plan at commit; keeps the trainers' registrations for joining replicas.
  JobPlanning planning_{{opt_.mpi_world_size, opt_.job}, participants_, wire_, block_scaling_};
  std::optional<uint64_t> trainers_finished_;  // the version the trainers finished at (all Bye)
  TrainerRestart restart_{restartOptions(), participants_, wire_, restartJob()};
  // Replicas joining the running job. Declared last: destroyed first, waiting for its planner
  // threads, which read planning_'s trainer registrations and post to the queue.
  ReplicaJoins joins_{joinOptions(), participants_, wire_, joinJob()};
};

}  // namespace wsync
