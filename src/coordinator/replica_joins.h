// Replicas joining the running job (coordinator/coordinator.h; docs/membership.md), from their
// ranks' first Hello until the replica enters the version sequencer. A component of the
// coordinator's event loop: it owns the joins under way, their planner threads and their peer
// cold starts (a ColdStartTracker, coordinator/cold_start.h), acts on the joining ranks'
// participants (coordinator/participants.h) and sends through a CoordinatorWire; what it needs of
// the rest of the job, and the time, come through ReplicaJoinsJob. No sockets. Runs on the
// coordinator's event thread, except the planner threads, which read only their arguments and
// hand their result back through ReplicaJoinsJob::post.
//
// A join: every rank of the replica said Hello -> Welcome (the next rollout ranks of the job) ->
// every rank registered -> its plan, computed on a planner thread -> PlanExtension to each trainer
// and PlanAssignment to its ranks -> every rank committed -> CommitOk (its ranks run and send
// heartbeats) and its peer cold start (filled from a running replica), while the trainers apply
// the extension (ExtensionDone) -> catch-ups (cold starts again while a newer version than the one
// it got exists, bounded by kMaxCatchUps while the trainers run) -> it enters the sequencer
// holding its cold start's version (or none: its first version comes from the trainers). A join
// not complete within the timeout of its first Hello, a rank that fails or closes, or a rank
// that says Leave aborts it (the job goes on without the replica).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "coordinator/cold_start.h"
#include "coordinator/coordinator_wire.h"
#include "coordinator/participants.h"
#include "coordinator/version_sequencer.h"
#include "layout/registration.h"
#include "options/options.h"
#include "protocol/protocol.h"

namespace wsync {

struct JoinerPlan;  // coordinator/join_plan.h

struct ReplicaJoinsOptions {
  std::chrono::milliseconds timeout{60000};  // a join completes within it of its first Hello
  JobSettings job;                           // Welcome's settings; the trainers' delta landing
  int32_t heartbeat_interval_ms = 0;         // Welcome's
  bool mpi_job = false;  // MPI bootstrap (its ranks cannot join; its own ranks cannot be dropped)
  std::chrono::milliseconds debug_plan_delay{0};  // CoordinatorOptions::debug_join_plan_delay
};

// What the joins ask of the running job (the coordinator: its phase, sequencer, registrations and
// event queue; a test: lambdas). Called on the event thread, except `post`.
struct ReplicaJoinsJob {
  std::function<bool()> running;                     // the job committed and runs
  std::function<bool()> ended;                       // the job finished or failed
  std::function<bool(int32_t replica)> has_replica;  // in the sequencer
  std::function<uint64_t(int32_t replica)> ready_version;
  std::function<uint64_t()> in_flight_version;            // 0: none
  std::function<Status(const ReplicaSpec&)> add_replica;  // the join completes: into the sequencer
  // The version the trainers finished at (every trainer said Bye); none while they run.
  std::function<std::optional<uint64_t>()> trainers_finished;
  // The trainers' registrations as the job's planning saw them (valid once the job runs, and not
  // changed after: planner threads read them).
  std::function<const std::vector<Registration>*()> trainer_registrations;
  // A rollout rank's registration, checked and as planning sees it (block-scaled tensors renamed).
  std::function<Result<Registration>(const Participant&)> registration;
  // UNSUPPORTED when a joining rank's block scalings are not schemes planned at commit.
  std::function<Status(const Participant&)> check_scalings;
  // Trainer `trainer` got `encoded` (PlanExtensionMsg) for `replica` (kept for a trainer restart).
  std::function<void(int32_t replica, int32_t trainer, const std::vector<uint8_t>& encoded)>
      extension_sent;
  // Drops a running replica (a cold start source that stalled); its ranks get an Error.
  std::function<void(Participant& rank, const std::string& reason)> drop_replica;
  // Runs `task` on the event thread later (thread-safe: planner threads call it).
  std::function<void(std::function<void()> task)> post;
  std::function<CoordinatorClock::time_point()> now;
};

class ReplicaJoins {
 public:
  // A joined replica is filled again (a catch-up) at most this often while the trainers run.
  static constexpr int kMaxCatchUps = 2;

  ReplicaJoins(ReplicaJoinsOptions options, ParticipantTable& participants, CoordinatorWire& wire,
               ReplicaJoinsJob job);
  ~ReplicaJoins();  // waits for planner threads (stopPlanners)
  // Waits for the planner threads; their results are dropped (post may be a no-op by then).
  void stopPlanners();

  bool empty() const { return joins_.empty(); }
  bool joining(int32_t replica) const { return joins_.count(replica) != 0; }
  // Its ranks were sent CommitOk (they run and heartbeat); false when not joining.
  bool committedOk(int32_t replica) const;
  // A rank of a replica in its peer cold start (its Prepared, Readied and SlotBusy go here).
  bool inColdStart(const Participant& p) const;

  // ---- events ----
  // A rank's Hello with HelloMsg::replica_size > 0: admitted into its replica's join, or refused.
  void onHello(ConnectionId conn, const HelloMsg& hello);
  void welcomeWaiting();  // the job runs now: replicas whose every rank said Hello are welcomed
  Status onRegister(Participant& p, const std::vector<uint8_t>& payload);
  Status onCommitDone(Participant& p);
  Status onExtensionDone(const Participant& p, int32_t replica);
  // Prepared / Readied from a rank in its cold start (a bad one aborts that join only).
  Status onColdStartMessage(Participant& p, MessageType type, const std::vector<uint8_t>& payload);
  Status onColdFillDone(const Participant& p, const std::vector<uint8_t>& payload);
  void onSourceLost(int32_t replica);  // a running replica was dropped
  void onDelivered();                  // a version was delivered: joins that waited for it go on
  void onTrainersFinished();           // joins that waited for the trainers' ExtensionDone go on
  // Ends a join that cannot complete: its ranks are dropped and get `status` (unless
  // `left_cleanly`: a rank of it said Leave, which Left answers); trainers that may have applied
  // its extension are told to forget it (ReplicaDropped).
  void abort(int32_t replica, const Status& status, bool left_cleanly = false);
  void abortAll(const std::function<Status(int32_t replica)>& status);
  // Time passed: joins past the timeout are aborted naming why; stalled cold start sources are
  // dropped.
  void tick(CoordinatorClock::time_point now);

 private:
  struct Join {
    int32_t id = -1;
    int32_t size = 0;
    CoordinatorClock::time_point started;
    std::vector<int32_t> members;  // participants index by replica rank; -1: not arrived
    std::vector<int32_t> ranks;    // rollout ranks once welcomed
    bool welcomed = false;
    bool extended = false;  // the trainers got its PlanExtension
    std::set<int32_t> trainers_done;
    int32_t num_slots = 0;
    double plan_ms = 0;
    size_t write_ops = 0;
    // Its plan's result applies only while this token is the one it was started with (an
    // aborted join's plan is dropped).
    uint64_t plan_token = 0;
    std::vector<Registration> registrations;  // of its ranks, by replica rank (for its cold start)
    bool committed_ok = false;                // CommitOk sent: its ranks run (and send heartbeats)
    bool cold_done = false;                   // the cold start ended (or none was possible)
    uint64_t ready_version = 0;               // what it ended with (0 / -1: no version)
    int32_t ready_slot = -1;
    // Catch-ups done, and whether the last one found nothing newer to fill (no more are tried).
    int catch_ups = 0;
    bool catch_up_stuck = false;
  };

  Status checkHello(const HelloMsg& hello) const;
  bool replicaInUse(int32_t replica) const;
  void welcome(Join& g);
  void plan(Join& g);
  void finishPlan(int32_t replica, uint64_t token, const Status& status,
                  const std::shared_ptr<const JoinerPlan>& plan);
  void maybeComplete(int32_t replica);
  // Whether the joiner, its cold start over, is filled again from a newer version first (a peer
  // holds one, or one is in flight: `wait` is set, and a delivery resumes it).
  bool needsCatchUp(const Join& g, bool* wait) const;
  void complete(Join& g);
  void sendTrainersDone(int32_t replica, uint64_t version);
  // Peer cold start: the running replicas as the tracker's sources, its start and its output.
  ColdStartSources coldStartSources() const;
  void startColdStart(Join& g);
  void applyColdStart(const ColdStartOutput& out);

  ReplicaJoinsOptions options_;
  ParticipantTable& participants_;
  CoordinatorWire& wire_;
  ReplicaJoinsJob job_;
  std::map<int32_t, Join> joins_;  // by replica id
  ColdStartTracker cold_starts_;
  uint64_t last_plan_token_ = 0;
  // Planner threads; finished ones are reaped when the next starts, the rest waited for by
  // stopPlanners(). Declared last: destroyed (waited for) first.
  std::vector<std::future<void>> planners_;
};

}  // namespace wsync
