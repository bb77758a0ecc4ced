// The C API's handles (what wsync_context_t, wsync_request_t and wsync_lease_t point to) and the
// helpers its source files share: statuses recorded as the context's last error, exceptions kept
// from crossing the C boundary. Internal to src/capi.
#pragma once

#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <string>

#include "runtime/context.h"
#include "runtime/rollout_context.h"
#include "runtime/trainer_context.h"
#include "wsync/wsync.h"

namespace wsync::capi_internal {
// A context's last error. Shared with its requests, so that a request may record a failure on its
// context even when it outlives the handle.
struct ErrorSlot {
  std::mutex mu;
  std::string text;
  void set(const std::string& message) {
    std::lock_guard lock(mu);
    text = message;
  }
};
}  // namespace wsync::capi_internal

struct wsync_context_s {
  std::unique_ptr<wsync::Context> ctx;
  std::shared_ptr<wsync::capi_internal::ErrorSlot> last_error =
      std::make_shared<wsync::capi_internal::ErrorSlot>();
};

struct wsync_request_s {
  std::shared_ptr<wsync::PublishRequest> request;
  std::chrono::milliseconds default_timeout{60000};
  std::shared_ptr<wsync::capi_internal::ErrorSlot>
      context_error;  // the publishing context's last error
  // The publish's failure, set once (never changed after): wsync_request_error() returns it.
  std::mutex error_mu;
  std::string error;
};

struct wsync_lease_s {
  wsync::Lease lease;
  const wsync::RolloutContext* ctx = nullptr;
  std::shared_ptr<wsync::capi_internal::ErrorSlot>
      context_error;  // the acquiring context's last error
};

namespace wsync::capi_internal {

// Returns s's code; a failure is recorded as ctx's last error (ctx NULL: the calling thread's
// context-creation error).
wsync_status_t record(wsync_context_t ctx, const wsync::Status& s);

// Runs `body` (returning wsync_status_t); exceptions become statuses recorded on `ctx`.
template <typename Body>
wsync_status_t guarded(wsync_context_t ctx, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return record(ctx, {WSYNC_ERR_SYSTEM, "out of memory"});
  } catch (const std::exception& e) {
    return record(ctx, wsync::internalError(std::string("unexpected exception: ") + e.what()));
  } catch (...) {
    return record(ctx, wsync::internalError("unexpected exception"));
  }
}

// Leases not yet released: releasing one twice is an error, not a double free.
void rememberLease(const wsync_lease_s* lease);
bool forgetLease(const wsync_lease_s* lease);

// The context as a trainer / rollout; nullptr when it has the other role.
wsync::TrainerContext* asTrainer(wsync_context_t ctx);
wsync::RolloutContext* asRollout(wsync_context_t ctx);

}  // namespace wsync::capi_internal
