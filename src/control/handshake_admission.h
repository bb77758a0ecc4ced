// Admission of unauthenticated connections to a FrameServer, and the record of the ones it
// refuses. Pure bookkeeping (no sockets; the caller passes the clock), used by the server thread
// only, except RefusalLog::counts(), which any thread may call.
//
//  - HandshakeLimiter: how many connections are in the handshake, per peer address and in all.
//    One address may hold at most `per_peer` of them, all addresses together `total`, so a host
//    that floods the port takes at most its own share and never locks out the others.
//  - RefusalLog: counts every refused connection by reason and logs them through the owner's
//    sink, rate-limited: at most one line per peer address per `per_peer_interval`, at most
//    `max_lines_per_second` lines in any second, and every `summary_interval` one line saying how
//    many refusals were not logged (by reason). A host that opens thousands of connections a
//    second costs a few lines, never a line each.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

namespace wsync {

// Why a connection never got past the handshake.
enum class RefusalReason : uint8_t {
  kWrongSecret,       // its authentication tag does not match the shared secret
  kBadHandshake,      // no authentication: garbage, a truncated or oversized frame, a frame that
                      // is not the client's authentication, another protocol version
  kHandshakeTimeout,  // it started the handshake but did not finish within handshake_timeout
  kIdle,              // it sent nothing within idle_handshake_timeout
  kPeerLimit,         // its address already had max_handshakes_per_peer connections in handshake
  kServerLimit,       // the server already had max_handshakes connections in handshake
  kAbandoned,         // it closed or reset the connection before finishing (counted, not logged)
};
inline constexpr size_t kRefusalReasons = 7;

// "wrong_secret", "bad_handshake", "handshake_timeout", "idle", "peer_limit", "server_limit",
// "abandoned": stable names for logs and metrics labels.
const char* refusalReasonName(RefusalReason reason);

// Counts by reason (index: the enum's value).
struct RefusalCounts {
  std::array<uint64_t, kRefusalReasons> by_reason{};
  uint64_t operator[](RefusalReason r) const { return by_reason[static_cast<size_t>(r)]; }
  uint64_t total() const;
};

class HandshakeLimiter {
 public:
  HandshakeLimiter(size_t per_peer, size_t total) : per_peer_(per_peer), total_limit_(total) {}

  // Admits one more connection from `address` (counted until release()), or says why not.
  std::optional<RefusalReason> admit(const std::string& address);
  // Ends the handshake of a connection admit() admitted.
  void release(const std::string& address);

  size_t pending() const { return total_; }
  size_t pendingFrom(const std::string& address) const;

 private:
  const size_t per_peer_;
  const size_t total_limit_;
  size_t total_ = 0;
  std::unordered_map<std::string, size_t> by_address_;  // only addresses with pending > 0
};

class RefusalLog {
 public:
  using Clock = std::chrono::steady_clock;
  using Sink = std::function<void(const std::string&)>;
  struct Limits {
    std::chrono::milliseconds per_peer_interval{1000};
    size_t max_lines_per_second = 10;
    std::chrono::milliseconds summary_interval{5000};
    size_t max_tracked_peers = 4096;  // bounds the memory of the per-address rate limit
  };

  // `server_name` begins every line ("control server on port 4000"). An empty sink logs nothing
  // (refusals are still counted).
  RefusalLog(Sink sink, std::string server_name, Limits limits);
  RefusalLog(Sink sink, std::string server_name)
      : RefusalLog(std::move(sink), std::move(server_name), Limits{}) {}

  // One refused connection from `peer` ("address:port"; rate-limited by `address`), with
  // `detail` saying what happened. Logs it now, or counts it towards the next summary.
  void record(RefusalReason reason, const std::string& address, const std::string& peer,
              const std::string& detail, Clock::time_point now);
  // Writes the summary of what was not logged when it is due. Call it now and then (the server
  // loop does every round); nextDue() says when it is next needed.
  void tick(Clock::time_point now);
  std::optional<Clock::time_point> nextDue() const;

  RefusalCounts counts() const;  // thread-safe
  uint64_t linesWritten() const { return lines_; }

 private:
  bool admitLine(const std::string& address, Clock::time_point now);
  void write(const std::string& line);

  const Sink sink_;
  const std::string server_name_;
  const Limits limits_;
  std::array<std::atomic<uint64_t>, kRefusalReasons> counts_{};
  std::unordered_map<std::string, Clock::time_point> last_line_;  // by address
  Clock::time_point second_start_{};
  size_t lines_this_second_ = 0;
  std::array<uint64_t, kRefusalReasons> unlogged_{};
  uint64_t unlogged_total_ = 0;
  Clock::time_point summary_window_start_{};
  uint64_t lines_ = 0;
};

}  // namespace wsync
