#include "capi_config.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>

namespace wsync::capi {
namespace {

// The int a C enum field holds, read without loading it as the C++ enum type (a value outside the
// enumerators' range would be undefined behavior there).
template <typename Enum>
int32_t rawEnum(const Enum& field) {
  static_assert(sizeof(Enum) == sizeof(int32_t), "wsync's C enums are 32-bit");
  int32_t raw = 0;
  std::memcpy(&raw, &field, sizeof raw);
  return raw;
}

Status notAnEnum(const char* field, const char* type, int32_t value, int32_t last) {
  return invalidArgument(std::string("config.") + field + " is " + std::to_string(value) +
                         ": not a " + type + " (0.." + std::to_string(last) + ")");
}

// config.device_transport into `configured` (left at its default when DEFAULT).
Status applyDeviceTransport(int32_t value, Options& configured) {
  switch (value) {
    case WSYNC_DEVICE_TRANSPORT_DEFAULT:
      return Status::ok();
    case WSYNC_DEVICE_TRANSPORT_CUDA_IPC:
      configured.device_transport = DeviceTransport::kCudaIpc;
      return Status::ok();
    case WSYNC_DEVICE_TRANSPORT_STAGED:
      configured.device_transport = DeviceTransport::kStaged;
      return Status::ok();
    case WSYNC_DEVICE_TRANSPORT_UCX_CUDA:
      configured.device_transport = DeviceTransport::kUcxCuda;
      return Status::ok();
    default:
      return notAnEnum("device_transport", "wsync_device_transport_t", value,
                       WSYNC_DEVICE_TRANSPORT_UCX_CUDA);
  }
}

// config.cuda_ipc_export into `configured` (left at its default when DEFAULT).
Status applyCudaIpcExport(int32_t value, Options& configured) {
  switch (value) {
    case WSYNC_CUDA_IPC_EXPORT_DEFAULT:
      return Status::ok();
    case WSYNC_CUDA_IPC_EXPORT_VMM:
      configured.cuda_ipc_export = CudaIpcExport::kVmm;
      return Status::ok();
    case WSYNC_CUDA_IPC_EXPORT_LEGACY:
      configured.cuda_ipc_export = CudaIpcExport::kLegacy;
      return Status::ok();
    default:
      return notAnEnum("cuda_ipc_export", "wsync_cuda_ipc_export_t", value,
                       WSYNC_CUDA_IPC_EXPORT_LEGACY);
  }
}

// config.checksums and config.checksum_retries into `configured.job`. WSYNC_UNSET_INT leaves the
// option's default; checksum_retries 0 does too (wsync.h before the sentinel documented 0 as "the
// default: 3", and callers built against it still send 0).
Status applyChecksums(const wsync_config_t& c, Options& configured) {
  if (c.checksums != WSYNC_UNSET_INT) {
    if (c.checksums != 0 && c.checksums != 1) {
      return invalidArgument("config.checksums is " + std::to_string(c.checksums) +
                             ": not 0, 1 or WSYNC_UNSET_INT");
    }
    configured.job.checksums = c.checksums == 1;
    configured.from_config.set(static_cast<size_t>(OptionId::checksums));
  }
  if (c.checksum_retries == WSYNC_UNSET_INT || c.checksum_retries == 0) return Status::ok();
  if (c.checksum_retries < -1) {
    return invalidArgument("config.checksum_retries is " + std::to_string(c.checksum_retries) +
                           ": -1 (never), a count, or WSYNC_UNSET_INT or 0 (default: 3)");
  }
  configured.job.checksum_retries = std::max(0, c.checksum_retries);
  configured.from_config.set(static_cast<size_t>(OptionId::checksum_retries));
  return Status::ok();
}

// config.delta and config.delta_max_share into `configured.job` (WSYNC_UNSET_INT and 0: the
// options' defaults).
Status applyDelta(const wsync_config_t& c, Options& configured) {
  if (c.delta != WSYNC_UNSET_INT) {
    if (c.delta != 0 && c.delta != 1) {
      return invalidArgument("config.delta is " + std::to_string(c.delta) +
                             ": not 0, 1 or WSYNC_UNSET_INT");
    }
    configured.job.delta = c.delta == 1;
    configured.from_config.set(static_cast<size_t>(OptionId::delta));
  }
  if (c.delta_max_share == 0.0) return Status::ok();
  if (!(c.delta_max_share > 0.0 && c.delta_max_share <= 1.0)) {
    return invalidArgument("config.delta_max_share is " + std::to_string(c.delta_max_share) +
                           ": not in (0, 1], or 0 (default: 0.25)");
  }
  configured.job.delta_max_share = c.delta_max_share;
  configured.from_config.set(static_cast<size_t>(OptionId::delta_max_share));
  return Status::ok();
}

constexpr size_t roundUpToConfigAlignment(size_t bytes) {
  return (bytes + alignof(wsync_config_t) - 1) / alignof(wsync_config_t) * alignof(wsync_config_t);
}
static_assert(roundUpToConfigAlignment(std::end(kConfigLayoutEnds)[-1]) == sizeof(wsync_config_t),
              "wsync_config_t grew: append the new layout's end to kConfigLayoutEnds");
// `size` tells the layouts apart only when each one's sizeof differs from the previous one's: a
// field that fits in the old tail padding needs a companion field (or a wider type).
constexpr bool layoutSizesIncrease() {
  for (size_t i = 1; i < std::size(kConfigLayoutEnds); ++i) {
    if (roundUpToConfigAlignment(kConfigLayoutEnds[i]) <=
        roundUpToConfigAlignment(kConfigLayoutEnds[i - 1]))
      return false;
  }
  return true;
}
static_assert(layoutSizesIncrease(), "two wsync_config_t layouts have the same sizeof");

// The caller's config with the fields its layout lacks set to their defaults. Only the bytes of
// the caller's fields are read: the tail padding of an older layout may hold garbage where a newer
// layout has a field.
Result<wsync_config_t> knownFields(const wsync_config_t& config) {
  if (config.magic != WSYNC_CONFIG_MAGIC)
    return invalidArgument("config.magic is wrong: initialize it with WSYNC_CONFIG_INITIALIZER");
  if (config.version != WSYNC_API_VERSION) {
    return invalidArgument("config.version is " + std::to_string(config.version) +
                           "; this library implements API version " +
                           std::to_string(WSYNC_API_VERSION));
  }
  std::string sizes;
  for (const size_t end : kConfigLayoutEnds) {
    if (config.size == roundUpToConfigAlignment(end)) {
      wsync_config_t known = WSYNC_CONFIG_INITIALIZER;
      std::memcpy(&known, &config, end);
      known.size = sizeof(wsync_config_t);
      return known;
    }
    sizes += (sizes.empty() ? "" : ", ") + std::to_string(roundUpToConfigAlignment(end));
  }
  return invalidArgument("config.size is " + std::to_string(config.size) +
                         ": not the sizeof(wsync_config_t) of a wsync.h this library knows (" +
                         sizes + "); initialize it with WSYNC_CONFIG_INITIALIZER");
}

}  // namespace

Result<ContextOptions> contextOptionsFrom(const wsync_config_t& config,
                                          const Options& environment) {
  WSYNC_ASSIGN_OR_RETURN(const wsync_config_t c, knownFields(config));
  const int32_t role = rawEnum(c.role);
  if (role != WSYNC_ROLE_TRAINER && role != WSYNC_ROLE_ROLLOUT)
    return notAnEnum("role", "wsync_role_t", role, WSYNC_ROLE_ROLLOUT);
  const int32_t bootstrap = rawEnum(c.bootstrap);
  if (bootstrap != WSYNC_BOOTSTRAP_MPI && bootstrap != WSYNC_BOOTSTRAP_EXPLICIT)
    return notAnEnum("bootstrap", "wsync_bootstrap_t", bootstrap, WSYNC_BOOTSTRAP_EXPLICIT);
  // The option-backed fields (options.h's "config field" column), then the one precedence rule.
  Options configured;
  WSYNC_RETURN_IF_ERROR(applyDeviceTransport(rawEnum(c.device_transport), configured));
  WSYNC_RETURN_IF_ERROR(applyCudaIpcExport(rawEnum(c.cuda_ipc_export), configured));
  WSYNC_RETURN_IF_ERROR(applyChecksums(c, configured));
  if (rawEnum(c.device_transport) != WSYNC_DEVICE_TRANSPORT_DEFAULT)
    configured.from_config.set(static_cast<size_t>(OptionId::device_transport));
  if (rawEnum(c.cuda_ipc_export) != WSYNC_CUDA_IPC_EXPORT_DEFAULT)
    configured.from_config.set(static_cast<size_t>(OptionId::cuda_ipc_export));
  WSYNC_RETURN_IF_ERROR(applyDelta(c, configured));
  ContextOptions o;
  o.settings = resolve(configured, environment);
  o.role = role == WSYNC_ROLE_TRAINER ? Role::kTrainer : Role::kRollout;
  o.use_mpi = bootstrap == WSYNC_BOOTSTRAP_MPI;
  o.replica = c.replica;
  o.num_slots = c.num_slots;
  o.timeout = std::chrono::milliseconds(c.timeout_ms);
  o.max_staleness = c.max_staleness;
  o.snapshot = c.snapshot != 0;
  o.rank = c.rank;
  o.num_trainers = c.num_trainers;
  o.num_rollouts = c.num_rollouts;
  if (c.coordinator_address) o.coordinator_address = c.coordinator_address;
  if (c.secret) o.secret = c.secret;
  o.cuda_device = c.cuda_device;
  o.replica_size = c.replica_size;
  o.replica_rank = c.replica_rank;
  return o;
}

}  // namespace wsync::capi
