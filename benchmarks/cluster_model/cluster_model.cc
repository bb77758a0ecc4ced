#include "cluster_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace wsync::cluster {
namespace {

struct Endpoint {
  Role role = Role::kTrainer;
  int32_t rank = 0;
};

// Per-link counters for one job, indexed by a dense link id: NIC links of every node of both
// roles, then six per-rank links of every rank of both roles.
class LinkTable {
 public:
  LinkTable(const ClusterSpec& spec, int trainers, int rollouts,
            const std::vector<MemoryKind>& trainer_memory,
            const std::vector<MemoryKind>& rollout_memory)
      : spec_(spec),
        trainers_(trainers),
        rollouts_(rollouts),
        trainer_memory_(trainer_memory),
        rollout_memory_(rollout_memory) {
    trainer_nodes_ = nodesFor(trainers, spec.trainer.ranks_per_node);
    rollout_nodes_ = nodesFor(rollouts, spec.rollout.ranks_per_node);
    trainer_nic_base_ = 0;
    rollout_nic_base_ = trainer_nic_base_ + 2 * trainer_nodes_ * spec.trainer.nics_per_node;
    rank_base_ = rollout_nic_base_ + 2 * rollout_nodes_ * spec.rollout.nics_per_node;
    region_link_ = rank_base_ + kRankLinks * static_cast<int64_t>(trainers + rollouts);
    coordinator_rx_ = region_link_ + 1;
    const size_t n = static_cast<size_t>(coordinator_rx_) + 2;
    bytes_.assign(n, 0.0);
    messages_.assign(n, 0);
    sent_.assign(trainers + rollouts, 0.0);
    received_.assign(trainers + rollouts, 0.0);
  }

  int trainerNodes() const { return trainer_nodes_; }
  int rolloutNodes() const { return rollout_nodes_; }
  double overNetwork() const { return over_network_; }
  double overNetworkDense() const { return over_network_dense_; }
  double withinNodes() const { return within_nodes_; }
  int64_t messages() const { return total_messages_; }

  // The partial maxima through the coordinator per version.
  void addCoordinator(double bytes_in, double bytes_out) {
    add(coordinator_rx_, bytes_in, 0);
    add(coordinator_rx_ + 1, bytes_out, 0);
  }

  // `bytes` in `messages` messages from `src` to `dst` along the links they cross; across nodes
  // only `wire_share` of them travel (delta encoding), inside a node all of them.
  void addTransfer(Endpoint src, Endpoint dst, double bytes, int64_t messages,
                   double wire_share = 1.0) {
    const NodeShape& ss = shape(src.role);
    const NodeShape& ds = shape(dst.role);
    add(rankLink(src, LinkKind::kIssue), 0, messages);
    total_messages_ += messages;
    const bool src_dev = device(src), dst_dev = device(dst);
    if (node(src) == node(dst)) {
      sent_[flat(src)] += bytes;
      received_[flat(dst)] += bytes;
      within_nodes_ += bytes;
      if (src_dev && dst_dev) {
        add(rankLink(src, LinkKind::kNvlinkTx), bytes, messages);
        add(rankLink(dst, LinkKind::kNvlinkRx), bytes, messages);
      } else if (src_dev || dst_dev) {  // host <-> device in one node: the device's PCIe
        add(rankLink(src_dev ? src : dst, src_dev ? LinkKind::kPcieTx : LinkKind::kPcieRx), bytes,
            messages);
      } else {
        add(rankLink(src, LinkKind::kCopy), bytes, messages);
      }
      return;
    }
    over_network_dense_ += bytes;
    bytes *= wire_share;
    over_network_ += bytes;
    sent_[flat(src)] += bytes;
    received_[flat(dst)] += bytes;
    if (spec_.region_link_gbit > 0 && src.role != dst.role) add(region_link_, bytes, messages);
    if (src_dev) add(rankLink(src, LinkKind::kPcieTx), bytes, messages);
    if (dst_dev) add(rankLink(dst, LinkKind::kPcieRx), bytes, messages);
    addNics(src, ss, /*rx=*/false, bytes, messages);
    addNics(dst, ds, /*rx=*/true, bytes, messages);
  }

  double nicGbyte(const NodeShape& s) const { return s.nic_gbit / 8.0 * spec_.wire_efficiency; }
  bool crossesNodes(Endpoint a, Endpoint b) const { return node(a) != node(b); }

  // Every loaded link with its time; also fills the busiest rank and NIC balance of `p`.
  void finish(Prediction* p) const {
    for (size_t id = 0; id < bytes_.size(); ++id) {
      if (bytes_[id] == 0 && messages_[id] == 0) continue;
      p->links.push_back(describe(static_cast<int64_t>(id)));
    }
    std::stable_sort(p->links.begin(), p->links.end(),
                     [](const LinkLoad& a, const LinkLoad& b) { return a.seconds > b.seconds; });
    double best = -1;
    for (size_t i = 0; i < sent_.size(); ++i) {
      const double b = sent_[i] + received_[i];
      if (b <= best) continue;
      best = b;
      const bool t = static_cast<int>(i) < trainers_;
      p->busiest_rank =
          std::string(t ? "trainer " : "rollout ") + std::to_string(t ? i : i - trainers_);
      p->busiest_rank_bytes = b;
    }
    p->trainer_nic_balance = nicBalance(trainer_nic_base_, trainer_nodes_, shape(Role::kTrainer),
                                        /*rx=*/false);
    p->rollout_nic_balance = nicBalance(rollout_nic_base_, rollout_nodes_, shape(Role::kRollout),
                                        /*rx=*/true);
  }

 private:
  static constexpr int kRankLinks = 6;  // pcie tx/rx, nvlink tx/rx, copy, issue

  static int nodesFor(int ranks, int per_node) { return (ranks + per_node - 1) / per_node; }
  const NodeShape& shape(Role r) const {
    return r == Role::kTrainer ? spec_.trainer : spec_.rollout;
  }
  int64_t flat(Endpoint e) const { return e.role == Role::kTrainer ? e.rank : trainers_ + e.rank; }
  bool device(Endpoint e) const {
    const auto& m = e.role == Role::kTrainer ? trainer_memory_ : rollout_memory_;
    return m[e.rank] == MemoryKind::kDevice;
  }
  // Global node index: trainer nodes first, then rollout nodes.
  int node(Endpoint e) const {
    const int n = e.rank / shape(e.role).ranks_per_node;
    return e.role == Role::kTrainer ? n : trainer_nodes_ + n;
  }
  int64_t rankLink(Endpoint e, LinkKind kind) const {
    static constexpr LinkKind kOrder[kRankLinks] = {LinkKind::kPcieTx,   LinkKind::kPcieRx,
                                                    LinkKind::kNvlinkTx, LinkKind::kNvlinkRx,
                                                    LinkKind::kCopy,     LinkKind::kIssue};
    int k = 0;
    while (kOrder[k] != kind)
      ++k;
    return rank_base_ + kRankLinks * flat(e) + k;
  }
  // NIC link id: base + (node * nics + nic) * 2 + rx.
  int64_t nicLink(int64_t base, int node_in_role, int nics, int nic, bool rx) const {
    return base + (static_cast<int64_t>(node_in_role) * nics + nic) * 2 + (rx ? 1 : 0);
  }
  void addNics(Endpoint e, const NodeShape& s, bool rx, double bytes, int64_t messages) {
    const int local = e.rank % s.ranks_per_node;
    const int first = static_cast<int>(int64_t{local} * s.nics_per_node / s.ranks_per_node);
    const int last = std::max(
        first + 1, static_cast<int>(int64_t{local + 1} * s.nics_per_node / s.ranks_per_node));
    const int64_t base = e.role == Role::kTrainer ? trainer_nic_base_ : rollout_nic_base_;
    const int node_in_role = e.rank / s.ranks_per_node;
    const int k = last - first;
    for (int nic = first; nic < last; ++nic)
      add(nicLink(base, node_in_role, s.nics_per_node, nic, rx), bytes / k,
          nic == first ? messages : 0);
  }
  void add(int64_t id, double bytes, int64_t messages) {
    bytes_[id] += bytes;
    messages_[id] += messages;
  }

  LinkLoad describe(int64_t id) const {
    LinkLoad l;
    l.bytes = bytes_[id];
    l.messages = messages_[id];
    if (id == coordinator_rx_ || id == coordinator_rx_ + 1) {
      l.kind = LinkKind::kCoordinator;
      l.name = id == coordinator_rx_ ? "coordinator/nic/rx" : "coordinator/nic/tx";
      l.gbyte_per_s = spec_.coordinator_nic_gbit / 8.0 * spec_.wire_efficiency;
    } else if (id == region_link_) {
      l.kind = LinkKind::kRegion;
      l.name = "region-link";
      l.gbyte_per_s = spec_.region_link_gbit / 8.0 * spec_.wire_efficiency;
    } else if (id < rank_base_) {
      const bool trainer = id < rollout_nic_base_;
      const NodeShape& s = shape(trainer ? Role::kTrainer : Role::kRollout);
      const int64_t rel = id - (trainer ? trainer_nic_base_ : rollout_nic_base_);
      const bool rx = rel % 2 == 1;
      const int64_t nic = (rel / 2) % s.nics_per_node, nd = (rel / 2) / s.nics_per_node;
      l.kind = rx ? LinkKind::kNicRx : LinkKind::kNicTx;
      l.name = std::string(trainer ? "trainer" : "rollout") + "-node" + std::to_string(nd) +
               "/nic" + std::to_string(nic) + (rx ? "/rx" : "/tx");
      l.gbyte_per_s = nicGbyte(s);
    } else {
      const int64_t rel = id - rank_base_;
      const int64_t r = rel / kRankLinks;
      const int k = static_cast<int>(rel % kRankLinks);
      const bool trainer = r < trainers_;
      const std::string who = std::string(trainer ? "trainer" : "rollout") +
                              std::to_string(trainer ? r : r - trainers_);
      static const char* const kNames[kRankLinks] = {"/pcie/tx",   "/pcie/rx", "/nvlink/tx",
                                                     "/nvlink/rx", "/copy",    "/issue"};
      static constexpr LinkKind kKinds[kRankLinks] = {LinkKind::kPcieTx,   LinkKind::kPcieRx,
                                                      LinkKind::kNvlinkTx, LinkKind::kNvlinkRx,
                                                      LinkKind::kCopy,     LinkKind::kIssue};
      const double bw[kRankLinks] = {spec_.pcie_gbyte,        spec_.pcie_gbyte,
                                     spec_.nvlink_gbyte,      spec_.nvlink_gbyte,
                                     spec_.host_memcpy_gbyte, 0};
      l.name = who + kNames[k];
      l.kind = kKinds[k];
      l.gbyte_per_s = bw[k];
    }
    l.seconds = l.kind == LinkKind::kIssue ? l.messages * spec_.message_overhead_us * 1e-6
                                           : l.bytes / (l.gbyte_per_s * 1e9);
    return l;
  }

  double nicBalance(int64_t base, int nodes, const NodeShape& s, bool rx) const {
    double lo = std::numeric_limits<double>::max(), hi = 0;
    for (int nd = 0; nd < nodes; ++nd)
      for (int nic = 0; nic < s.nics_per_node; ++nic) {
        const double b = bytes_[nicLink(base, nd, s.nics_per_node, nic, rx)];
        lo = std::min(lo, b);
        hi = std::max(hi, b);
      }
    return hi > 0 ? lo / hi : 0.0;
  }

  const ClusterSpec& spec_;
  int trainers_, rollouts_;
  const std::vector<MemoryKind>& trainer_memory_;
  const std::vector<MemoryKind>& rollout_memory_;
  int trainer_nodes_ = 0, rollout_nodes_ = 0;
  int64_t trainer_nic_base_ = 0, rollout_nic_base_ = 0, rank_base_ = 0, region_link_ = 0;
  int64_t coordinator_rx_ = 0;  // then coordinator tx
  std::vector<double> bytes_;
  std::vector<int64_t> messages_;
  std::vector<double> sent_, received_;  // per rank (trainers, then rollouts)
  double over_network_ = 0, over_network_dense_ = 0, within_nodes_ = 0;
  int64_t total_messages_ = 0;
};

// Puts one broadcast group on the links; returns its latency term (seconds).
double addGroup(const BroadcastGroup& g, const ClusterSpec& spec, const FormatCosts* costs,
                LinkTable& links, double* delivered) {
  const int elem = costs != nullptr ? costs->elemBytes(g.tensor, g.dst_dtype)
                                    : static_cast<int>(dtypeSize(g.dst_dtype));
  const double bytes = static_cast<double>(g.num_elements) * elem;
  std::vector<Endpoint> members{{Role::kTrainer, g.src.rank}};
  for (const BufferSpan& d : g.dst)
    members.push_back({Role::kRollout, d.rank});
  *delivered += bytes * static_cast<double>(g.dst.size());
  const double lat = spec.network_latency_us * 1e-6;
  if (spec.broadcast == BroadcastAlgorithm::kRing) {
    const int64_t chunks =
        std::max<int64_t>(1, (static_cast<int64_t>(bytes) + spec.broadcast_chunk_bytes - 1) /
                                 spec.broadcast_chunk_bytes);
    const double chunk_bytes = std::min(bytes, static_cast<double>(spec.broadcast_chunk_bytes));
    double fill = 0;
    for (size_t i = 0; i + 1 < members.size(); ++i) {
      links.addTransfer(members[i], members[i + 1], bytes, chunks);
      const bool net = links.crossesNodes(members[i], members[i + 1]);
      const double bw = net ? links.nicGbyte(spec.rollout) : spec.nvlink_gbyte;
      fill += (net ? lat : 0.0) + chunk_bytes / (bw * 1e9);
    }
    return fill;
  }
  // Binomial: member j >= 1 receives the whole payload from j - 2^floor(log2 j).
  int rounds = 0;
  for (size_t j = 1; j < members.size(); ++j) {
    size_t high = 1;
    int r = 1;
    while (high * 2 <= j) {
      high *= 2;
      ++r;
    }
    rounds = std::max(rounds, r);
    links.addTransfer(members[j - high], members[j], bytes, 1);
  }
  return rounds * lat;
}

}  // namespace

const char* linkKindName(LinkKind kind) {
  switch (kind) {
    case LinkKind::kNicTx:
      return "nic_tx";
    case LinkKind::kNicRx:
      return "nic_rx";
    case LinkKind::kPcieTx:
      return "pcie_tx";
    case LinkKind::kPcieRx:
      return "pcie_rx";
    case LinkKind::kNvlinkTx:
      return "nvlink_tx";
    case LinkKind::kNvlinkRx:
      return "nvlink_rx";
    case LinkKind::kCopy:
      return "copy";
    case LinkKind::kIssue:
      return "issue";
    case LinkKind::kRegion:
      return "region";
    case LinkKind::kCoordinator:
      return "coordinator";
  }
  return "?";
}

std::vector<MemoryKind> memoryKinds(const std::vector<Registration>& regs) {
  std::vector<MemoryKind> out;
  out.reserve(regs.size());
  for (const Registration& r : regs)
    out.push_back(r.buffers.empty() ? MemoryKind::kHost : r.buffers.front().memory);
  return out;
}

Result<Prediction> predictSync(const Plan& plan, const std::vector<MemoryKind>& trainer_memory,
                               const std::vector<MemoryKind>& rollout_memory,
                               const ClusterSpec& spec, const FormatCosts* costs) {
  const int trainers = plan.stats.trainer_ranks, rollouts = plan.stats.rollout_ranks;
  if (static_cast<int>(trainer_memory.size()) != trainers ||
      static_cast<int>(rollout_memory.size()) != rollouts)
    return invalidArgument("predictSync: memory kinds for " +
                           std::to_string(trainer_memory.size()) + " trainers and " +
                           std::to_string(rollout_memory.size()) + " rollouts, plan has " +
                           std::to_string(trainers) + " and " + std::to_string(rollouts));
  auto inRange = [](int32_t r, int n) { return r >= 0 && r < n; };
  LinkTable links(spec, trainers, rollouts, trainer_memory, rollout_memory);
  Prediction p;
  p.trainer_ranks = trainers;
  p.rollout_ranks = rollouts;
  p.trainer_nodes = links.trainerNodes();
  p.rollout_nodes = links.rolloutNodes();
  for (const WriteOp& op : plan.writes) {
    if (!inRange(op.src_rank, trainers) || !inRange(op.dst_rank, rollouts))
      return invalidArgument("predictSync: write op from trainer " + std::to_string(op.src_rank) +
                             " to rollout " + std::to_string(op.dst_rank) + " is out of range");
    const Region region = plan.region(op);
    const int elem = costs != nullptr ? costs->elemBytes(op.tensor, op.dst_dtype)
                                      : static_cast<int>(dtypeSize(op.dst_dtype));
    const double elements = static_cast<double>(region.numElements());
    const double data = elements * elem;
    // Scales travel dense next to the (possibly delta-encoded) data.
    const double scales =
        costs != nullptr ? elements * costs->scaleRatio(op.dst_rank, op.tensor) : 0.0;
    const double bytes = data + scales;
    const int64_t messages = spec.rows_are_messages ? region.count[1] * region.count[2] : 1;
    const double share = deltaWireShare(spec.changed_share, elem, spec.delta_chunk_bytes);
    links.addTransfer({Role::kTrainer, op.src_rank}, {Role::kRollout, op.dst_rank}, bytes, messages,
                      bytes > 0 ? (data * share + scales) / bytes : 1.0);
    p.bytes_delivered += bytes;
    p.scale_bytes += scales;
  }
  double latency = 0;
  for (const BroadcastGroup& g : plan.groups) {
    if (!inRange(g.src.rank, trainers))
      return invalidArgument("predictSync: group sender " + std::to_string(g.src.rank));
    for (const BufferSpan& d : g.dst)
      if (!inRange(d.rank, rollouts))
        return invalidArgument("predictSync: group receiver " + std::to_string(d.rank));
    latency = std::max(latency, addGroup(g, spec, costs, links, &p.bytes_delivered));
  }
  if (costs != nullptr && costs->amax_bytes_in > 0) {
    links.addCoordinator(costs->amax_bytes_in, costs->amax_bytes_out);
    p.amax_bytes_in = costs->amax_bytes_in;
    p.amax_bytes_out = costs->amax_bytes_out;
    const double coord = spec.coordinator_nic_gbit / 8.0 * spec.wire_efficiency * 1e9;
    p.amax_seconds =
        2 * spec.network_latency_us * 1e-6 + (costs->amax_bytes_in + costs->amax_bytes_out) / coord;
  }
  if (links.overNetwork() > 0) latency = std::max(latency, spec.network_latency_us * 1e-6);
  links.finish(&p);
  p.bytes_over_network = links.overNetwork();
  p.bytes_over_network_dense = links.overNetworkDense();
  p.bytes_within_nodes = links.withinNodes();
  p.messages = links.messages();
  if (!p.links.empty()) {
    p.bottleneck_link = p.links.front().name;
    p.bandwidth_seconds = p.links.front().seconds;
  }
  p.latency_seconds = latency;
  p.control_seconds = spec.control_ms * 1e-3;
  p.predicted_seconds =
      p.bandwidth_seconds + p.latency_seconds + p.control_seconds + p.amax_seconds;
  return p;
}

}  // namespace wsync::cluster
