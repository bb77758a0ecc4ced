// config.checksums / config.checksum_retries through libwsync.so alone: values out of range are
// refused naming the field, and a caller of the previous layout (the same struct without them)
// keeps working with garbage where they now are (its size says they are not there).
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <string>

#include "wsync/wsync.h"

namespace {

std::string refusal(const wsync_config_t& cfg) {
  wsync_context_t ctx = nullptr;
  const wsync_status_t s = wsync_context_create(&cfg, &ctx);
  EXPECT_EQ(s, WSYNC_ERR_INVALID_ARGUMENT) << wsync_status_string(s);
  EXPECT_EQ(ctx, nullptr);
  if (ctx != nullptr) wsync_context_destroy(ctx);
  return wsync_last_error(nullptr);
}

// A rollout without a replica: Context::create refuses it (before any MPI or socket).
wsync_config_t rolloutWithoutReplica() {
  wsync_config_t cfg = WSYNC_CONFIG_INITIALIZER;
  cfg.role = WSYNC_ROLE_ROLLOUT;
  return cfg;
}

TEST(ChecksumConfig, InitializerTurnsChecksumsOffWithDefaultRetries) {
  const wsync_config_t cfg = WSYNC_CONFIG_INITIALIZER;
  EXPECT_EQ(cfg.checksums, 0);
  EXPECT_EQ(cfg.checksum_retries, 0);  // 0: the default (3)
}

TEST(ChecksumConfig, ValuesOutOfRangeAreRefusedNamingTheField) {
  wsync_config_t cfg = rolloutWithoutReplica();
  cfg.checksums = 2;
  EXPECT_NE(refusal(cfg).find("config.checksums is 2"), std::string::npos);
  cfg.checksums = 1;
  cfg.checksum_retries = -2;
  EXPECT_NE(refusal(cfg).find("config.checksum_retries is -2"), std::string::npos);
  cfg.checksum_retries = -1;  // valid: never re-send; the missing replica is what fails
  EXPECT_EQ(refusal(cfg).find("checksum"), std::string::npos);
}

TEST(ChecksumConfig, ThePreviousLayoutNeverReadsTheNewFields) {
  constexpr size_t kPrevious = offsetof(wsync_config_t, checksums);  // ends after replica_rank
  wsync_config_t cfg;
  std::memset(&cfg, 0xab, sizeof cfg);  // garbage where checksums and checksum_retries are
  const wsync_config_t valid = rolloutWithoutReplica();
  std::memcpy(&cfg, &valid, kPrevious);
  cfg.size =
      (kPrevious + alignof(wsync_config_t) - 1) / alignof(wsync_config_t) * alignof(wsync_config_t);
  ASSERT_LT(cfg.size, sizeof(wsync_config_t)) << "the new fields must grow the struct";
  const std::string error = refusal(cfg);
  EXPECT_EQ(error.find("checksum"), std::string::npos) << error;
  EXPECT_EQ(error.find("config.size"), std::string::npos) << error;
}

}  // namespace
