// Delta versions, the coordinator's part (docs/delta.md): the job-wide settings every rank learns
// in Welcome, and each trainer's part of its peers' patch landing areas (src/delta/
// delta_landing.h), computed from the whole plan. Pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "coordinator/participants.h"
#include "coordinator/version_sequencer.h"
#include "options/options.h"
#include "plan/plan.h"
#include "protocol/protocol.h"

namespace wsync {

// Welcome's job-wide fields: checksums (on with delta versions too), delta and its share.
void describeJobSettings(const JobSettings& job, WelcomeMsg& welcome);

// Per rollout rank, the dense bytes each trainer writes it per version (write ops only).
using DenseWriteBytes = std::map<int32_t, std::vector<uint64_t>>;
DenseWriteBytes denseWriteBytes(const Plan& plan, int32_t num_trainers);

// Fills `peer`'s landing fields for `trainer` when delta versions are on and the rank exposed a
// landing area (`landing`: its RegisterMsg::delta_landing); leaves them empty (dense) otherwise.
// Trainers diff in their own memory, host or device.
void assignDeltaLanding(const JobSettings& job, const DenseWriteBytes& dense, int32_t trainer,
                        const std::vector<uint8_t>& landing, PeerInfo& peer);

// What trainer `trainer` is told of rollout rank `peer` (participant
// `rollout`) in its PlanAssignment or PlanExtension: the rollout's transport, slots and buffer
// offsets, and its part of the rollout's delta landing area (assignDeltaLanding).
PeerInfo trainerPeerInfo(const JobSettings& job, const DenseWriteBytes& dense, int32_t trainer,
                         int32_t peer, const Participant& rollout);

// A version's first Go: each replica it gives a slot gets its newest ready version as the base
// trainers may send patches against (0 when it holds none). Re-sends (a Go of the same version
// after a checksum failure) keep no bases: they are dense.
void setDeltaBases(const VersionSequencer& sequencer, GoMsg& go);

}  // namespace wsync
