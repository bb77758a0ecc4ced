#include "coordinator/metrics.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstdio>

#include "layout/dtype.h"

namespace wsync {

const char* replicaOutcomeName(ReplicaOutcome outcome) {
  switch (outcome) {
    case ReplicaOutcome::kReady:
      return "ready";
    case ReplicaOutcome::kSkipped:
      return "skipped";
    case ReplicaOutcome::kLost:
      return "lost";
    case ReplicaOutcome::kRejected:
      return "rejected";
  }
  return "?";
}

CoordinatorMetrics::CoordinatorMetrics(size_t keep_versions)
    : keep_versions_(std::max<size_t>(1, keep_versions)) {}

void CoordinatorMetrics::setReplicaBytes(std::map<int32_t, int64_t> bytes_per_replica) {
  std::lock_guard lock(mu_);
  bytes_per_replica_ = std::move(bytes_per_replica);
  for (const auto& [id, bytes] : bytes_per_replica_)
    (void)replica(id);
}

ReplicaCounters& CoordinatorMetrics::replica(int32_t id) {
  ReplicaCounters& r = replicas_[id];
  r.replica = id;
  return r;
}

std::optional<DeliveredMsg> CoordinatorMetrics::observe(const SequencerOutput& out,
                                                        const VersionSequencer& sequencer,
                                                        SequencerTime now) {
  std::optional<DeliveredMsg> delivered;
  for (const OutgoingMessage& m : out.messages) {
    switch (m.type) {
      case MessageType::kPrepare:  // not one sent ahead of its version (see VersionSequencer)
        if (std::get<SlotMsg>(m.payload).version == sequencer.inFlightVersion())
          onStarted(std::get<SlotMsg>(m.payload).version, now);
        break;
      case MessageType::kGo:
        onStarted(std::get<GoMsg>(m.payload).version, now);
        break;
      case MessageType::kReady: {
        if (m.to.empty()) break;
        const std::optional<int32_t> id = sequencer.replicaOf(m.to.front().rank);
        if (id) onReplicaReady(*id, std::get<SlotMsg>(m.payload).version, now);
        break;
      }
      case MessageType::kVerify: {
        std::lock_guard lock(mu_);
        ++totals_.checksum_verifications;
        break;
      }
      case MessageType::kDelivered:
        if (out.delivered) delivered = deliveredMessage(onDelivered(*out.delivered, now));
        break;
      default:
        break;
    }
  }
  return delivered;
}

void CoordinatorMetrics::onStarted(uint64_t version, SequencerTime now) {
  std::lock_guard lock(mu_);
  if (version <= totals_.newest_started) return;  // already started (Go after Prepare)
  totals_.newest_started = version;
  ++totals_.versions_started;
  in_flight_ = version;
  in_flight_started_ = now;
  in_flight_ready_seconds_.clear();
  in_flight_wire_bytes_ = 0;
  in_flight_full_bytes_ = 0;
}

void CoordinatorMetrics::onWireBytes(uint64_t version, uint64_t wire_bytes, uint64_t full_bytes) {
  std::lock_guard lock(mu_);
  if (version != in_flight_) return;
  in_flight_wire_bytes_ += wire_bytes;
  in_flight_full_bytes_ += full_bytes;
}

void CoordinatorMetrics::onReplicaReady(int32_t replica, uint64_t version, SequencerTime now) {
  std::lock_guard lock(mu_);
  if (version != in_flight_) return;
  in_flight_ready_seconds_[replica] =
      std::chrono::duration<double>(now - in_flight_started_).count();
}

VersionStats CoordinatorMetrics::onDelivered(const VersionOutcome& outcome, SequencerTime now) {
  std::lock_guard lock(mu_);
  VersionStats v;
  v.version = outcome.version;
  const bool known = outcome.version == in_flight_;
  v.seconds = known ? std::chrono::duration<double>(now - in_flight_started_).count() : 0.0;
  v.wire_bytes = known ? in_flight_wire_bytes_ : 0;
  v.full_bytes = known ? in_flight_full_bytes_ : 0;
  auto count = [](const std::map<int32_t, uint32_t>& per_replica, int32_t id) {
    auto it = per_replica.find(id);
    return it == per_replica.end() ? 0u : it->second;
  };
  auto add = [&](int32_t id, ReplicaOutcome what) {
    ReplicaVersionStats r{id, what, 0, 0.0};
    ReplicaCounters& c = replica(id);
    r.retries = count(outcome.retries, id);
    r.checksum_failures = count(outcome.checksum_failures, id);
    c.retries += r.retries;
    c.checksum_failures += r.checksum_failures;
    v.retries += r.retries;
    v.checksum_failures += r.checksum_failures;
    if (what == ReplicaOutcome::kReady) {
      auto bytes = bytes_per_replica_.find(id);
      r.bytes = bytes == bytes_per_replica_.end() ? 0 : bytes->second;
      auto ready = in_flight_ready_seconds_.find(id);
      r.seconds = known && ready != in_flight_ready_seconds_.end() ? ready->second : v.seconds;
      ++c.versions_ready;
      c.bytes += static_cast<uint64_t>(r.bytes);
      c.seconds += r.seconds;
      c.last_seconds = r.seconds;
      c.ready_version = outcome.version;
      v.bytes += r.bytes;
      ++v.replicas_ready;
    } else if (what == ReplicaOutcome::kSkipped || what == ReplicaOutcome::kRejected) {
      ++c.versions_skipped;
      ++v.replicas_skipped;
    } else {
      c.lost = true;
      ++v.replicas_lost;
    }
    v.replicas.push_back(r);
  };
  for (int32_t id : outcome.ready_replicas)
    add(id, ReplicaOutcome::kReady);
  for (int32_t id : outcome.skipped_replicas) {
    const bool rejected =
        std::binary_search(outcome.rejected_replicas.begin(), outcome.rejected_replicas.end(), id);
    add(id, rejected ? ReplicaOutcome::kRejected : ReplicaOutcome::kSkipped);
  }
  for (int32_t id : outcome.lost_replicas)
    add(id, ReplicaOutcome::kLost);
  std::sort(v.replicas.begin(), v.replicas.end(),
            [](const ReplicaVersionStats& a, const ReplicaVersionStats& b) {
              return a.replica < b.replica;
            });
  if (known) in_flight_ = 0;
  ++totals_.versions_delivered;
  totals_.newest_delivered = std::max(totals_.newest_delivered, outcome.version);
  totals_.bytes += static_cast<uint64_t>(v.bytes);
  totals_.seconds += v.seconds;
  totals_.skipped += static_cast<uint64_t>(v.replicas_skipped);
  totals_.lost += static_cast<uint64_t>(v.replicas_lost);
  totals_.retries += v.retries;
  totals_.checksum_failures += v.checksum_failures;
  totals_.wire_bytes += v.wire_bytes;
  totals_.full_bytes += v.full_bytes;
  recent_.push_back(v);
  while (recent_.size() > keep_versions_)
    recent_.pop_front();
  return v;
}

void CoordinatorMetrics::onControlRefused(RefusalReason reason) {
  std::lock_guard lock(mu_);
  ++totals_.control_refusals.by_reason[static_cast<size_t>(reason)];
}

void CoordinatorMetrics::onReplicaDropped() {
  std::lock_guard lock(mu_);
  ++totals_.dropped;
}

MetricsSnapshot CoordinatorMetrics::snapshot() const {
  std::lock_guard lock(mu_);
  MetricsSnapshot s = totals_;
  s.recent.assign(recent_.begin(), recent_.end());
  s.replicas.reserve(replicas_.size());
  for (const auto& [id, r] : replicas_) {
    ReplicaCounters c = r;
    c.lag_versions =
        s.newest_delivered > c.ready_version ? s.newest_delivered - c.ready_version : 0;
    s.replicas.push_back(c);
  }
  return s;
}

std::map<int32_t, int64_t> replicaBytes(const Plan& plan,
                                        const std::vector<int32_t>& replica_of_rollout) {
  std::map<int32_t, int64_t> bytes;
  for (int32_t id : replica_of_rollout)
    bytes.emplace(id, 0);
  for (const BroadcastGroup& g : plan.groups) {
    bytes[g.replica] += g.num_elements * static_cast<int64_t>(dtypeSize(g.dst_dtype)) *
                        static_cast<int64_t>(g.dst.size());
  }
  for (const WriteOp& op : plan.writes) {
    const auto r = static_cast<size_t>(op.dst_rank);
    if (r >= replica_of_rollout.size()) continue;
    bytes[replica_of_rollout[r]] +=
        plan.numElements(op) * static_cast<int64_t>(dtypeSize(op.dst_dtype));
  }
  return bytes;
}

DeliveredMsg deliveredMessage(const VersionStats& stats) {
  DeliveredMsg m;
  m.version = stats.version;
  m.has_stats = true;
  m.stats.bytes = static_cast<uint64_t>(std::max<int64_t>(0, stats.bytes));
  m.stats.microseconds = static_cast<uint64_t>(std::llround(std::max(0.0, stats.seconds) * 1e6));
  m.stats.replicas_ready = stats.replicas_ready;
  m.stats.replicas_skipped = stats.replicas_skipped;
  m.stats.replicas_lost = stats.replicas_lost;
  m.stats.retries = stats.retries;
  m.stats.checksum_failures = stats.checksum_failures;
  m.stats.wire_bytes = stats.wire_bytes;
  m.stats.full_bytes = stats.full_bytes;
  return m;
}

namespace {

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
  char buf[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  return buf;
}

// Appends one metric's HELP and TYPE lines.
void header(std::string& out, const char* name, const char* type, const char* help) {
  out += format("# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}
void sample(std::string& out, const char* name, double value) {
  out += format("%s %.17g\n", name, value);
}
void replicaSample(std::string& out, const char* name, int32_t replica, double value) {
  out += format("%s{replica=\"%d\"} %.17g\n", name, replica, value);
}

}  // namespace

std::string prometheusText(const MetricsSnapshot& s) {
  std::string out;
  // A metric with one sample; `value` any number (the counters are integers).
  const auto metric = [&](const char* name, const char* type, const char* help, auto value) {
    header(out, name, type, help);
    sample(out, name, static_cast<double>(value));
  };
  const auto counter = [&](const char* name, const char* help, auto value) {
    metric(name, "counter", help, value);
  };
  const auto gauge = [&](const char* name, const char* help, auto value) {
    metric(name, "gauge", help, value);
  };
  counter("wsync_versions_started_total", "Versions the coordinator started.", s.versions_started);
  counter("wsync_versions_delivered_total", "Versions delivered to every taking replica.",
          s.versions_delivered);
  gauge("wsync_newest_version", "The newest delivered version.", s.newest_delivered);
  counter("wsync_delivered_bytes_total", "Bytes delivered to rollout replicas over all versions.",
          s.bytes);
  counter("wsync_version_seconds_total",
          "Sum over delivered versions of start-to-delivered seconds.", s.seconds);
  const double last_seconds = s.recent.empty() ? 0.0 : s.recent.back().seconds;
  gauge("wsync_last_version_seconds", "Start-to-delivered seconds of the newest delivered version.",
        last_seconds);
  counter("wsync_replica_skips_total", "Replica-versions skipped (replica busy).", s.skipped);
  counter("wsync_lost_replicas_total", "Replicas lost while a version was in flight.", s.lost);
  counter("wsync_dropped_replicas_total",
          "Replicas dropped from the running job (died, silent, stalled), any time.", s.dropped);
  counter("wsync_retries_total",
          "Versions re-sent to a replica after a failed checksum verification.", s.retries);
  counter("wsync_checksum_failures_total",
          "Failed checksum verifications (one per replica and attempt).", s.checksum_failures);
  counter("wsync_checksum_verifications_total",
          "Checksum verifications asked of rollout ranks (one per rank and attempt).",
          s.checksum_verifications);
  counter("wsync_write_wire_bytes_total",
          "Bytes the trainers' one-sided writes put on the wire (patches with delta versions, "
          "re-sends included), over all versions.",
          s.wire_bytes);
  counter("wsync_write_full_bytes_total",
          "Bytes the same one-sided writes carry dense (the full versions), over all versions.",
          s.full_bytes);
  const VersionStats* last = s.recent.empty() ? nullptr : &s.recent.back();
  gauge("wsync_last_version_wire_bytes",
        "Bytes on the wire of the newest delivered version's one-sided writes.",
        last != nullptr ? last->wire_bytes : 0);
  gauge("wsync_last_version_full_bytes",
        "Bytes of the newest delivered version's one-sided writes, dense.",
        last != nullptr ? last->full_bytes : 0);

  struct PerReplica {
    const char* name;
    const char* type;
    const char* help;
    double (*value)(const ReplicaCounters&);
  };
  static const PerReplica kPerReplica[] = {
      {"wsync_replica_versions_ready_total", "counter",
       "Versions that became ready on the replica.",
       [](const ReplicaCounters& r) { return static_cast<double>(r.versions_ready); }},
      {"wsync_replica_versions_skipped_total", "counter", "Versions the replica skipped.",
       [](const ReplicaCounters& r) { return static_cast<double>(r.versions_skipped); }},
      {"wsync_replica_bytes_total", "counter", "Bytes delivered to the replica.",
       [](const ReplicaCounters& r) { return static_cast<double>(r.bytes); }},
      {"wsync_replica_ready_seconds_total", "counter",
       "Sum over its ready versions of start-to-ready seconds.",
       [](const ReplicaCounters& r) { return r.seconds; }},
      {"wsync_replica_last_ready_seconds", "gauge",
       "Start-to-ready seconds of the replica's newest ready version.",
       [](const ReplicaCounters& r) { return r.last_seconds; }},
      {"wsync_replica_ready_version", "gauge", "The newest version ready on the replica.",
       [](const ReplicaCounters& r) { return static_cast<double>(r.ready_version); }},
      {"wsync_replica_lag_versions", "gauge",
       "Versions the replica's newest ready version is behind the newest delivered one.",
       [](const ReplicaCounters& r) { return static_cast<double>(r.lag_versions); }},
      {"wsync_replica_lost", "gauge", "1 when the replica left while a version was in flight.",
       [](const ReplicaCounters& r) { return r.lost ? 1.0 : 0.0; }},
      {"wsync_replica_retries_total", "counter",
       "Versions re-sent to the replica after a failed checksum verification.",
       [](const ReplicaCounters& r) { return static_cast<double>(r.retries); }},
      {"wsync_replica_checksum_failures_total", "counter",
       "Failed checksum verifications on the replica (one per attempt).",
       [](const ReplicaCounters& r) { return static_cast<double>(r.checksum_failures); }},
  };
  for (const PerReplica& m : kPerReplica) {
    header(out, m.name, m.type, m.help);
    for (const ReplicaCounters& r : s.replicas)
      replicaSample(out, m.name, r.replica, m.value(r));
  }
  header(out, "wsync_control_refusals_total", "counter",
         "Control connections refused before authentication, by reason.");
  for (size_t i = 0; i < kRefusalReasons; ++i) {
    out +=
        format("wsync_control_refusals_total{reason=\"%s\"} %" PRIu64 "\n",
               refusalReasonName(static_cast<RefusalReason>(i)), s.control_refusals.by_reason[i]);
  }
  return out;
}

std::string versionLine(const VersionStats& v) {
  const int32_t total = v.replicas_ready + v.replicas_skipped + v.replicas_lost;
  const double gbps = v.seconds > 0 ? static_cast<double>(v.bytes) / v.seconds / 1e9 : 0.0;
  std::string line =
      format("version %" PRIu64 ": %d/%d replicas ready, %d skipped, %d lost, %" PRId64
             " bytes in %.4f s (%.2f GB/s)",
             v.version, v.replicas_ready, total, v.replicas_skipped, v.replicas_lost, v.bytes,
             v.seconds, gbps);
  if (v.checksum_failures > 0 || v.retries > 0) {
    line += format("; %u checksum failures, %u retries", v.checksum_failures, v.retries);
    for (const ReplicaVersionStats& r : v.replicas) {
      if (r.checksum_failures == 0 && r.retries == 0) continue;
      line += format(" (replica %d: %u failed, %u re-sent, %s)", r.replica, r.checksum_failures,
                     r.retries, replicaOutcomeName(r.outcome));
    }
  }
  if (v.wire_bytes < v.full_bytes) {  // delta versions sent patches
    line += format("; writes %" PRIu64 " of %" PRIu64 " bytes on the wire (%.2f %%)", v.wire_bytes,
                   v.full_bytes,
                   100.0 * static_cast<double>(v.wire_bytes) / static_cast<double>(v.full_bytes));
  }
  return line;
}

std::string summaryLine(const MetricsSnapshot& s) {
  const double mean_ms =
      s.versions_delivered > 0 ? 1e3 * s.seconds / static_cast<double>(s.versions_delivered) : 0.0;
  return format("summary: %" PRIu64 " versions delivered (newest %" PRIu64 "), %" PRIu64
                " bytes, %.3f ms per version on average, %" PRIu64 " replica skips, %" PRIu64
                " lost replicas (%" PRIu64 " while a version was in flight), %" PRIu64
                " retries, %" PRIu64 " checksum failures",
                s.versions_delivered, s.newest_delivered, s.bytes, mean_ms, s.skipped,
                std::max(s.dropped, s.lost), s.lost, s.retries, s.checksum_failures);
}

}  // namespace wsync
