// A trainer's delta versions (docs/delta.md): what it keeps to diff against, and the landing parts
// of its delta-capable peers; one state for the plan's writes and one per joined replica's
// extension. The publisher thread owns them; the functions below set them up and send their
// patches (no sockets of their own: the pairs' transports write).
//
// Per write op to a peer with a landing part (PeerInfo::delta_landing_bytes > 0): the bytes this
// trainer last sent through it (destination dtype, packed) and their version. A version's first
// send to a replica whose base (Go::base_of_replica) is that version sends the op as a patch when
// the patch is at most max_share of the dense bytes and fits the pair's part; every other op goes
// dense. Memory: one copy of what this trainer writes per version to delta-capable ranks (all
// replicas; in the trainer's memory, host or device), plus the pairs' staging in host memory
// (max_share of it, plus 4 KiB per pair). Device trainers encode on the GPU
// (kernels/delta_kernels.h) and add one op's largest patch and the encode's scratch (about 1/16 of
// the largest op's bf16 bytes) in device memory; only the patches cross to the host.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "common/status.h"
#include "plan/plan.h"
#include "protocol/protocol.h"
#include "runtime/device_ops.h"
#include "transport/write_transport.h"

namespace wsync {

class TrainerMembership;
class TrainerSources;

struct TrainerDeltaState {
  struct Pair {
    int32_t rollout = -1;
    WriteTransport* transport = nullptr;
    RemoteMemoryId landing = 0;
    uint64_t landing_offset = 0;  // this trainer's part of the rank's area
    uint64_t capacity = 0;
    size_t staging_offset = 0;    // into `staging`
    std::vector<size_t> ops;      // plan write indices, plan order
    uint64_t last_patch_end = 0;  // area bytes up to the end of the last patch this send (debug)
  };
  struct Op {
    int32_t pair = -1;  // index into pairs; -1: not delta-capable (dense always)
    uint32_t ordinal = 0;
    size_t kept_offset = 0;
    uint64_t kept_version = 0;  // 0: nothing kept yet
    bool patched = false;       // this send carries it as a patch
    bool converted = false;     // this send already converted it into its staging (host)
  };
  // A device trainer's memory for the encode (device memory; `kept` stays empty then).
  struct Device {
    bool on = false;
    int device = 0;
    DeviceStream stream;  // the encode's own (broadcasts on the trainer's stream go on beside it)
    DeviceBuffer kept;    // every delta op's last sent bytes
    DeviceBuffer patch;   // one op's patch (the largest op's maxPatchBytes)
    PinnedHostBuffer patch_host;  // a sendable patch read back (page-locked; the largest part)
    DeviceBuffer scratch;         // the encode's scratch (the largest op's)
    DeviceBuffer gather;          // a strided op's bytes, packed (the largest strided op's)
  };
  double max_share = 0.25;
  std::vector<Pair> pairs;
  std::vector<Op> ops;        // per plan write; empty when no pair exists
  std::vector<uint8_t> kept;  // every delta op's last sent bytes (host trainers)
  Device device;
  std::vector<uint8_t> staging;  // every pair's area, registered with the transports
  std::vector<uint8_t> scratch;  // a strided op's bytes, packed
  std::vector<uint8_t> patch;    // one op's patch (host trainers)
  uint64_t wire_bytes = 0;       // this send: what went on the wire
  uint64_t full_bytes = 0;       // this send: the same writes dense
  bool active() const { return !pairs.empty(); }
};

// Commit (before the transports exist; a joined replica's extension, before its peers are
// connected): with `enabled` (the job has delta versions), a pair per peer with a landing part,
// each op of `plan` to such a peer keeps its bytes in `memory` (device: CUDA device `device`);
// the staging holds every pair's area. The send counters stay as they are.
Status setUpDelta(const RankPlan& plan, const std::vector<PeerInfo>& peers, bool enabled,
                  uint32_t max_share_ppm, MemoryKind memory, int device, TrainerDeltaState& state);
// Commit (TrainerPeers::connect): the landing area of `p` through `transport`, when `state` has a
// part of it. PROTOCOL when the part lies outside the area.
Status attachDeltaLanding(const PeerInfo& p, WriteTransport& transport, TrainerDeltaState& state);

// Where one send reads each write op's bytes: `sources` and, for converting ops, their packed
// conversion staging `staged(i)` (host memory converts into it during the send; device memory
// converted into it before the send, complete when it starts). Device work waits up to `timeout`.
struct DeltaSendSources {
  const TrainerSources& sources;
  std::function<uint8_t*(size_t i)> staged;
  std::chrono::milliseconds timeout{60000};
};
// One send of `go` (before its dense writes): for every pair of `state` whose replica takes the Go
// (`membership`), the ops of `plan` whose kept bytes are of the replica's base version become
// patches in the pair's area (read from `from`), written into the rank's landing part as trainer
// `trainer_rank`; every op's kept bytes become this version's (device memory: complete when this
// returns). The areas' bytes are added to `*wire_bytes`.
Status sendDeltaPatches(const GoMsg& go, const RankPlan& plan, TrainerDeltaState& state,
                        const DeltaSendSources& from, const TrainerMembership& membership,
                        int32_t trainer_rank, uint64_t* wire_bytes);
// WSYNC_DEBUG_CORRUPT_EVERY with delta versions: flips the last byte of the last patch sent in
// this send (a changed element's value: the patch still decodes, the checksum catches the wrong
// element) in the pair's staging (host memory, whatever the trainer's) and writes it again from
// there. False when no patch was sent; the caller flushes.
Result<bool> corruptOnePatch(const GoMsg& go, TrainerDeltaState& state);

}  // namespace wsync
