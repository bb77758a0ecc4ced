#include "runtime/trainer_control.h"

#include <algorithm>
#include <string>
#include <utility>

namespace wsync {

Result<Frame> TrainerControl::next(MessageType expected, std::chrono::milliseconds timeout,
                                   std::optional<MessageType> also) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + timeout;
  while (true) {
    Frame frame;
    if (!kept_.empty()) {
      frame = std::move(kept_.front());
      kept_.pop_front();
    } else {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      WSYNC_ASSIGN_OR_RETURN(frame, recv_(std::max(left, std::chrono::milliseconds(0))));
    }
    const auto type = static_cast<MessageType>(frame.type);
    if (isMembership(type)) {
      WSYNC_RETURN_IF_ERROR(on_membership_(frame));
      continue;
    }
    if (type == MessageType::kError) {
      ErrorMsg err;
      WSYNC_RETURN_IF_ERROR(decode(frame.payload, err));
      return Status(err.code, err.message);
    }
    if (type != expected && type != also) {
      return protocolError(std::string("expected ") + messageTypeName(expected) +
                           " from the coordinator, got " + messageTypeName(type));
    }
    return frame;
  }
}

std::optional<TrainerControl::IdleFailure> TrainerControl::pollIdle() {
  while (true) {
    Result<Frame> frame = recv_(std::chrono::milliseconds(0));
    if (!frame.isOk()) {
      if (frame.status().code() == WSYNC_ERR_TIMEOUT) return std::nullopt;
      return IdleFailure{frame.status().withContext("control channel"), false};
    }
    const auto type = static_cast<MessageType>(frame->type);
    if (type == MessageType::kError) {
      ErrorMsg err;
      const Status decoded = decode(frame->payload, err);
      return IdleFailure{decoded.isOk() ? Status(err.code, err.message) : decoded, false};
    }
    if (!isMembership(type)) {  // a Go another trainer's Publish started: the publish reads it
      kept_.push_back(std::move(frame).value());
      continue;
    }
    const Status s = on_membership_(*frame);
    if (!s.isOk()) return IdleFailure{s, true};
  }
}

Result<GoMsg> TrainerControl::awaitGo(
    uint64_t version, std::chrono::milliseconds timeout, bool maxima_first,
    const std::function<Status(const BlockMaximaMsg&)>& on_maxima) {
  std::optional<GoMsg> go;
  bool have_maxima = !maxima_first;
  late_gos_.clear();
  while (!go || !have_maxima) {
    std::optional<MessageType> also;
    if (!have_maxima) also = MessageType::kGo;
    WSYNC_ASSIGN_OR_RETURN(
        Frame frame,
        next(have_maxima ? MessageType::kGo : MessageType::kBlockMaxima, timeout, also));
    if (static_cast<MessageType>(frame.type) == MessageType::kGo) {
      GoMsg m;
      WSYNC_RETURN_IF_ERROR(decode(frame.payload, m));
      if (go) {
        late_gos_.push_back(std::move(m));  // a late Go: after the first transfer
      } else {
        go = std::move(m);
      }
      continue;
    }
    BlockMaximaMsg maxima;
    WSYNC_RETURN_IF_ERROR(decode(frame.payload, maxima));
    if (maxima.version != version) {
      return protocolError("BlockMaxima of version " + std::to_string(maxima.version) +
                           " while this trainer publishes version " + std::to_string(version));
    }
    WSYNC_RETURN_IF_ERROR(on_maxima(maxima));
    have_maxima = true;
  }
  return std::move(go).value();
}

Result<DeliveredMsg> TrainerControl::awaitDelivered(
    uint64_t version, std::chrono::milliseconds timeout,
    const std::function<Status(const GoMsg&)>& resend) {
  const std::string what = "version " + std::to_string(version);
  std::vector<GoMsg> held = std::move(late_gos_);  // late Gos that came before BlockMaxima
  late_gos_.clear();
  for (size_t next_held = 0;; ++next_held) {
    GoMsg go;
    if (next_held < held.size()) {
      go = std::move(held[next_held]);
    } else {
      WSYNC_ASSIGN_OR_RETURN(Frame frame, next(MessageType::kDelivered, timeout, MessageType::kGo));
      if (static_cast<MessageType>(frame.type) == MessageType::kDelivered) {
        DeliveredMsg d;
        WSYNC_RETURN_IF_ERROR(decode(frame.payload, d));
        if (d.version != version)
          return protocolError("delivered " + std::to_string(d.version) + " while waiting for " +
                               what);
        return d;
      }
      WSYNC_RETURN_IF_ERROR(decode(frame.payload, go));
    }
    if (go.version != version) {
      return protocolError("Go for version " + std::to_string(go.version) +
                           " while waiting for the delivery of " + what);
    }
    WSYNC_RETURN_IF_ERROR(resend(go));
  }
}

}  // namespace wsync
