// TrainerContext, block-scaled rollout tensors: the quantized sources (runtime/trainer_quantizer.h)
// and the per-version exchange of block maxima with the coordinator (PartialMaxima, BlockMaxima).
#include "runtime/trainer_context.h"

namespace wsync {

Status TrainerContext::setUpQuantizer(const PlanAssignmentMsg& assignment) {
  const std::vector<ScaledTensor> table(assignment.block_scalings.begin(),
                                        assignment.block_scalings.end());
  WSYNC_ASSIGN_OR_RETURN(quantizer_,
                         TrainerQuantizer::create(registration_, table, assignment.exchanged_blocks,
                                                  memory_, options_.cuda_device, options_.timeout));
  return Status::ok();
}

Status TrainerContext::startQuantizing(uint64_t version) {
  if (quantizer_.empty()) return Status::ok();
  const auto source = [this](int32_t b) { return sourceOf(b); };
  WSYNC_ASSIGN_OR_RETURN(std::vector<uint8_t> partial,
                         quantizer_.computeMaxima(source, stream_.get()));
  if (!quantizer_.exchanges()) return quantizer_.quantize({}, source, stream_.get());
  return sendMessage(MessageType::kPartialMaxima,
                     encode(BlockMaximaMsg{version, std::move(partial)}));
}

Result<GoMsg> TrainerContext::awaitGo(uint64_t version) {
  const auto timeout = options_.timeout + kCoordinatorReplyGrace;
  std::optional<GoMsg> go;
  bool have_maxima = !quantizer_.exchanges();
  held_gos_.clear();
  while (!go || !have_maxima) {
    std::optional<MessageType> also;
    if (!have_maxima) also = MessageType::kGo;
    WSYNC_ASSIGN_OR_RETURN(
        Frame frame,
        nextFrame(have_maxima ? MessageType::kGo : MessageType::kBlockMaxima, timeout, also));
    if (static_cast<MessageType>(frame.type) == MessageType::kGo) {
      GoMsg m;
      WSYNC_RETURN_IF_ERROR(decode(frame.payload, m));
      if (go) {
        held_gos_.push_back(std::move(m));  // a late Go: after the first transfer
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
    WSYNC_RETURN_IF_ERROR(quantizer_.quantize(
        maxima.amax, [this](int32_t b) { return sourceOf(b); }, stream_.get()));
    have_maxima = true;
  }
  return std::move(go).value();
}

}  // namespace wsync
