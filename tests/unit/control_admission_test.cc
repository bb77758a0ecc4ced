// Admission to the control server (control/handshake_admission.h, control/frame_server.h): the
// per-peer and total handshake limits, idle handshakes dropped quickly, clients that retry a busy
// server, a refused secret failing at once, and refusals counted and logged rate-limited.
// RefusalLog and HandshakeLimiter are pure; the rest runs a real FrameServer on loopback with raw
// clients from distinct source addresses (127.0.0.2, 127.0.0.3, ... stand for other hosts).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "control/frame_channel.h"
#include "control/frame_server.h"
#include "control/handshake_admission.h"
#include "coordinator/metrics.h"
#include "support/raw_control_client.h"

namespace wsync {
namespace {

using namespace std::chrono_literals;
using Clock = RefusalLog::Clock;
using raw_control::closedByPeer;
using raw_control::connectFrom;
using raw_control::readRawFrame;
using raw_control::writeAll;

constexpr char kSecret[] = "admission-test-secret-0123456789";

size_t countContaining(const std::vector<std::string>& lines, const std::string& needle) {
  size_t n = 0;
  for (const std::string& l : lines)
    n += l.find(needle) != std::string::npos ? 1 : 0;
  return n;
}

// ---- RefusalLog and HandshakeLimiter (pure) ---------------------------------------------------

TEST(RefusalLog, OneLinePerPeerPerIntervalAndASummaryOfTheRest) {
  std::vector<std::string> lines;
  RefusalLog log([&](const std::string& l) { lines.push_back(l); }, "control server on port 1");
  const Clock::time_point t0 = Clock::now();
  for (int i = 0; i < 1000; ++i)
    log.record(RefusalReason::kWrongSecret, "10.0.0.1", "10.0.0.1:5000", "bad tag", t0 + 1ms * i);
  // 1000 refusals over one second from one address: one line at t0, one at t0 + 1 s.
  EXPECT_EQ(lines.size(), 1u);
  log.record(RefusalReason::kWrongSecret, "10.0.0.1", "10.0.0.1:5001", "bad tag", t0 + 1000ms);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("control server on port 1: refused 10.0.0.1:5000 (wrong_secret): "
                          "bad tag"),
            std::string::npos)
      << lines[0];
  ASSERT_TRUE(log.nextDue().has_value());
  log.tick(*log.nextDue() - 1ms);
  EXPECT_EQ(lines.size(), 2u);
  log.tick(*log.nextDue());
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[2].find("999 more refused connections not logged"), std::string::npos)
      << lines[2];
  EXPECT_NE(lines[2].find("wrong_secret 999"), std::string::npos) << lines[2];
  EXPECT_FALSE(log.nextDue().has_value());
  EXPECT_EQ(log.counts()[RefusalReason::kWrongSecret], 1001u);
  EXPECT_EQ(log.counts().total(), 1001u);
}

TEST(RefusalLog, ManyPeersAreCappedPerSecondAndAbandonedOnesAreOnlyCounted) {
  std::vector<std::string> lines;
  RefusalLog::Limits limits;
  limits.max_lines_per_second = 5;
  limits.max_tracked_peers = 8;
  RefusalLog log([&](const std::string& l) { lines.push_back(l); }, "srv", limits);
  const Clock::time_point t0 = Clock::now();
  for (int i = 0; i < 100; ++i) {
    const std::string address = "10.0.1." + std::to_string(i);
    log.record(RefusalReason::kBadHandshake, address, address + ":1", "garbage", t0);
    log.record(RefusalReason::kAbandoned, address, address + ":2", "closed", t0);
  }
  EXPECT_EQ(lines.size(), 5u);
  // Every peer is new one second later, but only max_tracked_peers are remembered: bounded.
  for (int i = 0; i < 100; ++i) {
    const std::string address = "10.0.2." + std::to_string(i);
    log.record(RefusalReason::kIdle, address, address + ":1", "idle", t0 + 1500ms);
  }
  EXPECT_EQ(lines.size(), 10u);
  log.tick(t0 + 10s);
  ASSERT_EQ(lines.size(), 11u);
  EXPECT_NE(lines.back().find("190 more refused"), std::string::npos) << lines.back();
  EXPECT_NE(lines.back().find("bad_handshake 95, idle 95"), std::string::npos) << lines.back();
  EXPECT_EQ(countContaining(lines, "abandoned"), 0u);
  EXPECT_EQ(log.counts()[RefusalReason::kAbandoned], 100u);
  EXPECT_EQ(log.counts().total(), 300u);
}

TEST(HandshakeLimiter, LimitsEachPeerAndTheTotal) {
  HandshakeLimiter limiter(/*per_peer=*/2, /*total=*/3);
  EXPECT_FALSE(limiter.admit("a").has_value());
  EXPECT_FALSE(limiter.admit("a").has_value());
  EXPECT_EQ(limiter.admit("a"), RefusalReason::kPeerLimit);
  EXPECT_FALSE(limiter.admit("b").has_value());
  EXPECT_EQ(limiter.admit("c"), RefusalReason::kServerLimit);
  EXPECT_EQ(limiter.pending(), 3u);
  limiter.release("a");
  EXPECT_EQ(limiter.pendingFrom("a"), 1u);
  EXPECT_FALSE(limiter.admit("c").has_value());
  limiter.release("a");
  limiter.release("b");
  limiter.release("c");
  limiter.release("unknown");  // harmless
  EXPECT_EQ(limiter.pending(), 0u);
  EXPECT_EQ(limiter.pendingFrom("a"), 0u);
}

TEST(RefusalMetrics, EveryReasonIsServedOnMetricsWithItsCount) {
  CoordinatorMetrics metrics;
  metrics.onControlRefused(RefusalReason::kWrongSecret);
  metrics.onControlRefused(RefusalReason::kWrongSecret);
  metrics.onControlRefused(RefusalReason::kPeerLimit);
  EXPECT_EQ(metrics.snapshot().control_refusals[RefusalReason::kWrongSecret], 2u);
  const std::string text = prometheusText(metrics.snapshot());
  EXPECT_NE(text.find("# TYPE wsync_control_refusals_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("\nwsync_control_refusals_total{reason=\"wrong_secret\"} 2\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\nwsync_control_refusals_total{reason=\"peer_limit\"} 1\n"),
            std::string::npos);
  for (size_t i = 0; i < kRefusalReasons; ++i) {
    const std::string reason = refusalReasonName(static_cast<RefusalReason>(i));
    EXPECT_NE(text.find("wsync_control_refusals_total{reason=\"" + reason + "\"}"),
              std::string::npos)
        << reason;
  }
}

// ---- a real FrameServer ---------------------------------------------------------------------

ControlOptions serverOptions() {
  ControlOptions o;
  o.secret = kSecret;
  o.handshake_timeout = 5000ms;
  o.idle_handshake_timeout = 5000ms;
  o.io_timeout = 5000ms;
  return o;
}

class AdmissionServer {
 public:
  explicit AdmissionServer(const ControlOptions& options) {
    FrameServerHandlers h;
    h.on_connect = [this](ConnectionId) { connects_.fetch_add(1); };
    h.on_refused = [this](RefusalReason) { refused_.fetch_add(1); };
    h.log = [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mu_);
      lines_.push_back(line);
    };
    Result<std::unique_ptr<FrameServer>> started = FrameServer::start("127.0.0.1", 0, options, h);
    if (!started.isOk()) ADD_FAILURE() << started.status().toString();
    server_ = std::move(started).value();
  }
  FrameServer& server() { return *server_; }
  uint16_t port() const { return server_->port(); }
  int connects() const { return connects_.load(); }
  int refusedHandlerCalls() const { return refused_.load(); }
  std::vector<std::string> lines() {
    std::lock_guard<std::mutex> lock(mu_);
    return lines_;
  }
  bool waitConnects(int n) {
    const auto deadline = SteadyClock::now() + 5s;
    while (connects_.load() < n) {
      if (SteadyClock::now() > deadline) return false;
      std::this_thread::sleep_for(2ms);
    }
    return true;
  }
  // Waits until refusals()[reason] reaches n.
  bool waitRefusals(RefusalReason reason, uint64_t n, std::chrono::milliseconds timeout = 5s) {
    const auto deadline = SteadyClock::now() + timeout;
    while (server_->refusals()[reason] < n) {
      if (SteadyClock::now() > deadline) return false;
      std::this_thread::sleep_for(2ms);
    }
    return true;
  }

 private:
  std::atomic<int> connects_{0};
  std::atomic<int> refused_{0};
  std::mutex mu_;
  std::vector<std::string> lines_;
  std::unique_ptr<FrameServer> server_;
};

// A raw connection from `source` that got the server's hello and then says nothing.
Fd idleConnection(const std::string& source, uint16_t port) {
  Result<Fd> fd = connectFrom(source, port);
  EXPECT_TRUE(fd.isOk()) << fd.status().toString();
  if (!fd.isOk()) return Fd();
  Result<Frame> hello = readRawFrame(fd->get());
  EXPECT_TRUE(hello.isOk() && hello->type == control_wire::kServerHello)
      << (hello.isOk() ? "type " + std::to_string(hello->type) : hello.status().toString());
  return std::move(fd).value();
}

// The first frame a new connection from `source` gets: kServerHello or kBusy.
uint16_t firstFrameType(const std::string& source, uint16_t port) {
  Result<Fd> fd = connectFrom(source, port);
  if (!fd.isOk()) return 0;
  Result<Frame> first = readRawFrame(fd->get());
  return first.isOk() ? first->type : 0;
}

TEST(FrameServerAdmission, IdleHandshakeIsDroppedLongBeforeTheHandshakeTimeout) {
  ControlOptions options = serverOptions();
  options.idle_handshake_timeout = 200ms;
  AdmissionServer server(options);
  Fd idle = idleConnection("127.0.0.2", server.port());
  const auto start = SteadyClock::now();
  ASSERT_TRUE(closedByPeer(idle.get(), 3000ms));
  const auto waited = SteadyClock::now() - start;
  EXPECT_GE(waited, 150ms);
  EXPECT_LT(waited, 2500ms);  // the handshake timeout is 5 s
  // One that started its handshake (a byte) is not idle: it gets the full handshake timeout.
  options.handshake_timeout = 600ms;
  AdmissionServer slow_server(options);
  Fd slow = idleConnection("127.0.0.2", slow_server.port());
  ASSERT_TRUE(writeAll(slow.get(), {0x57}).isOk());
  const auto slow_start = SteadyClock::now();
  ASSERT_TRUE(closedByPeer(slow.get(), 3000ms));
  EXPECT_GE(SteadyClock::now() - slow_start, 300ms);
  ASSERT_TRUE(server.waitRefusals(RefusalReason::kIdle, 1));
  ASSERT_TRUE(slow_server.waitRefusals(RefusalReason::kHandshakeTimeout, 1));
  EXPECT_EQ(slow_server.server().refusals()[RefusalReason::kIdle], 0u);
  EXPECT_EQ(countContaining(server.lines(), "(idle): sent nothing for 200 ms"), 1u);
  EXPECT_EQ(countContaining(slow_server.lines(), "(handshake_timeout)"), 1u);
}

TEST(FrameServerAdmission, AFloodingPeerGetsBusyWhileOtherPeersAreServed) {
  ControlOptions options = serverOptions();
  options.max_handshakes_per_peer = 4;
  options.max_handshakes = 6;
  AdmissionServer server(options);
  std::vector<Fd> flood;
  for (int i = 0; i < 4; ++i)
    flood.push_back(idleConnection("127.0.0.2", server.port()));
  // The fifth from the same host: busy, and closed at once.
  for (int i = 0; i < 20; ++i)
    EXPECT_EQ(firstFrameType("127.0.0.2", server.port()), control_wire::kBusy);
  // Another host is served, and a client from it authenticates.
  EXPECT_EQ(firstFrameType("127.0.0.3", server.port()), control_wire::kServerHello);
  Result<Fd> other = connectFrom("127.0.0.3", server.port());
  ASSERT_TRUE(other.isOk());
  EXPECT_TRUE(raw_control::rawHandshake(other->get(), kSecret).isOk());
  ASSERT_TRUE(server.waitRefusals(RefusalReason::kAbandoned, 1));  // the first one from .3
  ASSERT_TRUE(server.waitConnects(1));
  // The total: 4 from .2 plus 2 from .4 fill the server; then everybody is told busy.
  Fd a = idleConnection("127.0.0.4", server.port());
  Fd b = idleConnection("127.0.0.4", server.port());
  EXPECT_EQ(firstFrameType("127.0.0.5", server.port()), control_wire::kBusy);
  EXPECT_EQ(server.server().refusals()[RefusalReason::kPeerLimit], 20u);
  EXPECT_EQ(server.server().refusals()[RefusalReason::kServerLimit], 1u);
  EXPECT_EQ(server.connects(), 1);
  const std::vector<std::string> lines = server.lines();
  // 21 refusals from two hosts in well under a second: one line per host.
  EXPECT_EQ(countContaining(lines, "(peer_limit)"), 1u);
  EXPECT_EQ(countContaining(lines, "(server_limit)"), 1u);
  EXPECT_NE(countContaining(lines, "4 connections already in the handshake from 127.0.0.2"), 0u);
}

TEST(FrameServerAdmission, ClientRetriesABusyServerUntilAnIdleOneIsDropped) {
  ControlOptions options = serverOptions();
  options.max_handshakes_per_peer = 2;
  options.idle_handshake_timeout = 300ms;
  AdmissionServer server(options);
  // Two idle connections from this client's own address fill its share.
  Fd a = idleConnection("127.0.0.1", server.port());
  Fd b = idleConnection("127.0.0.1", server.port());
  ControlOptions client = serverOptions();
  const auto start = SteadyClock::now();
  Result<std::unique_ptr<FrameChannel>> channel =
      FrameChannel::connect("127.0.0.1", server.port(), client, 5000ms);
  ASSERT_TRUE(channel.isOk()) << channel.status().toString();
  EXPECT_GE(SteadyClock::now() - start, 200ms);  // it was busy until the idle ones were dropped
  EXPECT_GE(server.server().refusals()[RefusalReason::kPeerLimit], 1u);
  EXPECT_TRUE(server.waitRefusals(RefusalReason::kIdle, 2));
  EXPECT_TRUE(server.waitConnects(1));
}

TEST(FrameServerAdmission, ClientThatStaysBusyTimesOutWithinItsTimeout) {
  ControlOptions options = serverOptions();
  options.max_handshakes_per_peer = 1;
  AdmissionServer server(options);
  Fd hog = idleConnection("127.0.0.1", server.port());  // idle for 5 s
  const auto start = SteadyClock::now();
  Result<std::unique_ptr<FrameChannel>> channel =
      FrameChannel::connect("127.0.0.1", server.port(), serverOptions(), 600ms);
  const auto waited = SteadyClock::now() - start;
  ASSERT_FALSE(channel.isOk());
  EXPECT_EQ(channel.status().code(), WSYNC_ERR_TIMEOUT) << channel.status().toString();
  EXPECT_NE(channel.status().message().find("did not admit this client"), std::string::npos)
      << channel.status().message();
  EXPECT_NE(channel.status().message().find("busy"), std::string::npos)
      << channel.status().message();
  EXPECT_GE(waited, 550ms);
  EXPECT_LT(waited, 2500ms);
  EXPECT_GE(server.server().refusals()[RefusalReason::kPeerLimit], 2u);  // it did retry
}

TEST(FrameServerAdmission, WrongSecretFailsAtOnceAndIsLogged) {
  AdmissionServer server(serverOptions());
  ControlOptions wrong = serverOptions();
  wrong.secret = "not-the-secret";
  const auto start = SteadyClock::now();
  Result<std::unique_ptr<FrameChannel>> channel =
      FrameChannel::connect("127.0.0.1", server.port(), wrong, 20000ms);
  ASSERT_FALSE(channel.isOk());
  EXPECT_EQ(channel.status().code(), WSYNC_ERR_PROTOCOL) << channel.status().toString();
  EXPECT_NE(channel.status().message().find("wrong shared secret"), std::string::npos)
      << channel.status().message();
  EXPECT_LT(SteadyClock::now() - start, 2000ms);  // not retried until the 20 s timeout
  EXPECT_EQ(server.server().refusals()[RefusalReason::kWrongSecret], 1u);
  EXPECT_EQ(server.refusedHandlerCalls(), 1);
  EXPECT_EQ(countContaining(server.lines(), "(wrong_secret): authentication failed"), 1u);
  EXPECT_EQ(server.connects(), 0);
}

TEST(FrameServerAdmission, GarbageAndUnauthenticatedFramesAreRefusedLoggedRateLimited) {
  AdmissionServer server(serverOptions());
  constexpr int kEach = 50;
  for (int i = 0; i < kEach; ++i) {
    // An application frame with no handshake at all (a client with no secret).
    Result<Fd> fd = connectFrom("127.0.0.6", server.port());
    ASSERT_TRUE(fd.isOk());
    ASSERT_TRUE(readRawFrame(fd->get()).isOk());
    const auto header = control_wire::encodeHeader(1, 0, 4);
    std::vector<uint8_t> frame(header.begin(), header.end());
    frame.insert(frame.end(), {1, 2, 3, 4});
    ASSERT_TRUE(writeAll(fd->get(), frame).isOk());
    Result<Frame> reply = readRawFrame(fd->get());
    ASSERT_TRUE(reply.isOk()) << reply.status().toString();
    EXPECT_EQ(reply->type, control_wire::kRefused);
    EXPECT_TRUE(closedByPeer(fd->get()));
    // A huge length prefix in a handshake frame.
    Result<Fd> huge = connectFrom("127.0.0.6", server.port());
    ASSERT_TRUE(huge.isOk());
    const auto big = control_wire::encodeHeader(control_wire::kClientAuth,
                                                control_wire::kFlagHandshake, 0xffffffffu);
    ASSERT_TRUE(writeAll(huge->get(), std::vector<uint8_t>(big.begin(), big.end())).isOk());
    EXPECT_TRUE(closedByPeer(huge->get()));
    // Connect and go away at once.
    ASSERT_TRUE(connectFrom("127.0.0.6", server.port()).isOk());
  }
  ASSERT_TRUE(server.waitRefusals(RefusalReason::kBadHandshake, 2 * kEach));
  ASSERT_TRUE(server.waitRefusals(RefusalReason::kAbandoned, kEach));
  EXPECT_EQ(server.connects(), 0);
  const std::vector<std::string> lines = server.lines();
  EXPECT_GE(lines.size(), 1u);
  EXPECT_LE(lines.size(), 10u) << "one line per second for one host";
  EXPECT_EQ(countContaining(lines, "(abandoned)"), 0u);
  // A good client is still served at once.
  Result<std::unique_ptr<FrameChannel>> good =
      FrameChannel::connect("127.0.0.1", server.port(), serverOptions(), 3000ms);
  ASSERT_TRUE(good.isOk()) << good.status().toString();
}

}  // namespace
}  // namespace wsync
