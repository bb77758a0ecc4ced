#include "coordinator/block_scaling.h"

#include <algorithm>
#include <string>
#include <utility>

namespace wsync {

Status CoordinatorBlockScaling::plan(std::vector<Registration>& trainers,
                                     std::vector<Registration>& rollouts) {
  std::vector<std::vector<ScaledTensor>> scalings(rollouts.size());
  std::vector<RolloutScalings> inputs;
  for (size_t r = 0; r < rollouts.size(); ++r) {
    const auto& records = participants_.rollout(static_cast<int32_t>(r)).reg.block_scalings;
    scalings[r].assign(records.begin(), records.end());
    inputs.push_back({&rollouts[r], &scalings[r]});
  }
  WSYNC_ASSIGN_OR_RETURN(scaling_table_, jobScalingTable(inputs));
  for (size_t r = 0; r < rollouts.size(); ++r)
    WSYNC_RETURN_IF_ERROR(applyRolloutScalings(rollouts[r], scalings[r]));
  if (scaling_table_.empty()) return Status::ok();
  setRolloutCuts(scaling_table_, rollouts);
  std::vector<std::vector<QuantizedSource>> sources(trainers.size());
  for (size_t t = 0; t < trainers.size(); ++t) {
    WSYNC_ASSIGN_OR_RETURN(sources[t], addQuantizedSources(trainers[t], scaling_table_));
  }
  MaximaExchange exchange = planMaximaExchange(sources, scaling_table_);
  exchanged_blocks_ = exchange.exchanged;
  if (!exchange.empty()) maxima_.emplace(std::move(exchange));
  wire_.log("block scaling: " + std::to_string(scaling_table_.size()) + " scaled tensor schemes; " +
            (maxima_ ? std::to_string(maxima_->numBlocks()) +
                           " blocks straddle trainers, partial maxima " +
                           std::to_string(maxima_->bytesPerVersion()) + " bytes per version"
                     : std::string("no block straddles trainers")));
  return Status::ok();
}

Status CoordinatorBlockScaling::addQuantizedSourcesTo(Registration& trainer) const {
  if (scaling_table_.empty()) return Status::ok();
  return addQuantizedSources(trainer, scaling_table_).status();
}

Status CoordinatorBlockScaling::checkJoiner(const Participant& p, bool elastic) const {
  for (const BlockScalingRecord& r : p.reg.block_scalings) {
    const bool planned = std::any_of(scaling_table_.begin(), scaling_table_.end(),
                                     [&](const ScaledTensor& s) { return s == r; });
    if (!planned) {
      return Status(WSYNC_ERR_UNSUPPORTED,
                    participantName(p) + " of joining replica " + std::to_string(p.hello.replica) +
                        " holds '" + r.tensor + "' with " + describe(r.scaling) + " (scales '" +
                        r.scaling.scale_tensor +
                        "'), which no replica held at commit: a block-scaled joiner needs a "
                        "rollout with that scheme at commit (the trainers quantize only the "
                        "schemes planned then" +
                        (elastic ? "; this job had no fixed rollout rank at commit, so none "
                                   "was planned)"
                                 : ")"));
    }
  }
  return Status::ok();
}

void CoordinatorBlockScaling::addTo(int32_t t, PlanAssignmentMsg& msg) const {
  for (const ScaledTensor& s : scaling_table_) {
    BlockScalingRecord record;
    static_cast<ScaledTensor&>(record) = s;
    msg.block_scalings.push_back(std::move(record));
  }
  if (static_cast<size_t>(t) < exchanged_blocks_.size())
    msg.exchanged_blocks = exchanged_blocks_[static_cast<size_t>(t)];
}

Status CoordinatorBlockScaling::onPartialMaxima(const Participant& p,
                                                const std::vector<uint8_t>& payload) {
  if (!maxima_) {
    return protocolError("PartialMaxima from " + participantName(p) + ": no block straddles");
  }
  BlockMaximaMsg m;
  WSYNC_RETURN_IF_ERROR(decode(payload, m));
  WSYNC_ASSIGN_OR_RETURN(std::vector<MaximaRelay::Reply> replies,
                         maxima_->onPartial(p.role_rank, m.version, m.amax));
  for (auto& [t, amax] : replies) {
    wire_.sendTo(participants_.trainer(t), MessageType::kBlockMaxima,
                 encode(BlockMaximaMsg{m.version, std::move(amax)}));
  }
  return Status::ok();
}

void CoordinatorBlockScaling::forgetVersions() {
  if (maxima_) maxima_->reset();
}

}  // namespace wsync
