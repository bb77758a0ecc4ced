// The C API's rollout calls: versions, leases and copy flips (include/wsync/wsync.h); the shim's
// rules are wsync_capi.cc's.
#include <chrono>
#include <string>

#include "capi_handles.h"

using wsync::capi_internal::asRollout;
using wsync::capi_internal::forgetLease;
using wsync::capi_internal::guarded;
using wsync::capi_internal::record;
using wsync::capi_internal::rememberLease;

extern "C" {

wsync_status_t wsync_newest_version(wsync_context_t ctx, uint64_t* version) {
  if (ctx == nullptr || version == nullptr) return WSYNC_ERR_INVALID_ARGUMENT;
  return guarded(ctx, [&]() -> wsync_status_t {
    wsync::RolloutContext* rollout = asRollout(ctx);
    if (rollout == nullptr)
      return record(ctx, wsync::invalidUsage("newest_version on a trainer context"));
    if (!rollout->committed())
      return record(ctx, wsync::invalidUsage("newest_version before commit"));
    auto v = rollout->newestVersion();
    if (!v) return record(ctx, {WSYNC_ERR_NOT_READY, "no version is ready yet"});
    *version = *v;
    return WSYNC_SUCCESS;
  });
}

wsync_status_t wsync_wait_version(wsync_context_t ctx, uint64_t version, int timeout_ms,
                                  uint64_t* newest) {
  if (ctx == nullptr || newest == nullptr) return WSYNC_ERR_INVALID_ARGUMENT;
  return guarded(ctx, [&]() -> wsync_status_t {
    wsync::RolloutContext* rollout = asRollout(ctx);
    if (rollout == nullptr)
      return record(ctx, wsync::invalidUsage("wait_version on a trainer context"));
    const auto timeout =
        timeout_ms < 0 ? rollout->options().timeout : std::chrono::milliseconds(timeout_ms);
    auto v = rollout->waitVersion(version, timeout);
    if (!v.isOk()) return record(ctx, v.status());
    *newest = *v;
    return WSYNC_SUCCESS;
  });
}

wsync_status_t wsync_acquire(wsync_context_t ctx, uint64_t version, wsync_lease_t* lease) {
  if (ctx == nullptr || lease == nullptr) return WSYNC_ERR_INVALID_ARGUMENT;
  return guarded(ctx, [&]() -> wsync_status_t {
    wsync::RolloutContext* rollout = asRollout(ctx);
    if (rollout == nullptr) return record(ctx, wsync::invalidUsage("acquire on a trainer context"));
    auto l = rollout->acquire(version == WSYNC_VERSION_NEWEST ? wsync::kNewestVersion : version);
    if (!l.isOk()) return record(ctx, l.status());
    auto* handle = new wsync_lease_s;
    handle->lease = std::move(l).value();
    handle->ctx = rollout;
    handle->context_error = ctx->last_error;
    rememberLease(handle);
    *lease = handle;
    return WSYNC_SUCCESS;
  });
}

wsync_status_t wsync_lease_version(wsync_lease_t lease, uint64_t* version) {
  if (lease == nullptr || version == nullptr) return WSYNC_ERR_INVALID_ARGUMENT;
  *version = lease->lease.version();
  return WSYNC_SUCCESS;
}

wsync_status_t wsync_lease_buffer(wsync_lease_t lease, int buffer_index, void** data) {
  if (lease == nullptr || data == nullptr) return WSYNC_ERR_INVALID_ARGUMENT;
  void* p = lease->ctx->bufferData(lease->lease, buffer_index);
  if (p == nullptr) {  // wsync_last_error(ctx) says why (not an earlier call's error)
    const std::string why =
        "wsync_lease_buffer: buffer index " + std::to_string(buffer_index) +
        (lease->lease.valid() ? " is not in [0, " + std::to_string(lease->ctx->numBuffers()) + ")"
                              : " of a lease that holds no version");
    if (lease->context_error) lease->context_error->set(why);
    return WSYNC_ERR_INVALID_ARGUMENT;
  }
  *data = p;
  return WSYNC_SUCCESS;
}

wsync_status_t wsync_copy_flip(wsync_context_t ctx, uint64_t version, wsync_cuda_stream_t stream,
                               uint64_t* flipped) {
  if (ctx == nullptr || flipped == nullptr) return WSYNC_ERR_INVALID_ARGUMENT;
  return guarded(ctx, [&]() -> wsync_status_t {
    wsync::RolloutContext* rollout = asRollout(ctx);
    if (rollout == nullptr)
      return record(ctx, wsync::invalidUsage("copy_flip on a trainer context"));
    if (!rollout->committed()) return record(ctx, wsync::invalidUsage("copy_flip before commit"));
    if (!rollout->hasLiveMemory()) {
      return record(ctx, wsync::invalidUsage(
                             "copy_flip: no buffer was registered with live memory (data != NULL "
                             "in wsync_register_buffer), so there is nothing to copy into; read "
                             "the slots through wsync_acquire and wsync_lease_buffer instead"));
    }
    auto v = rollout->copyFlip(version == WSYNC_VERSION_NEWEST ? wsync::kNewestVersion : version,
                               stream);
    if (!v.isOk()) return record(ctx, v.status());
    *flipped = *v;
    return WSYNC_SUCCESS;
  });
}

wsync_status_t wsync_lease_release(wsync_lease_t lease) {
  if (lease == nullptr) return WSYNC_SUCCESS;
  if (!forgetLease(lease)) {  // released already (or never a lease): touch nothing
    return record(nullptr,
                  wsync::invalidUsage("wsync_lease_release: the lease was already released "
                                      "(or is not a lease handle)"));
  }
  delete lease;  // the Lease destructor releases
  return WSYNC_SUCCESS;
}

}  // extern "C"
