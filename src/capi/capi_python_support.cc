// What bindings (python/wsync's ctypes mirrors, other FFIs) need from the library itself: the
// defaults of the growable structs (wsync_config_init, wsync_version_stats_init), so that no
// binding repeats WSYNC_CONFIG_INITIALIZER's values, and the layout of every public struct as
// this library was compiled (wsync_struct_layout), so that a binding can check its mirrors.
#include <cstddef>
#include <cstring>

#include "wsync/wsync.h"

namespace {

struct FieldLayout {
  const char* name;
  size_t offset;
  size_t size;
};

struct StructLayout {
  const char* name;
  size_t size;
  const FieldLayout* fields;
  size_t num_fields;
};

#define WSYNC_FIELD(type, field) \
  { #field, offsetof(type, field), sizeof(type::field) }

constexpr FieldLayout kConfigFields[] = {
    WSYNC_FIELD(wsync_config_t, size),
    WSYNC_FIELD(wsync_config_t, magic),
    WSYNC_FIELD(wsync_config_t, version),
    WSYNC_FIELD(wsync_config_t, role),
    WSYNC_FIELD(wsync_config_t, bootstrap),
    WSYNC_FIELD(wsync_config_t, replica),
    WSYNC_FIELD(wsync_config_t, num_slots),
    WSYNC_FIELD(wsync_config_t, timeout_ms),
    WSYNC_FIELD(wsync_config_t, max_staleness),
    WSYNC_FIELD(wsync_config_t, snapshot),
    WSYNC_FIELD(wsync_config_t, rank),
    WSYNC_FIELD(wsync_config_t, num_trainers),
    WSYNC_FIELD(wsync_config_t, num_rollouts),
    WSYNC_FIELD(wsync_config_t, coordinator_address),
    WSYNC_FIELD(wsync_config_t, secret),
    WSYNC_FIELD(wsync_config_t, cuda_device),
    WSYNC_FIELD(wsync_config_t, device_transport),
    WSYNC_FIELD(wsync_config_t, cuda_ipc_export),
    WSYNC_FIELD(wsync_config_t, replica_size),
    WSYNC_FIELD(wsync_config_t, replica_rank),
    WSYNC_FIELD(wsync_config_t, checksums),
    WSYNC_FIELD(wsync_config_t, checksum_retries),
    WSYNC_FIELD(wsync_config_t, delta),
    WSYNC_FIELD(wsync_config_t, delta_max_share),
};

constexpr FieldLayout kVersionStatsFields[] = {
    WSYNC_FIELD(wsync_version_stats_t, size),
    WSYNC_FIELD(wsync_version_stats_t, version),
    WSYNC_FIELD(wsync_version_stats_t, bytes),
    WSYNC_FIELD(wsync_version_stats_t, seconds),
    WSYNC_FIELD(wsync_version_stats_t, replicas_ready),
    WSYNC_FIELD(wsync_version_stats_t, replicas_skipped),
    WSYNC_FIELD(wsync_version_stats_t, replicas_lost),
    WSYNC_FIELD(wsync_version_stats_t, retries),
    WSYNC_FIELD(wsync_version_stats_t, checksum_failures),
    WSYNC_FIELD(wsync_version_stats_t, age_ms),
    WSYNC_FIELD(wsync_version_stats_t, newest_started),
    WSYNC_FIELD(wsync_version_stats_t, lag),
    WSYNC_FIELD(wsync_version_stats_t, first_version),
    WSYNC_FIELD(wsync_version_stats_t, first_version_seconds),
    WSYNC_FIELD(wsync_version_stats_t, first_version_from_peer),
    WSYNC_FIELD(wsync_version_stats_t, wire_bytes),
    WSYNC_FIELD(wsync_version_stats_t, full_bytes),
};

constexpr FieldLayout kPlanInfoFields[] = {
    WSYNC_FIELD(wsync_plan_info_t, bytes_per_version),
    WSYNC_FIELD(wsync_plan_info_t, broadcast_groups),
    WSYNC_FIELD(wsync_plan_info_t, write_ops),
    WSYNC_FIELD(wsync_plan_info_t, num_replicas),
};

constexpr FieldLayout kPieceFields[] = {
    WSYNC_FIELD(wsync_piece_t, tensor),        WSYNC_FIELD(wsync_piece_t, ndim),
    WSYNC_FIELD(wsync_piece_t, global_shape),  WSYNC_FIELD(wsync_piece_t, box_offset),
    WSYNC_FIELD(wsync_piece_t, box_extent),    WSYNC_FIELD(wsync_piece_t, local_offset),
    WSYNC_FIELD(wsync_piece_t, local_strides),
};

constexpr FieldLayout kBlockScalingFields[] = {
    WSYNC_FIELD(wsync_block_scaling_t, size),
    WSYNC_FIELD(wsync_block_scaling_t, format),
    WSYNC_FIELD(wsync_block_scaling_t, block_rows),
    WSYNC_FIELD(wsync_block_scaling_t, block_cols),
    WSYNC_FIELD(wsync_block_scaling_t, scale_tensor),
};

#undef WSYNC_FIELD

template <size_t N>
constexpr StructLayout layoutOf(const char* name, size_t size, const FieldLayout (&fields)[N]) {
  return {name, size, fields, N};
}

constexpr StructLayout kStructs[] = {
    layoutOf("wsync_config_t", sizeof(wsync_config_t), kConfigFields),
    layoutOf("wsync_version_stats_t", sizeof(wsync_version_stats_t), kVersionStatsFields),
    layoutOf("wsync_plan_info_t", sizeof(wsync_plan_info_t), kPlanInfoFields),
    layoutOf("wsync_piece_t", sizeof(wsync_piece_t), kPieceFields),
    layoutOf("wsync_block_scaling_t", sizeof(wsync_block_scaling_t), kBlockScalingFields),
};

// The table lists every field up to the struct's end: a field appended to the header without a
// line here fails the build.
template <size_t N>
constexpr bool coversStruct(const FieldLayout (&fields)[N], size_t struct_size, size_t alignment) {
  const size_t end = fields[N - 1].offset + fields[N - 1].size;
  return (end + alignment - 1) / alignment * alignment == struct_size;
}
static_assert(coversStruct(kConfigFields, sizeof(wsync_config_t), alignof(wsync_config_t)),
              "wsync_config_t grew: list its new fields in kConfigFields");
static_assert(coversStruct(kVersionStatsFields, sizeof(wsync_version_stats_t),
                           alignof(wsync_version_stats_t)),
              "wsync_version_stats_t grew: list its new fields in kVersionStatsFields");

}  // namespace

extern "C" {

wsync_status_t wsync_config_init(wsync_config_t* config) {
  if (config == nullptr) return WSYNC_ERR_INVALID_ARGUMENT;
  const wsync_config_t initial = WSYNC_CONFIG_INITIALIZER;
  *config = initial;
  return WSYNC_SUCCESS;
}

wsync_status_t wsync_version_stats_init(wsync_version_stats_t* stats) {
  if (stats == nullptr) return WSYNC_ERR_INVALID_ARGUMENT;
  const wsync_version_stats_t initial = WSYNC_VERSION_STATS_INITIALIZER;
  *stats = initial;
  return WSYNC_SUCCESS;
}

wsync_status_t wsync_struct_layout(const char* type, const char* field, size_t* offset,
                                   size_t* size) {
  if (type == nullptr) return WSYNC_ERR_INVALID_ARGUMENT;
  for (const StructLayout& s : kStructs) {
    if (std::strcmp(s.name, type) != 0) continue;
    if (field == nullptr) {
      if (offset != nullptr) *offset = 0;
      if (size != nullptr) *size = s.size;
      return WSYNC_SUCCESS;
    }
    for (size_t i = 0; i < s.num_fields; ++i) {
      if (std::strcmp(s.fields[i].name, field) != 0) continue;
      if (offset != nullptr) *offset = s.fields[i].offset;
      if (size != nullptr) *size = s.fields[i].size;
      return WSYNC_SUCCESS;
    }
    return WSYNC_ERR_INVALID_ARGUMENT;
  }
  return WSYNC_ERR_INVALID_ARGUMENT;
}

}  // extern "C"
