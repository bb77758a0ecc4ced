// Job-wide settings set explicitly on a rank (issue 19): each rank's Hello carries the job-wide
// options its environment or config set; a value other than the coordinator's fails the job on
// every rank with an error naming the option and the ranks, a joiner's is refused, and a setting a
// rank left unset (or set to the coordinator's value) is fine. In-process jobs: a coordinator on
// a thread, a trainer and a rollout through the public C API (explicit bootstrap).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/admission.h"
#include "coordinator/coordinator.h"
#include "options/options.h"
#include "wsync/wsync.h"

namespace {

constexpr char kSecret[] = "job-settings-secret";

struct Rank {
  wsync_config_t cfg = WSYNC_CONFIG_INITIALIZER;
  wsync_context_t ctx = nullptr;
  wsync_status_t status = WSYNC_ERR_INTERNAL;
  std::string error;
};

// A job of one trainer and one rollout whose coordinator checksums or not; `set` adjusts each
// rank's config before create. Returns each rank's create status and error.
std::vector<Rank> createJob(bool coordinator_checksums, void (*set)(int rank, wsync_config_t&)) {
  wsync::CoordinatorOptions opt;
  opt.num_trainers = 1;
  opt.num_rollouts = 1;
  opt.control.secret = kSecret;
  opt.timeout = std::chrono::milliseconds(5000);
  opt.job.checksums = coordinator_checksums;
  auto coordinator = wsync::Coordinator::start(std::move(opt));
  EXPECT_TRUE(coordinator.isOk()) << coordinator.status().toString();
  if (!coordinator.isOk()) return {};
  const std::string address = "127.0.0.1:" + std::to_string((*coordinator)->port());
  std::vector<Rank> ranks(2);
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    Rank& r = ranks[static_cast<size_t>(i)];
    r.cfg.role = i == 0 ? WSYNC_ROLE_TRAINER : WSYNC_ROLE_ROLLOUT;
    r.cfg.bootstrap = WSYNC_BOOTSTRAP_EXPLICIT;
    r.cfg.rank = 0;
    r.cfg.num_trainers = 1;
    r.cfg.num_rollouts = 1;
    r.cfg.replica = i == 0 ? -1 : 0;
    r.cfg.coordinator_address = address.c_str();
    r.cfg.secret = kSecret;
    r.cfg.timeout_ms = 5000;
    set(i, r.cfg);
    threads.emplace_back([&r] {
      r.status = wsync_context_create(&r.cfg, &r.ctx);
      if (r.status != WSYNC_SUCCESS) r.error = wsync_last_error(nullptr);
    });
  }
  for (std::thread& t : threads)
    t.join();
  for (Rank& r : ranks) {
    if (r.ctx) wsync_context_abort(r.ctx);
    if (r.ctx) wsync_context_destroy(r.ctx);
  }
  return ranks;
}

TEST(JobSettingsJob, AnExplicitValueOtherThanTheCoordinatorsFailsTheJobNamingOptionAndRank) {
  const std::vector<Rank> ranks = createJob(false, [](int rank, wsync_config_t& cfg) {
    if (rank == 0) cfg.checksums = 1;  // the trainer asks for checksums; the coordinator has none
  });
  ASSERT_EQ(ranks.size(), 2u);
  for (const Rank& r : ranks) {
    EXPECT_EQ(r.status, WSYNC_ERR_INVALID_ARGUMENT) << r.error;
    EXPECT_NE(r.error.find("WSYNC_CHECKSUMS is 0 on the coordinator but 1 on trainer 0"),
              std::string::npos)
        << r.error;
    EXPECT_EQ(r.error.find("rollout 0"), std::string::npos) << "the rollout left it unset";
  }
}

TEST(JobSettingsJob, EveryDifferingRankIsNamed) {
  const std::vector<Rank> ranks = createJob(true, [](int rank, wsync_config_t& cfg) {
    cfg.checksum_retries = 5;          // the coordinator's: 3
    if (rank == 1) cfg.checksums = 1;  // agrees with the coordinator
  });
  ASSERT_EQ(ranks.size(), 2u);
  for (const Rank& r : ranks) {
    EXPECT_EQ(r.status, WSYNC_ERR_INVALID_ARGUMENT) << r.error;
    EXPECT_NE(r.error.find("WSYNC_CHECKSUM_RETRIES is 3 on the coordinator but 5 on trainer 0, 5 "
                           "on rollout 0"),
              std::string::npos)
        << r.error;
    EXPECT_EQ(r.error.find("WSYNC_CHECKSUMS"), std::string::npos) << r.error;
  }
}

TEST(JobSettingsJob, UnsetOrAgreeingSettingsAreFine) {
  const std::vector<Rank> ranks = createJob(true, [](int rank, wsync_config_t& cfg) {
    if (rank == 0) cfg.checksums = 1;  // the coordinator's value; the rollout leaves it unset
  });
  ASSERT_EQ(ranks.size(), 2u);
  for (const Rank& r : ranks)
    EXPECT_EQ(r.status, WSYNC_SUCCESS) << r.error;
}

// The pieces: what a rank sends, and the coordinator's check of Hellos.
TEST(JobSettings, ExplicitSettingsTravelAsVariableAndValueAndAreCheckedAgainstTheDecidedOnes) {
  wsync::Options configured;
  configured.job.checksum_retries = 7;
  configured.from_config.set(static_cast<size_t>(wsync::OptionId::checksum_retries));
  auto environment = wsync::readOptions([](const char* name) -> const char* {
    return std::string(name) == "WSYNC_HEARTBEAT_TIMEOUT_MS" ? "2500" : nullptr;
  });
  ASSERT_TRUE(environment.isOk());
  const wsync::Options effective = wsync::resolve(configured, *environment);
  EXPECT_EQ(wsync::explicitJobSettings(effective),
            (wsync::NamedSettingValues{{"WSYNC_HEARTBEAT_TIMEOUT_MS", "2500"},
                                       {"WSYNC_CHECKSUM_RETRIES", "7"}}));
  EXPECT_TRUE(wsync::explicitJobSettings(wsync::Options{}).empty()) << "defaults are not explicit";

  wsync::HelloMsg agrees, differs, unknown;
  agrees.job_settings = {{"WSYNC_CHECKSUM_RETRIES", "3"}};
  differs.job_settings = {{"WSYNC_HEARTBEAT_TIMEOUT_MS", "2500"}};
  unknown.job_settings = {{"WSYNC_DEVICE_TRANSPORT", "staged"}};
  const wsync::JobSettings decided;
  EXPECT_TRUE(wsync::checkExplicitJobSettings(decided, {{"trainer 0", &agrees}}).isOk());
  const wsync::Status s =
      wsync::checkExplicitJobSettings(decided, {{"trainer 0", &agrees}, {"rollout 4", &differs}});
  EXPECT_EQ(s.code(), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(s.message().find("WSYNC_HEARTBEAT_TIMEOUT_MS is 10000 on the coordinator but 2500 on "
                             "rollout 4"),
            std::string::npos)
      << s.message();
  const wsync::Status bad = wsync::checkExplicitJobSettings(decided, {{"rollout 1", &unknown}});
  EXPECT_EQ(bad.code(), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(bad.message().find("'WSYNC_DEVICE_TRANSPORT' is not a job-wide option"),
            std::string::npos)
      << bad.message();
}

}  // namespace
