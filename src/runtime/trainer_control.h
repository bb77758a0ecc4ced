// The coordinator's messages as a trainer's publisher thread reads them. Membership news
// (ReplicaDropped, PlanExtension) goes to the membership handler wherever it arrives; an Error
// becomes its status; frames read while idle (a Go that another trainer's Publish started) are kept
// for the next publish. Per version: Go, after BlockMaxima when block maxima are exchanged (Gos
// that arrive first are kept: the first is the version's, later ones are a busy replica's late Go,
// sent after the first transfer), then, after Sent, re-sends (a late Go, or a Go of the same
// version for replicas whose checksums failed) until Delivered. No sockets of its own: frames come
// from `recv`. Publisher thread only.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <optional>
#include <vector>

#include "common/status.h"
#include "control/frame_channel.h"
#include "protocol/protocol.h"

namespace wsync {

class TrainerControl {
 public:
  // The next frame from the coordinator within `timeout` (TIMEOUT when none).
  using Recv = std::function<Result<Frame>(std::chrono::milliseconds timeout)>;
  // Applies a membership frame (ReplicaDropped or PlanExtension); an error fails the trainer.
  using MembershipHandler = std::function<Status(const Frame& frame)>;

  TrainerControl(Recv recv, MembershipHandler on_membership)
      : recv_(std::move(recv)), on_membership_(std::move(on_membership)) {}

  static bool isMembership(MessageType type) {
    return type == MessageType::kReplicaDropped || type == MessageType::kPlanExtension;
  }

  // The next frame of type `expected` (or `also`; the caller reads frame.type), kept frames first,
  // applying membership frames on the way. An Error frame: its status; another type: PROTOCOL.
  Result<Frame> next(MessageType expected, std::chrono::milliseconds timeout,
                     std::optional<MessageType> also = std::nullopt);

  // Idle: reads every frame that arrived, applying membership news and keeping the rest. OK when
  // the channel has nothing more; else the failure and whether the coordinator should hear of it
  // (a membership frame that failed here; not an Error it sent or a broken channel).
  struct IdleFailure {
    Status status;
    bool tell_coordinator = false;
  };
  std::optional<IdleFailure> pollIdle();

  // The Go of `version`. `maxima_first`: BlockMaxima(version) comes as well and `on_maxima` runs
  // with it before Go is returned (the trainer quantizes with it).
  Result<GoMsg> awaitGo(uint64_t version, std::chrono::milliseconds timeout, bool maxima_first,
                        const std::function<Status(const BlockMaximaMsg&)>& on_maxima);
  // After Sent(version): Delivered(version); every Go of the same version on the way (the late
  // Gos kept by awaitGo first) is handed to `resend` (which transfers again and sends Sent).
  Result<DeliveredMsg> awaitDelivered(uint64_t version, std::chrono::milliseconds timeout,
                                      const std::function<Status(const GoMsg&)>& resend);

 private:
  Recv recv_;
  MembershipHandler on_membership_;
  std::deque<Frame> kept_;       // read while idle, for the next publish
  std::vector<GoMsg> late_gos_;  // of the version in flight, that came before BlockMaxima
};

}  // namespace wsync
