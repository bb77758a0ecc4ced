#include "coordinator/delta_assign.h"

#include "delta/delta_landing.h"
#include "layout/dtype.h"

namespace wsync {

void describeJobSettings(const JobSettings& job, WelcomeMsg& welcome) {
  welcome.checksums = job.checksums || job.delta;
  welcome.delta = job.delta;
  welcome.delta_max_share_ppm = job.delta ? delta::shareToPpm(job.delta_max_share) : 0;
}

DenseWriteBytes denseWriteBytes(const Plan& plan, int32_t num_trainers) {
  DenseWriteBytes dense;
  for (const WriteOp& op : plan.writes) {
    if (op.src_rank < 0 || op.src_rank >= num_trainers) continue;
    auto& per_trainer = dense[op.dst_rank];
    per_trainer.resize(static_cast<size_t>(num_trainers), 0);
    per_trainer[static_cast<size_t>(op.src_rank)] +=
        static_cast<uint64_t>(plan.numElements(op)) * dtypeSize(op.dst_dtype);
  }
  return dense;
}

void assignDeltaLanding(const JobSettings& job, const DenseWriteBytes& dense, int32_t trainer,
                        const std::vector<uint8_t>& landing, PeerInfo& peer) {
  if (!job.delta || landing.empty()) return;
  const auto it = dense.find(peer.rank);
  if (it == dense.end() || trainer < 0 || static_cast<size_t>(trainer) >= it->second.size()) return;
  const std::vector<delta::LandingPart> parts =
      delta::landingParts(it->second, delta::shareToPpm(job.delta_max_share));
  const delta::LandingPart& part = parts[static_cast<size_t>(trainer)];
  if (part.bytes == 0) return;
  peer.delta_landing = landing;
  peer.delta_landing_offset = part.offset;
  peer.delta_landing_bytes = part.bytes;
}

PeerInfo trainerPeerInfo(const JobSettings& job, const DenseWriteBytes& dense, int32_t trainer,
                         int32_t peer, const Participant& rollout) {
  PeerInfo info{peer,
                rollout.reg.transport,
                rollout.reg.transport_address,
                rollout.reg.slot_descriptors,
                rollout.reg.buffer_byte_offsets,
                {},
                0,
                0};
  assignDeltaLanding(job, dense, trainer, rollout.reg.delta_landing, info);
  return info;
}

void setDeltaBases(const VersionSequencer& sequencer, GoMsg& go) {
  go.base_of_replica.assign(go.slot_of_replica.size(), 0);
  for (size_t id = 0; id < go.slot_of_replica.size(); ++id) {
    if (go.slot_of_replica[id] >= 0)
      go.base_of_replica[id] = sequencer.readyVersion(static_cast<int32_t>(id));
  }
}

}  // namespace wsync
