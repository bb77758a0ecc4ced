// wsync-sync-bench: results and JSON (see the header).
#include "sync_bench_report.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>

namespace wsync_bench {
namespace {

std::string fixed(double value, int decimals) {
  char b[64];
  std::snprintf(b, sizeof(b), "%.*f", decimals, value);
  return b;
}

// null, or the number as JsonObject::number prints it (for the human lines).
std::string fixedOrNull(bool valid, double value, int decimals) {
  return valid && std::isfinite(value) ? fixed(value, decimals) : "null";
}

double minOf(const std::vector<double>& v) {
  return v.empty() ? 0 : *std::min_element(v.begin(), v.end());
}

double maxOf(const std::vector<double>& v) {
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

// The fields both memory kinds print first, after "memory" (and "model").
void addRunFields(JsonObject& j, const Options& opt, const Roles& roles, const SyncResult& sync,
                  size_t tensors) {
  j.count("bytes_delivered", sync.plan.bytes_per_version)
      .text("layout", opt.layout_name)
      .text("dtype", opt.dtype_name)
      .integer("trainers", roles.trainers)
      .integer("rollouts", roles.rollouts)
      .integer("replicas", sync.plan.num_replicas)
      .integer("tp", roles.tp)
      .count("tensors", tensors)
      .integer("broadcast_groups", sync.plan.broadcast_groups)
      .integer("write_ops", sync.plan.write_ops);
}

// What the device report derives from the measurements (GB/s = 1e9 bytes per second).
struct DeviceFigures {
  double wsync_s = 0, wsync_gbps = 0;
  double copy_gbps = 0, ratio = 0, concurrent_gbps = 0;
  double h2d_gbps = 0, d2h_gbps = 0, pinned_gbps = 0;
  double ratio_target = 0;
  double flip_p99 = 0;
  bool have_flips = false;
  double copy_flip_s = 0;
};

DeviceFigures deviceFigures(const Options& opt, const SyncResult& sync, const DeviceLimits& limits,
                            const LayoutSizes& sizes) {
  DeviceFigures f;
  f.wsync_s = median(sync.seconds);
  f.wsync_gbps = static_cast<double>(sync.plan.bytes_per_version) / f.wsync_s / 1e9;
  f.copy_gbps = static_cast<double>(sizes.delivered) / limits.copy_delivered_s / 1e9;
  f.ratio = f.wsync_gbps / f.copy_gbps;
  f.concurrent_gbps = static_cast<double>(sizes.delivered) / limits.copy_concurrent_s / 1e9;
  f.h2d_gbps = static_cast<double>(kPinnedReferenceBytes) / limits.pinned_h2d_s / 1e9;
  f.d2h_gbps = static_cast<double>(kPinnedReferenceBytes) / limits.pinned_d2h_s / 1e9;
  // Staged transfers cross PCIe twice (device to host, host to device), in both directions at
  // once at best: the slower direction bounds them.
  f.pinned_gbps = std::min(f.h2d_gbps, f.d2h_gbps);
  f.ratio_target = opt.layout == wsync_demo::RolloutLayout::kMatch ? 0.85 : 0.7;
  f.flip_p99 = quantile(sync.acquire_us, 0.99);
  f.have_flips = !sync.copy_flip_seconds.empty();
  f.copy_flip_s = median(sync.copy_flip_seconds);
  return f;
}

void printDeviceLines(const Options& opt, const SyncResult& sync, const DeviceLimits& limits,
                      const DeviceFigures& f, const PhaseClock& phases, double total_s) {
  std::string phase_line;
  for (const auto& [name, sec] : phases.phases()) {
    char b[96];
    std::snprintf(b, sizeof(b), "%s%s %.3f s", phase_line.empty() ? "" : ", ", name.c_str(), sec);
    phase_line += b;
  }
  std::printf("[phases] %s; total %.3f s\n", phase_line.c_str(), total_s);
  std::printf(
      "[bench] wsync %.6f s (%.1f GB/s, %.3f x device copy %.1f GB/s, target %.2f; %.3f x the "
      "trainers' concurrent copy %.1f GB/s); flip p99 %.1f "
      "us over %zu leases; copy flip %s s (device copy of the slot %.6f s); publish blocked %s s, "
      "training stream held %s s (device copy of the parameters %.6f s)\n",
      f.wsync_s, f.wsync_gbps, f.ratio, f.copy_gbps, f.ratio_target,
      f.wsync_gbps / f.concurrent_gbps, f.concurrent_gbps, f.flip_p99, sync.acquire_us.size(),
      fixedOrNull(f.have_flips, f.copy_flip_s, 6).c_str(), limits.copy_slot_s,
      fixedOrNull(true, sync.publish_block_s, 6).c_str(),
      fixedOrNull(opt.snapshot, sync.publish_stream_s, 6).c_str(), limits.copy_params_s);
}

// The device JSON's fields after the run fields, up to the copy flips.
void addDeviceRates(JsonObject& j, const Options& opt, const SyncResult& sync,
                    const DeviceFigures& f) {
  j.number("wsync_seconds", f.wsync_s, 6)
      .number("wsync_seconds_min", minOf(sync.seconds), 6)
      .number("wsync_seconds_max", maxOf(sync.seconds), 6)
      .number("wsync_gbps", f.wsync_gbps, 3)
      .number("device_copy_gbps", f.copy_gbps, 3)
      .number("ratio_to_device_copy", f.ratio, 4)
      .number("device_copy_concurrent_gbps", f.concurrent_gbps, 3)
      .number("ratio_to_concurrent_copy", f.wsync_gbps / f.concurrent_gbps, 4)
      .text("device_transport", opt.device_transport)
      .number("pinned_h2d_gbps", f.h2d_gbps, 2)
      .number("pinned_d2h_gbps", f.d2h_gbps, 2)
      .number("ratio_to_pinned", f.wsync_gbps / f.pinned_gbps, 4)
      .number("ratio_target", f.ratio_target, 2)
      .number("flip_us_p50", quantile(sync.acquire_us, 0.5), 2)
      .number("flip_us_p99", f.flip_p99, 2)
      .number("flip_us_max", sync.acquire_us.empty() ? 0.0 : sync.acquire_us.back(), 2)
      .count("flip_samples", sync.acquire_us.size())
      .integer("flip_failures", sync.acquire_failures);
}

// The device JSON's copy flip, publish and target fields.
void addDeviceTargets(JsonObject& j, const Options& opt, const SyncResult& sync,
                      const DeviceLimits& limits, const LayoutSizes& sizes,
                      const DeviceFigures& f) {
  const double flips_max = f.have_flips ? sync.copy_flip_seconds.back() : 0;
  j.numberOrNull("copy_flip_seconds", f.have_flips, f.copy_flip_s, 6)
      .numberOrNull("copy_flip_seconds_max", f.have_flips, flips_max, 6)
      .count("copy_flip_samples", sync.copy_flip_seconds.size())
      .count("slot_bytes", sizes.slot_bytes)
      .number("device_copy_seconds_slot", limits.copy_slot_s, 6)
      .numberOrNull("copy_flip_to_device_copy", f.have_flips, f.copy_flip_s / limits.copy_slot_s, 3)
      .numberOrNull("publish_block_seconds", true, sync.publish_block_s, 6)
      .numberOrNull("publish_stream_seconds", opt.snapshot, sync.publish_stream_s, 6)
      .count("params_bytes", sizes.params_bytes)
      .number("device_copy_seconds_params", limits.copy_params_s, 6)
      .numberOrNull("publish_block_to_device_copy", opt.snapshot,
                    sync.publish_block_s / limits.copy_params_s, 4);
  JsonObject met;
  met.boolean("ratio_to_device_copy", f.ratio >= f.ratio_target)
      .booleanOrNull("flip_us_p99", !sync.acquire_us.empty(), f.flip_p99 <= 50)
      .booleanOrNull("copy_flip", f.have_flips, f.copy_flip_s <= 1.2 * limits.copy_slot_s)
      .booleanOrNull("publish_block", opt.snapshot,
                     sync.publish_block_s <= 1.2 * limits.copy_params_s);
  j.object("targets_met", met);
}

}  // namespace

JsonObject& JsonObject::raw(const char* key, const std::string& json) {
  if (!body_.empty()) body_ += ", ";
  body_ += "\"";
  body_ += key;
  body_ += "\": ";
  body_ += json;
  return *this;
}

JsonObject& JsonObject::text(const char* key, const std::string& value) {
  return raw(key, "\"" + value + "\"");
}

JsonObject& JsonObject::integer(const char* key, int64_t value) {
  return raw(key, std::to_string(value));
}

JsonObject& JsonObject::count(const char* key, uint64_t value) {
  return raw(key, std::to_string(value));
}

JsonObject& JsonObject::boolean(const char* key, bool value) {
  return raw(key, value ? "true" : "false");
}

JsonObject& JsonObject::number(const char* key, double value, int decimals) {
  return raw(key, fixed(value, decimals));
}

JsonObject& JsonObject::numberOrNull(const char* key, bool valid, double value, int decimals) {
  return raw(key, fixedOrNull(valid, value, decimals));
}

JsonObject& JsonObject::booleanOrNull(const char* key, bool valid, bool value) {
  return valid ? boolean(key, value) : raw(key, "null");
}

JsonObject& JsonObject::object(const char* key, const JsonObject& value) {
  return raw(key, value.str());
}

void printHostReport(const Options& opt, const Roles& roles,
                     const std::vector<wsync_demo::TensorSpec>& tensors, const SyncResult& sync,
                     const HostLimits& limits, const BaselineResult& baseline,
                     const std::string& load_start, const SyncResult* checked) {
  const double ws = median(sync.seconds);
  const double wgbps = static_cast<double>(sync.plan.bytes_per_version) / ws / 1e9;
  const double bs = median(baseline.seconds);
  const std::string baseline_s = opt.baseline ? fixed(bs, 6) : "null";
  const std::string speedup = opt.baseline ? fixed(bs / ws, 3) : "null";
  const double p99 = quantile(sync.acquire_us, 0.99);
  std::printf(
      "[bench] wsync %.4f s (%.2f GB/s, %.2f x memcpy %.2f GB/s); baseline %s s (%s x slower); "
      "acquire p99 %.1f us over %zu leases\n",
      ws, wgbps, wgbps / limits.best(), limits.best(), baseline_s.c_str(), speedup.c_str(), p99,
      sync.acquire_us.size());
  const double cs = checked != nullptr ? median(checked->seconds) : 0.0;
  if (checked != nullptr) {
    std::printf("[bench] checksums: wsync %.4f s without, %.4f s with (%.3f x)\n", ws, cs, cs / ws);
  }
  JsonObject j;
  j.text("memory", "host").text("model", opt.model);
  j.integer("bytes", wsync_demo::totalElements(tensors) * 4);
  addRunFields(j, opt, roles, sync, tensors.size());
  j.integer("iters", opt.iters)
      .integer("warmup", opt.warmup)
      .number("wsync_seconds", ws, 6)
      .number("wsync_seconds_min", minOf(sync.seconds), 6)
      .number("wsync_seconds_max", maxOf(sync.seconds), 6)
      .number("wsync_gbps", wgbps, 3)
      .number("memcpy_gbps", limits.best(), 3)
      .number("ratio_to_memcpy", wgbps / limits.best(), 3)
      .number("memcpy_before_gbps", limits.before_gbps, 3)
      .number("memcpy_after_gbps", limits.after_gbps, 3)
      .numberOrNull("baseline_seconds", opt.baseline, bs, 6)
      .numberOrNull("speedup_vs_baseline", opt.baseline, bs / ws, 3)
      .number("acquire_us_p50", quantile(sync.acquire_us, 0.5), 2)
      .number("acquire_us_p99", p99, 2)
      .number("acquire_us_max", sync.acquire_us.empty() ? 0.0 : sync.acquire_us.back(), 2)
      .count("acquire_samples", sync.acquire_us.size())
      .integer("acquire_failures", sync.acquire_failures)
      .boolean("verified", sync.mismatches == 0)
      .booleanOrNull("baseline_verified", opt.baseline, baseline.mismatches == 0)
      .numberOrNull("checksums_wsync_seconds", checked != nullptr, cs, 6)
      .numberOrNull("checksums_ratio", checked != nullptr, cs / ws, 3)
      .booleanOrNull("checksums_verified", checked != nullptr,
                     checked != nullptr && checked->mismatches == 0)
      .text("loadavg_start", load_start)
      .text("loadavg_end", loadAverage());
  std::printf("%s\n", j.str().c_str());
  std::fflush(stdout);
}

void printDeviceReport(const Options& opt, const Roles& roles,
                       const std::vector<wsync_demo::TensorSpec>& tensors, const SyncResult& sync,
                       const DeviceLimits& limits, const LayoutSizes& sizes,
                       const PhaseClock& phases) {
  const DeviceFigures f = deviceFigures(opt, sync, limits, sizes);
  const double total_s = phases.totalSeconds();
  printDeviceLines(opt, sync, limits, f, phases, total_s);
  const int64_t parameters = wsync_demo::totalElements(tensors);
  JsonObject j;
  j.text("memory", "device").text("model", opt.model).integer("parameters", parameters);
  j.integer("bytes", parameters * static_cast<int64_t>(wsync_demo::dtypeBytes(opt.dtype)));
  addRunFields(j, opt, roles, sync, tensors.size());
  j.integer("cuda_device", opt.cuda_device)
      .boolean("snapshot", opt.snapshot)
      .boolean("copy_flip", opt.copy_flip)
      .integer("iters", opt.iters)
      .integer("warmup", opt.warmup);
  addDeviceRates(j, opt, sync, f);
  addDeviceTargets(j, opt, sync, limits, sizes, f);
  JsonObject phase_seconds;
  for (const auto& [name, sec] : phases.phases())
    phase_seconds.number(name.c_str(), sec, 4);
  j.number("commit_seconds", sync.plan.commit_seconds, 4)
      .object("phase_seconds", phase_seconds)
      .number("total_seconds", total_s, 3)
      .count("device_memory_used_max_bytes", limits.used_max)
      .count("device_memory_bytes", limits.device_total)
      .boolean("verified", sync.mismatches == 0)
      .integer("mismatches", sync.mismatches)
      .text("loadavg_end", loadAverage());
  std::printf("%s\n", j.str().c_str());
  std::fflush(stdout);
}

}  // namespace wsync_bench
