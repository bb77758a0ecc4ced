// The C API shim: validates arguments, converts C structs into wsync's C++ types, turns Status
// into wsync_status_t plus the context's last-error string, and never lets an exception cross.
#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>
#include <string>
#include <unordered_set>

#include "capi_config.h"
#include "capi_handles.h"
#include "common/fast_copy.h"
#include "options/options.h"
#include "runtime/context.h"
#include "runtime/rollout_context.h"
#include "runtime/trainer_context.h"
#include "wsync/wsync.h"

namespace {
thread_local std::string t_create_error;  // last failure of wsync_context_create on this thread
thread_local std::string t_error_copy;    // what wsync_last_error() returned last on this thread

// The lease handles not yet released, so that releasing one twice is an error instead of a double
// free. (A handle's address may be reused by a later acquire; releasing a stale handle after that
// releases the new lease: use each handle once.)
std::mutex g_leases_mu;
std::unordered_set<const wsync_lease_s*>& liveLeases() {
  static auto* leases = new std::unordered_set<const wsync_lease_s*>();  // outlives exit handlers
  return *leases;
}
}  // namespace

namespace wsync::capi_internal {

void rememberLease(const wsync_lease_s* lease) {
  std::lock_guard lock(g_leases_mu);
  liveLeases().insert(lease);
}
bool forgetLease(const wsync_lease_s* lease) {
  std::lock_guard lock(g_leases_mu);
  return liveLeases().erase(lease) == 1;
}

wsync_status_t record(wsync_context_t ctx, const wsync::Status& s) {
  if (s.isOk()) return WSYNC_SUCCESS;
  if (ctx != nullptr) {
    ctx->last_error->set(s.message());
  } else {
    t_create_error = s.message();
  }
  return s.code();
}

wsync::TrainerContext* asTrainer(wsync_context_t ctx) {
  return ctx->ctx->role() == wsync::Role::kTrainer
             ? static_cast<wsync::TrainerContext*>(ctx->ctx.get())
             : nullptr;
}
wsync::RolloutContext* asRollout(wsync_context_t ctx) {
  return ctx->ctx->role() == wsync::Role::kRollout
             ? static_cast<wsync::RolloutContext*>(ctx->ctx.get())
             : nullptr;
}

}  // namespace wsync::capi_internal

using wsync::capi_internal::asRollout;
using wsync::capi_internal::asTrainer;

namespace {
using wsync::capi_internal::guarded;
using wsync::capi_internal::record;

// The text of a publish's failure `s`: never empty, and naming the version.
std::string publishErrorText(const wsync::PublishRequest& request, const wsync::Status& s) {
  const std::string version = "version " + std::to_string(request.version());
  const std::string message = s.message().empty() ? wsync_status_string(s.code()) : s.message();
  return message.rfind(version, 0) == 0 ? message : version + ": " + message;
}

// Returns s's code; a failure is recorded on the request's context, and a final failure (the
// publish is over) also on the request.
// A final failure is a failed publish: never TIMEOUT, which would tell the caller to wait again.
wsync_status_t recordRequest(wsync_request_t request, const wsync::Status& status, bool final) {
  if (status.isOk() || status.code() == WSYNC_IN_PROGRESS) return status.code();
  const wsync::Status s = final ? wsync::asJobFailure(status) : status;
  const std::string text = publishErrorText(*request->request, s);
  request->context_error->set(text);
  if (final) {
    std::lock_guard lock(request->error_mu);
    if (request->error.empty()) request->error = text;
  }
  return s.code();
}

wsync::Status invalid(const std::string& m) {
  return wsync::invalidArgument(m);
}

wsync::Result<wsync::Dims> dimsFrom(const int64_t* values, int ndim, const char* what,
                                    const std::string& tensor) {
  wsync::Dims d = wsync::Dims::zeros(ndim);
  if (ndim > 0 && values == nullptr)
    return invalid("tensor '" + tensor + "': " + what + " is NULL");
  for (int i = 0; i < ndim; ++i)
    d[i] = values[i];
  return d;
}

wsync::Result<wsync::Piece> pieceFrom(wsync::Context& ctx, const wsync_piece_t& p) {
  if (p.tensor == nullptr || p.tensor[0] == '\0') return invalid("a piece has no tensor name");
  const std::string name = p.tensor;
  if (p.ndim < 0 || p.ndim > wsync::kMaxRank) {
    return invalid("tensor '" + name + "': ndim " + std::to_string(p.ndim) + " is outside [0, " +
                   std::to_string(wsync::kMaxRank) + "]");
  }
  WSYNC_ASSIGN_OR_RETURN(wsync::Dims shape, dimsFrom(p.global_shape, p.ndim, "global_shape", name));
  for (int i = 0; i < p.ndim; ++i) {
    if (shape[i] <= 0)
      return invalid("tensor '" + name + "': global shape " + shape.toString() +
                     " is not positive");
  }
  wsync::Piece piece;
  piece.box.offset = wsync::Dims::zeros(p.ndim);
  piece.box.extent = shape;
  if (p.box_offset) {
    WSYNC_ASSIGN_OR_RETURN(piece.box.offset, dimsFrom(p.box_offset, p.ndim, "box_offset", name));
  }
  if (p.box_extent) {
    WSYNC_ASSIGN_OR_RETURN(piece.box.extent, dimsFrom(p.box_extent, p.ndim, "box_extent", name));
  }
  piece.local_offset = p.local_offset;
  if (p.local_strides) {
    WSYNC_ASSIGN_OR_RETURN(piece.local_strides,
                           dimsFrom(p.local_strides, p.ndim, "local_strides", name));
  } else {
    piece.local_strides = wsync::rowMajorStrides(piece.box.extent);
  }
  WSYNC_ASSIGN_OR_RETURN(piece.tensor, ctx.declareTensor(name, shape));
  return piece;
}

}  // namespace

extern "C" {

namespace {
// The host copy routine the resolved options ask for (process-wide: the last context created wins).
void applyHostCopy(wsync::HostCopy choice) {
  switch (choice) {
    case wsync::HostCopy::kMemcpy:
      wsync::preferHostCopy(wsync::HostCopyKind::kMemcpy);
      break;
    case wsync::HostCopy::kAvx2:
      wsync::preferHostCopy(wsync::HostCopyKind::kStreamAvx2);
      break;
    case wsync::HostCopy::kAuto:
    case wsync::HostCopy::kAvx512:
      wsync::preferHostCopy(wsync::HostCopyKind::kStreamAvx512);
      break;
  }
}
}  // namespace

wsync_status_t wsync_context_create(const wsync_config_t* config, wsync_context_t* out) {
  return guarded(nullptr, [&]() -> wsync_status_t {
    if (config == nullptr || out == nullptr)
      return record(nullptr, invalid("config and ctx must not be NULL"));
    // The options, resolved once for this context (capi_config.h): a bad config field is
    // reported before a bad environment variable.
    const wsync::Result<wsync::Options> environment = wsync::readOptions();
    auto options = wsync::capi::contextOptionsFrom(
        *config, environment.isOk() ? environment.value() : wsync::Options());
    if (!options.isOk()) return record(nullptr, options.status());
    if (!environment.isOk()) return record(nullptr, environment.status());
    applyHostCopy(options->settings.host_copy);
    auto ctx = wsync::Context::create(*options);
    if (!ctx.isOk()) return record(nullptr, ctx.status());
    auto* handle = new wsync_context_s;
    handle->ctx = std::move(ctx).value();
    *out = handle;
    return WSYNC_SUCCESS;
  });
}

wsync_status_t wsync_context_destroy(wsync_context_t ctx) {
  if (ctx == nullptr) return WSYNC_SUCCESS;
  const wsync_status_t s =
      guarded(nullptr, [&]() -> wsync_status_t { return record(nullptr, ctx->ctx->finalize()); });
  try {
    delete ctx;
  } catch (...) {
    return WSYNC_ERR_INTERNAL;
  }
  return s;
}

wsync_status_t wsync_context_abort(wsync_context_t ctx) {
  if (ctx == nullptr) return WSYNC_ERR_INVALID_ARGUMENT;
  return guarded(ctx, [&]() -> wsync_status_t {
    ctx->ctx->abort();
    return WSYNC_SUCCESS;
  });
}

const char* wsync_last_error(wsync_context_t ctx) {
  try {
    if (ctx == nullptr) {
      t_error_copy = t_create_error;
    } else {
      std::lock_guard lock(ctx->last_error->mu);
      t_error_copy = ctx->last_error->text;
    }
    return t_error_copy.c_str();
  } catch (...) {
    return "out of memory while reading the last error";
  }
}

wsync_status_t wsync_get_version(int* major, int* minor, int* patch) {
  if (major) *major = WSYNC_VERSION_MAJOR;
  if (minor) *minor = WSYNC_VERSION_MINOR;
  if (patch) *patch = WSYNC_VERSION_PATCH;
  return WSYNC_SUCCESS;
}

wsync_status_t wsync_plan_info(wsync_context_t ctx, wsync_plan_info_t* info) {
  if (ctx == nullptr || info == nullptr) return WSYNC_ERR_INVALID_ARGUMENT;
  return guarded(ctx, [&]() -> wsync_status_t {
    if (!ctx->ctx->committed()) return record(ctx, wsync::invalidUsage("plan_info before commit"));
    const auto& p = ctx->ctx->planSummary();
    info->bytes_per_version = static_cast<uint64_t>(p.bytes_per_version);
    info->broadcast_groups = p.broadcast_groups;
    info->write_ops = p.write_ops;
    info->num_replicas = p.replicas;
    return WSYNC_SUCCESS;
  });
}

wsync_status_t wsync_context_info(wsync_context_t ctx, int* rank, int* num_trainers,
                                  int* num_rollouts) {
  if (ctx == nullptr) return WSYNC_ERR_INVALID_ARGUMENT;
  if (rank) *rank = ctx->ctx->rank();
  if (num_trainers) *num_trainers = ctx->ctx->numTrainers();
  if (num_rollouts) *num_rollouts = ctx->ctx->numRollouts();
  return WSYNC_SUCCESS;
}

wsync_status_t wsync_version_stats(wsync_context_t ctx, wsync_version_stats_t* stats) {
  if (ctx == nullptr || stats == nullptr) return WSYNC_ERR_INVALID_ARGUMENT;
  return guarded(ctx, [&]() -> wsync_status_t {
    // The layouts so far: the first (up to `lag`) and the current one.
    constexpr size_t kFirstLayoutBytes = offsetof(wsync_version_stats_t, lag) + sizeof(uint64_t);
    constexpr size_t kFirstVersionLayoutBytes =  // up to first_version_from_peer, padded
        (offsetof(wsync_version_stats_t, first_version_from_peer) + sizeof(int) +
         alignof(wsync_version_stats_t) - 1) /
        alignof(wsync_version_stats_t) * alignof(wsync_version_stats_t);
    const size_t layout = stats->size;
    if (layout != sizeof(wsync_version_stats_t) && layout != kFirstLayoutBytes &&
        layout != kFirstVersionLayoutBytes) {
      return record(ctx, invalid("wsync_version_stats: stats.size " + std::to_string(stats->size) +
                                 " is not a known layout (use WSYNC_VERSION_STATS_INITIALIZER)"));
    }
    if (!ctx->ctx->committed())
      return record(ctx, wsync::invalidUsage("version_stats before commit"));
    wsync_version_stats_t out = WSYNC_VERSION_STATS_INITIALIZER;
    if (wsync::TrainerContext* trainer = asTrainer(ctx)) {
      const std::optional<wsync::DeliveredMsg> d = trainer->lastDelivered();
      if (!d) return record(ctx, {WSYNC_ERR_NOT_READY, "no version was delivered yet"});
      out.version = d->version;
      out.bytes = d->stats.bytes;
      out.seconds = static_cast<double>(d->stats.microseconds) * 1e-6;
      out.replicas_ready = d->stats.replicas_ready;
      out.replicas_skipped = d->stats.replicas_skipped;
      out.replicas_lost = d->stats.replicas_lost;
      out.retries = d->stats.retries;
      out.checksum_failures = d->stats.checksum_failures;
      out.wire_bytes = d->stats.wire_bytes;
      out.full_bytes = d->stats.full_bytes;
    } else {
      const wsync::RolloutStaleness::View v = asRollout(ctx)->staleness();
      if (v.newest_ready == 0) return record(ctx, {WSYNC_ERR_NOT_READY, "no version is ready yet"});
      out.version = v.newest_ready;
      out.age_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                       wsync::RolloutStaleness::Clock::now() - v.ready_at)
                       .count();
      out.newest_started = v.newest_started;
      out.lag = v.lag();
      out.first_version = v.first_version;
      out.first_version_seconds = v.first_ready_seconds;
      out.first_version_from_peer = v.first_from_peer ? 1 : 0;
    }
    out.size = layout;
    std::memcpy(stats, &out, layout);  // only the fields of the caller's layout
    return WSYNC_SUCCESS;
  });
}

wsync_status_t wsync_register_buffer(wsync_context_t ctx, const char* name, wsync_dtype_t dtype,
                                     wsync_memory_kind_t memory, void* data, int64_t num_elements,
                                     int num_pieces, const wsync_piece_t* pieces,
                                     int* buffer_index) {
  if (ctx == nullptr) return WSYNC_ERR_INVALID_ARGUMENT;
  return guarded(ctx, [&]() -> wsync_status_t {
    if (name == nullptr) return record(ctx, invalid("buffer name is NULL"));
    if (!wsync::validDType(static_cast<int>(dtype))) {
      return record(ctx,
                    invalid(std::string("buffer '") + name + "': dtype " +
                            std::to_string(static_cast<int>(dtype)) + " is not a wsync_dtype_t"));
    }
    if (memory != WSYNC_MEMORY_HOST && memory != WSYNC_MEMORY_DEVICE) {
      return record(ctx, invalid(std::string("buffer '") + name +
                                 "': memory kind is not a wsync_memory_kind_t"));
    }
    if (num_pieces < 0 || (num_pieces > 0 && pieces == nullptr)) {
      return record(ctx, invalid(std::string("buffer '") + name +
                                 "': pieces is NULL or num_pieces negative"));
    }
    wsync::LocalBuffer buffer;
    buffer.name = name;
    buffer.dtype = static_cast<wsync::DType>(dtype);
    buffer.memory = static_cast<wsync::MemoryKind>(memory);
    buffer.num_elements = num_elements;
    for (int i = 0; i < num_pieces; ++i) {
      auto piece = pieceFrom(*ctx->ctx, pieces[i]);
      if (!piece.isOk())
        return record(ctx, piece.status().withContext(std::string("buffer '") + name + "'"));
      buffer.pieces.push_back(*piece);
    }
    auto index = ctx->ctx->registerBuffer(std::move(buffer), data);
    if (!index.isOk()) return record(ctx, index.status());
    if (buffer_index) *buffer_index = *index;
    return WSYNC_SUCCESS;
  });
}

wsync_status_t wsync_commit(wsync_context_t ctx) {
  if (ctx == nullptr) return WSYNC_ERR_INVALID_ARGUMENT;
  return guarded(ctx, [&] { return record(ctx, ctx->ctx->commit()); });
}

wsync_status_t wsync_set_tensor_scale(wsync_context_t ctx, const char* tensor, float scale) {
  if (ctx == nullptr) return WSYNC_ERR_INVALID_ARGUMENT;
  return guarded(ctx, [&]() -> wsync_status_t {
    if (tensor == nullptr) return record(ctx, wsync::invalidArgument("null tensor name"));
    wsync::TrainerContext* trainer = asTrainer(ctx);
    if (trainer == nullptr) {
      return record(ctx, wsync::invalidUsage("set_tensor_scale on a rollout context (scales "
                                             "belong to the trainers, which convert)"));
    }
    return record(ctx, trainer->setTensorScale(tensor, scale));
  });
}

wsync_status_t wsync_set_block_scaling(wsync_context_t ctx, const char* tensor,
                                       const wsync_block_scaling_t* scaling) {
  if (ctx == nullptr) return WSYNC_ERR_INVALID_ARGUMENT;
  return guarded(ctx, [&]() -> wsync_status_t {
    if (tensor == nullptr || scaling == nullptr) {
      return record(ctx, invalid("set_block_scaling: null tensor name or scaling"));
    }
    if (scaling->size != sizeof(wsync_block_scaling_t)) {
      return record(ctx, invalid("set_block_scaling: wsync_block_scaling_t.size " +
                                 std::to_string(scaling->size) + " is not this library's " +
                                 std::to_string(sizeof(wsync_block_scaling_t)) +
                                 " (initialize with WSYNC_BLOCK_SCALING_INITIALIZER)"));
    }
    wsync::RolloutContext* rollout = asRollout(ctx);
    if (rollout == nullptr) {
      return record(ctx, wsync::invalidUsage("set_block_scaling on a trainer context (the "
                                             "rollouts say how they hold their weights)"));
    }
    wsync::BlockScaling s;
    s.format = static_cast<wsync::ScaleFormat>(scaling->format);
    if (!wsync::validScaleFormat(static_cast<int>(scaling->format))) {
      return record(
          ctx, invalid("set_block_scaling '" + std::string(tensor) + "': unknown scale format " +
                       std::to_string(static_cast<int>(scaling->format))));
    }
    s.block_rows = scaling->block_rows;
    s.block_cols = scaling->block_cols;
    s.scale_tensor = scaling->scale_tensor == nullptr ? "" : scaling->scale_tensor;
    return record(ctx, rollout->setBlockScaling(tensor, s));
  });
}

wsync_status_t wsync_publish(wsync_context_t ctx, uint64_t version, wsync_request_t* request) {
  return wsync_publish_on_stream(ctx, version, nullptr, request);
}

wsync_status_t wsync_publish_on_stream(wsync_context_t ctx, uint64_t version,
                                       wsync_cuda_stream_t stream, wsync_request_t* request) {
  if (ctx == nullptr || request == nullptr) return WSYNC_ERR_INVALID_ARGUMENT;
  return guarded(ctx, [&]() -> wsync_status_t {
    wsync::TrainerContext* trainer = asTrainer(ctx);
    if (trainer == nullptr) return record(ctx, wsync::invalidUsage("publish on a rollout context"));
    auto r = trainer->publish(version, stream);
    if (!r.isOk()) return record(ctx, r.status());
    auto* handle = new wsync_request_s;
    handle->request = std::move(r).value();
    handle->default_timeout = trainer->options().timeout;
    handle->context_error = ctx->last_error;
    *request = handle;
    return WSYNC_SUCCESS;
  });
}

wsync_status_t wsync_request_test(wsync_request_t request) {
  if (request == nullptr) return WSYNC_ERR_INVALID_ARGUMENT;
  return guarded(nullptr, [&] { return recordRequest(request, request->request->test(), true); });
}

wsync_status_t wsync_request_wait(wsync_request_t request, int timeout_ms) {
  if (request == nullptr) return WSYNC_ERR_INVALID_ARGUMENT;
  return guarded(nullptr, [&] {
    const auto timeout =
        timeout_ms < 0 ? request->default_timeout : std::chrono::milliseconds(timeout_ms);
    const wsync::Status waited = request->request->wait(timeout);
    if (waited.code() != WSYNC_ERR_TIMEOUT) return recordRequest(request, waited, true);
    // TIMEOUT: the wait's (still in flight) or the publish's own (then it is over).
    const wsync::Status now = request->request->test();
    if (now.code() == WSYNC_IN_PROGRESS) return recordRequest(request, waited, false);
    return recordRequest(request, now, true);
  });
}

const char* wsync_request_error(wsync_request_t request) {
  if (request == nullptr) return "";
  try {
    std::lock_guard lock(request->error_mu);
    if (request->error.empty()) {
      const wsync::Status s = request->request->test();
      if (!s.isOk() && s.code() != WSYNC_IN_PROGRESS)
        request->error = publishErrorText(*request->request, wsync::asJobFailure(s));
    }
    return request->error.c_str();
  } catch (...) {
    return "out of memory while reading the request's error";
  }
}

wsync_status_t wsync_request_replicas(wsync_request_t request, wsync_replicas_kind_t kind,
                                      int capacity, int* replicas, int* count) {
  if (request == nullptr || count == nullptr || capacity < 0 ||
      (replicas == nullptr && capacity > 0)) {
    return record(nullptr, invalid("wsync_request_replicas: null request or count, negative "
                                   "capacity, or replicas NULL with capacity > 0"));
  }
  return guarded(nullptr, [&]() -> wsync_status_t {
    int32_t raw_kind = 0;
    std::memcpy(&raw_kind, &kind, sizeof raw_kind);  // a value outside the enum stays defined
    if (raw_kind < WSYNC_REPLICAS_READY || raw_kind > WSYNC_REPLICAS_LOST) {
      return record(nullptr, invalid("wsync_request_replicas: kind " + std::to_string(raw_kind) +
                                     " is not a wsync_replicas_kind_t"));
    }
    const wsync::Status s = request->request->test();
    if (!s.isOk()) return recordRequest(request, s, true);
    const wsync::DeliveredMsg outcome = request->request->outcome();
    const std::vector<int32_t>& list = raw_kind == WSYNC_REPLICAS_READY ? outcome.ready_replicas
                                       : raw_kind == WSYNC_REPLICAS_SKIPPED
                                           ? outcome.skipped_replicas
                                           : outcome.lost_replicas;
    const size_t n = std::min(list.size(), static_cast<size_t>(capacity));
    std::copy(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(n), replicas);
    *count = static_cast<int>(list.size());
    return WSYNC_SUCCESS;
  });
}

wsync_status_t wsync_request_free(wsync_request_t request) {
  delete request;
  return WSYNC_SUCCESS;
}

}  // extern "C"
