#include "cluster_spec.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace wsync::cluster {
namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

bool parseDouble(const std::string& v, double* out) {
  errno = 0;
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (errno != 0 || end == v.c_str() || *end != '\0') return false;
  *out = d;
  return true;
}

bool parseInt(const std::string& v, int64_t* out) {
  errno = 0;
  char* end = nullptr;
  const long long i = std::strtoll(v.c_str(), &end, 10);
  if (errno != 0 || end == v.c_str() || *end != '\0') return false;
  *out = i;
  return true;
}

// Applies one key = value; false when the key is unknown or the value malformed / out of range.
bool applyKey(const std::string& key, const std::string& value, ClusterSpec* s) {
  if (key == "name") {
    s->name = value;
    return !value.empty();
  }
  if (key == "broadcast") {
    if (value == "ring")
      s->broadcast = BroadcastAlgorithm::kRing;
    else if (value == "binomial")
      s->broadcast = BroadcastAlgorithm::kBinomial;
    else
      return false;
    return true;
  }
  if (key == "rollout_format") {
    for (RolloutFormat f :
         {RolloutFormat::kAsRegistered, RolloutFormat::kBf16, RolloutFormat::kFp8Block128,
          RolloutFormat::kFp8Block128Pow2, RolloutFormat::kMxfp8})
      if (value == rolloutFormatName(f)) {
        s->rollout_format = f;
        return true;
      }
    return false;
  }
  if (key == "rows_are_messages") {
    if (value != "true" && value != "false") return false;
    s->rows_are_messages = value == "true";
    return true;
  }
  // Integer keys (positive).
  int* const ints[] = {&s->trainer.ranks_per_node, &s->rollout.ranks_per_node,
                       &s->trainer.nics_per_node, &s->rollout.nics_per_node};
  const char* const int_keys[] = {"trainer_ranks_per_node", "rollout_ranks_per_node",
                                  "trainer_nics_per_node", "rollout_nics_per_node"};
  int64_t n = 0;
  for (int i = 0; i < 4; ++i) {
    if (key != int_keys[i]) continue;
    if (!parseInt(value, &n) || n <= 0 || n > 1 << 20) return false;
    *ints[i] = static_cast<int>(n);
    return true;
  }
  if (key == "gpus_per_node" || key == "ranks_per_node" || key == "nics_per_node") {
    if (!parseInt(value, &n) || n <= 0 || n > 1 << 20) return false;
    const bool ranks = key != "nics_per_node";
    (ranks ? s->trainer.ranks_per_node : s->trainer.nics_per_node) = static_cast<int>(n);
    (ranks ? s->rollout.ranks_per_node : s->rollout.nics_per_node) = static_cast<int>(n);
    return true;
  }
  if (key == "broadcast_chunk_bytes" || key == "delta_chunk_bytes") {
    if (!parseInt(value, &n) || n <= 0) return false;
    (key == "delta_chunk_bytes" ? s->delta_chunk_bytes : s->broadcast_chunk_bytes) = n;
    return true;
  }
  // Real keys: rates must be > 0, latencies >= 0.
  double d = 0;
  if (!parseDouble(value, &d)) return false;
  struct RealKey {
    const char* key;
    double* field;
    bool rate;
  };
  const RealKey reals[] = {
      {"trainer_nic_gbit", &s->trainer.nic_gbit, true},
      {"rollout_nic_gbit", &s->rollout.nic_gbit, true},
      {"wire_efficiency", &s->wire_efficiency, true},
      {"nvlink_gbyte", &s->nvlink_gbyte, true},
      {"pcie_gbyte", &s->pcie_gbyte, true},
      {"host_memcpy_gbyte", &s->host_memcpy_gbyte, true},
      {"network_latency_us", &s->network_latency_us, false},
      {"message_overhead_us", &s->message_overhead_us, false},
      {"control_ms", &s->control_ms, false},
      {"coordinator_nic_gbit", &s->coordinator_nic_gbit, true},
  };
  if (key == "changed_share") {  // < 0: dense; else a share in [0, 1]
    if (d > 1) return false;
    s->changed_share = d < 0 ? -1 : d;
    return true;
  }
  if (key == "region_link_gbit") {  // 0: one region
    if (d < 0) return false;
    s->region_link_gbit = d;
    return true;
  }
  if (key == "nic_gbit") {
    if (d <= 0) return false;
    s->trainer.nic_gbit = s->rollout.nic_gbit = d;
    return true;
  }
  for (const RealKey& r : reals) {
    if (key != r.key) continue;
    if (r.rate ? d <= 0 : d < 0) return false;
    if (key == "wire_efficiency" && d > 1) return false;
    *r.field = d;
    return true;
  }
  return false;
}

}  // namespace

const char* rolloutFormatName(RolloutFormat f) {
  switch (f) {
    case RolloutFormat::kAsRegistered:
      return "as_registered";
    case RolloutFormat::kBf16:
      return "bf16";
    case RolloutFormat::kFp8Block128:
      return "fp8_block128";
    case RolloutFormat::kFp8Block128Pow2:
      return "fp8_block128_pow2";
    case RolloutFormat::kMxfp8:
      return "mxfp8";
  }
  return "?";
}

Status parseClusterSpec(const std::string& text, ClusterSpec* spec) {
  std::istringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    line = trim(line);
    if (line.empty()) continue;
    const size_t eq = line.find('=');
    if (eq == std::string::npos)
      return invalidArgument("cluster spec line " + std::to_string(number) +
                             ": expected 'key = value', got '" + line + "'");
    const std::string key = trim(line.substr(0, eq));
    const std::string value = trim(line.substr(eq + 1));
    if (!applyKey(key, value, spec))
      return invalidArgument("cluster spec line " + std::to_string(number) +
                             ": unknown key or bad value: " + key + " = '" + value + "'");
  }
  return Status::ok();
}

Result<ClusterSpec> loadClusterSpec(const std::string& path) {
  std::ifstream in(path);
  if (!in) return invalidArgument("cannot read cluster spec " + path);
  std::stringstream buf;
  buf << in.rdbuf();
  ClusterSpec spec;
  WSYNC_RETURN_IF_ERROR(parseClusterSpec(buf.str(), &spec).withContext(path));
  return spec;
}

std::string formatClusterSpec(const ClusterSpec& s) {
  std::ostringstream o;
  o.precision(10);
  o << "name = " << s.name << "\n"
    << "trainer_ranks_per_node = " << s.trainer.ranks_per_node << "\n"
    << "trainer_nics_per_node = " << s.trainer.nics_per_node << "\n"
    << "trainer_nic_gbit = " << s.trainer.nic_gbit << "\n"
    << "rollout_ranks_per_node = " << s.rollout.ranks_per_node << "\n"
    << "rollout_nics_per_node = " << s.rollout.nics_per_node << "\n"
    << "rollout_nic_gbit = " << s.rollout.nic_gbit << "\n"
    << "wire_efficiency = " << s.wire_efficiency << "\n"
    << "nvlink_gbyte = " << s.nvlink_gbyte << "\n"
    << "pcie_gbyte = " << s.pcie_gbyte << "\n"
    << "host_memcpy_gbyte = " << s.host_memcpy_gbyte << "\n"
    << "network_latency_us = " << s.network_latency_us << "\n"
    << "message_overhead_us = " << s.message_overhead_us << "\n"
    << "control_ms = " << s.control_ms << "\n"
    << "rows_are_messages = " << (s.rows_are_messages ? "true" : "false") << "\n"
    << "broadcast = " << (s.broadcast == BroadcastAlgorithm::kRing ? "ring" : "binomial") << "\n"
    << "broadcast_chunk_bytes = " << s.broadcast_chunk_bytes << "\n"
    << "changed_share = " << s.changed_share << "\n"
    << "delta_chunk_bytes = " << s.delta_chunk_bytes << "\n"
    << "region_link_gbit = " << s.region_link_gbit << "\n"
    << "rollout_format = " << rolloutFormatName(s.rollout_format) << "\n"
    << "coordinator_nic_gbit = " << s.coordinator_nic_gbit << "\n";
  return o.str();
}

double deltaWireShare(double changed_share, int elem_bytes, int64_t chunk_bytes) {
  if (changed_share < 0) return 1.0;
  const double e = elem_bytes;
  const double n = std::max<double>(1.0, std::floor(static_cast<double>(chunk_bytes) / e));
  const double c = n * changed_share;
  const double dense = n * e, bitmap = std::ceil(n / 8.0) + c * e, index = c * (2.0 + e);
  return (std::min({dense, bitmap, index}) + 4.0) / dense;
}

}  // namespace wsync::cluster
