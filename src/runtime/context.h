// Context: one rank's membership in a wsync job (the object behind wsync_context_t). The base
// class owns what both roles share: the control channel to the coordinator, the registration, and
// the commit handshake. TrainerContext and RolloutContext add their data planes.
//
// Threads: the application calls the public methods (from one thread at a time, except abort(),
// which is safe from any thread, and the rollout's reader methods, which are thread-safe). After
// commit, each role runs one background thread that owns the control channel.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "layout/registration.h"
#include "options/options.h"
#include "plan/plan.h"
#include "protocol/protocol.h"
#include "runtime/bootstrap.h"
#include "transport/backend.h"

namespace wsync {

// A context's options: its identity in the job (JobIdentity: role, bootstrap, replica, timeout,
// max_staleness, joining replica's size and rank), passed to joinJob as it is, and the rest.
struct ContextOptions : JobIdentity {
  int32_t num_slots = 2;
  bool snapshot = false;
  int cuda_device = -1;  // the CUDA device of device-memory buffers; -1: host memory only
  // Explicit bootstrap with fixed membership: the job's counts (a joining replica needs none).
  int32_t num_trainers = 0;
  int32_t num_rollouts = 0;
  // Every WSYNC_ option, resolved once at creation (options/options.h: the environment over the
  // config over the defaults): this rank's data plane (device_transport, cuda_ipc_export), its
  // control plane (spin_wait_us), the debug switches, and, on the rank that hosts the coordinator
  // (MPI bootstrap, world rank 0), coordinator_host, log and the job-wide `job` settings.
  Options settings;
};

// The error a failed job reports from then on, every time: `failure` itself, except that a
// TIMEOUT (which callers read as "still running, wait again") becomes REMOTE with the same
// message (a peer or the coordinator did not answer in time, and the job is over).
Status asJobFailure(const Status& failure);

class Context {
 public:
  static Result<std::unique_ptr<Context>> create(const ContextOptions& options);
  virtual ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  Role role() const { return options_.role; }
  int32_t rank() const { return job_.welcome.role_rank; }
  int32_t numTrainers() const { return job_.welcome.num_trainers; }
  int32_t numRollouts() const { return job_.welcome.num_rollouts; }
  const ContextOptions& options() const { return options_; }
  bool committed() const { return committed_; }
  // This rank's share of the plan (valid after commit).
  struct PlanSummary {
    int64_t bytes_per_version = 0;
    int64_t broadcast_groups = 0;
    int64_t write_ops = 0;
    int32_t replicas = 0;
  };
  const PlanSummary& planSummary() const { return plan_summary_; }

  // Declares global tensor `name` (idempotent); INVALID_ARGUMENT when it was declared on this rank
  // with another shape. Returns its index for Piece::tensor.
  Result<int32_t> declareTensor(const std::string& name, const Dims& shape);

  // Adds a buffer (validated: name unique, pieces inside the buffer and their tensors). `data`:
  // the trainer's memory; must be null for rollouts. Returns the buffer's index.
  Result<int32_t> registerBuffer(LocalBuffer buffer, void* data);

  // Collective: registration -> plan -> transports -> every rank ready.
  Status commit();

  // Every blocked call returns ABORTED; safe from any thread.
  virtual void abort();
  // Tells the coordinator goodbye after in-flight work ends (bounded by the timeout).
  virtual Status finalize();

 protected:
  explicit Context(ContextOptions options) : options_(std::move(options)) {}

  // Role hooks, called by commit() in this order on the calling thread.
  // Before Register: set up memory and the transport; fill the role's part of `msg`.
  virtual Status prepareRegistration(RegisterMsg& msg) = 0;
  // After PlanAssignment: connect peers, build the per-version work.
  virtual Status applyPlan(RankPlan plan, PlanAssignmentMsg assignment) = 0;
  // After CommitOk: start the background thread (it owns the channel from now on).
  virtual Status startRunning() = 0;

  Status sendMessage(MessageType type, const std::vector<uint8_t>& payload);
  Status sendError(const Status& status);
  // Records the first fatal error of the context (later calls keep the first), as asJobFailure.
  void setFailed(const Status& status);
  Status failure() const;
  bool failedOrAborted() const { return failed_.load(); }

  ContextOptions options_;
  JobConnection job_;
  Registration registration_;
  std::vector<void*> buffer_data_;  // trainers: the caller's memory; rollouts: live memory or null
  // The memory kind of this rank's buffers (all of them share one); host when none.
  MemoryKind memoryKind() const;
  // What creating a write backend needs, from the options (writer_rank: this trainer's rank).
  TransportSetup transportSetup(int32_t writer_rank) const;
  // The broadcaster of this rank's share of the plan (null when it has no broadcast groups): the
  // backend the coordinator chose, created collectively with the other members.
  Result<std::unique_ptr<Broadcaster>> createBroadcaster(const RankPlan& plan,
                                                         const PlanAssignmentMsg& assignment) const;

 private:
  Status joinJob();
  bool committed_ = false;
  PlanSummary plan_summary_;
  bool commit_started_ = false;
  std::atomic<bool> failed_{false};
  mutable std::mutex failure_mu_;
  Status failure_;
};

}  // namespace wsync
