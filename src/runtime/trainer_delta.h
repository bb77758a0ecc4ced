// A trainer's delta versions (docs/delta.md): what it keeps to diff against, and the landing parts
// of its delta-capable peers. The publisher thread owns it (TrainerContext::sendDeltas,
// src/runtime/trainer_delta.cc).
//
// Per write op to a peer with a landing part (PeerInfo::delta_landing_bytes > 0): the bytes this
// trainer last sent through it (destination dtype, packed) and their version. A version's first
// send to a replica whose base (Go::base_of_replica) is that version sends the op as a patch when
// the patch is at most max_share of the dense bytes and fits the pair's part; every other op goes
// dense. Memory: one copy of what this trainer writes per version to delta-capable ranks (all
// replicas), plus the pairs' staging (max_share of it, plus 4 KiB per pair).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "transport/write_transport.h"

namespace wsync {

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
  double max_share = 0.25;
  std::vector<Pair> pairs;
  std::vector<Op> ops;           // per plan write; empty when no pair exists
  std::vector<uint8_t> kept;     // every delta op's last sent bytes
  std::vector<uint8_t> staging;  // every pair's area, registered with the transports
  std::vector<uint8_t> scratch;  // a strided op's bytes, packed
  std::vector<uint8_t> patch;    // one op's patch
  uint64_t wire_bytes = 0;       // this send: what went on the wire
  uint64_t full_bytes = 0;       // this send: the same writes dense
  bool active() const { return !pairs.empty(); }
};

}  // namespace wsync
