// The cluster model: predicts how long one version of a wsync plan takes on a cluster.
//
// Placement: trainer ranks fill trainer nodes in rank order (spec.trainer.ranks_per_node each),
// rollout ranks fill rollout nodes of their own. Local rank l of a node with N NICs and R ranks
// uses NICs [l*N/R, (l+1)*N/R) (at least NIC l*N/R), splitting its bytes evenly over them.
//
// Every transfer of the plan puts its bytes (destination dtype: the sender converts) on the links
// it crosses:
//  - another node: the sender's PCIe (device memory), its NIC(s) out, the receiver's NIC(s) in,
//    the receiver's PCIe (device memory); the fabric between NICs is non-blocking;
//  - the same node: device memory the sender's NVLink out and the receiver's NVLink in; host
//    memory the sending process's memcpy.
// With ClusterSpec::changed_share >= 0, a write op that crosses the network carries
// deltaWireShare() of its bytes (delta versions); with region_link_gbit > 0 every trainer ->
// rollout network byte also crosses the one region link. With a FormatCosts (rollout_format),
// elements travel in the format's bytes plus their block scales (dense), and the partial maxima
// of straddling blocks load the coordinator's NIC in and out.
// Write ops go sender -> receiver; a broadcast group goes along its algorithm's edges (a ring over
// the sender then the receivers in rank order, or a binomial tree). Each sender also has an
// "issue" link whose time is its message count times spec.message_overhead_us.
// Time of a link = bytes / bandwidth (NICs: nic_gbit / 8 * wire_efficiency GB/s) or the issue
// time. Predicted time = the slowest link + the latency term (one network latency when anything
// crosses the network; for broadcast rings the pipeline fill: hops x (latency + one chunk at NIC
// rate); binomial: rounds x latency; the largest over groups) + spec.control_ms + the partial
// maxima exchange (Prediction::amax_seconds; 0 without straddling blocks).
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cluster_spec.h"
#include "common/status.h"
#include "layout/dtype.h"
#include "layout/registration.h"
#include "plan/plan.h"
#include "rollout_format.h"

namespace wsync::cluster {

enum class LinkKind : uint8_t {
  kNicTx,
  kNicRx,
  kPcieTx,
  kPcieRx,
  kNvlinkTx,
  kNvlinkRx,
  kCopy,
  kIssue,
  kRegion,      // the one link between two regions (ClusterSpec::region_link_gbit)
  kCoordinator  // the coordinator's NIC, in and out (the partial-maxima exchange)
};
const char* linkKindName(LinkKind kind);  // "nic_tx", ... "issue", "region", "coordinator"

struct LinkLoad {
  std::string name;  // e.g. "rollout-node3/nic5/rx", "trainer17/pcie/tx", "trainer17/issue"
  LinkKind kind = LinkKind::kNicTx;
  double bytes = 0;
  int64_t messages = 0;
  double gbyte_per_s = 0;  // the link's bandwidth (0 for issue links)
  double seconds = 0;
};

struct Prediction {
  int trainer_ranks = 0, rollout_ranks = 0;
  int trainer_nodes = 0, rollout_nodes = 0;
  double predicted_seconds = 0;
  double bandwidth_seconds = 0;  // the slowest link
  double latency_seconds = 0;    // the latency term
  double control_seconds = 0;
  std::string bottleneck_link;
  std::string busiest_rank;  // "trainer 3" / "rollout 17": the most bytes sent or received
  double busiest_rank_bytes = 0;
  double bytes_delivered = 0;           // into rollout buffers (every receiver counted)
  double bytes_over_network = 0;        // crossing NICs (each hop once; delta-encoded when enabled)
  double bytes_over_network_dense = 0;  // the same transfers without delta encoding
  double bytes_within_nodes = 0;        // NVLink / memcpy
  double scale_bytes = 0;               // block scales delivered (rollout_format fp8_*, mxfp8)
  double amax_bytes_in = 0, amax_bytes_out = 0;  // partial maxima through the coordinator
  // The exchange before trainers quantize: 2 network latencies + all maxima into, then out of,
  // the coordinator's NIC (serial: BlockMaxima goes out once every trainer's maxima arrived).
  double amax_seconds = 0;
  int64_t messages = 0;
  // The least busy NIC's time over the busiest's, among trainer NICs out and rollout NICs in
  // (1: every NIC equally busy; 0: some NIC idle).
  double trainer_nic_balance = 0, rollout_nic_balance = 0;
  std::vector<LinkLoad> links;  // every link that carries something, slowest first
};

// The memory kind of every rank (all buffers of a rank share one kind): the first buffer's, host
// when a rank has none.
std::vector<MemoryKind> memoryKinds(const std::vector<Registration>& regs);

// Predicts one version of `plan`. trainer_memory / rollout_memory: one entry per rank of the
// plan's stats (INVALID_ARGUMENT otherwise, or when a plan rank is out of range). `costs`
// (buildFormatCosts for spec.rollout_format; null: the registered dtypes, no scales) sets each
// element's bytes on the wire, the scale bytes that travel with them and the partial maxima
// through the coordinator.
Result<Prediction> predictSync(const Plan& plan, const std::vector<MemoryKind>& trainer_memory,
                               const std::vector<MemoryKind>& rollout_memory,
                               const ClusterSpec& spec, const FormatCosts* costs = nullptr);

}  // namespace wsync::cluster
