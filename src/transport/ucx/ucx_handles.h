// RAII owners of UCX (UCP) objects and the conversion of UCX status codes into wsync::Status.
// Internal to the UCX backend. Lifetimes: a context outlives its workers and memory maps (memory
// maps hold a shared reference to it); a worker outlives its endpoints; an endpoint outlives the
// remote keys unpacked on it. Owners of several of these declare them in that order so members
// are destroyed in reverse.
#pragma once

#include <ucp/api/ucp.h>

#include <chrono>
#include <memory>
#include <string>

#include "common/status.h"

namespace wsync::ucx {

// "<what>: <ucs_status_string(status)>" with a wsync code that fits the UCX code.
Status ucxError(ucs_status_t status, const std::string& what);

// Waits for the outcome of a non-blocking UCP call (`request` as returned by a ucp_*_nbx call:
// NULL, an error pointer or a request), progressing `worker` until it completes or `deadline`
// passes. Always releases the request. Returns UCS_ERR_TIMED_OUT at the deadline (the operation
// then goes on inside UCX, with nobody waiting for it).
ucs_status_t waitRequest(ucp_worker_h worker, ucs_status_ptr_t request,
                         std::chrono::steady_clock::time_point deadline);

struct ContextDeleter {
  void operator()(ucp_context_h context) const { ucp_cleanup(context); }
};
// Shared: memory maps keep their context alive.
using ContextRef = std::shared_ptr<ucp_context>;

struct WorkerDeleter {
  void operator()(ucp_worker_h worker) const { ucp_worker_destroy(worker); }
};
using WorkerPtr = std::unique_ptr<ucp_worker, WorkerDeleter>;

// Closes an endpoint in flush mode, progressing its worker for at most `bound`; past the bound
// the close goes on inside UCX and the worker's destruction finishes it.
struct EndpointCloser {
  ucp_worker_h worker = nullptr;
  std::chrono::milliseconds bound{0};
  void operator()(ucp_ep_h endpoint) const;
};
using EndpointPtr = std::unique_ptr<ucp_ep, EndpointCloser>;

struct RkeyDeleter {
  void operator()(ucp_rkey_h rkey) const { ucp_rkey_destroy(rkey); }
};
using RkeyPtr = std::unique_ptr<ucp_rkey, RkeyDeleter>;

struct MemUnmapper {
  ContextRef context;
  void operator()(ucp_mem_h mem) const { ucp_mem_unmap(context.get(), mem); }
};
using MemPtr = std::unique_ptr<ucp_mem, MemUnmapper>;

// A context with the RMA feature, configured from UCX's own environment (UCX_* variables).
Result<ContextRef> createContext();
// A worker in UCS_THREAD_MODE_MULTI; UNSUPPORTED when this UCX build cannot give that mode.
Result<WorkerPtr> createWorker(ucp_context_h context);

}  // namespace wsync::ucx
