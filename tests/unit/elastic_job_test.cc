// Fully elastic jobs (issue 20): no fixed rollout rank at all (num_rollouts 0), every engine
// joins at run time. A coordinator started through the C++ API (or the built wsync-coordinator
// with --rollouts 0) and ranks on threads with WSYNC_BOOTSTRAP_EXPLICIT (real control
// connections, real UCX writes): the trainers commit and publish with nobody listening (each
// publish completes at once, ready on no replica), the first replica to join gets its first
// version from the trainers, a later one is cold-filled from a peer, replicas leave, crash and
// rejoin, and the trainers never wait for them.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "coordinator/coordinator.h"
#include "coordinator/metrics.h"
#include "models/demo_policy.h"
#include "support/explicit_job.h"
#include "wsync/wsync.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr char kSecret[] = "elastic-job-test-secret";

// An elastic job's coordinator (one trainer, no fixed rollout rank) whose log lines a test reads.
struct ElasticJob {
  std::unique_ptr<wsync::Coordinator> coordinator;
  std::string address;
  std::shared_ptr<wsync::CoordinatorMetrics> metrics =
      std::make_shared<wsync::CoordinatorMetrics>();
  std::mutex log_mu;
  std::vector<std::string> log;

  explicit ElasticJob(int trainers = 1) {
    wsync::CoordinatorOptions opt;
    opt.num_trainers = trainers;
    opt.num_rollouts = 0;
    opt.control.secret = kSecret;
    opt.timeout = std::chrono::milliseconds(20000);
    opt.max_staleness = 0;  // every replica in the job takes every version (no skips)
    opt.metrics = metrics;
    opt.log = [this](const std::string& line) {
      std::lock_guard lock(log_mu);
      log.push_back(line);
    };
    auto started = wsync::Coordinator::start(std::move(opt));
    EXPECT_TRUE(started.isOk()) << started.status().toString();
    if (!started.isOk()) return;
    coordinator = std::move(started).value();
    address = "127.0.0.1:" + std::to_string(coordinator->port());
  }
  ~ElasticJob() {
    if (coordinator) coordinator->stop();  // its threads log into the members below until then
  }
  // How many log lines contain `text`.
  int logged(const std::string& text) {
    std::lock_guard lock(log_mu);
    return static_cast<int>(std::count_if(log.begin(), log.end(), [&](const std::string& line) {
      return line.find(text) != std::string::npos;
    }));
  }
  // Waits (at most 20 s) until `times` log lines contain `text`.
  bool waitLogged(const std::string& text, int times = 1) {
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    while (logged(text) < times && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return logged(text) >= times;
  }
};

wsync_demo::PolicyShape smallPolicy() {
  wsync_demo::PolicyShape shape;
  shape.layers = 1;
  shape.hidden = 64;
  shape.ffn = 128;
  shape.vocab = 256;
  return shape;
}

std::vector<int> replicas(wsync_request_t req, wsync_replicas_kind_t kind) {
  int count = 0;
  EXPECT_EQ(wsync_request_replicas(req, kind, 0, nullptr, &count), WSYNC_SUCCESS);
  std::vector<int> ids(static_cast<size_t>(count));
  EXPECT_EQ(wsync_request_replicas(req, kind, count, ids.data(), &count), WSYNC_SUCCESS);
  return ids;
}

// A replica of one rank joining the running job (replica_size 1) as replica `id`: reads every
// version from its first one until `last`, each bit for bit, recording the newest one read in
// `seen`; then leaves cleanly (kDestroy) or drops its connection (kAbort: a crash).
enum class End { kDestroy, kAbort };
struct Replica {
  Replica(const std::string& address, int id, uint64_t last_version, End end)
      : id(id), last(last_version) {
    thread = std::thread([this, address, end] { run(address, end); });
  }
  ~Replica() {
    if (thread.joinable()) thread.join();
  }
  void join() { thread.join(); }

  const int id;
  std::atomic<uint64_t> last;  // may be lowered while it reads
  std::atomic<uint64_t> seen{0};
  std::atomic<bool> has_first{false}, done{false};
  wsync_version_stats_t first = WSYNC_VERSION_STATS_INITIALIZER;  // set before has_first
  std::thread thread;

 private:
  void run(const std::string& address, End end) {
    wsync_config_t cfg =
        wsync_test::explicitConfig(address, kSecret, WSYNC_ROLE_ROLLOUT, -1, id, 0, 0);
    cfg.replica_size = 1;
    cfg.replica_rank = 0;
    const auto tensors = wsync_demo::policyTensors(smallPolicy());
    wsync_context_t ctx = nullptr;
    ASSERT_EQ(wsync_context_create(&cfg, &ctx), WSYNC_SUCCESS) << wsync_last_error(nullptr);
    const auto layout = wsync_demo::rolloutLayout(tensors, wsync_demo::RolloutLayout::kMixed, 1, 0);
    std::vector<int> indices;
    ASSERT_EQ(wsync_demo::registerBuffers(ctx, tensors, layout, WSYNC_DTYPE_BFLOAT16, {}, &indices),
              WSYNC_SUCCESS);
    ASSERT_EQ(wsync_commit(ctx), WSYNC_SUCCESS) << wsync_last_error(ctx);
    uint64_t newest = 0;
    ASSERT_EQ(wsync_wait_version(ctx, 0, 20000, &newest), WSYNC_SUCCESS) << wsync_last_error(ctx);
    ASSERT_EQ(wsync_version_stats(ctx, &first), WSYNC_SUCCESS);
    has_first = true;
    for (uint64_t v = first.version; v <= last.load(); ++v) {
      while (newest < v) {
        ASSERT_EQ(wsync_wait_version(ctx, newest, 20000, &newest), WSYNC_SUCCESS)
            << wsync_last_error(ctx);
      }
      wsync_lease_t lease = nullptr;
      ASSERT_EQ(wsync_acquire(ctx, v, &lease), WSYNC_SUCCESS)
          << "replica " << id << ", version " << v << ": " << wsync_last_error(ctx);
      for (size_t b = 0; b < layout.size(); ++b) {
        void* p = nullptr;
        ASSERT_EQ(wsync_lease_buffer(lease, indices[b], &p), WSYNC_SUCCESS);
        std::string error;
        EXPECT_EQ(
            wsync_demo::countMismatches(tensors, layout[b], WSYNC_DTYPE_BFLOAT16, p, v, &error), 0)
            << "replica " << id << ", version " << v << ": " << error;
      }
      wsync_lease_release(lease);
      seen = v;
    }
    if (end == End::kAbort) wsync_context_abort(ctx);
    const wsync_status_t destroyed = wsync_context_destroy(ctx);
    if (end == End::kDestroy) EXPECT_EQ(destroyed, WSYNC_SUCCESS) << wsync_last_error(nullptr);
    done = true;
  }
};

void waitFor(const std::atomic<bool>& flag) {
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (!flag && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(flag.load());
}

// The single trainer of these jobs (a job of no fixed rollout rank: num_rollouts 0).
class Trainer {
 public:
  explicit Trainer(const std::string& address)
      : tensors_(wsync_demo::policyTensors(smallPolicy())) {
    wsync_config_t cfg =
        wsync_test::explicitConfig(address, kSecret, WSYNC_ROLE_TRAINER, 0, -1, 1, 0);
    created_ = wsync_context_create(&cfg, &ctx_) == WSYNC_SUCCESS;
    EXPECT_TRUE(created_) << wsync_last_error(nullptr);
  }
  ~Trainer() { EXPECT_EQ(wsync_context_destroy(ctx_), WSYNC_SUCCESS) << wsync_last_error(nullptr); }

  bool commit() {
    if (!created_) return false;
    layout_ = wsync_demo::trainerLayout(tensors_, 1, 0);
    params_.resize(layout_.size());
    std::vector<void*> data;
    for (size_t b = 0; b < layout_.size(); ++b) {
      params_[b].resize(static_cast<size_t>(std::max<int64_t>(1, layout_[b].num_elements)));
      data.push_back(params_[b].data());
    }
    std::vector<int> indices;
    const bool ok = wsync_demo::registerBuffers(ctx_, tensors_, layout_, WSYNC_DTYPE_FLOAT32, data,
                                                &indices) == WSYNC_SUCCESS &&
                    wsync_commit(ctx_) == WSYNC_SUCCESS;
    EXPECT_TRUE(ok) << wsync_last_error(ctx_);
    return ok;
  }

  struct Outcome {
    double ms = 0;
    std::vector<int> ready, lost;
  };
  // Publishes version v and waits for it; then, in lockstep, waits until each replica it was
  // ready on (of `readers`, by replica id) read it, so that no slot is overwritten unread.
  Outcome publish(uint64_t v, const std::vector<Replica*>& readers = {}) {
    for (size_t b = 0; b < layout_.size(); ++b)
      wsync_demo::fillTrainerBuffer(tensors_, layout_[b], v, params_[b].data());
    Outcome o;
    const auto t0 = Clock::now();
    wsync_request_t req = nullptr;
    EXPECT_EQ(wsync_publish(ctx_, v, &req), WSYNC_SUCCESS) << wsync_last_error(ctx_);
    EXPECT_EQ(wsync_request_wait(req, -1), WSYNC_SUCCESS) << wsync_request_error(req);
    o.ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    o.ready = replicas(req, WSYNC_REPLICAS_READY);
    o.lost = replicas(req, WSYNC_REPLICAS_LOST);
    wsync_request_free(req);
    for (Replica* r : readers) {
      if (std::find(o.ready.begin(), o.ready.end(), r->id) == o.ready.end()) continue;
      const auto deadline = Clock::now() + std::chrono::seconds(20);
      while (r->seen < v && !r->done && Clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      EXPECT_GE(r->seen.load(), v) << "replica " << r->id << " did not read version " << v;
    }
    return o;
  }

 private:
  std::vector<wsync_demo::TensorSpec> tensors_;
  std::vector<wsync_demo::BufferSpec> layout_;
  std::vector<std::vector<float>> params_;
  wsync_context_t ctx_ = nullptr;
  bool created_ = false;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// (1) Trainers with no rollout rank at all commit and publish: every version completes at once,
// delivered to no replica, and the job ends well when they say goodbye.
TEST(ElasticJob, TrainersPublishWithNobodyListening) {
  ElasticJob job;
  ASSERT_TRUE(job.coordinator);
  {
    Trainer trainer(job.address);
    ASSERT_TRUE(trainer.commit());
    std::vector<double> times;
    for (uint64_t v = 1; v <= 10; ++v) {
      const Trainer::Outcome o = trainer.publish(v);
      EXPECT_TRUE(o.ready.empty()) << "version " << v;
      EXPECT_TRUE(o.lost.empty()) << "version " << v;
      times.push_back(o.ms);
    }
    EXPECT_LT(median(times), 100.0) << "a publish with no replica waits for something";
  }
  EXPECT_TRUE(job.coordinator->wait(std::chrono::seconds(20)).isOk());
  EXPECT_TRUE(job.logged("(1 trainers, 0 rollouts)"));
  // The metrics count the versions, delivered to nobody.
  const wsync::MetricsSnapshot snap = job.metrics->snapshot();
  EXPECT_EQ(snap.versions_delivered, 10u);
  EXPECT_EQ(snap.newest_delivered, 10u);
  EXPECT_EQ(snap.bytes, 0u);
  EXPECT_EQ(snap.lost + snap.skipped + snap.dropped, 0u);
  EXPECT_TRUE(snap.replicas.empty());
  EXPECT_NE(wsync::prometheusText(snap).find("wsync_versions_delivered_total 10\n"),
            std::string::npos)
      << wsync::prometheusText(snap);
  EXPECT_FALSE(wsync::summaryLine(snap).empty());
}

// (2)-(4) Replica 1 joins after version 3: nobody holds a version, so its first one is the
// trainer's next (4), and it reads every later version bit for bit. Replica 2 joins while the
// trainer pauses after version 6: it is cold-filled from replica 1 with version 6. Replica 1
// leaves after version 9 and the job goes on with replica 2 alone.
TEST(ElasticJob, EnginesJoinAfterTheTrainersThenLeave) {
  constexpr uint64_t kFirstJoin = 3, kSecondJoin = 6, kLeave = 9, kLast = 12;
  ElasticJob job;
  ASSERT_TRUE(job.coordinator);
  {
    Trainer trainer(job.address);
    ASSERT_TRUE(trainer.commit());
    for (uint64_t v = 1; v <= kFirstJoin; ++v)
      EXPECT_TRUE(trainer.publish(v).ready.empty()) << "version " << v;

    Replica one(job.address, 1, kLeave, End::kDestroy);
    ASSERT_TRUE(job.waitLogged("replica 1 joined"));
    EXPECT_TRUE(job.logged("replica 1: no cold start (no running replica holds a version yet)"));
    for (uint64_t v = kFirstJoin + 1; v <= kSecondJoin; ++v)
      EXPECT_EQ(trainer.publish(v, {&one}).ready, std::vector<int>{1}) << "version " << v;
    waitFor(one.has_first);
    EXPECT_EQ(one.first.first_version, kFirstJoin + 1);
    EXPECT_EQ(one.first.first_version_from_peer, 0) << "no peer held a version";

    Replica two(job.address, 2, kLast, End::kDestroy);
    waitFor(two.has_first);
    ASSERT_TRUE(job.waitLogged("replica 2 joined"));
    EXPECT_EQ(two.first.first_version, kSecondJoin);
    EXPECT_EQ(two.first.first_version_from_peer, 1);
    EXPECT_TRUE(job.logged("replica 2 cold-started from replica 1 with version 6"));
    for (uint64_t v = kSecondJoin + 1; v <= kLeave; ++v)
      EXPECT_EQ(trainer.publish(v, {&one, &two}).ready, (std::vector<int>{1, 2}))
          << "version " << v;

    one.join();  // it read kLeave and destroyed its context (a clean leave)
    EXPECT_TRUE(one.done.load());
    for (uint64_t v = kLeave + 1; v <= kLast; ++v) {
      const Trainer::Outcome o = trainer.publish(v, {&two});
      EXPECT_EQ(o.ready, std::vector<int>{2}) << "version " << v;
      EXPECT_TRUE(o.lost.empty()) << "version " << v;
    }
    two.join();
    EXPECT_EQ(two.seen.load(), kLast);
  }
  EXPECT_TRUE(job.coordinator->wait(std::chrono::seconds(20)).isOk());
}

// A replica that crashes leaves the job empty again: the trainer's versions complete at once
// for nobody, and the engine restarted with the same replica id rejoins; no peer holds a
// version, so its first one comes from the trainer.
TEST(ElasticJob, CrashedReplicaRejoinsAnEmptyJob) {
  ElasticJob job;
  ASSERT_TRUE(job.coordinator);
  {
    Trainer trainer(job.address);
    ASSERT_TRUE(trainer.commit());
    EXPECT_TRUE(trainer.publish(1).ready.empty());
    {
      Replica crashing(job.address, 7, 4, End::kAbort);
      ASSERT_TRUE(job.waitLogged("replica 7 joined"));
      for (uint64_t v = 2; v <= 4; ++v)
        EXPECT_EQ(trainer.publish(v, {&crashing}).ready, std::vector<int>{7}) << "version " << v;
      crashing.join();
      ASSERT_TRUE(job.waitLogged("replica 7 (rollout ranks 0) dropped"));
    }
    int lost = 0;
    for (uint64_t v = 5; v <= 7; ++v) {
      const Trainer::Outcome o = trainer.publish(v);
      EXPECT_TRUE(o.ready.empty()) << "version " << v;
      lost += static_cast<int>(o.lost.size());
    }
    EXPECT_EQ(lost, 0) << "the replica was dropped between versions";

    Replica again(job.address, 7, 10, End::kDestroy);
    ASSERT_TRUE(job.waitLogged("replica 7 joined", 2));
    for (uint64_t v = 8; v <= 10; ++v)
      EXPECT_EQ(trainer.publish(v, {&again}).ready, std::vector<int>{7}) << "version " << v;
    again.join();
    EXPECT_EQ(again.first.first_version, 8u);
    EXPECT_EQ(again.first.first_version_from_peer, 0);
    EXPECT_EQ(again.seen.load(), 10u);
  }
  EXPECT_TRUE(job.coordinator->wait(std::chrono::seconds(20)).isOk());
}

// The built wsync-coordinator: --rollouts 0 starts an elastic job (a trainer and a joining
// replica run against it; it exits 0 once both said goodbye); negative counts are refused.
struct Process {
  FILE* out = nullptr;
  std::string first_line;
};

Process startProgram(const std::string& args) {
  Process p;
  const std::string command = std::string(WSYNC_COORDINATOR_PROGRAM) + " " + args + " 2>&1";
  p.out = popen(command.c_str(), "r");
  char line[512];
  if (p.out != nullptr && std::fgets(line, sizeof line, p.out) != nullptr) p.first_line = line;
  return p;
}

int finishProgram(Process& p, std::string* rest = nullptr) {
  char line[512];
  while (std::fgets(line, sizeof line, p.out) != nullptr) {
    if (rest != nullptr) *rest += line;
  }
  const int status = pclose(p.out);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(ElasticJob, CoordinatorProgramRunsAJobOfNoFixedRollouts) {
  Process coordinator = startProgram(std::string("--trainers 1 --rollouts 0 --quiet --secret ") +
                                     kSecret + " --timeout-ms 20000 --max-staleness 0");
  ASSERT_NE(coordinator.out, nullptr);
  const std::string prefix = "wsync-coordinator listening on port ";
  ASSERT_EQ(coordinator.first_line.rfind(prefix, 0), 0u) << coordinator.first_line;
  const std::string address =
      "127.0.0.1:" + std::to_string(std::stoi(coordinator.first_line.substr(prefix.size())));
  {
    Trainer trainer(address);
    ASSERT_TRUE(trainer.commit());
    EXPECT_TRUE(trainer.publish(1).ready.empty());
    // Its first version comes from the trainer (no peer): publish until it has one (the log is
    // quiet: the join's end is not seen here), then 3 more, which it reads.
    Replica replica(address, 0, UINT64_MAX, End::kDestroy);
    uint64_t v = 2;
    for (; !replica.has_first && v < 20000; ++v) {
      trainer.publish(v, {&replica});
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_TRUE(replica.has_first.load());
    replica.last = replica.first.version + 3;
    for (; v <= replica.first.version + 3; ++v)
      EXPECT_EQ(trainer.publish(v, {&replica}).ready, std::vector<int>{0}) << "version " << v;
    replica.join();
    EXPECT_EQ(replica.first.first_version_from_peer, 0);
    EXPECT_EQ(replica.seen.load(), replica.first.version + 3);
  }
  std::string rest;
  EXPECT_EQ(finishProgram(coordinator, &rest), 0) << rest;
}

// Negative counts, no trainer, and a forgotten --rollouts (0 must be asked for) are refused.
TEST(ElasticJob, CoordinatorProgramRefusesBadCounts) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--trainers 1 --rollouts -1", "--trainers must be positive and --rollouts >= 0"},
      {"--trainers 0 --rollouts 0", "--trainers must be positive and --rollouts >= 0"},
      {"--trainers 1", "--rollouts is required"}};
  for (const auto& [counts, error] : cases) {
    Process p = startProgram(counts + " --secret s");
    ASSERT_NE(p.out, nullptr);
    std::string rest;
    EXPECT_EQ(finishProgram(p, &rest), 2) << counts;
    EXPECT_NE((p.first_line + rest).find(error), std::string::npos) << p.first_line << rest;
  }
}

// The C++ API refuses the same counts, naming them.
TEST(ElasticJob, CoordinatorOptionsRefuseBadCounts) {
  for (const auto& [trainers, rollouts] : {std::pair{1, -1}, std::pair{0, 0}}) {
    wsync::CoordinatorOptions opt;
    opt.num_trainers = trainers;
    opt.num_rollouts = rollouts;
    opt.control.secret = kSecret;
    auto started = wsync::Coordinator::start(std::move(opt));
    ASSERT_FALSE(started.isOk());
    EXPECT_EQ(started.status().code(), WSYNC_ERR_INVALID_ARGUMENT);
    EXPECT_NE(started.status().message().find("num_rollouts >= 0"), std::string::npos)
        << started.status().toString();
  }
}

// A rollout with a fixed rank cannot take part in a job of none: it is told to join instead.
TEST(ElasticJob, FixedRolloutIsToldToJoin) {
  ElasticJob job;
  ASSERT_TRUE(job.coordinator);
  wsync_config_t cfg =
      wsync_test::explicitConfig(job.address, kSecret, WSYNC_ROLE_ROLLOUT, 0, 0, 1, 1);
  cfg.timeout_ms = 5000;
  wsync_context_t ctx = nullptr;
  EXPECT_NE(wsync_context_create(&cfg, &ctx), WSYNC_SUCCESS);
  const std::string error = wsync_last_error(nullptr);
  EXPECT_NE(error.find("no fixed rollout rank"), std::string::npos) << error;
  EXPECT_NE(error.find("replica_size > 0"), std::string::npos) << error;
  // One that says the job has no fixed rollout rank is told so before it connects.
  cfg.num_rollouts = 0;
  EXPECT_EQ(wsync_context_create(&cfg, &ctx), WSYNC_ERR_INVALID_ARGUMENT);
  const std::string local = wsync_last_error(nullptr);
  EXPECT_NE(local.find("num_rollouts is 0"), std::string::npos) << local;
  EXPECT_NE(local.find("replica_size > 0"), std::string::npos) << local;
  job.coordinator->stop();
}

}  // namespace
