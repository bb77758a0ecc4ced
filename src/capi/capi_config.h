// The C API's config conversion: a caller's wsync_config_t (of any layout version, told by its
// `size`; the rule is in wsync.h) checked field by field and turned into ContextOptions, whose
// `settings` are resolved here, once per context, by the one precedence rule (options/options.h:
// environment > config field > default).
#pragma once

#include <cstddef>

#include "common/status.h"
#include "options/options.h"
#include "runtime/context.h"
#include "wsync/wsync.h"

namespace wsync::capi {

// The layouts wsync_config_t has had, each told by where its last field ends. A caller's `size` is
// sizeof of one of them: that end rounded up to the struct's alignment. Appending fields to
// wsync_config_t means appending their layout's end here (a static_assert checks the last one).
inline constexpr size_t kConfigLayoutEnds[] = {
    offsetof(wsync_config_t, cuda_device) + sizeof(int),                          // 0.1.0
    offsetof(wsync_config_t, cuda_ipc_export) + sizeof(wsync_cuda_ipc_export_t),  // data plane
    offsetof(wsync_config_t, replica_rank) + sizeof(int),                         // joining
    offsetof(wsync_config_t, checksum_retries) + sizeof(int),                     // checksums
    offsetof(wsync_config_t, delta_max_share) + sizeof(double),                   // delta
};

// Reads the fields of the caller's layout (told by config.size; later fields keep
// WSYNC_CONFIG_INITIALIZER's values) and validates them. INVALID_ARGUMENT names the field: magic,
// version, size, role, bootstrap, device_transport, cuda_ipc_export, checksums,
// checksum_retries, delta or delta_max_share. Fields Context::create checks itself (replica,
// num_slots, timeout_ms, explicit-bootstrap ranks) pass through unchecked. The option-backed fields
// (the "config field" column of options.h) are merged with `environment` (readOptions()) by
// resolve() into `settings`.
Result<ContextOptions> contextOptionsFrom(const wsync_config_t& config, const Options& environment);

}  // namespace wsync::capi
