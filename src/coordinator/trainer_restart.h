// Trainer restart (CoordinatorOptions::trainer_restart; coordinator/coordinator.h): the running
// job outlives its trainers. A component of the coordinator's event loop: it owns the restart's
// state (the kept plan, the joined replicas' plan extensions, the restart under way), acts on the
// trainers' participants (coordinator/participants.h) and sends through a CoordinatorWire; what
// it needs of the rest of the job comes through TrainerRestartJob. No sockets and no clock (every
// timed event carries `now`); not thread-safe: the event thread owns it.
//
//   running --(a trainer lost: closed without goodbye, or an error)--> restarting:
//     begin(): every trainer still connected gets an Error naming the lost one and is dropped.
//     The caller also aborts the version in flight (replicas not ready give its slot back:
//     Go(v, -1)), forgets published versions not started, stops Delivered and aborts joins under
//     way. Rollouts stay connected and keep serving their newest ready version.
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
//   restart_timeout fails the job (TIMEOUT naming the missing ranks).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "coordinator/coordinator_wire.h"
#include "coordinator/participants.h"
#include "layout/registration.h"
#include "options/options.h"
#include "plan/plan.h"
#include "protocol/protocol.h"

namespace wsync {

struct TrainerRestartOptions {
  // Whether the job may restart its trainers (CoordinatorOptions::trainer_restart, explicit
  // bootstrap only); false: nothing is kept and canBegin() is false.
  bool enabled = false;
  std::chrono::milliseconds restart_timeout{600000};  // the new trainers must commit within it
  std::chrono::milliseconds timeout{60000};  // the joined replicas' extensions applied within it
  JobSettings job;                           // Welcome's settings; the trainers' delta landing
  int32_t heartbeat_interval_ms = 0;         // Welcome's
};

// What a restart asks of the running job (the coordinator: its sequencer, block scaling and
// version events; a test: lambdas). Called only during the event that needs them.
struct TrainerRestartJob {
  std::function<bool(int32_t replica)> has_replica;          // it takes part in versions
  std::function<bool(int32_t rollout)> rollout_in_versions;  // its replica does
  std::function<uint64_t()> last_started_version;
  // A new trainer's registration as planning saw its predecessor's (quantized sources added).
  std::function<Status(Registration&)> as_planned;
  // Trainer t's PlanAssignment completed with what the plan does not hold (block scaling).
  std::function<void(int32_t trainer, PlanAssignmentMsg&)> complete_assignment;
  // A Publish held while the extensions were applied, due now; an error the caller handles
  // (the trainers restart again).
  std::function<void(int32_t trainer, const std::vector<uint8_t>& payload)> publish;
  // Drop `rank`'s replica from the job (its ranks get an Error saying `reason`).
  std::function<void(Participant& rank, const std::string& reason)> drop_replica;
};

// A trainer restart under way (TrainerRestart::active()).
struct TrainerRestartState {
  std::string cause;                      // why the trainers were lost
  CoordinatorClock::time_point deadline;  // the new trainers must have committed by then
  std::vector<int32_t> members;           // participants index by trainer rank; -1: not back
  bool assigned = false;                  // every member registered and got its PlanAssignment
  // After CommitOk: the joined replicas' plan extensions not applied yet, by (trainer rank,
  // replica); Publishes are held (trainer rank, payload) until every one is.
  bool extending = false;
  std::set<std::pair<int32_t, int32_t>> extensions_due;
  std::vector<std::pair<int32_t, std::vector<uint8_t>>> held_publishes;
};

class TrainerRestart {
 public:
  TrainerRestart(TrainerRestartOptions options, ParticipantTable& participants,
                 CoordinatorWire& wire, TrainerRestartJob job);

  // ---- what a restart will need, kept while the job runs (when enabled) ----
  // The job's plan and the trainers' registrations as planning saw them (`trainers` must stay
  // valid while this does).
  void keepPlan(Plan plan, const std::vector<Registration>* trainers);
  // Trainer `trainer`'s encoded PlanExtensionMsg for joined replica `replica`.
  void keepExtension(int32_t replica, int32_t trainer, std::vector<uint8_t> encoded);

  // Whether losing a trainer of the running job now starts a restart rather than failing it.
  bool canBegin(bool job_running) const;
  bool active() const { return state_.has_value(); }  // a restart is under way
  // The new trainers are applying the joined replicas' extensions (ExtensionDone goes here).
  bool extending() const { return state_ && state_->extending; }
  const std::string& cause() const { return state_->cause; }  // while active()

  // ---- events ----
  // The trainers were lost (`cause`): every trainer still in the job gets an Error and is dropped.
  void begin(const Status& cause, CoordinatorClock::time_point now);
  // A trainer's Hello while active(): admitted as its rank's new trainer, or refused.
  void onHello(ConnectionId conn, const HelloMsg& hello);
  void onTrainerClosed();  // a previous trainer's connection closing may let Welcome go out
  Status onRegister(Participant& p, const std::vector<uint8_t>& payload);
  Status onCommitDone(Participant& p, CoordinatorClock::time_point now);
  // While extending(): holds a trainer's Publish (true) until every extension was applied.
  bool holdPublish(const Participant& p, const std::vector<uint8_t>& payload);
  Status onExtensionDone(const Participant& p, int32_t replica);
  // Time passed: replicas whose extension is overdue are dropped; TIMEOUT (the caller fails the
  // job) when the new trainers did not commit within restart_timeout.
  Status tick(CoordinatorClock::time_point now);

 private:
  void maybeWelcome();
  void sendAssignments();
  void maybeFinish();

  TrainerRestartOptions options_;
  ParticipantTable& participants_;
  CoordinatorWire& wire_;
  TrainerRestartJob job_;
  std::optional<Plan> plan_;
  const std::vector<Registration>* trainer_registrations_ = nullptr;
  std::map<int32_t, std::vector<std::vector<uint8_t>>> extensions_;  // by replica, trainer rank
  std::optional<TrainerRestartState> state_;
};

}  // namespace wsync
