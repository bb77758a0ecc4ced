#include "control/frame_channel.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <random>
#include <thread>

#include "common/wire.h"

namespace wsync {
namespace control_wire {
namespace {

uint64_t load64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

void store64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    p[i] = static_cast<uint8_t>(v >> (8 * i));
}

uint64_t rotl(uint64_t x, int b) {
  return (x << b) | (x >> (64 - b));
}

void sipRound(uint64_t& v0, uint64_t& v1, uint64_t& v2, uint64_t& v3) {
  v0 += v1;
  v1 = rotl(v1, 13);
  v1 ^= v0;
  v0 = rotl(v0, 32);
  v2 += v3;
  v3 = rotl(v3, 16);
  v3 ^= v2;
  v0 += v3;
  v3 = rotl(v3, 21);
  v3 ^= v0;
  v2 += v1;
  v1 = rotl(v1, 17);
  v1 ^= v2;
  v2 = rotl(v2, 32);
}

AuthKey keyFromText(const char (&text)[17]) {
  AuthKey k{};
  std::memcpy(k.data(), text, 16);
  return k;
}

Tag tagFor(const AuthKey& key, const char (&label)[7], const Nonce& server_nonce,
           const Nonce& client_nonce) {
  uint8_t msg[6 + kNonceBytes + kNonceBytes + 1];
  std::memcpy(msg, label, 6);
  std::memcpy(msg + 6, server_nonce.data(), kNonceBytes);
  std::memcpy(msg + 6 + kNonceBytes, client_nonce.data(), kNonceBytes);
  Tag tag{};
  for (uint8_t lane = 0; lane < 2; ++lane) {
    msg[sizeof(msg) - 1] = lane;
    store64(tag.data() + 8 * lane, sipHash24(key, msg, sizeof(msg)));
  }
  return tag;
}

std::vector<uint8_t> handshakeFrame(HandshakeType type, const std::vector<uint8_t>& payload) {
  const auto header = encodeHeader(type, kFlagHandshake, static_cast<uint32_t>(payload.size()));
  std::vector<uint8_t> frame(kHeaderBytes + payload.size());
  std::memcpy(frame.data(), header.data(), kHeaderBytes);
  if (!payload.empty()) std::memcpy(frame.data() + kHeaderBytes, payload.data(), payload.size());
  return frame;
}

}  // namespace

std::array<uint8_t, kHeaderBytes> encodeHeader(uint16_t type, uint16_t flags, uint32_t length) {
  std::array<uint8_t, kHeaderBytes> h{};
  for (int i = 0; i < 4; ++i)
    h[i] = static_cast<uint8_t>(kMagic >> (8 * i));
  h[4] = static_cast<uint8_t>(type);
  h[5] = static_cast<uint8_t>(type >> 8);
  h[6] = static_cast<uint8_t>(flags);
  h[7] = static_cast<uint8_t>(flags >> 8);
  for (int i = 0; i < 4; ++i)
    h[8 + i] = static_cast<uint8_t>(length >> (8 * i));
  return h;
}

Header decodeHeader(const uint8_t* b) {
  Header h;
  h.magic = static_cast<uint32_t>(b[0]) | static_cast<uint32_t>(b[1]) << 8 |
            static_cast<uint32_t>(b[2]) << 16 | static_cast<uint32_t>(b[3]) << 24;
  h.type = static_cast<uint16_t>(b[4] | b[5] << 8);
  h.flags = static_cast<uint16_t>(b[6] | b[7] << 8);
  h.length = static_cast<uint32_t>(b[8]) | static_cast<uint32_t>(b[9]) << 8 |
             static_cast<uint32_t>(b[10]) << 16 | static_cast<uint32_t>(b[11]) << 24;
  return h;
}

uint64_t sipHash24(const AuthKey& key, const void* data, size_t size) {
  const uint64_t k0 = load64(key.data());
  const uint64_t k1 = load64(key.data() + 8);
  uint64_t v0 = k0 ^ 0x736f6d6570736575ULL;
  uint64_t v1 = k1 ^ 0x646f72616e646f6dULL;
  uint64_t v2 = k0 ^ 0x6c7967656e657261ULL;
  uint64_t v3 = k1 ^ 0x7465646279746573ULL;
  const auto* p = static_cast<const uint8_t*>(data);
  const size_t full = size - size % 8;
  for (size_t i = 0; i < full; i += 8) {
    const uint64_t m = load64(p + i);
    v3 ^= m;
    sipRound(v0, v1, v2, v3);
    sipRound(v0, v1, v2, v3);
    v0 ^= m;
  }
  uint64_t last = static_cast<uint64_t>(size & 0xff) << 56;
  for (size_t i = full; i < size; ++i)
    last |= static_cast<uint64_t>(p[i]) << (8 * (i - full));
  v3 ^= last;
  sipRound(v0, v1, v2, v3);
  sipRound(v0, v1, v2, v3);
  v0 ^= last;
  v2 ^= 0xff;
  for (int i = 0; i < 4; ++i)
    sipRound(v0, v1, v2, v3);
  return v0 ^ v1 ^ v2 ^ v3;
}

AuthKey deriveAuthKey(std::string_view secret) {
  static const AuthKey kLane0 = keyFromText("wsync/ctl/kdf/0.");
  static const AuthKey kLane1 = keyFromText("wsync/ctl/kdf/1.");
  AuthKey key{};
  store64(key.data(), sipHash24(kLane0, secret.data(), secret.size()));
  store64(key.data() + 8, sipHash24(kLane1, secret.data(), secret.size()));
  return key;
}

Tag clientTag(const AuthKey& key, const Nonce& server_nonce, const Nonce& client_nonce) {
  return tagFor(key, "client", server_nonce, client_nonce);
}

Tag serverTag(const AuthKey& key, const Nonce& server_nonce, const Nonce& client_nonce) {
  return tagFor(key, "server", server_nonce, client_nonce);
}

bool equalConstantTime(const uint8_t* a, const uint8_t* b, size_t size) {
  volatile uint8_t diff = 0;
  for (size_t i = 0; i < size; ++i)
    diff = static_cast<uint8_t>(diff | (a[i] ^ b[i]));
  return diff == 0;
}

std::vector<uint8_t> serverHelloFrame(const Nonce& server_nonce) {
  ByteWriter w;
  w.fixed32(kProtocolVersion);
  w.bytes(server_nonce.data(), server_nonce.size());
  return handshakeFrame(kServerHello, w.data());
}

std::vector<uint8_t> clientAuthFrame(const Nonce& client_nonce, const Tag& tag) {
  ByteWriter w;
  w.fixed32(kProtocolVersion);
  w.bytes(client_nonce.data(), client_nonce.size());
  w.bytes(tag.data(), tag.size());
  return handshakeFrame(kClientAuth, w.data());
}

std::vector<uint8_t> welcomeFrame(const Tag& tag) {
  return handshakeFrame(kWelcome, std::vector<uint8_t>(tag.begin(), tag.end()));
}

std::vector<uint8_t> refusedFrame(std::string_view reason) {
  reason = reason.substr(0, kMaxRefusedReason);
  return handshakeFrame(kRefused, std::vector<uint8_t>(reason.begin(), reason.end()));
}

std::vector<uint8_t> busyFrame(std::string_view reason) {
  reason = reason.substr(0, kMaxRefusedReason);
  return handshakeFrame(kBusy, std::vector<uint8_t>(reason.begin(), reason.end()));
}

// ---- FrameReader ------------------------------------------------------------------------------

Status FrameReader::parseHeader(const std::string& who) {
  header_ = decodeHeader(stage_.data() + begin_);
  if (header_.magic != kMagic) {
    return protocolError("malformed frame from " + who + ": bad magic 0x" + [&] {
      char hex[9];
      std::snprintf(hex, sizeof(hex), "%08x", header_.magic);
      return std::string(hex);
    }() + " (not a wsync control peer, or the stream is corrupt)");
  }
  if (header_.flags != required_flags_) {
    return protocolError(
        "malformed frame from " + who + ": flags " + std::to_string(header_.flags) + " where " +
        std::to_string(required_flags_) +
        (required_flags_ == kFlagHandshake ? " (handshake) was expected" : " was expected"));
  }
  if (header_.length > max_payload_) {
    return protocolError("frame from " + who + " (type " + std::to_string(header_.type) +
                         ") announces " + std::to_string(header_.length) +
                         " payload bytes, above the limit of " + std::to_string(max_payload_));
  }
  begin_ += kHeaderBytes;
  have_header_ = true;
  filled_ = 0;
  payload_.clear();
  return Status::ok();
}

void FrameReader::ensurePayloadRoom(size_t n) {
  const size_t need = filled_ + n;
  if (payload_.size() >= need) return;
  // Grow geometrically with the bytes that arrived, so a lying length costs no memory.
  size_t next = std::max<size_t>({need, payload_.size() * 2, size_t{1} << 20});
  next = std::min<size_t>(next, header_.length);
  payload_.resize(next);
}

Result<FrameReader::Event> FrameReader::read(int fd, const std::string& who, Frame* out,
                                             size_t budget) {
  size_t received = 0;
  const size_t stage_bytes = std::min(kStageBytes, kHeaderBytes + max_payload_);
  if (stage_.size() < stage_bytes) stage_.resize(stage_bytes);
  for (;;) {
    if (!have_header_ && end_ - begin_ >= kHeaderBytes) {
      WSYNC_RETURN_IF_ERROR(parseHeader(who));
    }
    if (have_header_) {
      const size_t take = std::min<size_t>(end_ - begin_, header_.length - filled_);
      if (take > 0) {
        try {
          ensurePayloadRoom(take);
        } catch (const std::bad_alloc&) {
          return systemError("out of memory for a " + std::to_string(header_.length) +
                             "-byte frame from " + who);
        }
        std::memcpy(payload_.data() + filled_, stage_.data() + begin_, take);
        filled_ += take;
        begin_ += take;
      }
      if (filled_ == header_.length) {
        payload_.resize(filled_);
        out->type = header_.type;
        out->payload = std::move(payload_);
        payload_ = {};
        have_header_ = false;
        if (begin_ == end_) begin_ = end_ = 0;
        return Event::kFrame;
      }
    }
    if (received >= budget) return Event::kAgain;

    // Need more bytes. Large remainders go straight into the payload; the rest via the stage.
    uint8_t* dst;
    size_t room;
    const bool into_payload = have_header_ && header_.length - filled_ >= kStageBytes;
    if (into_payload) {
      try {
        ensurePayloadRoom(std::min<size_t>(header_.length - filled_, size_t{8} << 20));
      } catch (const std::bad_alloc&) {
        return systemError("out of memory for a " + std::to_string(header_.length) +
                           "-byte frame from " + who);
      }
      dst = payload_.data() + filled_;
      room = payload_.size() - filled_;
    } else {
      if (begin_ == end_) {
        begin_ = end_ = 0;
      } else if (begin_ > 0) {
        std::memmove(stage_.data(), stage_.data() + begin_, end_ - begin_);
        end_ -= begin_;
        begin_ = 0;
      }
      dst = stage_.data() + end_;
      room = stage_.size() - end_;
    }
    const ssize_t n = ::recv(fd, dst, room, MSG_DONTWAIT);
    if (n > 0) {
      received += static_cast<size_t>(n);
      total_received_ += static_cast<uint64_t>(n);
      (into_payload ? filled_ : end_) += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) {
      if (!midFrame()) return Event::kClosed;
      const size_t got = have_header_ ? kHeaderBytes + filled_ : end_ - begin_;
      const std::string want =
          have_header_ ? std::to_string(kHeaderBytes + header_.length) : "a header's 12";
      return protocolError("truncated frame: " + who + " closed the connection after " +
                           std::to_string(got) + " of " + want + " bytes");
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Event::kAgain;
    if (errno == ECONNRESET || errno == ETIMEDOUT || errno == EPIPE) {
      return remoteError("connection to " + who + " was reset: " + std::strerror(errno));
    }
    return systemError("recv from " + who + " failed: " + std::strerror(errno));
  }
}

}  // namespace control_wire

// ---- FrameChannel -----------------------------------------------------------------------------

namespace {

// Reads one frame with `reader`, waiting until `deadline`. kClosed comes back as REMOTE.
Result<Frame> readFrameUntil(int fd, int wake_fd, const std::string& who,
                             control_wire::FrameReader& reader, SteadyClock::time_point deadline) {
  for (;;) {
    Frame frame;
    WSYNC_ASSIGN_OR_RETURN(auto event, reader.read(fd, who, &frame));
    if (event == control_wire::FrameReader::Event::kFrame) return frame;
    if (event == control_wire::FrameReader::Event::kClosed) {
      return remoteError(who + " closed the connection");
    }
    WSYNC_RETURN_IF_ERROR(waitFd(fd, POLLIN, deadline, wake_fd));
  }
}

// Opens a TCP connection to host:port, retrying while it is refused (the server may not be
// listening yet) until `deadline`.
Result<Fd> connectUntil(const std::string& host, uint16_t port, const std::string& where,
                        SteadyClock::time_point deadline, std::chrono::milliseconds timeout) {
  auto backoff = std::chrono::milliseconds(5);
  for (;;) {
    Result<Fd> attempt = tcpConnect(host, port, deadline);
    if (attempt.isOk()) return attempt;
    const Status& st = attempt.status();
    if (st.code() != WSYNC_ERR_TIMEOUT && st.code() != WSYNC_ERR_REMOTE) return st;
    const auto now = SteadyClock::now();
    if (st.code() == WSYNC_ERR_TIMEOUT || now >= deadline) {
      return timeoutError("nobody answered at " + where + " within " +
                          std::to_string(timeout.count()) + " ms (last attempt: " + st.message() +
                          ")");
    }
    std::this_thread::sleep_for(std::min<SteadyClock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
  }
}

// The pause before handshake attempt `attempt` (1, 2, ...) against a busy server: exponential
// from 10 ms up to 1 s, with jitter in [50%, 100%] so that many clients do not retry in step.
std::chrono::milliseconds busyBackoff(int attempt) {
  thread_local std::minstd_rand random(std::random_device{}());
  const int64_t cap = std::min<int64_t>(int64_t{10} << std::min(attempt, 7), 1000);
  return std::chrono::milliseconds(cap / 2 + static_cast<int64_t>(random() % (cap / 2 + 1)));
}

}  // namespace

FrameChannel::FrameChannel(Fd fd, WakeFd wake, std::string peer, const ControlOptions& options)
    : fd_(std::move(fd)),
      wake_(std::move(wake)),
      peer_(std::move(peer)),
      max_frame_bytes_(options.max_frame_bytes),
      io_timeout_(options.io_timeout),
      key_(control_wire::deriveAuthKey(options.secret)),
      spin_wait_(options.spin_wait) {}

FrameChannel::~FrameChannel() = default;

Result<std::unique_ptr<FrameChannel>> FrameChannel::connect(const std::string& host, uint16_t port,
                                                            const ControlOptions& options,
                                                            std::chrono::milliseconds timeout) {
  const std::string where = host + ":" + std::to_string(port);
  if (options.secret.empty()) {
    return invalidArgument("connecting to " + where + ": ControlOptions.secret is empty");
  }
  if (options.max_frame_bytes > control_wire::kMaxFrameLimit) {
    return invalidArgument("connecting to " + where + ": max_frame_bytes " +
                           std::to_string(options.max_frame_bytes) +
                           " exceeds the 32-bit frame length field");
  }
  const auto start = SteadyClock::now();
  const auto deadline = start + timeout;
  for (int attempt = 1;; ++attempt) {
    WSYNC_ASSIGN_OR_RETURN(Fd fd, connectUntil(host, port, where, deadline, timeout));
    WSYNC_ASSIGN_OR_RETURN(WakeFd wake, WakeFd::create());
    std::unique_ptr<FrameChannel> channel(
        new FrameChannel(std::move(fd), std::move(wake), where, options));
    bool retryable = false;
    Status st = channel->handshake(SteadyClock::now() + options.handshake_timeout, &retryable);
    if (st.isOk()) return channel;
    const auto now = SteadyClock::now();
    if (!retryable) return st;
    if (now >= deadline) {
      const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - start);
      return timeoutError("the server " + where + " did not admit this client within " +
                          std::to_string(waited.count()) + " ms (" + std::to_string(attempt) +
                          " attempts; last: " + st.message() + ")");
    }
    std::this_thread::sleep_for(
        std::min<SteadyClock::duration>(busyBackoff(attempt), deadline - now));
  }
}

Status FrameChannel::handshake(SteadyClock::time_point deadline, bool* retryable) {
  using namespace control_wire;
  const std::string who = "the server " + peer_;
  *retryable = false;
  auto fail = [&](const Status& st) {
    if (st.code() == WSYNC_ERR_TIMEOUT) {
      return timeoutError(who + " did not complete the handshake in time");
    }
    // Closed or reset before the handshake was done: a busy or restarting server; try again.
    *retryable = st.code() == WSYNC_ERR_REMOTE;
    return st.withContext("handshake with " + peer_);
  };
  reader_.setLimits(kMaxHandshakePayload, kFlagHandshake);
  Result<Frame> hello = readFrameUntil(fd_.get(), -1, who, reader_, deadline);
  if (!hello.isOk()) return fail(hello.status());
  if (hello->type == kBusy) {
    *retryable = true;
    return remoteError(who +
                       " is busy: " + std::string(hello->payload.begin(), hello->payload.end()));
  }
  ByteReader r(hello->payload);
  uint32_t version = 0;
  Nonce server_nonce{};
  if (hello->type != kServerHello || !r.fixed32(version)) {
    return protocolError(who + " does not speak the wsync control protocol (its first frame has " +
                         "type " + std::to_string(hello->type) + ", " +
                         std::to_string(hello->payload.size()) + " bytes)");
  }
  if (version != kProtocolVersion) {
    return protocolError(who + " speaks control protocol version " + std::to_string(version) +
                         ", this client version " + std::to_string(kProtocolVersion));
  }
  if (!r.bytes(server_nonce.data(), server_nonce.size()) || !r.atEnd()) {
    return protocolError(who + " sent a malformed hello (" + std::to_string(hello->payload.size()) +
                         " bytes)");
  }
  Nonce client_nonce{};
  WSYNC_RETURN_IF_ERROR(randomBytes(client_nonce.data(), client_nonce.size()));
  std::vector<uint8_t> auth =
      clientAuthFrame(client_nonce, clientTag(key_, server_nonce, client_nonce));
  iovec iov{auth.data(), auth.size()};
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
  Status sent =
      sendAll(fd_.get(), &iov, 1, std::max(left, std::chrono::milliseconds(1)), -1, nullptr);
  if (!sent.isOk()) return fail(sent);

  Result<Frame> reply = readFrameUntil(fd_.get(), -1, who, reader_, deadline);
  if (!reply.isOk()) return fail(reply.status());
  if (reply->type == kRefused) {
    std::string reason(reply->payload.begin(), reply->payload.end());
    return protocolError(who + " refused the handshake: " + reason);
  }
  const Tag expected = serverTag(key_, server_nonce, client_nonce);
  if (reply->type != kWelcome || reply->payload.size() != kTagBytes ||
      !equalConstantTime(reply->payload.data(), expected.data(), kTagBytes)) {
    return protocolError(who + " failed to prove it holds the shared secret");
  }
  reader_.setLimits(max_frame_bytes_, 0);
  return Status::ok();
}

Status FrameChannel::aborted() const {
  return {WSYNC_ERR_ABORTED, "the channel to " + peer_ + " was shut down"};
}

Status FrameChannel::send(uint16_t type, const uint8_t* payload, size_t size) {
  if (size > max_frame_bytes_) {
    return invalidArgument("frame of type " + std::to_string(type) + " has " +
                           std::to_string(size) + " bytes, above max_frame_bytes " +
                           std::to_string(max_frame_bytes_) + " (not sent to " + peer_ + ")");
  }
  if (size > 0 && payload == nullptr) return invalidArgument("send: null payload with size > 0");
  std::lock_guard<std::mutex> lock(send_mu_);
  if (shut_down_.load()) return aborted();
  if (!send_error_.isOk()) return send_error_;
  auto header = control_wire::encodeHeader(type, 0, static_cast<uint32_t>(size));
  iovec iov[2] = {{header.data(), header.size()}, {const_cast<uint8_t*>(payload), size}};
  size_t written = 0;
  Status st = sendAll(fd_.get(), iov, 2, io_timeout_, wake_.fd(), &written);
  if (st.isOk()) {
    last_activity_.store(SteadyClock::now().time_since_epoch().count());
    return st;
  }
  if (shut_down_.load() || st.code() == WSYNC_ERR_ABORTED) return aborted();
  st = st.withContext("sending a frame of type " + std::to_string(type) + " to " + peer_);
  if (written > 0 || st.code() != WSYNC_ERR_TIMEOUT) {
    // Part of a frame is on the wire (or the socket is dead): the stream cannot be resumed.
    send_error_ = st;
    ::shutdown(fd_.get(), SHUT_RDWR);
  }
  return st;
}

Result<Frame> FrameChannel::recv(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(recv_mu_);
  if (shut_down_.load()) return aborted();
  if (!recv_error_.isOk()) return recv_error_;
  const auto deadline = SteadyClock::now() + timeout;
  const std::string who = "the server " + peer_;
  for (;;) {
    Frame frame;
    Result<control_wire::FrameReader::Event> event = reader_.read(fd_.get(), who, &frame);
    if (shut_down_.load()) return aborted();
    if (!event.isOk()) {
      recv_error_ = event.status();
      return recv_error_;
    }
    if (*event == control_wire::FrameReader::Event::kFrame) {
      last_activity_.store(SteadyClock::now().time_since_epoch().count());
      return frame;
    }
    if (*event == control_wire::FrameReader::Event::kClosed) {
      recv_error_ = remoteError(who + " closed the connection");
      return recv_error_;
    }
    const SteadyClock::time_point spin_until =
        SteadyClock::time_point(SteadyClock::duration(last_activity_.load())) + spin_wait_;
    Status waited = waitFd(fd_.get(), POLLIN, deadline, wake_.fd(), spin_until);
    if (waited.code() == WSYNC_ERR_ABORTED || shut_down_.load()) return aborted();
    if (waited.code() == WSYNC_ERR_TIMEOUT) {
      return timeoutError("no frame from " + who + " within " + std::to_string(timeout.count()) +
                          " ms");
    }
    WSYNC_RETURN_IF_ERROR(waited);
  }
}

void FrameChannel::shutdown() {
  shut_down_.store(true);
  wake_.notify();
  ::shutdown(fd_.get(), SHUT_RDWR);
}

}  // namespace wsync
