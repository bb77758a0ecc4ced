// Serves the coordinator's metrics over HTTP (cpp-httplib): GET /metrics answers the Prometheus
// text exposition format (coordinator/metrics.h); every other path is 404. One listening thread;
// `render` is called on it for each scrape and must be thread-safe
// (CoordinatorMetrics::snapshot() is). Built only where cpp-httplib is installed
// (WSYNC_HAVE_METRICS_HTTP).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"

namespace wsync {

class MetricsHttpServer {
 public:
  // Listens on host:port (port 0: an ephemeral one, see port()). SYSTEM when it cannot bind.
  static Result<std::unique_ptr<MetricsHttpServer>> start(const std::string& host, uint16_t port,
                                                          std::function<std::string()> render);
  ~MetricsHttpServer();  // stops
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  uint16_t port() const;
  void stop();  // idempotent; returns once the listening thread ended

  class Impl;

 private:
  explicit MetricsHttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace wsync
