// The config of a rank of an in-process job: ranks on threads joining a coordinator started
// through the C++ API with WSYNC_BOOTSTRAP_EXPLICIT (the unit tests' explicit, membership,
// trainer restart and metrics jobs).
#pragma once

#include <string>

#include "wsync/wsync.h"

namespace wsync_test {

// A rank of a job of `trainers` trainers and `rollouts` rollout ranks whose coordinator listens at
// `address` with `secret` (both must outlive the config); replica -1 for trainers. 20 s timeout.
inline wsync_config_t explicitConfig(const std::string& address, const char* secret,
                                     wsync_role_t role, int rank, int replica, int trainers,
                                     int rollouts) {
  wsync_config_t cfg = WSYNC_CONFIG_INITIALIZER;
  cfg.role = role;
  cfg.bootstrap = WSYNC_BOOTSTRAP_EXPLICIT;
  cfg.rank = rank;
  cfg.num_trainers = trainers;
  cfg.num_rollouts = rollouts;
  cfg.replica = replica;
  cfg.coordinator_address = address.c_str();
  cfg.secret = secret;
  cfg.timeout_ms = 20000;
  return cfg;
}

}  // namespace wsync_test
