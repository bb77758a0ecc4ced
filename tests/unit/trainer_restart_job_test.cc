// Trainer restart in one process: a coordinator started through the C++ API (trainer_restart on or
// off) and ranks on threads joining with WSYNC_BOOTSTRAP_EXPLICIT (real control connections, real
// UCX writes). A trainer whose connection drops (wsync_context_abort) is "lost"; a new trainer
// context with the same registration takes its place. (A trainer process killed with -9:
// tests/fault/run_fault.sh restart.)
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/coordinator.h"
#include "models/demo_policy.h"
#include "support/explicit_job.h"
#include "wsync/wsync.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr char kSecret[] = "trainer-restart-test-secret";

// A coordinator of 1 trainer (and 1 rollout unless said) whose log lines a test can read.
struct Job {
  std::unique_ptr<wsync::Coordinator> coordinator;
  std::string address;
  std::mutex log_mu;
  std::vector<std::string> log;

  bool logged(const std::string& text) {
    std::lock_guard lock(log_mu);
    return std::any_of(log.begin(), log.end(), [&](const std::string& line) {
      return line.find(text) != std::string::npos;
    });
  }
  bool waitLogged(const std::string& text) {
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    while (!logged(text) && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return logged(text);
  }
};

void start(Job& job, bool trainer_restart, std::chrono::milliseconds restart_timeout,
           int rollouts = 1) {
  wsync::CoordinatorOptions opt;
  opt.num_trainers = 1;
  opt.num_rollouts = rollouts;
  opt.control.secret = kSecret;
  opt.timeout = std::chrono::milliseconds(20000);
  opt.trainer_restart = trainer_restart;
  opt.trainer_restart_timeout = restart_timeout;
  opt.log = [&job](const std::string& line) {
    std::lock_guard lock(job.log_mu);
    job.log.push_back(line);
  };
  auto c = wsync::Coordinator::start(std::move(opt));
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  job.address = "127.0.0.1:" + std::to_string((*c)->port());
  job.coordinator = std::move(c).value();
}

wsync_demo::PolicyShape smallPolicy(int hidden = 64) {
  wsync_demo::PolicyShape shape;
  shape.layers = 1;
  shape.hidden = hidden;
  shape.ffn = 2 * hidden;
  shape.vocab = 4 * hidden;
  return shape;
}

wsync_config_t config(const Job& job, wsync_role_t role, int rank, int replica, int rollouts = 1) {
  return wsync_test::explicitConfig(job.address, kSecret, role, rank, replica, 1, rollouts);
}

// The trainer: publishes versions; lose() drops its connection without goodbye (as a crash does).
class Trainer {
 public:
  // `hidden`: the policy's hidden size (another one registers other shapes).
  explicit Trainer(const Job& job, int rollouts = 1, int hidden = 64)
      : tensors_(wsync_demo::policyTensors(smallPolicy(hidden))) {
    wsync_config_t cfg = config(job, WSYNC_ROLE_TRAINER, 0, -1, rollouts);
    EXPECT_EQ(wsync_context_create(&cfg, &ctx_), WSYNC_SUCCESS) << wsync_last_error(nullptr);
    layout_ = wsync_demo::trainerLayout(tensors_, 1, 0);
    params_.resize(layout_.size());
    std::vector<void*> data;
    for (size_t b = 0; b < layout_.size(); ++b) {
      params_[b].resize(static_cast<size_t>(std::max<int64_t>(1, layout_[b].num_elements)));
      data.push_back(params_[b].data());
    }
    std::vector<int> indices;
    EXPECT_EQ(
        wsync_demo::registerBuffers(ctx_, tensors_, layout_, WSYNC_DTYPE_FLOAT32, data, &indices),
        WSYNC_SUCCESS);
    commit_status_ = wsync_commit(ctx_);
    commit_error_ = wsync_last_error(ctx_);
  }
  wsync_status_t commitStatus() const { return commit_status_; }
  const std::string& commitError() const { return commit_error_; }
  ~Trainer() {
    if (ctx_ == nullptr) return;
    const wsync_status_t destroyed = wsync_context_destroy(ctx_);
    if (commit_status_ == WSYNC_SUCCESS && !refused_)
      EXPECT_EQ(destroyed, WSYNC_SUCCESS) << wsync_last_error(nullptr);
  }
  bool refused_ = false;  // the coordinator refused it: destroy reports that
  // Publishes v; its request's status and error.
  wsync_status_t tryPublish(uint64_t v, std::string* error) {
    for (size_t b = 0; b < layout_.size(); ++b)
      wsync_demo::fillTrainerBuffer(tensors_, layout_[b], v, params_[b].data());
    wsync_request_t req = nullptr;
    wsync_status_t s = wsync_publish(ctx_, v, &req);
    if (s == WSYNC_SUCCESS) s = wsync_request_wait(req, -1);
    *error = s == WSYNC_SUCCESS ? "" : wsync_last_error(ctx_);
    wsync_request_free(req);
    return s;
  }
  // The replicas version v is ready on.
  std::vector<int> publish(uint64_t v) {
    EXPECT_EQ(commit_status_, WSYNC_SUCCESS) << commit_error_;
    for (size_t b = 0; b < layout_.size(); ++b)
      wsync_demo::fillTrainerBuffer(tensors_, layout_[b], v, params_[b].data());
    wsync_request_t req = nullptr;
    EXPECT_EQ(wsync_publish(ctx_, v, &req), WSYNC_SUCCESS) << wsync_last_error(ctx_);
    EXPECT_EQ(wsync_request_wait(req, -1), WSYNC_SUCCESS) << wsync_request_error(req);
    int count = 0;
    wsync_request_replicas(req, WSYNC_REPLICAS_READY, 0, nullptr, &count);
    std::vector<int> ready(static_cast<size_t>(count));
    wsync_request_replicas(req, WSYNC_REPLICAS_READY, count, ready.data(), &count);
    wsync_request_free(req);
    return ready;
  }
  void lose() {
    wsync_context_abort(ctx_);
    (void)wsync_context_destroy(ctx_);
    ctx_ = nullptr;
  }

 private:
  std::vector<wsync_demo::TensorSpec> tensors_;
  std::vector<wsync_demo::BufferSpec> layout_;
  std::vector<std::vector<float>> params_;
  wsync_context_t ctx_ = nullptr;
  wsync_status_t commit_status_ = WSYNC_SUCCESS;
  std::string commit_error_;
};

// A one-rank rollout reading every newest version (bit-exact) until it saw `last`, or until the
// job fails (*failure gets the error).
void readVersions(wsync_config_t cfg, uint64_t last, std::atomic<uint64_t>* seen,
                  std::string* failure, bool abort_at_end) {
  const auto tensors = wsync_demo::policyTensors(smallPolicy());
  wsync_context_t ctx = nullptr;
  ASSERT_EQ(wsync_context_create(&cfg, &ctx), WSYNC_SUCCESS) << wsync_last_error(nullptr);
  const auto layout = wsync_demo::rolloutLayout(tensors, wsync_demo::RolloutLayout::kMixed, 1, 0);
  std::vector<int> indices;
  ASSERT_EQ(wsync_demo::registerBuffers(ctx, tensors, layout, WSYNC_DTYPE_BFLOAT16, {}, &indices),
            WSYNC_SUCCESS);
  ASSERT_EQ(wsync_commit(ctx), WSYNC_SUCCESS) << wsync_last_error(ctx);
  uint64_t newest = 0;
  while (newest < last) {
    const wsync_status_t s = wsync_wait_version(ctx, newest, 20000, &newest);
    if (s != WSYNC_SUCCESS) {
      if (failure != nullptr) *failure = wsync_last_error(ctx);
      ASSERT_NE(failure, nullptr) << wsync_last_error(ctx);
      break;
    }
    wsync_lease_t lease = nullptr;
    ASSERT_EQ(wsync_acquire(ctx, WSYNC_VERSION_NEWEST, &lease), WSYNC_SUCCESS);
    uint64_t v = 0;
    wsync_lease_version(lease, &v);
    for (size_t b = 0; b < layout.size(); ++b) {
      void* p = nullptr;
      ASSERT_EQ(wsync_lease_buffer(lease, indices[b], &p), WSYNC_SUCCESS);
      std::string error;
      EXPECT_EQ(wsync_demo::countMismatches(tensors, layout[b], WSYNC_DTYPE_BFLOAT16, p, v, &error),
                0)
          << "version " << v << ": " << error;
    }
    wsync_lease_release(lease);
    *seen = v;
  }
  if (abort_at_end) wsync_context_abort(ctx);  // its connection drops: the job drops its replica
  (void)wsync_context_destroy(ctx);
}

void waitSeen(const std::atomic<uint64_t>& seen, uint64_t v) {
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (seen < v && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_GE(seen.load(), v);
}

// A replica that joined the running job is not part of the plan: the restarted trainer gets its
// plan extension again and writes it from its first version on.
TEST(TrainerRestart, JoinedReplicaReceivesFromTheRestartedTrainer) {
  Job job;
  start(job, true, std::chrono::milliseconds(20000));
  constexpr uint64_t kLost = 8, kLast = 20;
  std::atomic<uint64_t> seen0{0}, seen1{0};
  std::thread first(readVersions, config(job, WSYNC_ROLE_ROLLOUT, 0, 0), kLast, &seen0, nullptr,
                    false);
  wsync_config_t joining = config(job, WSYNC_ROLE_ROLLOUT, -1, 1);
  joining.replica_size = 1;
  joining.replica_rank = 0;
  std::thread joiner;
  {
    Trainer lost(job);
    for (uint64_t v = 1; v <= kLost; ++v) {
      if (v == 3) joiner = std::thread(readVersions, joining, kLast, &seen1, nullptr, false);
      if (v == 4) ASSERT_TRUE(job.waitLogged("replica 1 joined"));
      const std::vector<int> ready = lost.publish(v);
      if (v > 5) waitSeen(seen1, 1);
    }
    waitSeen(seen1, kLost);
    waitSeen(seen0, kLost);  // a reader slowed by a loaded machine has read the last one too
    lost.lose();
  }
  ASSERT_TRUE(job.waitLogged("trainers lost"));
  EXPECT_EQ(seen0.load(), kLost) << "no version while the trainers are down";
  {
    Trainer restarted(job);
    std::vector<int> ready;
    for (uint64_t v = kLost + 1; v <= kLast; ++v) {
      ready = restarted.publish(v);
      EXPECT_EQ(ready, (std::vector<int>{0, 1})) << "version " << v;
    }
    EXPECT_TRUE(job.logged("trainers restarted"));
  }
  first.join();
  joiner.join();
  EXPECT_EQ(seen0.load(), kLast);
  EXPECT_EQ(seen1.load(), kLast);
  EXPECT_TRUE(job.coordinator->wait(std::chrono::seconds(20)).isOk());
}

// A replica dropped before the trainers were lost is left out of the restarted trainer's plan (it
// does not connect to it or write to it); the replica still running receives every version.
TEST(TrainerRestart, DroppedReplicaIsLeftOutOfTheRestartedTrainersPlan) {
  Job job;
  start(job, true, std::chrono::milliseconds(20000), 2);
  constexpr uint64_t kDropAt = 2, kLost = 4, kLast = 10;
  std::atomic<uint64_t> seen0{0}, seen1{0};
  std::thread stayer(readVersions, config(job, WSYNC_ROLE_ROLLOUT, 0, 0, 2), kLast, &seen0, nullptr,
                     false);
  std::thread dropped(readVersions, config(job, WSYNC_ROLE_ROLLOUT, 1, 1, 2), kDropAt, &seen1,
                      nullptr, true);
  {
    Trainer lost(job, 2);
    for (uint64_t v = 1; v <= kLost; ++v) {
      lost.publish(v);
      if (v == kDropAt) ASSERT_TRUE(job.waitLogged("replica 1 (rollout ranks 1) dropped"));
    }
    lost.lose();
  }
  dropped.join();
  ASSERT_TRUE(job.waitLogged("trainers lost"));
  {
    Trainer restarted(job, 2);
    for (uint64_t v = kLost + 1; v <= kLast; ++v)
      EXPECT_EQ(restarted.publish(v), std::vector<int>{0}) << "version " << v;
  }
  stayer.join();
  EXPECT_EQ(seen0.load(), kLast);
  EXPECT_TRUE(job.coordinator->wait(std::chrono::seconds(20)).isOk());
}

// Restarted trainers are refused, and the rollouts keep their version, when they register other
// shapes (MISMATCH at commit, naming the rank and the tensor) or publish a version not above the
// last one started (INVALID_USAGE naming both); a good one then continues.
TEST(TrainerRestart, ChangedRegistrationAndRepeatedVersionAreRefused) {
  Job job;
  start(job, true, std::chrono::milliseconds(20000));
  constexpr uint64_t kLost = 3, kLast = 6;
  std::atomic<uint64_t> seen{0};
  std::thread rollout(readVersions, config(job, WSYNC_ROLE_ROLLOUT, 0, 0), kLast, &seen, nullptr,
                      false);
  {
    Trainer lost(job);
    for (uint64_t v = 1; v <= kLost; ++v)
      lost.publish(v);
    lost.lose();
  }
  ASSERT_TRUE(job.waitLogged("trainers lost"));
  {
    Trainer other(job, 1, 32);
    other.refused_ = true;
    EXPECT_EQ(other.commitStatus(), WSYNC_ERR_MISMATCH) << other.commitError();
    EXPECT_NE(other.commitError().find("trainer 0 registered differently"), std::string::npos)
        << other.commitError();
    EXPECT_NE(other.commitError().find("tensor 'model.embed_tokens.weight'"), std::string::npos)
        << other.commitError();
  }
  {
    Trainer repeating(job);
    repeating.refused_ = true;
    std::string error;
    EXPECT_EQ(repeating.tryPublish(kLost, &error), WSYNC_ERR_INVALID_USAGE) << error;
    EXPECT_NE(error.find("published version 3, not above version 3"), std::string::npos) << error;
  }
  EXPECT_EQ(seen.load(), kLost);
  {
    Trainer restarted(job);
    for (uint64_t v = kLost + 1; v <= kLast; ++v)
      EXPECT_EQ(restarted.publish(v), std::vector<int>{0});
  }
  rollout.join();
  EXPECT_EQ(seen.load(), kLast);
  EXPECT_TRUE(job.coordinator->wait(std::chrono::seconds(20)).isOk());
}

// A job whose one trainer publishes version 1 and is then lost: the job's final status, and the
// error its rollout saw.
wsync::Status loseTheOnlyTrainer(bool trainer_restart, std::chrono::milliseconds restart_timeout,
                                 std::string* rollout_error) {
  Job job;
  start(job, trainer_restart, restart_timeout);
  std::atomic<uint64_t> seen{0};
  std::thread rollout(readVersions, config(job, WSYNC_ROLE_ROLLOUT, 0, 0), 100, &seen,
                      rollout_error, false);
  {
    Trainer trainer(job);
    trainer.publish(1);
    waitSeen(seen, 1);
    trainer.lose();
  }
  rollout.join();
  return job.coordinator->wait(std::chrono::seconds(20));
}

// Without trainer_restart, losing the trainer fails the job with an error naming it, on the
// rollouts too.
TEST(TrainerRestart, WithoutItLosingATrainerFailsTheJobNamingIt) {
  std::string rollout_error;
  const wsync::Status s =
      loseTheOnlyTrainer(false, std::chrono::milliseconds(20000), &rollout_error);
  EXPECT_EQ(s.code(), WSYNC_ERR_REMOTE) << s.toString();
  EXPECT_NE(s.message().find("trainer 0"), std::string::npos) << s.toString();
  EXPECT_NE(rollout_error.find("trainer 0"), std::string::npos) << rollout_error;
}

// Trainers that do not come back within trainer_restart_timeout fail the job: TIMEOUT naming them.
TEST(TrainerRestart, TrainersNotBackInTimeFailTheJobNamingThem) {
  std::string rollout_error;
  const wsync::Status s = loseTheOnlyTrainer(true, std::chrono::milliseconds(300), &rollout_error);
  EXPECT_EQ(s.code(), WSYNC_ERR_TIMEOUT) << s.toString();
  EXPECT_NE(s.message().find("trainer 0 never came back"), std::string::npos) << s.toString();
  EXPECT_NE(rollout_error.find("trainer 0 never came back"), std::string::npos) << rollout_error;
}

}  // namespace
