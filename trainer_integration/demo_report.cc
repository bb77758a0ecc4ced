#include "trainer_integration/demo_report.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

namespace wsync_demo {
namespace {

std::string format(const char* fmt, double a) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, a);
  return buf;
}

std::string seconds(double s) {
  if (s < 1e-5) return format("%.1f us", s * 1e6);
  if (s < 1e-3) return format("%.0f us", s * 1e6);
  if (s < 1) return format("%.2f ms", s * 1e3);
  return format("%.3f s", s);
}

std::string megabytes(uint64_t bytes) {
  return format("%.1f MB", static_cast<double>(bytes) / 1e6);
}

std::string plural(int64_t n, const std::string& noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

const char* limitName(const DemoSummary& s) {
  return s.device ? "device-to-device copy" : "memcpy";
}

// Why the numbers are what they are: what was timed, how the checks stayed out of it, and what
// this machine does to the ratio.
std::string measurementNote(const DemoSummary& s) {
  std::string note =
      "sync = trainer rank 0's publish until the version is ready on every replica. ";
  if (s.paced) {
    note +=
        "Every version is verified bit for bit once it has landed, outside that window (the "
        "trainers wait for those checks before the next publish); during a transfer each "
        "generation step takes a lease and checks a sample of " +
        std::to_string(s.sample_elements) + " elements. ";
  } else {
    note += "The checks were not paced (" + s.not_paced_reason +
            "): a full check of one version may overlap the next transfer and slow it. ";
  }
  note += std::string("The limit is one ") +
          (s.device ? "cudaMemcpy device-to-device on trainer 0's GPU"
                    : "single-threaded memcpy on trainer 0") +
          " of " + megabytes(s.limit_bytes) + ", measured in this run. ";
  const double median = s.syncMedianS();
  const double at_limit =
      s.limit_gbps > 0 ? static_cast<double>(s.bytes_per_version) / (s.limit_gbps * 1e9) : 0;
  const bool busy_cores = s.load_average > s.cores_on_node;
  if (!s.device && (s.processes_on_node > s.cores_on_node || busy_cores)) {
    note += std::to_string(s.processes_on_node) + " processes share " +
            std::to_string(s.cores_on_node) + " CPU cores here" +
            (busy_cores
                 ? format(", with a load average of %.1f when the versions started", s.load_average)
                 : std::string()) +
            ", and host copies run on those cores: the ratio is below what a core per process "
            "gives (expect < 1 x memcpy). ";
  }
  if (s.device && median > 0 && at_limit < 0.25 * median) {  // seen on an H200: 0.02 -> 0.21 x
    note += "Copying the bytes at the limit would take " + seconds(at_limit) + " of the median " +
            seconds(median) +
            "; larger versions (e.g. --layers 16 --hidden 2048 --ffn 8192) amortize what a "
            "version costs besides the copy. ";
  }
  if (!note.empty() && note.back() == ' ') note.pop_back();
  return note;
}

// Appends `label` + `text` to `lines`, wrapped at 100 columns under the label.
void addWrapped(const std::string& label, const std::string& text,
                std::vector<std::string>* lines) {
  const size_t width = 100;
  std::string line = label;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(' ', pos);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(pos, end - pos);
    if (line.size() > label.size() && line.size() + 1 + word.size() > width) {
      lines->push_back(line);
      line = std::string(label.size(), ' ');
    }
    if (line.size() > label.size()) line += ' ';
    line += word;
    pos = end + 1;
  }
  lines->push_back(line);
}

std::string jsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  return format("%.6g", v);
}

std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out + "\"";
}

}  // namespace

double steadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = std::ceil(std::clamp(q, 0.0, 1.0) * static_cast<double>(values.size()));
  const size_t index = rank < 1 ? 0 : static_cast<size_t>(rank) - 1;
  return values[std::min(index, values.size() - 1)];
}

int64_t stepsInWindows(const std::vector<Interval>& windows, const std::vector<Interval>& steps) {
  int64_t n = 0;
  for (const Interval& step : steps) {
    // The first window that ends at or after the step begins; it overlaps when it begins in time.
    const auto it =
        std::lower_bound(windows.begin(), windows.end(), step.begin_s,
                         [](const Interval& w, double begin_s) { return w.end_s < begin_s; });
    if (it != windows.end() && it->begin_s <= step.end_s) ++n;
  }
  return n;
}

double DemoSummary::gbpsAtMedian() const {
  const double median = syncMedianS();
  return median > 0 ? static_cast<double>(bytes_per_version) / median / 1e9 : 0;
}

double DemoSummary::ratioToLimit() const {
  return limit_gbps > 0 ? gbpsAtMedian() / limit_gbps : 0;
}

RolloutReport DemoSummary::rolloutTotals() const {
  RolloutReport t;
  t.versions_verified = rollouts.empty() ? 0 : rollouts.front().versions_verified;
  for (const RolloutReport& r : rollouts) {
    t.steps += r.steps;
    t.steps_during_transfers += r.steps_during_transfers;
    t.versions_verified = std::min(t.versions_verified, r.versions_verified);
    t.torn_or_wrong_reads += r.torn_or_wrong_reads;
    t.out_of_order_reads += r.out_of_order_reads;
    t.acquire_p99_ns = std::max(t.acquire_p99_ns, r.acquire_p99_ns);
  }
  return t;
}

bool DemoSummary::readsOk() const {
  const RolloutReport t = rolloutTotals();
  return !rollouts.empty() && t.torn_or_wrong_reads == 0 && t.out_of_order_reads == 0 &&
         (!paced || t.versions_verified == versions);
}

std::vector<std::string> summaryLines(const DemoSummary& s) {
  std::vector<std::string> lines;
  const int tp = s.replicas > 0 ? s.rollout_ranks / s.replicas : 0;
  lines.push_back("== wsync demo: " + plural(s.versions, "version") + ", " +
                  plural(s.trainers, "trainer rank") + " -> " +
                  plural(s.replicas, "rollout replica") + " x TP " + std::to_string(tp) + ", " +
                  (s.device ? "device" : "host") + " memory (" + s.memory_detail + ") ==");
  lines.push_back("sync per version  median " + seconds(s.syncMedianS()) + ", p90 " +
                  seconds(percentile(s.sync_s, 0.9)) + "  (" + megabytes(s.bytes_per_version) +
                  " delivered to the rollout ranks per version)");
  lines.push_back("bandwidth         " + format("%.2f GB/s", s.gbpsAtMedian()) +
                  " at the median = " + format("%.2f", s.ratioToLimit()) + " x " + limitName(s) +
                  " of the same bytes (" + format("%.2f GB/s", s.limit_gbps) + ")");
  if (s.rollouts.empty()) {
    lines.push_back("generation        not collected (" + s.not_paced_reason + ")");
    lines.push_back("reads             not collected: see each [rollout] line");
  } else {
    const RolloutReport t = s.rolloutTotals();
    double transfers_s = 0;
    for (double v : s.sync_s)
      transfers_s += v;
    lines.push_back("generation        " + std::to_string(t.steps_during_transfers) + " of " +
                    std::to_string(t.steps) +
                    " generation steps were served while transfers were in flight (" +
                    seconds(transfers_s) + " in all); taking a version: p99 " +
                    seconds(static_cast<double>(t.acquire_p99_ns) * 1e-9) + " on the worst rank");
    lines.push_back("reads             " + std::string(s.readsOk() ? "OK" : "FAILED") + ": " +
                    std::to_string(t.versions_verified) + " of " + std::to_string(s.versions) +
                    " versions verified bit for bit on each of " +
                    std::to_string(s.rollouts.size()) + " rollout ranks; " +
                    std::to_string(t.torn_or_wrong_reads) + " torn or wrong reads, " +
                    std::to_string(t.out_of_order_reads) + " out of order");
  }
  addWrapped("measured          ", measurementNote(s), &lines);
  return lines;
}

std::string summaryJson(const DemoSummary& s) {
  const bool have = !s.rollouts.empty();
  const RolloutReport t = s.rolloutTotals();
  const auto count = [&](int64_t v) { return have ? std::to_string(v) : std::string("null"); };
  std::string j = "{\"wsync_demo_summary\":1";
  j += ",\"memory\":" + jsonString(s.device ? "device" : "host");
  j += ",\"memory_detail\":" + jsonString(s.memory_detail);
  j += ",\"trainers\":" + std::to_string(s.trainers);
  j += ",\"rollout_ranks\":" + std::to_string(s.rollout_ranks);
  j += ",\"replicas\":" + std::to_string(s.replicas);
  j += ",\"versions\":" + std::to_string(s.versions);
  j += ",\"bytes_per_version\":" + std::to_string(s.bytes_per_version);
  j += ",\"sync_median_s\":" + jsonNumber(s.syncMedianS());
  j += ",\"sync_p90_s\":" + jsonNumber(percentile(s.sync_s, 0.9));
  j += ",\"gbps_at_median\":" + jsonNumber(s.gbpsAtMedian());
  j += ",\"limit\":" + jsonString(s.device ? "device_to_device_copy" : "memcpy");
  j += ",\"limit_bytes\":" + std::to_string(s.limit_bytes);
  j += ",\"limit_gbps\":" + jsonNumber(s.limit_gbps);
  j += ",\"ratio_to_limit\":" + jsonNumber(s.ratioToLimit());
  j += ",\"steps\":" + count(t.steps);
  j += ",\"steps_during_transfers\":" + count(t.steps_during_transfers);
  j += ",\"acquire_p99_s\":" +
       (have ? jsonNumber(static_cast<double>(t.acquire_p99_ns) * 1e-9) : std::string("null"));
  j += ",\"versions_verified\":" + count(t.versions_verified);
  j += ",\"torn_or_wrong_reads\":" + count(t.torn_or_wrong_reads);
  j += ",\"out_of_order_reads\":" + count(t.out_of_order_reads);
  j += std::string(",\"reads_ok\":") + (s.readsOk() ? "true" : "false");
  j += std::string(",\"paced\":") + (s.paced ? "true" : "false");
  j += ",\"sample_elements\":" + std::to_string(s.sample_elements);
  j += ",\"processes_on_node\":" + std::to_string(s.processes_on_node);
  j += ",\"cores_on_node\":" + std::to_string(s.cores_on_node);
  j += ",\"load_average\":" + jsonNumber(s.load_average);
  return j + "}";
}

}  // namespace wsync_demo
