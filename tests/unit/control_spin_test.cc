// Busy polling in the control plane (src/control): a spinning FrameChannel::recv and a spinning
// FrameServer loop deliver every frame, keep their deadlines and stop when told. Real TCP over
// 127.0.0.1, real threads.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "common/status.h"
#include "control/frame_channel.h"
#include "control/frame_server.h"

namespace wsync {
namespace {

using namespace std::chrono_literals;

// An echo server (every frame goes back unchanged) whose loop spins until `spin_until`.
class SpinningEchoServer {
 public:
  explicit SpinningEchoServer(SteadyClock::time_point spin_until) {
    FrameServerHandlers h;
    h.on_frame = [this](ConnectionId id, Frame&& f) {
      (void)server_.load()->send(id, f.type, std::move(f.payload));
    };
    Result<std::unique_ptr<FrameServer>> started =
        FrameServer::start("127.0.0.1", 0, options(), std::move(h));
    if (!started.isOk()) ADD_FAILURE() << started.status().toString();
    owned_ = std::move(started).value();
    server_.store(owned_.get());
    owned_->spinUntil(spin_until);
  }

  static ControlOptions options(std::chrono::microseconds spin = 0us) {
    ControlOptions o;
    o.secret = "spin-test-secret-0123456789";
    o.handshake_timeout = 2000ms;
    o.io_timeout = 5000ms;
    o.spin_wait = spin;
    return o;
  }

  std::unique_ptr<FrameChannel> connect(std::chrono::microseconds spin) {
    Result<std::unique_ptr<FrameChannel>> c =
        FrameChannel::connect("127.0.0.1", owned_->port(), options(spin), 3000ms);
    if (!c.isOk()) ADD_FAILURE() << c.status().toString();
    return c.isOk() ? std::move(c).value() : nullptr;
  }

  FrameServer& server() { return *owned_; }

 private:
  std::atomic<FrameServer*> server_{nullptr};
  std::unique_ptr<FrameServer> owned_;
};

// Round trips with both ends spinning: every frame comes back whole and in order.
TEST(ControlSpin, EveryFrameComesBackInOrderWhileBothEndsSpin) {
  SpinningEchoServer server(SteadyClock::now() + 60s);
  auto c = server.connect(200ms);
  ASSERT_NE(c, nullptr);
  for (uint8_t i = 0; i < 200; ++i) {
    const std::vector<uint8_t> payload(1 + i * 7, i);
    ASSERT_TRUE(c->send(static_cast<uint16_t>(100 + i), payload).isOk());
    Result<Frame> f = c->recv(3000ms);
    ASSERT_TRUE(f.isOk()) << f.status().toString();
    EXPECT_EQ(f->type, 100 + i);
    EXPECT_EQ(f->payload, payload);
  }
}

// A recv inside the spin window still ends at its own deadline (TIMEOUT), not at the window's end.
TEST(ControlSpin, ASpinningRecvKeepsItsDeadline) {
  SpinningEchoServer server(SteadyClock::now());
  auto c = server.connect(5s);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->send(1, {7}).isOk());  // starts the window
  ASSERT_TRUE(c->recv(3000ms).isOk());
  const auto start = SteadyClock::now();
  Result<Frame> none = c->recv(50ms);
  const auto waited = SteadyClock::now() - start;
  EXPECT_EQ(none.status().code(), WSYNC_ERR_TIMEOUT) << none.status().toString();
  EXPECT_GE(waited, 45ms);
  EXPECT_LT(waited, 2000ms);
}

// shutdown() ends a recv that is spinning (ABORTED), well before the window would.
TEST(ControlSpin, ShutdownEndsASpinningRecv) {
  SpinningEchoServer server(SteadyClock::now());
  auto c = server.connect(30s);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->send(1, {}).isOk());
  ASSERT_TRUE(c->recv(3000ms).isOk());
  Status result;
  const auto start = SteadyClock::now();
  std::thread waiter([&] { result = c->recv(20000ms).status(); });
  std::this_thread::sleep_for(50ms);
  c->shutdown();
  waiter.join();
  EXPECT_EQ(result.code(), WSYNC_ERR_ABORTED) << result.toString();
  EXPECT_LT(SteadyClock::now() - start, 5000ms);
}

// A server spinning far into the future serves several clients and stops at once when told.
TEST(ControlSpin, ASpinningServerServesClientsAndStops) {
  SpinningEchoServer server(SteadyClock::now() + 3600s);
  std::vector<std::unique_ptr<FrameChannel>> clients;
  for (int i = 0; i < 4; ++i) {
    clients.push_back(server.connect(0us));
    ASSERT_NE(clients.back(), nullptr);
  }
  for (int round = 0; round < 50; ++round) {
    for (size_t i = 0; i < clients.size(); ++i) {
      const std::vector<uint8_t> payload{static_cast<uint8_t>(round), static_cast<uint8_t>(i)};
      ASSERT_TRUE(clients[i]->send(9, payload).isOk());
      Result<Frame> f = clients[i]->recv(3000ms);
      ASSERT_TRUE(f.isOk()) << f.status().toString();
      EXPECT_EQ(f->payload, payload);
    }
  }
  const auto start = SteadyClock::now();
  server.server().stop();
  EXPECT_LT(SteadyClock::now() - start, 3000ms);
  EXPECT_EQ(clients[0]->recv(3000ms).status().code(), WSYNC_ERR_REMOTE);
}

}  // namespace
}  // namespace wsync
