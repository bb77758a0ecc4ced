// wsync-hostile-client: attacks a running wsync-coordinator's control port without the secret,
// from several loopback source addresses at once, for --seconds, while the job streams versions
// (tests/fault/run_hostile.sh runs the job and checks it):
//   flood     (127.0.0.2) --flood idle connections at once, held without a byte, round after round
//   garbage   (127.0.0.3) random bytes
//   truncated (127.0.0.3) the start of a valid client authentication frame, then our FIN
//   huge      (127.0.0.4) frame headers announcing 4 GiB (handshake and application flags)
//   nosecret  (127.0.0.4) an application frame without any handshake; an empty authentication
//   wrong     (127.0.0.5) a full handshake with a wrong secret
//   churn     (127.0.0.6) connect and close in a tight loop
//   probe     (127.0.0.7) another host: every 100 ms it must get the server's hello, never busy
// It samples the coordinator's resident memory (VmRSS of /proc/<pid>/status) once the warm-up is
// over and at the end, and reads the coordinator's refusal counters from /metrics when given.
// Checks (exit 1 when one fails, with the reason): the flood never had more than --per-peer-limit
// connections in the handshake at once and the rest were told busy; every held connection was
// dropped as idle within --idle-drop-ms of its connect; every garbage, truncated, huge, no-secret
// and wrong-secret connection was closed (the last two with a refusal); the probe was never
// refused; the resident memory grew by at most --rss-growth-kib; the counters match what was sent.
// Prints "hostile: attack running" when it starts and "hostile: refused connections N" at the end.
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cxxopts.hpp>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "control/frame_channel.h"
#include "support/raw_control_client.h"
#ifdef WSYNC_HOSTILE_HAVE_HTTPLIB
#include <httplib.h>
#endif

namespace {

using namespace wsync;
using namespace wsync::raw_control;
using Clock = std::chrono::steady_clock;
namespace cw = wsync::control_wire;

struct Args {
  uint16_t port = 0;
  int pid = 0;
  double seconds = 12;
  double warmup = 4;
  int flood = 500;
  size_t per_peer_limit = 32;
  int idle_ms = 2000;
  int idle_drop_ms = 5000;
  int64_t rss_growth_kib = 2048;
  int metrics_port = 0;
};

// Failures and counts shared by the attack threads.
struct Tally {
  std::mutex mu;
  std::vector<std::string> failures;
  std::atomic<uint64_t> flood_busy{0}, flood_held{0}, flood_rounds{0};
  std::atomic<uint64_t> garbage{0}, truncated{0}, huge{0}, nosecret{0}, wrong{0}, churn{0};
  std::atomic<uint64_t> probes{0};
  std::atomic<int64_t> slowest_idle_drop_ms{0};
  void fail(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu);
    if (failures.size() < 20) failures.push_back(what);
  }
};

int64_t residentKib(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

std::vector<uint8_t> randomBytes(std::mt19937& rng, size_t n) {
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v)
    b = static_cast<uint8_t>(rng());
  return v;
}

// One round of the flood: opens `count` connections from 127.0.0.2 as fast as it can, sorts them
// into held (got the hello) and busy, then waits for the server to drop every held one as idle.
// Among those opened within idle_ms / 2 of the round's start (none of which can have been dropped
// yet), at most per_peer_limit may be held.
void floodRound(const Args& a, Tally& t) {
  struct Opened {
    Fd fd;
    Clock::time_point at;
  };
  std::vector<Opened> fds;
  const auto round_start = Clock::now();
  for (int i = 0; i < a.flood; ++i) {
    Result<Fd> fd = connectFrom("127.0.0.2", a.port, Ms(3000));
    if (fd.isOk()) fds.push_back({std::move(fd).value(), Clock::now()});
  }
  std::vector<Opened> held;
  uint64_t busy = 0;
  size_t held_early = 0;
  for (Opened& o : fds) {
    Result<Frame> first = readRawFrame(o.fd.get(), Ms(3000));
    if (first.isOk() && first->type == cw::kServerHello) {
      held_early += o.at - round_start < Ms(a.idle_ms / 2) ? 1 : 0;
      held.push_back(std::move(o));
    } else if (first.isOk() && first->type == cw::kBusy) {
      ++busy;
    } else {
      t.fail("flood: a connection got neither hello nor busy: " +
             (first.isOk() ? "type " + std::to_string(first->type) : first.status().toString()));
    }
  }
  if (held_early > a.per_peer_limit) {
    t.fail("flood: " + std::to_string(held_early) + " connections from one address were in the " +
           "handshake at once (limit " + std::to_string(a.per_peer_limit) + ")");
  }
  for (Opened& o : held) {
    const auto left = std::chrono::duration_cast<Ms>(Ms(a.idle_drop_ms) - (Clock::now() - o.at));
    if (!closedByPeer(o.fd.get(), std::max(Ms(1), left))) {
      t.fail("flood: an idle connection was not dropped within " + std::to_string(a.idle_drop_ms) +
             " ms");
      break;
    }
    const int64_t ms = std::chrono::duration_cast<Ms>(Clock::now() - o.at).count();
    t.slowest_idle_drop_ms.store(std::max(t.slowest_idle_drop_ms.load(), ms));
  }
  t.flood_busy += busy;
  t.flood_held += held.size();
  ++t.flood_rounds;
}

// Sends `bytes` from `source` and expects the server to close within 3 s. When `refusal` is
// set, the first frame after the hello must be kRefused.
bool sendAndExpectClose(const Args& a, Tally& t, const char* what, const std::string& source,
                        const std::vector<uint8_t>& bytes, bool after_hello, bool refusal) {
  Result<Fd> fd = connectFrom(source, a.port, Ms(3000));
  if (!fd.isOk()) {
    t.fail(std::string(what) + ": connect: " + fd.status().toString());
    return false;
  }
  if (after_hello) {
    Result<Frame> hello = readRawFrame(fd->get(), Ms(3000));
    if (!hello.isOk() || hello->type != cw::kServerHello) {
      t.fail(std::string(what) + ": no hello from another address than the flood's");
      return false;
    }
  }
  if (!writeAll(fd->get(), bytes).isOk()) return true;  // closed under our feet: also refused
  if (refusal) {
    Result<Frame> reply = readRawFrame(fd->get(), Ms(3000));
    if (!reply.isOk() || reply->type != cw::kRefused) {
      t.fail(std::string(what) + ": no refusal: " +
             (reply.isOk() ? "type " + std::to_string(reply->type) : reply.status().toString()));
      return false;
    }
  }
  ::shutdown(fd->get(), SHUT_WR);  // a truncated frame: nothing more comes
  if (!closedByPeer(fd->get(), Ms(3000))) {
    t.fail(std::string(what) + ": the server kept the connection open");
    return false;
  }
  return true;
}

std::vector<uint8_t> headerBytes(uint16_t type, uint16_t flags, uint32_t length) {
  const auto h = cw::encodeHeader(type, flags, length);
  return std::vector<uint8_t>(h.begin(), h.end());
}

// Runs `step` until `stop`; a short pause between steps keeps the 2-core machine's job moving.
void loop(const std::atomic<bool>& stop, Ms pause, const std::function<void()>& step) {
  while (!stop.load()) {
    step();
    if (pause.count() > 0) std::this_thread::sleep_for(pause);
  }
}

std::vector<std::thread> startAttacks(const Args& a, Tally& t, const std::atomic<bool>& stop) {
  std::vector<std::thread> threads;
  threads.emplace_back([&] { loop(stop, Ms(0), [&] { floodRound(a, t); }); });
  threads.emplace_back([&] {
    std::mt19937 rng(1);
    loop(stop, Ms(1), [&] {
      if (sendAndExpectClose(a, t, "garbage", "127.0.0.3", randomBytes(rng, 1 + rng() % 2048),
                             false, false))
        ++t.garbage;
      // A valid authentication frame's first 1..55 bytes, then our FIN.
      std::vector<uint8_t> auth = cw::clientAuthFrame(cw::Nonce{}, cw::Tag{});
      auth.resize(1 + rng() % (auth.size() - 1));
      if (sendAndExpectClose(a, t, "truncated", "127.0.0.3", auth, true, false)) ++t.truncated;
    });
  });
  threads.emplace_back([&] {
    std::mt19937 rng(2);
    loop(stop, Ms(1), [&] {
      const bool handshake = rng() % 2 == 0;
      std::vector<uint8_t> huge =
          headerBytes(handshake ? cw::kClientAuth : 1, handshake ? cw::kFlagHandshake : 0,
                      0xffffffffu - static_cast<uint32_t>(rng() % 1024));
      const std::vector<uint8_t> tail = randomBytes(rng, rng() % 4096);
      huge.insert(huge.end(), tail.begin(), tail.end());
      if (sendAndExpectClose(a, t, "huge", "127.0.0.4", huge, rng() % 2 == 0, false)) ++t.huge;
      // No secret: an application frame instead of the handshake, or an empty authentication.
      std::vector<uint8_t> hello = headerBytes(1, 0, 16);
      hello.resize(hello.size() + 16, 0);
      if (sendAndExpectClose(a, t, "nosecret", "127.0.0.4", hello, true, true)) ++t.nosecret;
      if (sendAndExpectClose(a, t, "nosecret", "127.0.0.4",
                             headerBytes(cw::kClientAuth, cw::kFlagHandshake, 0), true, true))
        ++t.nosecret;
    });
  });
  threads.emplace_back([&] {
    loop(stop, Ms(1), [&] {
      Result<Fd> fd = connectFrom("127.0.0.5", a.port, Ms(3000));
      if (!fd.isOk()) return t.fail("wrong: connect: " + fd.status().toString());
      const Status st = rawHandshake(fd->get(), "wrong secret, wrong secret");
      if (st.message().find("refused: authentication failed (wrong shared secret)") ==
          std::string::npos) {
        return t.fail("wrong: not refused as a wrong secret: " + st.toString());
      }
      ++t.wrong;
    });
  });
  threads.emplace_back([&] {
    loop(stop, Ms(0), [&] {
      if (connectFrom("127.0.0.6", a.port, Ms(3000)).isOk()) ++t.churn;
    });
  });
  threads.emplace_back([&] {
    loop(stop, Ms(100), [&] {
      Result<Fd> fd = connectFrom("127.0.0.7", a.port, Ms(3000));
      if (!fd.isOk()) return t.fail("probe: connect: " + fd.status().toString());
      Result<Frame> first = readRawFrame(fd->get(), Ms(2000));
      if (!first.isOk() || first->type != cw::kServerHello) {
        return t.fail(
            "probe: another host was not served: " +
            (first.isOk() ? "type " + std::to_string(first->type) : first.status().toString()));
      }
      ++t.probes;
    });
  });
  return threads;
}

// The coordinator's wsync_control_refusals_total{reason="..."} samples; empty when unavailable.
std::string fetchMetrics(int port) {
#ifdef WSYNC_HOSTILE_HAVE_HTTPLIB
  if (port <= 0) return "";
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(3);
  client.set_read_timeout(3);
  auto res = client.Get("/metrics");
  return res && res->status == 200 ? res->body : "";
#else
  (void)port;
  return "";
#endif
}

uint64_t counter(const std::string& page, const std::string& reason) {
  const std::string key = "wsync_control_refusals_total{reason=\"" + reason + "\"} ";
  const size_t at = page.find(key);
  return at == std::string::npos ? 0 : std::stoull(page.substr(at + key.size()));
}

int run(const Args& a) {
  Tally t;
  std::atomic<bool> stop{false};
  const auto start = Clock::now();
  std::vector<std::thread> threads = startAttacks(a, t, stop);
  std::printf("hostile: attack running\n");
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::duration<double>(a.warmup));
  const int64_t base_kib = residentKib(a.pid);
  std::printf("hostile: coordinator VmRSS after %.0f s of warm-up: %lld KiB\n", a.warmup,
              static_cast<long long>(base_kib));
  std::fflush(stdout);
  std::this_thread::sleep_until(start + std::chrono::duration<double>(a.seconds));
  const int64_t end_kib = residentKib(a.pid);
  stop.store(true);
  for (std::thread& th : threads)
    th.join();
  const uint64_t refused = t.flood_busy + t.flood_held + t.garbage + t.truncated + t.huge +
                           t.nosecret + t.wrong + t.churn;
  std::printf(
      "hostile: %.1f s: flood %llu rounds of %d (%llu held in the handshake, %llu told busy, "
      "slowest idle drop %lld ms), garbage %llu, truncated %llu, huge %llu, no secret %llu, "
      "wrong secret %llu, connect-close %llu, other-host probes served %llu\n",
      std::chrono::duration<double>(Clock::now() - start).count(),
      static_cast<unsigned long long>(t.flood_rounds.load()), a.flood,
      static_cast<unsigned long long>(t.flood_held.load()),
      static_cast<unsigned long long>(t.flood_busy.load()),
      static_cast<long long>(t.slowest_idle_drop_ms.load()),
      static_cast<unsigned long long>(t.garbage.load()),
      static_cast<unsigned long long>(t.truncated.load()),
      static_cast<unsigned long long>(t.huge.load()),
      static_cast<unsigned long long>(t.nosecret.load()),
      static_cast<unsigned long long>(t.wrong.load()),
      static_cast<unsigned long long>(t.churn.load()),
      static_cast<unsigned long long>(t.probes.load()));
  std::printf(
      "hostile: coordinator VmRSS %lld KiB after warm-up, %lld KiB at the end (%+lld KiB)\n",
      static_cast<long long>(base_kib), static_cast<long long>(end_kib),
      static_cast<long long>(end_kib - base_kib));
  if (base_kib < 0 || end_kib < 0) t.fail("cannot read the coordinator's VmRSS");
  if (a.rss_growth_kib >= 0 && end_kib - base_kib > a.rss_growth_kib) {
    t.fail("the coordinator's resident memory grew by " + std::to_string(end_kib - base_kib) +
           " KiB under attack (bound " + std::to_string(a.rss_growth_kib) + " KiB)");
  }
  if (t.flood_rounds == 0 || t.flood_busy == 0 || t.wrong == 0 || t.garbage == 0 || t.huge == 0 ||
      t.nosecret == 0 || t.truncated == 0 || t.churn == 0 || t.probes == 0) {
    t.fail("an attack never completed once");
  }
  const std::string page = fetchMetrics(a.metrics_port);
  if (!page.empty()) {
    std::printf(
        "hostile: coordinator counters: wrong_secret %llu, bad_handshake %llu, idle %llu, "
        "peer_limit %llu, abandoned %llu\n",
        static_cast<unsigned long long>(counter(page, "wrong_secret")),
        static_cast<unsigned long long>(counter(page, "bad_handshake")),
        static_cast<unsigned long long>(counter(page, "idle")),
        static_cast<unsigned long long>(counter(page, "peer_limit")),
        static_cast<unsigned long long>(counter(page, "abandoned")));
    if (counter(page, "wrong_secret") < t.wrong) t.fail("wrong_secret counter below the attempts");
    if (counter(page, "peer_limit") < t.flood_busy) t.fail("peer_limit counter below the busy");
    if (counter(page, "idle") < t.flood_held) t.fail("idle counter below the held connections");
    if (counter(page, "bad_handshake") < t.garbage + t.nosecret) {
      t.fail("bad_handshake counter below the garbage and no-secret connections");
    }
  } else if (a.metrics_port > 0) {
    std::printf("hostile: no /metrics to read (built without cpp-httplib?)\n");
  }
  std::printf("hostile: refused connections %llu\n", static_cast<unsigned long long>(refused));
  for (const std::string& f : t.failures)
    std::printf("hostile: FAILED: %s\n", f.c_str());
  std::fflush(stdout);
  return t.failures.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  cxxopts::Options options("wsync-hostile-client", "Attacks a wsync-coordinator's control port");
  // clang-format off
  options.add_options()
      ("port", "the coordinator's port on 127.0.0.1", cxxopts::value<int>())
      ("pid", "the coordinator's process id (for VmRSS)", cxxopts::value<int>())
      ("seconds", "attack this long", cxxopts::value<double>()->default_value("12"))
      ("warmup", "sample VmRSS first after this long", cxxopts::value<double>()->default_value("4"))
      ("flood", "idle connections per flood round", cxxopts::value<int>()->default_value("500"))
      ("per-peer-limit", "the server's max_handshakes_per_peer", cxxopts::value<int>()->default_value("32"))
      ("idle-ms", "the server's idle_handshake_timeout", cxxopts::value<int>()->default_value("2000"))
      ("idle-drop-ms", "bound on dropping an idle connection", cxxopts::value<int>()->default_value("5000"))
      ("rss-growth-kib", "bound on VmRSS growth after the warm-up (negative: not checked)",
       cxxopts::value<int>()->default_value("2048"))
      ("metrics-port", "the coordinator's /metrics port (0: none)", cxxopts::value<int>()->default_value("0"))
      ("free-port", "print a free port on 127.0.0.1 and exit");
  // clang-format on
  try {
    const auto parsed = options.parse(argc, argv);
    if (parsed.count("free-port") != 0) {
      Result<Fd> fd = tcpListen("127.0.0.1", 0);
      if (!fd.isOk()) return 2;
      std::printf("%u\n", static_cast<unsigned>(localPort(fd->get()).value()));
      return 0;
    }
    Args a;
    a.port = static_cast<uint16_t>(parsed["port"].as<int>());
    a.pid = parsed["pid"].as<int>();
    a.seconds = parsed["seconds"].as<double>();
    a.warmup = parsed["warmup"].as<double>();
    a.flood = parsed["flood"].as<int>();
    a.per_peer_limit = static_cast<size_t>(parsed["per-peer-limit"].as<int>());
    a.idle_ms = parsed["idle-ms"].as<int>();
    a.idle_drop_ms = parsed["idle-drop-ms"].as<int>();
    a.rss_growth_kib = parsed["rss-growth-kib"].as<int>();
    a.metrics_port = parsed["metrics-port"].as<int>();
    return run(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wsync-hostile-client: %s\n", e.what());
    return 2;
  }
}
