// A small in-process wsync job for the defect regression tests: an explicit-bootstrap coordinator
// on a thread, one host-memory trainer and some rollout ranks, all through the public C API. Each
// rank creates, registers one float32 tensor "w" of `elements` elements (the whole tensor) and
// commits on its own thread; the statuses and last errors are kept per rank.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/coordinator.h"
#include "wsync/wsync.h"

namespace wsync_test {

inline constexpr char kJobSecret[] = "defects-job-secret";

struct JobSpec {
  int num_rollouts = 1;
  int rollouts_per_replica = 1;
  int timeout_ms = 5000;  // every rank's and the coordinator's
  int max_staleness = -1;
  int skip_grace_ms = 200;
  int64_t elements = 64;
  wsync_dtype_t rollout_dtype = WSYNC_DTYPE_FLOAT32;
};

struct Job {
  std::unique_ptr<wsync::Coordinator> coordinator;
  std::string address;
  std::vector<float> weights;
  wsync_context_t trainer = nullptr;
  std::vector<wsync_context_t> rollouts;
  // Create, register and commit: index 0 the trainer, 1 + r rollout r.
  std::vector<wsync_status_t> status;
  std::vector<std::string> error;
  std::vector<std::string> log;  // the coordinator's log lines
  std::mutex log_mu;

  bool committed() const {
    for (wsync_status_t s : status)
      if (s != WSYNC_SUCCESS) return false;
    return true;
  }
  std::string errors() const {
    std::string all;
    for (size_t i = 0; i < error.size(); ++i)
      all += "[rank " + std::to_string(i) + ": " + error[i] + "] ";
    return all;
  }
  ~Job() {
    if (trainer) wsync_context_abort(trainer);
    for (wsync_context_t r : rollouts)
      if (r) wsync_context_abort(r);
    if (trainer) wsync_context_destroy(trainer);
    for (wsync_context_t r : rollouts)
      wsync_context_destroy(r);
  }
};

inline wsync_config_t jobConfig(const Job& job, const JobSpec& spec, wsync_role_t role, int rank) {
  wsync_config_t cfg = WSYNC_CONFIG_INITIALIZER;
  cfg.role = role;
  cfg.bootstrap = WSYNC_BOOTSTRAP_EXPLICIT;
  cfg.rank = rank;
  cfg.num_trainers = 1;
  cfg.num_rollouts = spec.num_rollouts;
  cfg.replica = role == WSYNC_ROLE_ROLLOUT ? rank / spec.rollouts_per_replica : -1;
  cfg.coordinator_address = job.address.c_str();
  cfg.secret = kJobSecret;
  cfg.timeout_ms = spec.timeout_ms;
  cfg.max_staleness = spec.max_staleness;
  return cfg;
}

// Starts the coordinator and every rank; returns when all of them finished commit (or failed).
inline std::unique_ptr<Job> startJob(const JobSpec& spec) {
  auto job = std::make_unique<Job>();
  wsync::CoordinatorOptions opt;
  opt.num_trainers = 1;
  opt.num_rollouts = spec.num_rollouts;
  opt.control.secret = kJobSecret;
  opt.timeout = std::chrono::milliseconds(spec.timeout_ms);
  opt.skip_grace = std::chrono::milliseconds(spec.skip_grace_ms);
  opt.max_staleness = spec.max_staleness;
  Job* raw = job.get();
  opt.log = [raw](const std::string& line) {
    std::lock_guard lock(raw->log_mu);
    raw->log.push_back(line);
  };
  auto c = wsync::Coordinator::start(std::move(opt));
  if (!c.isOk()) return nullptr;
  job->coordinator = std::move(c).value();
  job->address = "127.0.0.1:" + std::to_string(job->coordinator->port());
  job->weights.resize(static_cast<size_t>(spec.elements));
  for (size_t i = 0; i < job->weights.size(); ++i)
    job->weights[i] = static_cast<float>(i) * 0.5f;
  const int ranks = 1 + spec.num_rollouts;
  job->status.assign(static_cast<size_t>(ranks), WSYNC_ERR_INTERNAL);
  job->error.assign(static_cast<size_t>(ranks), "");
  job->rollouts.assign(static_cast<size_t>(spec.num_rollouts), nullptr);
  auto run_rank = [&job, &spec](int index) {
    const bool trainer = index == 0;
    wsync_config_t cfg = jobConfig(*job, spec, trainer ? WSYNC_ROLE_TRAINER : WSYNC_ROLE_ROLLOUT,
                                   trainer ? 0 : index - 1);
    wsync_context_t ctx = nullptr;
    wsync_status_t s = wsync_context_create(&cfg, &ctx);
    if (s != WSYNC_SUCCESS) {
      job->status[static_cast<size_t>(index)] = s;
      job->error[static_cast<size_t>(index)] = wsync_last_error(nullptr);
      return;
    }
    (trainer ? job->trainer : job->rollouts[static_cast<size_t>(index - 1)]) = ctx;
    int64_t shape[1] = {spec.elements};
    wsync_piece_t piece = WSYNC_PIECE_INITIALIZER;
    piece.tensor = "w";
    piece.ndim = 1;
    piece.global_shape = shape;
    s = wsync_register_buffer(ctx, "w", trainer ? WSYNC_DTYPE_FLOAT32 : spec.rollout_dtype,
                              WSYNC_MEMORY_HOST, trainer ? job->weights.data() : nullptr,
                              spec.elements, 1, &piece, nullptr);
    if (s == WSYNC_SUCCESS) s = wsync_commit(ctx);
    job->status[static_cast<size_t>(index)] = s;
    if (s != WSYNC_SUCCESS) job->error[static_cast<size_t>(index)] = wsync_last_error(ctx);
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < ranks; ++i)
    threads.emplace_back(run_rank, i);
  for (std::thread& t : threads)
    t.join();
  return job;
}

// Publishes `version` and waits for it (the context's timeout).
inline wsync_status_t publishAndWait(Job& job, uint64_t version, std::string* error = nullptr) {
  wsync_request_t request = nullptr;
  wsync_status_t s = wsync_publish(job.trainer, version, &request);
  if (s == WSYNC_SUCCESS) s = wsync_request_wait(request, -1);
  if (s != WSYNC_SUCCESS && error) *error = wsync_last_error(job.trainer);
  wsync_request_free(request);
  return s;
}

}  // namespace wsync_test
