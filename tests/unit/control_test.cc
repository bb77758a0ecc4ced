// Tests of the control-plane transport (src/control): real TCP over 127.0.0.1, real threads.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "common/status.h"
#include "control/frame_channel.h"
#include "control/frame_server.h"
#include "control/socket.h"
#include "support/raw_control_client.h"

namespace wsync {
namespace {

using namespace std::chrono_literals;
using Ms = std::chrono::milliseconds;
using raw_control::closedByPeer;
using raw_control::rawHandshake;
using raw_control::readRawFrame;
using raw_control::writeAll;

constexpr char kHost[] = "127.0.0.1";

ControlOptions testOptions(const std::string& secret = "test-secret-0123456789") {
  ControlOptions o;
  o.secret = secret;
  o.handshake_timeout = 2000ms;
  o.io_timeout = 5000ms;
  return o;
}

// Deterministic bytes: a 12-byte tag (a, b, c) then a xorshift stream seeded by it.
std::vector<uint8_t> pattern(uint32_t a, uint32_t b, uint32_t c, size_t n) {
  std::vector<uint8_t> v(std::max<size_t>(n, 12));
  std::memcpy(v.data(), &a, 4);
  std::memcpy(v.data() + 4, &b, 4);
  std::memcpy(v.data() + 8, &c, 4);
  uint64_t x = (uint64_t{a} << 40) ^ (uint64_t{b} << 20) ^ c ^ 0x9e3779b97f4a7c15ULL;
  for (size_t i = 12; i < v.size(); ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v[i] = static_cast<uint8_t>(x);
  }
  return v;
}

uint32_t tagAt(const std::vector<uint8_t>& v, int i) {
  uint32_t x = 0;
  std::memcpy(&x, v.data() + 4 * i, 4);
  return x;
}

// Records handler calls; optionally echoes every frame back (type and payload unchanged).
class TestServer {
 public:
  explicit TestServer(const ControlOptions& options = testOptions(), bool echo = true) {
    FrameServerHandlers h;
    h.on_connect = [this](ConnectionId id) {
      std::lock_guard<std::mutex> lock(mu_);
      connected_.push_back(id);
      cv_.notify_all();
    };
    h.on_frame = [this, echo](ConnectionId id, Frame&& f) {
      frames_.fetch_add(1);
      if (echo) {
        Status st = server_.load()->send(id, f.type, std::move(f.payload));
        if (!st.isOk()) send_errors_.fetch_add(1);
      }
    };
    h.on_close = [this](ConnectionId id, const Status& st) {
      std::lock_guard<std::mutex> lock(mu_);
      closed_.emplace_back(id, st);
      cv_.notify_all();
    };
    Result<std::unique_ptr<FrameServer>> started = FrameServer::start(kHost, 0, options, h);
    if (!started.isOk()) ADD_FAILURE() << started.status().toString();
    owned_ = std::move(started).value();
    server_.store(owned_.get());
  }

  FrameServer& server() { return *owned_; }
  uint16_t port() const { return owned_->port(); }
  int frames() const { return frames_.load(); }
  int sendErrors() const { return send_errors_.load(); }

  std::vector<ConnectionId> connected() {
    std::lock_guard<std::mutex> lock(mu_);
    return connected_;
  }
  std::vector<std::pair<ConnectionId, Status>> closed() {
    std::lock_guard<std::mutex> lock(mu_);
    return closed_;
  }
  bool waitConnected(size_t n, Ms timeout = 5000ms) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return connected_.size() >= n; });
  }
  bool waitClosed(size_t n, Ms timeout = 5000ms) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return closed_.size() >= n; });
  }

  std::unique_ptr<FrameChannel> connect(const ControlOptions& options = testOptions()) {
    Result<std::unique_ptr<FrameChannel>> c = FrameChannel::connect(kHost, port(), options, 3000ms);
    if (!c.isOk()) {
      ADD_FAILURE() << c.status().toString();
      return nullptr;
    }
    return std::move(c).value();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<ConnectionId> connected_;
  std::vector<std::pair<ConnectionId, Status>> closed_;
  std::atomic<int> frames_{0};
  std::atomic<int> send_errors_{0};
  std::atomic<FrameServer*> server_{nullptr};
  std::unique_ptr<FrameServer> owned_;
};

// ---- raw-socket helpers (speak the wire format byte by byte) ---------------------------------

Fd rawConnect(uint16_t port) {
  Result<Fd> fd = tcpConnect(kHost, port, SteadyClock::now() + 2s);
  EXPECT_TRUE(fd.isOk()) << fd.status().toString();
  return fd.isOk() ? std::move(fd).value() : Fd();
}

// A one-connection fake server speaking the handshake by hand; `script` runs on the accepted
// socket after the handshake (or instead of it when `handshake` is false).
class FakeServer {
 public:
  FakeServer(const std::string& secret, std::function<void(int)> script, bool handshake = true,
             uint32_t version = control_wire::kProtocolVersion, bool forge_welcome = false) {
    Result<Fd> listening = tcpListen(kHost, 0);
    EXPECT_TRUE(listening.isOk());
    listen_ = std::move(listening).value();
    port_ = localPort(listen_.get()).value();
    thread_ = std::thread([=, this] {
      using namespace control_wire;
      if (!waitFd(listen_.get(), POLLIN, SteadyClock::now() + 5s, -1).isOk()) return;
      Result<Fd> accepted = tcpAccept(listen_.get());
      if (!accepted.isOk() || !accepted->valid()) return;
      const int fd = accepted->get();
      if (handshake) {
        Nonce server_nonce{};
        server_nonce.fill(3);
        std::vector<uint8_t> frame = serverHelloFrame(server_nonce);
        frame[12] = static_cast<uint8_t>(version);  // version is the payload's first u32
        if (!writeAll(fd, frame).isOk()) return;
        Result<Frame> auth = readRawFrame(fd);
        if (!auth.isOk() || auth->payload.size() != 4 + 2 * kNonceBytes) return;
        Nonce client_nonce{};
        std::memcpy(client_nonce.data(), auth->payload.data() + 4, kNonceBytes);
        const AuthKey key = deriveAuthKey(secret);
        const Tag want = clientTag(key, server_nonce, client_nonce);
        client_authenticated_ =
            std::memcmp(auth->payload.data() + 4 + kNonceBytes, want.data(), kTagBytes) == 0;
        Tag proof = serverTag(key, server_nonce, client_nonce);
        if (forge_welcome) proof[0] ^= 1;
        if (!writeAll(fd, welcomeFrame(proof)).isOk()) return;
      }
      script(fd);
      closedByPeer(fd, 5000ms);  // keep the socket until the client goes away
    });
  }
  ~FakeServer() { thread_.join(); }
  uint16_t port() const { return port_; }
  bool clientAuthenticated() const { return client_authenticated_.load(); }

 private:
  Fd listen_;
  uint16_t port_ = 0;
  std::atomic<bool> client_authenticated_{false};
  std::thread thread_;
};

uint16_t unusedPort() {
  Result<Fd> fd = tcpListen(kHost, 0);
  EXPECT_TRUE(fd.isOk());
  return localPort(fd->get()).value();  // closed on return: nobody listens there now
}

// ---- wire helpers ------------------------------------------------------------------------------

TEST(ControlWire, SipHashMatchesReferenceVectors) {
  control_wire::AuthKey key{};
  for (int i = 0; i < 16; ++i)
    key[i] = static_cast<uint8_t>(i);
  uint8_t msg[15];
  for (int i = 0; i < 15; ++i)
    msg[i] = static_cast<uint8_t>(i);
  // From the SipHash paper (Aumasson & Bernstein), appendix A, and its reference vectors.
  EXPECT_EQ(control_wire::sipHash24(key, msg, 15), 0xa129ca6149be45e5ULL);
  EXPECT_EQ(control_wire::sipHash24(key, msg, 0), 0x726fdb47dd0e0e31ULL);
}

TEST(ControlWire, TagsDependOnSecretNoncesAndDirection) {
  using namespace control_wire;
  Nonce a{}, b{};
  a.fill(1);
  b.fill(2);
  const AuthKey k1 = deriveAuthKey("alpha");
  const AuthKey k2 = deriveAuthKey("alphb");
  EXPECT_NE(k1, k2);
  EXPECT_NE(clientTag(k1, a, b), clientTag(k2, a, b));
  EXPECT_NE(clientTag(k1, a, b), clientTag(k1, b, a));
  EXPECT_NE(clientTag(k1, a, b), serverTag(k1, a, b));
  EXPECT_EQ(clientTag(k1, a, b), clientTag(deriveAuthKey("alpha"), a, b));
  const uint8_t x[3] = {1, 2, 3}, y[3] = {1, 2, 4};
  EXPECT_TRUE(equalConstantTime(x, x, 3));
  EXPECT_FALSE(equalConstantTime(x, y, 3));
  const auto h = encodeHeader(0xBEEF, 0, 0x01020304);
  const Header d = decodeHeader(h.data());
  EXPECT_EQ(d.magic, kMagic);
  EXPECT_EQ(d.type, 0xBEEF);
  EXPECT_EQ(d.flags, 0);
  EXPECT_EQ(d.length, 0x01020304u);
  EXPECT_EQ(h[0], 'W');  // the magic reads "WSYC" on the wire
  EXPECT_EQ(h[3], 'C');
}

// ---- end to end --------------------------------------------------------------------------------

TEST(FrameServer, EchoManyClientsManyThreadsNeverInterleaves) {
  TestServer server;
  constexpr int kClients = 6, kThreads = 4, kFrames = 150;
  std::vector<std::unique_ptr<FrameChannel>> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.push_back(server.connect());
    ASSERT_NE(clients.back(), nullptr);
  }
  ASSERT_TRUE(server.waitConnected(kClients));
  auto sizeOf = [](int seq) -> size_t { return seq % 25 == 0 ? 300000 : (seq * 37) % 5000; };

  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    // One receiver per client: checks every echoed frame and the per-sender order.
    threads.emplace_back([&, c] {
      std::vector<uint32_t> next(kThreads, 0);
      for (int i = 0; i < kThreads * kFrames; ++i) {
        Result<Frame> f = clients[c]->recv(10000ms);
        if (!f.isOk()) {
          ADD_FAILURE() << "client " << c << ": " << f.status().toString();
          failures++;
          return;
        }
        const uint32_t t = tagAt(f->payload, 1), seq = tagAt(f->payload, 2);
        if (tagAt(f->payload, 0) != static_cast<uint32_t>(c) || t >= kThreads || f->type != t ||
            seq != next[t] || f->payload != pattern(c, t, seq, sizeOf(seq))) {
          ADD_FAILURE() << "client " << c << ": bad frame (thread " << t << ", seq " << seq << ")";
          failures++;
          return;
        }
        next[t]++;
      }
    });
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, c, t] {
        for (int seq = 0; seq < kFrames; ++seq) {
          Status st = clients[c]->send(static_cast<uint16_t>(t), pattern(c, t, seq, sizeOf(seq)));
          if (!st.isOk()) {
            ADD_FAILURE() << st.toString();
            failures++;
            return;
          }
        }
      });
    }
  }
  for (auto& th : threads)
    th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(server.frames(), kClients * kThreads * kFrames);
  EXPECT_EQ(server.sendErrors(), 0);
  for (const auto& [id, st] : server.closed())
    ADD_FAILURE() << id << ": " << st.toString();
}

TEST(FrameServer, DeliversEveryFrameOfABurstLargerThanOneReadRound) {
  // 4 MiB of 1 KiB frames written at once: more than the server reads per poll round. Frames
  // already buffered when a round ends must still be delivered although the socket is then empty.
  TestServer server(testOptions(), /*echo=*/false);
  for (int attempt = 0; attempt < 8; ++attempt) {
    Fd fd = rawConnect(server.port());
    ASSERT_TRUE(rawHandshake(fd.get(), testOptions().secret).isOk());
    constexpr int kFrames = 4096;
    std::vector<uint8_t> burst;
    for (int i = 0; i < kFrames; ++i) {
      auto header = control_wire::encodeHeader(1, 0, 1024 - control_wire::kHeaderBytes);
      burst.insert(burst.end(), header.begin(), header.end());
      burst.resize(burst.size() + 1024 - control_wire::kHeaderBytes, static_cast<uint8_t>(i));
    }
    const int before = server.frames();
    ASSERT_TRUE(writeAll(fd.get(), burst).isOk());
    const auto deadline = SteadyClock::now() + 3s;
    while (server.frames() < before + kFrames && SteadyClock::now() < deadline) {
      std::this_thread::sleep_for(1ms);
    }
    ASSERT_EQ(server.frames(), before + kFrames) << "attempt " << attempt;
  }
}

TEST(FrameServer, ServerSendsFromManyThreadsInOrder) {
  TestServer server(testOptions(), /*echo=*/false);
  auto client = server.connect();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(server.waitConnected(1));
  const ConnectionId id = server.connected()[0];
  constexpr int kThreads = 4, kFrames = 200;
  std::vector<std::thread> senders;
  for (int t = 0; t < kThreads; ++t) {
    senders.emplace_back([&, t] {
      for (int seq = 0; seq < kFrames; ++seq) {
        EXPECT_TRUE(server.server().send(id, 9, pattern(1, t, seq, 100 + seq * 50)).isOk());
      }
    });
  }
  std::vector<uint32_t> next(kThreads, 0);
  for (int i = 0; i < kThreads * kFrames; ++i) {
    Result<Frame> f = client->recv(5000ms);
    ASSERT_TRUE(f.isOk()) << f.status().toString();
    const uint32_t t = tagAt(f->payload, 1), seq = tagAt(f->payload, 2);
    ASSERT_LT(t, static_cast<uint32_t>(kThreads));
    ASSERT_EQ(seq, next[t]);
    ASSERT_EQ(f->payload, pattern(1, t, seq, 100 + seq * 50));
    ASSERT_EQ(f->type, 9);
    next[t]++;
  }
  for (auto& th : senders)
    th.join();
}

TEST(FrameServer, LargeFrameDoesNotBlockOtherConnections) {
  TestServer server;
  auto big = server.connect();
  auto small = server.connect();
  ASSERT_NE(big, nullptr);
  ASSERT_NE(small, nullptr);
  const std::vector<uint8_t> payload = pattern(42, 0, 0, 64u << 20);
  // `big` does not read its echo yet: the server holds ~64 MiB queued for a socket that is full.
  ASSERT_TRUE(big->send(3, payload).isOk());
  for (int i = 0; i < 20; ++i) {
    const std::vector<uint8_t> ping = pattern(7, 7, i, 64);
    ASSERT_TRUE(small->send(1, ping).isOk());
    Result<Frame> pong = small->recv(3000ms);
    ASSERT_TRUE(pong.isOk()) << "ping " << i << ": " << pong.status().toString();
    EXPECT_EQ(pong->payload, ping);
  }
  Result<Frame> echo = big->recv(10000ms);
  ASSERT_TRUE(echo.isOk()) << echo.status().toString();
  EXPECT_EQ(echo->type, 3);
  EXPECT_TRUE(echo->payload == payload) << "64 MiB echo differs";
}

TEST(FrameServer, WrongSecretIsRefusedAndNeverReachesHandlers) {
  TestServer server;
  Result<std::unique_ptr<FrameChannel>> bad =
      FrameChannel::connect(kHost, server.port(), testOptions("not-the-secret"), 3000ms);
  ASSERT_FALSE(bad.isOk());
  EXPECT_EQ(bad.status().code(), WSYNC_ERR_PROTOCOL) << bad.status().toString();
  EXPECT_NE(bad.status().message().find("refused"), std::string::npos) << bad.status().message();

  auto good = server.connect();
  ASSERT_NE(good, nullptr);
  ASSERT_TRUE(good->send(5, pattern(1, 2, 3, 10)).isOk());
  ASSERT_TRUE(good->recv(3000ms).isOk());
  EXPECT_EQ(server.connected().size(), 1u);
  EXPECT_EQ(server.frames(), 1);
}

TEST(FrameServer, RawClientWithWrongSecretIsRefused) {
  TestServer server;
  Fd fd = rawConnect(server.port());
  Status st = rawHandshake(fd.get(), "wrong");
  EXPECT_FALSE(st.isOk());
  EXPECT_TRUE(closedByPeer(fd.get()));
  EXPECT_TRUE(server.connected().empty());
}

TEST(FrameServer, GarbageIsDroppedAndOthersKeepBeingServed) {
  TestServer server;
  auto good = server.connect();
  ASSERT_NE(good, nullptr);

  Fd fd = rawConnect(server.port());
  std::vector<uint8_t> garbage = pattern(0xdead, 0xbeef, 1, 4096);
  ASSERT_TRUE(writeAll(fd.get(), garbage).isOk());
  EXPECT_TRUE(closedByPeer(fd.get()));

  // Garbage after a valid hello read: a frame with a bad magic.
  Fd fd2 = rawConnect(server.port());
  ASSERT_TRUE(readRawFrame(fd2.get()).isOk());
  ASSERT_TRUE(writeAll(fd2.get(), std::vector<uint8_t>(64, 0xff)).isOk());
  EXPECT_TRUE(closedByPeer(fd2.get()));

  ASSERT_TRUE(good->send(1, pattern(5, 5, 5, 1000)).isOk());
  Result<Frame> echo = good->recv(3000ms);
  ASSERT_TRUE(echo.isOk()) << echo.status().toString();
  EXPECT_EQ(echo->payload, pattern(5, 5, 5, 1000));
  EXPECT_EQ(server.connected().size(), 1u);
  EXPECT_EQ(server.frames(), 1);
}

TEST(FrameServer, OversizedLengthIsDroppedWithoutAllocating) {
  ControlOptions options = testOptions();
  options.max_frame_bytes = 1 << 20;
  TestServer server(options);

  // Before the handshake: a handshake frame announcing 1 GiB.
  Fd pre = rawConnect(server.port());
  auto header =
      control_wire::encodeHeader(control_wire::kClientAuth, control_wire::kFlagHandshake, 1u << 30);
  ASSERT_TRUE(writeAll(pre.get(), {header.begin(), header.end()}).isOk());
  EXPECT_TRUE(closedByPeer(pre.get()));
  EXPECT_TRUE(server.connected().empty());

  // After the handshake: one byte above max_frame_bytes, and a 4 GiB - 1 length.
  for (uint32_t length : {(1u << 20) + 1, 0xffffffffu}) {
    Fd fd = rawConnect(server.port());
    ASSERT_TRUE(rawHandshake(fd.get(), options.secret).isOk());
    header = control_wire::encodeHeader(7, 0, length);
    ASSERT_TRUE(writeAll(fd.get(), {header.begin(), header.end()}).isOk());
    EXPECT_TRUE(closedByPeer(fd.get()));
  }
  ASSERT_TRUE(server.waitClosed(2));
  for (const auto& [id, st] : server.closed()) {
    EXPECT_EQ(st.code(), WSYNC_ERR_PROTOCOL) << st.toString();
    EXPECT_NE(st.message().find("above the limit of 1048576"), std::string::npos) << st.message();
  }
  EXPECT_EQ(server.frames(), 0);
  // A frame of exactly max_frame_bytes still goes through.
  auto good = server.connect(options);
  ASSERT_NE(good, nullptr);
  ASSERT_TRUE(good->send(2, pattern(9, 9, 9, 1 << 20)).isOk());
  Result<Frame> echo = good->recv(3000ms);
  ASSERT_TRUE(echo.isOk()) << echo.status().toString();
  EXPECT_EQ(echo->payload.size(), 1u << 20);
  // The client refuses to send one byte more, and sends nothing.
  Status too_big = good->send(2, std::vector<uint8_t>((1 << 20) + 1));
  EXPECT_EQ(too_big.code(), WSYNC_ERR_INVALID_ARGUMENT) << too_big.toString();
  EXPECT_TRUE(good->send(2, {}).isOk());
  EXPECT_TRUE(good->recv(3000ms).isOk());
}

TEST(FrameServer, TruncatedFramesAreDropped) {
  TestServer server;
  // Before the handshake: half a header, then close.
  {
    Fd fd = rawConnect(server.port());
    auto header =
        control_wire::encodeHeader(control_wire::kClientAuth, control_wire::kFlagHandshake, 36);
    ASSERT_TRUE(writeAll(fd.get(), {header.begin(), header.begin() + 5}).isOk());
  }
  // After the handshake: a header announcing 1000 bytes, 10 of them, then close.
  {
    Fd fd = rawConnect(server.port());
    ASSERT_TRUE(rawHandshake(fd.get(), testOptions().secret).isOk());
    auto header = control_wire::encodeHeader(4, 0, 1000);
    std::vector<uint8_t> bytes(header.begin(), header.end());
    bytes.resize(bytes.size() + 10, 0xab);
    ASSERT_TRUE(writeAll(fd.get(), bytes).isOk());
  }
  ASSERT_TRUE(server.waitClosed(1));
  const Status st = server.closed()[0].second;
  EXPECT_EQ(st.code(), WSYNC_ERR_PROTOCOL) << st.toString();
  EXPECT_NE(st.message().find("truncated frame"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("22 of 1012 bytes"), std::string::npos) << st.message();
  EXPECT_EQ(server.connected().size(), 1u);
  EXPECT_EQ(server.frames(), 0);
  auto good = server.connect();
  ASSERT_NE(good, nullptr);
  ASSERT_TRUE(good->send(1, {1, 2, 3}).isOk());
  EXPECT_TRUE(good->recv(3000ms).isOk());
}

TEST(FrameServer, SlowHandshakeIsDropped) {
  ControlOptions options = testOptions();
  options.handshake_timeout = 200ms;
  TestServer server(options);
  Fd fd = rawConnect(server.port());
  const auto start = SteadyClock::now();
  ASSERT_TRUE(readRawFrame(fd.get()).isOk());  // the hello; then we say nothing
  EXPECT_TRUE(closedByPeer(fd.get(), 3000ms));
  EXPECT_GE(SteadyClock::now() - start, 150ms);
  EXPECT_TRUE(server.connected().empty());
  EXPECT_TRUE(server.closed().empty());
}

TEST(FrameServer, StopClosesEveryConnection) {
  TestServer server;
  auto a = server.connect();
  auto b = server.connect();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(server.waitConnected(2));
  server.server().stop();
  server.server().stop();  // idempotent
  ASSERT_EQ(server.closed().size(), 2u);
  for (const auto& [id, st] : server.closed())
    EXPECT_EQ(st.code(), WSYNC_ERR_ABORTED);
  EXPECT_EQ(a->recv(3000ms).status().code(), WSYNC_ERR_REMOTE);
  EXPECT_EQ(b->recv(3000ms).status().code(), WSYNC_ERR_REMOTE);
  EXPECT_EQ(server.server().send(1, 1, {}).code(), WSYNC_ERR_ABORTED);
}

TEST(FrameServer, SendAndStartErrorsNameTheCulprit) {
  TestServer server(testOptions(), /*echo=*/false);
  Status unknown = server.server().send(99, 1, {});
  EXPECT_EQ(unknown.code(), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(unknown.message().find("99"), std::string::npos);

  auto client = server.connect();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(server.waitConnected(1));
  const ConnectionId id = server.connected()[0];
  client.reset();  // the client goes away
  ASSERT_TRUE(server.waitClosed(1));
  EXPECT_EQ(server.closed()[0].first, id);
  EXPECT_EQ(server.closed()[0].second.code(), WSYNC_ERR_REMOTE)
      << server.closed()[0].second.toString();
  EXPECT_EQ(server.server().send(id, 1, {}).code(), WSYNC_ERR_REMOTE);

  ControlOptions empty = testOptions("");
  EXPECT_EQ(FrameServer::start(kHost, 0, empty, {}).status().code(), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(FrameChannel::connect(kHost, server.port(), empty, 100ms).status().code(),
            WSYNC_ERR_INVALID_ARGUMENT);
  Result<std::unique_ptr<FrameServer>> clash =
      FrameServer::start(kHost, server.port(), testOptions(), {});
  EXPECT_EQ(clash.status().code(), WSYNC_ERR_SYSTEM);
  EXPECT_NE(clash.status().message().find(std::to_string(server.port())), std::string::npos);
}

TEST(FrameServer, HandlerThrowingClosesOnlyItsConnection) {
  std::atomic<FrameServer*> self{nullptr};
  std::mutex mu;
  std::vector<Status> closes;
  FrameServerHandlers h;
  h.on_frame = [&](ConnectionId id, Frame&& f) {
    if (f.type == 13) throw std::runtime_error("unlucky frame");
    (void)self.load()->send(id, f.type, std::move(f.payload));
  };
  h.on_close = [&](ConnectionId, const Status& st) {
    std::lock_guard<std::mutex> lock(mu);
    closes.push_back(st);
  };
  auto started = FrameServer::start(kHost, 0, testOptions(), h);
  ASSERT_TRUE(started.isOk());
  self = started->get();
  auto a = FrameChannel::connect(kHost, (*started)->port(), testOptions(), 2000ms);
  auto b = FrameChannel::connect(kHost, (*started)->port(), testOptions(), 2000ms);
  ASSERT_TRUE(a.isOk() && b.isOk());
  ASSERT_TRUE((*a)->send(13, {}).isOk());
  EXPECT_EQ((*a)->recv(3000ms).status().code(), WSYNC_ERR_REMOTE);
  ASSERT_TRUE((*b)->send(1, {1}).isOk());
  EXPECT_TRUE((*b)->recv(3000ms).isOk());
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(closes.size(), 1u);
  EXPECT_EQ(closes[0].code(), WSYNC_ERR_INTERNAL);
  EXPECT_NE(closes[0].message().find("unlucky frame"), std::string::npos);
}

TEST(FrameChannel, ConnectTimesOutWhenNobodyListens) {
  const uint16_t port = unusedPort();
  const auto start = SteadyClock::now();
  auto c = FrameChannel::connect(kHost, port, testOptions(), 300ms);
  const auto took = SteadyClock::now() - start;
  ASSERT_FALSE(c.isOk());
  EXPECT_EQ(c.status().code(), WSYNC_ERR_TIMEOUT) << c.status().toString();
  EXPECT_NE(c.status().message().find(std::to_string(port)), std::string::npos);
  EXPECT_GE(took, 250ms);
  EXPECT_LT(took, 2000ms);
}

TEST(FrameChannel, ConnectRetriesUntilTheServerListens) {
  const uint16_t port = unusedPort();
  std::unique_ptr<FrameServer> server;
  std::thread late([&] {
    std::this_thread::sleep_for(300ms);
    auto s = FrameServer::start(kHost, port, testOptions(), {});
    ASSERT_TRUE(s.isOk()) << s.status().toString();
    server = std::move(s).value();
  });
  auto c = FrameChannel::connect(kHost, port, testOptions(), 5000ms);
  late.join();
  EXPECT_TRUE(c.isOk()) << c.status().toString();
}

TEST(FrameChannel, RecvTimeoutLeavesTheChannelUsable) {
  TestServer server;
  auto c = server.connect();
  ASSERT_NE(c, nullptr);
  const auto start = SteadyClock::now();
  Result<Frame> none = c->recv(100ms);
  EXPECT_EQ(none.status().code(), WSYNC_ERR_TIMEOUT);
  EXPECT_GE(SteadyClock::now() - start, 90ms);
  ASSERT_TRUE(c->send(8, {4, 5, 6}).isOk());
  Result<Frame> f = c->recv(3000ms);
  ASSERT_TRUE(f.isOk()) << f.status().toString();
  EXPECT_EQ(f->type, 8);
  EXPECT_EQ(f->payload, (std::vector<uint8_t>{4, 5, 6}));
}

TEST(FrameChannel, PartialFrameSurvivesRecvTimeout) {
  const std::vector<uint8_t> payload = pattern(3, 1, 4, 200000);
  std::atomic<bool> resume{false};
  FakeServer fake(testOptions().secret, [&](int fd) {
    auto header = control_wire::encodeHeader(77, 0, static_cast<uint32_t>(payload.size()));
    std::vector<uint8_t> first(header.begin(), header.end());
    first.insert(first.end(), payload.begin(), payload.begin() + 1000);
    ASSERT_TRUE(writeAll(fd, first).isOk());
    while (!resume.load())
      std::this_thread::sleep_for(5ms);
    ASSERT_TRUE(writeAll(fd, {payload.begin() + 1000, payload.end()}).isOk());
  });
  auto c = FrameChannel::connect(kHost, fake.port(), testOptions(), 3000ms);
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_TRUE(fake.clientAuthenticated());
  EXPECT_EQ((*c)->recv(100ms).status().code(), WSYNC_ERR_TIMEOUT);
  resume = true;
  Result<Frame> f = (*c)->recv(3000ms);
  ASSERT_TRUE(f.isOk()) << f.status().toString();
  EXPECT_EQ(f->type, 77);
  EXPECT_TRUE(f->payload == payload);
}

TEST(FrameChannel, RejectsServersThatCannotProveTheSecretOrSpeakAnotherVersion) {
  {
    FakeServer fake(
        testOptions().secret, [](int) {}, true, control_wire::kProtocolVersion,
        /*forge_welcome=*/true);
    auto c = FrameChannel::connect(kHost, fake.port(), testOptions(), 3000ms);
    EXPECT_EQ(c.status().code(), WSYNC_ERR_PROTOCOL);
    EXPECT_NE(c.status().message().find("failed to prove"), std::string::npos)
        << c.status().message();
  }
  {
    FakeServer fake(
        testOptions().secret, [](int) {}, true, /*version=*/99);
    auto c = FrameChannel::connect(kHost, fake.port(), testOptions(), 3000ms);
    EXPECT_EQ(c.status().code(), WSYNC_ERR_PROTOCOL);
    EXPECT_NE(c.status().message().find("version 99"), std::string::npos) << c.status().message();
  }
  {
    // Not a wsync server at all: it sends text.
    FakeServer fake(
        "", [](int fd) { (void)writeAll(fd, std::vector<uint8_t>(40, 'x')); }, false);
    auto c = FrameChannel::connect(kHost, fake.port(), testOptions(), 3000ms);
    EXPECT_EQ(c.status().code(), WSYNC_ERR_PROTOCOL);
    EXPECT_NE(c.status().message().find("bad magic"), std::string::npos) << c.status().message();
  }
  {
    // A server that accepts and then says nothing: the handshake times out.
    ControlOptions quick = testOptions();
    quick.handshake_timeout = 200ms;
    FakeServer fake(
        "", [](int) {}, false);
    auto c = FrameChannel::connect(kHost, fake.port(), quick, 3000ms);
    EXPECT_EQ(c.status().code(), WSYNC_ERR_TIMEOUT) << c.status().toString();
  }
}

TEST(FrameChannel, PeerCloseIsReportedAfterQueuedFramesAndSendNeverRaisesSigpipe) {
  TestServer server(testOptions(), /*echo=*/false);
  auto c = server.connect();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(server.waitConnected(1));
  const ConnectionId id = server.connected()[0];
  // A frame queued just before close() is still delivered, then the close is seen.
  ASSERT_TRUE(server.server().send(id, 11, pattern(1, 1, 1, 500000)).isOk());
  server.server().close(id);
  EXPECT_EQ(server.server().send(id, 11, {}).code(), WSYNC_ERR_REMOTE);
  Result<Frame> last = c->recv(3000ms);
  ASSERT_TRUE(last.isOk()) << last.status().toString();
  EXPECT_EQ(last->payload, pattern(1, 1, 1, 500000));
  Result<Frame> closed = c->recv(3000ms);
  EXPECT_EQ(closed.status().code(), WSYNC_ERR_REMOTE) << closed.status().toString();
  EXPECT_EQ(c->recv(10ms).status().code(), WSYNC_ERR_REMOTE);  // final
  ASSERT_TRUE(server.waitClosed(1));
  EXPECT_EQ(server.closed()[0].second.code(), WSYNC_ERR_ABORTED);

  // Writing into the closed connection fails with an error (no SIGPIPE kills the process).
  Status st;
  const std::vector<uint8_t> chunk(1 << 20, 1);
  for (int i = 0; i < 200 && st.isOk(); ++i)
    st = c->send(1, chunk);
  EXPECT_EQ(st.code(), WSYNC_ERR_REMOTE) << st.toString();
}

TEST(FrameChannel, ShutdownWakesABlockedRecv) {
  TestServer server;
  auto c = server.connect();
  ASSERT_NE(c, nullptr);
  Status result;
  auto start = SteadyClock::now();
  std::thread waiter([&] { result = c->recv(10000ms).status(); });
  std::this_thread::sleep_for(100ms);
  c->shutdown();
  waiter.join();
  EXPECT_EQ(result.code(), WSYNC_ERR_ABORTED) << result.toString();
  EXPECT_LT(SteadyClock::now() - start, 2000ms);
  EXPECT_EQ(c->send(1, {}).code(), WSYNC_ERR_ABORTED);
  EXPECT_EQ(c->recv(10ms).status().code(), WSYNC_ERR_ABORTED);
  ASSERT_TRUE(server.waitClosed(1));  // the server sees the connection end
}

}  // namespace
}  // namespace wsync
