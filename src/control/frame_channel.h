// Control-plane transport: authenticated, framed messages over TCP. This layer moves opaque
// (type, payload) frames; what they mean (the coordinator protocol) is decided above it.
//
// Wire format (all integers little-endian). Every frame is a 12-byte header followed by the
// payload:
//   magic u32 = control_wire::kMagic | type u16 | flags u16 | payload length u32
// A frame whose magic or flags are wrong, or whose length is above the receiver's limit, is a
// PROTOCOL error: the receiver drops the connection without allocating for the announced length.
//
// Handshake (frames with flags = kFlagHandshake; application frames have flags = 0):
//   server -> client  kServerHello  version u32, server nonce (16 random bytes)
//   client -> server  kClientAuth   version u32, client nonce (16), tag (16) = MAC(key, "client",
//                                   server nonce, client nonce)
//   server -> client  kWelcome      tag (16) = MAC(key, "server", server nonce, client nonce)
//                  or kRefused      reason (text), then the server closes.
// A server with too many connections in the handshake (from this client's address, or in all)
// sends kBusy (reason text) instead of kServerHello and closes: the client retries later.
// key is derived from the shared secret, MAC is keyed SipHash-2-4 (two 64-bit lanes). The secret
// never travels, in clear or otherwise: the only bytes derived from it on the wire are the two
// 16-byte tags, each a MAC over 32 bytes of fresh nonces. Tags are compared in constant time,
// both sides prove they hold the secret (the server only after the client did, so a client
// without the secret learns nothing from the server), and fresh nonces on both sides defeat
// replay. (An eavesdropper who sees a handshake can still try to guess a weak secret offline:
// use a long random secret.) Frames after the handshake are neither encrypted nor MACed: run the
// control plane on a trusted network.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "control/socket.h"

namespace wsync {

struct Frame {
  uint16_t type = 0;
  std::vector<uint8_t> payload;
};

struct ControlOptions {
  std::string secret;                  // shared secret; both sides must agree; must not be empty
  size_t max_frame_bytes = 256 << 20;  // larger frames are rejected (PROTOCOL) without allocating
  // A connection must finish the handshake within handshake_timeout (both sides), and (server)
  // send its first byte within idle_handshake_timeout, or it is dropped.
  std::chrono::milliseconds handshake_timeout{10000};
  std::chrono::milliseconds idle_handshake_timeout{2000};
  // Server: connections in the handshake at once, from one peer address and in all. More are
  // answered kBusy and closed (clients retry).
  size_t max_handshakes_per_peer = 32;
  size_t max_handshakes = 512;
  // A frame being sent, or (on the server) a frame partly received, that makes no progress for
  // this long fails the connection with TIMEOUT: bounds the wait on a peer that stopped reading or
  // stopped mid-frame.
  std::chrono::milliseconds io_timeout{60000};
  // Busy polling (FrameChannel): for this long after a frame was sent or received, a wait for the
  // next one polls without sleeping (yielding the CPU between polls) instead of blocking, so that
  // a frame is seen within a microsecond or two rather than after a thread wake-up (tens of
  // microseconds after an idle stretch). Costs a core per waiting thread during the window.
  // 0: never. (FrameServer spins when its owner says so: FrameServer::spinUntil.)
  std::chrono::microseconds spin_wait{0};
};

// Wire-level helpers, public so that tests (and tools) can speak the protocol byte by byte.
namespace control_wire {

inline constexpr uint32_t kMagic = 0x43595357;  // bytes "WSYC" on the wire
inline constexpr size_t kHeaderBytes = 12;
inline constexpr uint16_t kFlagHandshake = 0x1;
inline constexpr uint32_t kProtocolVersion = 1;
inline constexpr size_t kNonceBytes = 16;
inline constexpr size_t kTagBytes = 16;
inline constexpr size_t kMaxHandshakePayload = 512;  // the frame limit until the handshake is done
inline constexpr size_t kMaxRefusedReason = 256;
inline constexpr uint32_t kMaxFrameLimit = 0xffffffffu;  // the header's length field is 32-bit

enum HandshakeType : uint16_t {
  kServerHello = 1,
  kClientAuth = 2,
  kWelcome = 3,
  kRefused = 4,
  kBusy = 5,  // instead of kServerHello: too many connections in the handshake; retry later
};

using Nonce = std::array<uint8_t, kNonceBytes>;
using Tag = std::array<uint8_t, kTagBytes>;
using AuthKey = std::array<uint8_t, 16>;

struct Header {
  uint32_t magic = 0;
  uint16_t type = 0;
  uint16_t flags = 0;
  uint32_t length = 0;
};

std::array<uint8_t, kHeaderBytes> encodeHeader(uint16_t type, uint16_t flags, uint32_t length);
Header decodeHeader(const uint8_t* bytes);  // reads kHeaderBytes bytes; validates nothing

// SipHash-2-4 of data under a 128-bit key (key bytes little-endian as in the reference).
uint64_t sipHash24(const AuthKey& key, const void* data, size_t size);
AuthKey deriveAuthKey(std::string_view secret);
Tag clientTag(const AuthKey& key, const Nonce& server_nonce, const Nonce& client_nonce);
Tag serverTag(const AuthKey& key, const Nonce& server_nonce, const Nonce& client_nonce);
// Compares without an early exit, so the time taken does not reveal where the bytes differ.
bool equalConstantTime(const uint8_t* a, const uint8_t* b, size_t size);

// A whole handshake frame (header + payload), ready to send.
std::vector<uint8_t> serverHelloFrame(const Nonce& server_nonce);
std::vector<uint8_t> clientAuthFrame(const Nonce& client_nonce, const Tag& tag);
std::vector<uint8_t> welcomeFrame(const Tag& tag);
std::vector<uint8_t> refusedFrame(std::string_view reason);
std::vector<uint8_t> busyFrame(std::string_view reason);

// Reassembles frames from a nonblocking socket. Survives partial reads: a read that stops midway
// keeps its state, and the next read continues the same frame. Payload memory grows with the bytes
// that actually arrived (at most ~8 MiB ahead of them), never to the announced length up front.
// Not thread-safe.
class FrameReader {
 public:
  enum class Event { kFrame, kAgain, kClosed };

  // Frames must have exactly `required_flags` and at most `max_payload` bytes. Bytes already
  // buffered are judged by the new limits.
  void setLimits(size_t max_payload, uint16_t required_flags) {
    max_payload_ = max_payload;
    required_flags_ = required_flags;
  }
  // Reads what `fd` has (stopping after about `budget` bytes) until one frame is complete.
  // kFrame: *out holds it. kAgain: no complete frame is buffered and the socket has no more bytes
  // now (or the budget ran out; budget 0 only hands out frames already buffered).
  // kClosed: the peer closed the connection cleanly between frames. Errors: PROTOCOL (bad magic or
  // flags, too long, the peer closed mid-frame), REMOTE (connection reset), SYSTEM. `who` names
  // the peer in messages.
  Result<Event> read(int fd, const std::string& who, Frame* out, size_t budget = SIZE_MAX);
  // True while part of a frame has been received.
  bool midFrame() const { return have_header_ || end_ > begin_; }
  // Bytes received from the socket so far (progress tracking).
  uint64_t totalReceived() const { return total_received_; }

 private:
  Status parseHeader(const std::string& who);
  void ensurePayloadRoom(size_t n);

  static constexpr size_t kStageBytes = 64 << 10;
  size_t max_payload_ = kMaxHandshakePayload;
  uint16_t required_flags_ = kFlagHandshake;
  // Sized on the first read after setLimits(): kHeaderBytes + max_payload (at most kStageBytes),
  // so a connection in the handshake holds a few hundred bytes, not kStageBytes.
  std::vector<uint8_t> stage_;
  size_t begin_ = 0;  // unparsed bytes are stage_[begin_, end_)
  size_t end_ = 0;
  bool have_header_ = false;
  Header header_;
  std::vector<uint8_t> payload_;
  size_t filled_ = 0;  // payload bytes received so far
  uint64_t total_received_ = 0;
};

}  // namespace control_wire

// A client connection. send() is thread-safe (whole frames, never interleaved); recv() is called
// by one thread at a time. shutdown() makes a blocked recv() (and send()) return WSYNC_ERR_ABORTED,
// and every later call too; it is thread-safe.
class FrameChannel {
 public:
  // Connects to host:port and does the handshake (each attempt bounded by
  // options.handshake_timeout). Retries with backoff until `timeout` while the server is not
  // listening yet, answers busy (too many connections in the handshake) or closes the connection
  // before the handshake is done (an attempt begun before `timeout` may finish up to
  // handshake_timeout after it). TIMEOUT when nobody answered or the server stayed busy;
  // PROTOCOL at once, never retried, when the server refuses the secret, the peer does not speak
  // this protocol or its version differs; INVALID_ARGUMENT for an empty secret.
  static Result<std::unique_ptr<FrameChannel>> connect(const std::string& host, uint16_t port,
                                                       const ControlOptions& options,
                                                       std::chrono::milliseconds timeout);
  ~FrameChannel();
  FrameChannel(const FrameChannel&) = delete;
  FrameChannel& operator=(const FrameChannel&) = delete;

  // Sends one frame; returns once it is all in the socket. INVALID_ARGUMENT when size is above
  // max_frame_bytes (nothing sent); TIMEOUT when the peer accepts no data for io_timeout; REMOTE
  // when the peer is gone. A failure after part of the frame was written breaks the channel: it is
  // shut down and every later send/recv fails.
  Status send(uint16_t type, const uint8_t* payload, size_t size);
  Status send(uint16_t type, const std::vector<uint8_t>& payload) {
    return send(type, payload.data(), payload.size());
  }
  // Waits up to `timeout` for the next frame. TIMEOUT when no frame within timeout (a partly
  // received frame is kept for the next call); REMOTE when the peer closed; PROTOCOL when
  // malformed; ABORTED after shutdown(). REMOTE and PROTOCOL are final: later calls repeat them.
  Result<Frame> recv(std::chrono::milliseconds timeout);
  void shutdown();

  // "host:port" of the server, for messages.
  const std::string& peer() const { return peer_; }

 private:
  FrameChannel(Fd fd, WakeFd wake, std::string peer, const ControlOptions& options);
  // *retryable: the failure says nothing about the secret or the protocol (busy, closed).
  Status handshake(SteadyClock::time_point deadline, bool* retryable);
  Status aborted() const;

  Fd fd_;
  WakeFd wake_;
  const std::string peer_;
  const size_t max_frame_bytes_;
  const std::chrono::milliseconds io_timeout_;
  const control_wire::AuthKey key_;
  std::atomic<bool> shut_down_{false};
  const std::chrono::microseconds spin_wait_;
  // When a frame was last sent or received (SteadyClock ticks): busy polling lasts spin_wait_
  // from there.
  std::atomic<SteadyClock::rep> last_activity_{0};

  std::mutex send_mu_;
  Status send_error_;  // guarded by send_mu_; sticky once the byte stream is broken

  std::mutex recv_mu_;
  control_wire::FrameReader reader_;  // guarded by recv_mu_
  Status recv_error_;                 // guarded by recv_mu_
};

}  // namespace wsync
