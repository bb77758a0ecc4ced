// wsync_config_t's growth rule (wsync.h), checked through libwsync.so: a caller compiled against
// the first header (0.1.0, fields through cuda_device) keeps working, fields past its `size` are
// never read, and the data-plane fields are validated by name. No context gets created (every
// config fails before MPI is touched), so no MPI job is needed.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <string>

#include "wsync/wsync.h"

namespace {

// The first public layout, as a program compiled against wsync 0.1.0 lays it out.
struct ConfigV1 {
  size_t size;
  uint32_t magic;
  uint32_t version;
  wsync_role_t role;
  wsync_bootstrap_t bootstrap;
  int replica;
  int num_slots;
  int timeout_ms;
  int max_staleness;
  int snapshot;
  int rank;
  int num_trainers;
  int num_rollouts;
  const char* coordinator_address;
  const char* secret;
  int cuda_device;
};

// Fields of the first layout never move (the rule: append only).
#define WSYNC_SAME_OFFSET(field) \
  static_assert(offsetof(ConfigV1, field) == offsetof(wsync_config_t, field), #field " moved")
WSYNC_SAME_OFFSET(size);
WSYNC_SAME_OFFSET(magic);
WSYNC_SAME_OFFSET(version);
WSYNC_SAME_OFFSET(role);
WSYNC_SAME_OFFSET(bootstrap);
WSYNC_SAME_OFFSET(replica);
WSYNC_SAME_OFFSET(num_slots);
WSYNC_SAME_OFFSET(timeout_ms);
WSYNC_SAME_OFFSET(max_staleness);
WSYNC_SAME_OFFSET(snapshot);
WSYNC_SAME_OFFSET(rank);
WSYNC_SAME_OFFSET(num_trainers);
WSYNC_SAME_OFFSET(num_rollouts);
WSYNC_SAME_OFFSET(coordinator_address);
WSYNC_SAME_OFFSET(secret);
WSYNC_SAME_OFFSET(cuda_device);
#undef WSYNC_SAME_OFFSET
static_assert(sizeof(ConfigV1) <= sizeof(wsync_config_t));
static_assert(offsetof(wsync_config_t, device_transport) >= offsetof(ConfigV1, cuda_device) + 4,
              "appended fields come after the first layout");

// Creates a context from `config` and returns the create error (the config must be refused).
std::string refusal(const void* config, wsync_status_t want = WSYNC_ERR_INVALID_ARGUMENT) {
  wsync_context_t ctx = nullptr;
  const wsync_status_t s = wsync_context_create(static_cast<const wsync_config_t*>(config), &ctx);
  EXPECT_EQ(s, want) << wsync_status_string(s) << ": " << wsync_last_error(nullptr);
  EXPECT_EQ(ctx, nullptr);
  if (ctx != nullptr) wsync_context_destroy(ctx);
  return wsync_last_error(nullptr);
}

// A rollout config without a replica: valid up to Context::create, which refuses it (before MPI).
wsync_config_t rolloutWithoutReplica() {
  wsync_config_t cfg = WSYNC_CONFIG_INITIALIZER;
  cfg.role = WSYNC_ROLE_ROLLOUT;
  return cfg;
}

// Stores an arbitrary int in a C enum field, as a C caller can.
template <typename Enum>
void setRaw(Enum& field, int32_t value) {
  static_assert(sizeof(Enum) == sizeof(int32_t));
  std::memcpy(&field, &value, sizeof value);
}

TEST(CapiConfig, InitializerFillsEveryField) {
  const wsync_config_t cfg = WSYNC_CONFIG_INITIALIZER;
  EXPECT_EQ(cfg.size, sizeof(wsync_config_t));
  EXPECT_EQ(cfg.magic, WSYNC_CONFIG_MAGIC);
  EXPECT_EQ(cfg.version, WSYNC_API_VERSION);
  EXPECT_EQ(cfg.replica, -1);
  EXPECT_EQ(cfg.num_slots, 2);
  EXPECT_EQ(cfg.timeout_ms, 60000);
  EXPECT_EQ(cfg.cuda_device, -1);
  EXPECT_EQ(cfg.device_transport, WSYNC_DEVICE_TRANSPORT_DEFAULT);
  EXPECT_EQ(cfg.cuda_ipc_export, WSYNC_CUDA_IPC_EXPORT_DEFAULT);
}

TEST(CapiConfig, FirstLayoutIsAcceptedAndItsTailNeverRead) {
  // An old caller's config whose tail padding, and the bytes after it, are invalid as any appended
  // field (where the current layout has device_transport, the first one had padding).
  struct {
    ConfigV1 config;
    unsigned char after[64];
  } old;
  std::memset(&old, 0xab, sizeof old);
  ConfigV1& c = old.config;
  c.size = sizeof(ConfigV1);
  c.magic = WSYNC_CONFIG_MAGIC;
  c.version = 1;
  c.role = WSYNC_ROLE_ROLLOUT;
  c.bootstrap = WSYNC_BOOTSTRAP_MPI;
  c.replica = -1;  // refused by Context::create, after the layout checks
  c.num_slots = 2;
  c.timeout_ms = 60000;
  c.max_staleness = -1;
  c.snapshot = 0;
  c.rank = -1;
  c.num_trainers = c.num_rollouts = 0;
  c.coordinator_address = c.secret = nullptr;
  c.cuda_device = -1;
  const std::string error = refusal(&c);
  EXPECT_NE(error.find("replica"), std::string::npos) << error;
  // The same bytes declared as the current layout: the tail is read now, and refused by name.
  c.size = sizeof(wsync_config_t);
  EXPECT_NE(refusal(&c).find("config.device_transport"), std::string::npos);
}

TEST(CapiConfig, SizeOutsideTheKnownLayoutsIsNamed) {
  wsync_config_t cfg = rolloutWithoutReplica();
  for (const size_t size :
       {offsetof(wsync_config_t, cuda_device), sizeof(ConfigV1) + 4, sizeof(wsync_config_t) - 4}) {
    cfg.size = size;  // between layouts
    EXPECT_NE(refusal(&cfg).find("config.size is " + std::to_string(size)), std::string::npos);
  }
  struct {
    wsync_config_t config;
    int newer_field;
  } newer{rolloutWithoutReplica(), 0};
  newer.config.size = sizeof newer;  // from a header newer than this library
  EXPECT_NE(refusal(&newer).find("config.size"), std::string::npos);
}

TEST(CapiConfig, MagicAndVersionAreNamed) {
  wsync_config_t cfg = rolloutWithoutReplica();
  cfg.magic = 0;
  EXPECT_NE(refusal(&cfg).find("config.magic"), std::string::npos);
  cfg = rolloutWithoutReplica();
  cfg.version = WSYNC_API_VERSION + 1;
  EXPECT_NE(refusal(&cfg).find("config.version"), std::string::npos);
}

TEST(CapiConfig, EnumsOutOfRangeAreNamed) {
  for (const int32_t bad : {4, -1, 0x7fffffff}) {
    wsync_config_t cfg = rolloutWithoutReplica();
    setRaw(cfg.device_transport, bad);
    const std::string error = refusal(&cfg);
    EXPECT_NE(error.find("config.device_transport is " + std::to_string(bad)), std::string::npos)
        << error;
  }
  for (const int32_t bad : {3, -7}) {
    wsync_config_t cfg = rolloutWithoutReplica();
    setRaw(cfg.cuda_ipc_export, bad);
    const std::string error = refusal(&cfg);
    EXPECT_NE(error.find("config.cuda_ipc_export is " + std::to_string(bad)), std::string::npos)
        << error;
  }
  wsync_config_t cfg = rolloutWithoutReplica();
  setRaw(cfg.role, 2);
  EXPECT_NE(refusal(&cfg).find("config.role"), std::string::npos);
  cfg = rolloutWithoutReplica();
  setRaw(cfg.bootstrap, -1);
  EXPECT_NE(refusal(&cfg).find("config.bootstrap"), std::string::npos);
}

TEST(CapiConfig, EveryDataPlaneChoiceIsAccepted) {
  for (const wsync_device_transport_t t :
       {WSYNC_DEVICE_TRANSPORT_DEFAULT, WSYNC_DEVICE_TRANSPORT_CUDA_IPC,
        WSYNC_DEVICE_TRANSPORT_STAGED, WSYNC_DEVICE_TRANSPORT_UCX_CUDA}) {
    for (const wsync_cuda_ipc_export_t e :
         {WSYNC_CUDA_IPC_EXPORT_DEFAULT, WSYNC_CUDA_IPC_EXPORT_VMM, WSYNC_CUDA_IPC_EXPORT_LEGACY}) {
      wsync_config_t cfg = rolloutWithoutReplica();
      cfg.device_transport = t;
      cfg.cuda_ipc_export = e;
      const std::string error = refusal(&cfg);
      EXPECT_NE(error.find("replica"), std::string::npos) << t << "/" << e << ": " << error;
    }
  }
}

TEST(CapiConfig, ChecksumFieldsOutOfRangeAreNamed) {
  const wsync_config_t initial = WSYNC_CONFIG_INITIALIZER;
  EXPECT_EQ(initial.checksums, WSYNC_UNSET_INT);         // the option: WSYNC_CHECKSUMS, else off
  EXPECT_EQ(initial.checksum_retries, WSYNC_UNSET_INT);  // WSYNC_CHECKSUM_RETRIES, else 3
  wsync_config_t cfg = rolloutWithoutReplica();
  cfg.checksums = 2;
  EXPECT_NE(refusal(&cfg).find("config.checksums is 2"), std::string::npos);
  // 0 stays valid for both (older headers' initializer): off, and the default retries.
  cfg.checksums = 0;
  cfg.checksum_retries = 0;
  std::string valid = refusal(&cfg);
  EXPECT_NE(valid.find("replica"), std::string::npos) << valid;
  cfg.checksums = 1;
  cfg.checksum_retries = -2;
  EXPECT_NE(refusal(&cfg).find("config.checksum_retries is -2"), std::string::npos);
  cfg.checksum_retries = -1;  // valid (never re-send): the missing replica is what fails
  const std::string error = refusal(&cfg);
  EXPECT_NE(error.find("replica"), std::string::npos) << error;
}

TEST(CapiConfig, TheJoiningLayoutNeverReadsTheChecksumFields) {
  // The layout before checksums ends after replica_rank; garbage where the new fields are.
  constexpr size_t kEnd = offsetof(wsync_config_t, checksums);
  wsync_config_t cfg;
  std::memset(&cfg, 0xab, sizeof cfg);
  const wsync_config_t valid = rolloutWithoutReplica();
  std::memcpy(&cfg, &valid, kEnd);
  cfg.size =
      (kEnd + alignof(wsync_config_t) - 1) / alignof(wsync_config_t) * alignof(wsync_config_t);
  ASSERT_LT(cfg.size, sizeof(wsync_config_t)) << "the checksum fields must grow the struct";
  const std::string error = refusal(&cfg);
  EXPECT_NE(error.find("replica"), std::string::npos) << error;
}

TEST(CapiConfig, VersionIsThePackageVersion) {
  int major = -1, minor = -1, patch = -1;
  ASSERT_EQ(wsync_get_version(&major, &minor, &patch), WSYNC_SUCCESS);
  EXPECT_EQ(std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch),
            WSYNC_EXPECTED_VERSION);
  EXPECT_EQ(wsync_get_version(nullptr, nullptr, nullptr), WSYNC_SUCCESS);
}

TEST(CapiConfig, NullRequestIsRefused) {
  EXPECT_STREQ(wsync_request_error(nullptr), "");
  EXPECT_EQ(wsync_request_test(nullptr), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(wsync_request_wait(nullptr, 0), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(wsync_request_free(nullptr), WSYNC_SUCCESS);
}

}  // namespace
