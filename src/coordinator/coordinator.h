// The coordinator: one per job. Admits ranks (authenticated control connections), gathers their
// registrations, computes the plan once, hands each rank its part, then sequences versions:
// picks the slot each replica writes into, says when every replica may start, and marks a version
// ready on a replica only when all of its data landed (see protocol/protocol.h for the
// messages; the per-version state machine is coordinator/version_sequencer.h).
//
// Membership: trainers are fixed (losing one fails the job, unless trainer_restart: then the
// trainers may come back, coordinator/trainer_restart.h), and so are the ranks of an MPI-
// bootstrap job (their replicas may receive by broadcast). Any other rollout rank of the job
// whose connection closes without goodbye, or that stays silent past heartbeat_timeout, is
// dropped with its replica: the in-flight version completes for the other replicas, the replica's
// other ranks get an Error, the trainers are told (ReplicaDropped) and Delivered lists the replica
// as lost. A rollout that leaves (Leave, at finalize) takes its replica out at once, so later
// versions do not wait for it. A replica joining the running job (Hello with replica_size > 0) is
// planned alone against the trainers; once its ranks committed it is filled with the newest ready
// version from a running replica (peer cold start: ColdStartTracker, cold_start.h), and it takes
// part from the next version after that and after every trainer applied its plan extension.
//
// Threading: start() spawns one event thread; every state change happens on it. The control
// server's thread only enqueues events. wait() and stop() may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "control/frame_channel.h"  // ControlOptions
#include "options/options.h"        // JobSettings

namespace wsync {

class CoordinatorMetrics;  // coordinator/metrics.h

struct CoordinatorOptions {
  std::string bind_host = "127.0.0.1";
  uint16_t port = 0;  // 0: an ephemeral port (see Coordinator::port())
  ControlOptions control;
  // Who must join. MPI bootstrap: `mpi_world_size` > 0 and every rank says its world rank in Hello
  // (world ranks [first_participant_world_rank, mpi_world_size) join). Explicit bootstrap:
  // num_trainers (> 0) and num_rollouts (>= 0; 0: an elastic job, no fixed rollout rank: the
  // trainers commit alone, their versions complete at once until a replica joined; start() refuses
  // other counts).
  int mpi_world_size = 0;
  int first_participant_world_rank = 0;
  int num_trainers = 0;
  int num_rollouts = 0;
  // Bound on joining, registering and committing, and on every version's progress.
  std::chrono::milliseconds timeout{60000};
  // A replica that has not drained its target slot this long after a version starts is skipped
  // for that version, unless that would make it lag more than max_staleness versions.
  std::chrono::milliseconds skip_grace{200};
  int max_staleness = -1;  // -1: unbounded
  // The job-wide settings (options/options.h), decided here for the whole job:
  // - job.heartbeat_timeout_ms: a rollout rank of the running job that sends nothing (rollouts
  //   heartbeat every quarter of this) for this long is dropped like one whose connection closed;
  //   0: heartbeats are not watched. A replica whose ranks hold up a version (no Received after
  //   Go, no Verify answer, no Readied after Ready: answers a running rank gives at once) for this
  //   long, at most timeout / 2, is dropped too: a stopped replica never holds a version up to
  //   `timeout`;
  // - job.checksums: versions are checksummed (docs/checksums.md): trainers send checksums,
  //   rollouts verify before a version becomes ready; a replica whose check fails gets the version
  //   again, at most job.checksum_retries times (>= 0), then skips it.
  // Unlike the option's default (10000), heartbeats are not watched unless set: tests and
  // embedders that build a CoordinatorOptions by hand opt in.
  JobSettings job = JobSettings{.heartbeat_timeout_ms = 0};
  // Trainer restart (explicit bootstrap, plans without broadcast groups; coordinator.h's header
  // comment): losing a trainer of the running job does not fail it. The version in flight is
  // aborted, the other trainers get an Error and are dropped, rollouts keep serving their newest
  // ready version, and the same number of trainers may register again (identical registrations)
  // within trainer_restart_timeout, then publish versions above the last started one. false:
  // losing a trainer fails the job.
  bool trainer_restart = false;
  std::chrono::milliseconds trainer_restart_timeout{600000};
  // Tests only: a joining replica's planner thread waits this long before it plans (shows that
  // versions keep being sequenced while a replica is planned).
  std::chrono::milliseconds debug_join_plan_delay{0};
  // Progress lines, and refused control connections (rate-limited): called from the event thread
  // and the control server's thread, so it must be thread-safe. May be empty.
  std::function<void(const std::string&)> log;
  // Fed with every version's outcome (readers: metrics->snapshot()); null: a private one.
  std::shared_ptr<CoordinatorMetrics> metrics;
};

class Coordinator {
 public:
  static Result<std::unique_ptr<Coordinator>> start(CoordinatorOptions options);
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  uint16_t port() const;
  // Blocks until every rank said goodbye (SUCCESS), the job failed (its error), or `timeout`.
  Status wait(std::chrono::milliseconds timeout);
  void stop();

  class Impl;

 private:
  explicit Coordinator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace wsync
