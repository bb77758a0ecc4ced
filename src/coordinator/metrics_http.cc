#include "coordinator/metrics_http.h"

#include <httplib.h>

#include <chrono>
#include <thread>

namespace wsync {

class MetricsHttpServer::Impl {
 public:
  httplib::Server server;
  std::thread thread;
  uint16_t port = 0;
};

Result<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::start(
    const std::string& host, uint16_t port, std::function<std::string()> render) {
  auto impl = std::make_unique<Impl>();
  impl->server.Get("/metrics", [render = std::move(render)](const httplib::Request&,
                                                            httplib::Response& response) {
    response.set_content(render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  if (port == 0) {
    const int bound = impl->server.bind_to_any_port(host);
    if (bound <= 0) return systemError("metrics server: cannot listen on " + host);
    impl->port = static_cast<uint16_t>(bound);
  } else {
    if (!impl->server.bind_to_port(host, port)) {
      return systemError("metrics server: cannot listen on " + host + ":" + std::to_string(port));
    }
    impl->port = port;
  }
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->server.listen_after_bind(); });
  // httplib's stop() only stops a server that runs: wait until it does, so stop() never misses.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!raw->server.is_running() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return std::unique_ptr<MetricsHttpServer>(new MetricsHttpServer(std::move(impl)));
}

MetricsHttpServer::MetricsHttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MetricsHttpServer::~MetricsHttpServer() {
  stop();
}

uint16_t MetricsHttpServer::port() const {
  return impl_->port;
}

void MetricsHttpServer::stop() {
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

}  // namespace wsync
