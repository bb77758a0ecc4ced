// A cluster description for the cluster model (cluster_model.h): how many ranks share a node, the
// NICs of a node and their rate, NVLink, PCIe, host memcpy, and the latency terms. Read from a
// small text file (docs/cluster_model.md describes the format; benchmarks/cluster_model/*.cluster
// are examples):
//
//   # comment
//   name = h200-8x400g
//   gpus_per_node = 8        # ranks per node, both roles (or trainer_/rollout_ranks_per_node)
//   nics_per_node = 8        # both roles (or trainer_/rollout_nics_per_node)
//   nic_gbit = 400           # per NIC and direction, Gbit/s (or trainer_/rollout_nic_gbit)
//
// Unknown keys and malformed values are INVALID_ARGUMENT naming the line.
// Thread-safety: plain data and pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace wsync::cluster {

// How a broadcast group moves its bytes: a pipelined ring (NCCL: every member receives the bytes
// once and forwards them once, in chunks) or a binomial tree (MPI: round k doubles the holders,
// each send is the whole payload).
enum class BroadcastAlgorithm : uint8_t { kRing, kBinomial };

// One role's side of the cluster: its ranks fill nodes of their own (trainer and rollout ranks
// never share a node), `ranks_per_node` at a time in rank order.
struct NodeShape {
  int ranks_per_node = 8;
  int nics_per_node = 8;
  double nic_gbit = 400;  // per NIC, per direction (full duplex)
};

// What a rollout holds on the wire side (issue 21), overriding the registered rollout dtype:
//  kAsRegistered  the registered dtype's bytes (e.g. --rollout-dtype float8_e4m3: 1 byte per
//                 element everywhere, no scales)
//  kBf16          2 bytes per element
//  kFp8Block128 / kFp8Block128Pow2  linear weights (rank >= 2, not embeddings, lm_head or the MoE
//                 router) as e4m3 (1 byte) plus one float32 scale per 128x128 block (vLLM
//                 Fp8LinearMethod with weight_block_size [128, 128]; pow2: the same bytes, scales
//                 powers of two); every other tensor bf16
//  kMxfp8         the same weights as e4m3 plus one e8m0 byte per 1x32 block (OCP MXFP8)
// The fp8 formats also count the partial-maxima exchange of blocks that straddle trainers
// (rollout_format.h).
enum class RolloutFormat : uint8_t { kAsRegistered, kBf16, kFp8Block128, kFp8Block128Pow2, kMxfp8 };
const char* rolloutFormatName(RolloutFormat f);  // "as_registered", "bf16", "fp8_block128", ...

struct ClusterSpec {
  std::string name = "cluster";
  NodeShape trainer;
  NodeShape rollout;
  // Payload share of the NIC's bits (headers; 1448 / 1514 for TCP over a 1500-byte MTU).
  double wire_efficiency = 1.0;
  double nvlink_gbyte = 450;       // per GPU, per direction, GB/s (device memory, same node)
  double pcie_gbyte = 55;          // per GPU, per direction, GB/s (device memory <-> NIC)
  double host_memcpy_gbyte = 15;   // per sending process, GB/s (host memory, same node)
  double network_latency_us = 5;   // one-way latency of a message across the network
  double message_overhead_us = 1;  // a sender's cost to post one message (serial per sender)
  double control_ms = 1;           // the control plane per version (publish .. delivered)
  bool rows_are_messages = false;  // a strided region is posted one row per message
  BroadcastAlgorithm broadcast = BroadcastAlgorithm::kRing;
  int64_t broadcast_chunk_bytes = int64_t{4} << 20;  // ring pipeline chunk
  // Delta versions (issue 22): the share of elements that differ from the version each replica
  // holds; a write op that crosses the network then carries its delta encoding (per chunk of
  // delta_chunk_bytes the smallest of dense, bitmap + changed values, index list + changed values:
  // deltaWireShare). < 0: every version dense. Broadcast groups and writes inside a node stay
  // dense.
  double changed_share = -1;
  int64_t delta_chunk_bytes = 4096;
  // Two regions: > 0 puts the trainer nodes in one region and the rollout nodes in another, joined
  // by one link of this rate (Gbit/s per direction) that every trainer -> rollout network byte
  // crosses (the "region" link). 0: one region (a non-blocking fabric between all NICs).
  double region_link_gbit = 0;
  RolloutFormat rollout_format = RolloutFormat::kAsRegistered;
  // The coordinator's NIC (Gbit/s per direction): the partial maxima of straddling blocks are
  // relayed through it with the Publish / Go messages (links "coordinator/nic/rx", "/tx").
  double coordinator_nic_gbit = 100;
};

// The delta encoding's bytes over the dense bytes for elements of `elem_bytes` that change
// independently with probability `changed_share`, in chunks of `chunk_bytes`: per chunk of n
// elements with c = n * share changed, min(n * e, ceil(n / 8) + c * e, c * (2 + e)) + a 4-byte
// header, over n * e (the cost model of benchmarks/delta/changed_share.py's best-per-chunk).
double deltaWireShare(double changed_share, int elem_bytes, int64_t chunk_bytes);

// Parses the text format above into `spec` (keys not given keep their current value).
// INVALID_ARGUMENT names the line number and the key or value at fault.
Status parseClusterSpec(const std::string& text, ClusterSpec* spec);
// Reads and parses a file; INVALID_ARGUMENT also when it cannot be read.
Result<ClusterSpec> loadClusterSpec(const std::string& path);
// The spec as text in the same format (round-trips through parseClusterSpec).
std::string formatClusterSpec(const ClusterSpec& spec);

}  // namespace wsync::cluster
