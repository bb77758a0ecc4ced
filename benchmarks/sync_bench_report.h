// wsync-sync-bench: the results on world rank 0: a human summary line, then, as the last line of
// the output, one JSON object (benchmarks/README.md lists the fields of each memory kind).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/demo_policy.h"
#include "sync_bench_args.h"
#include "sync_bench_common.h"
#include "sync_bench_limits.h"
#include "sync_bench_loop.h"
#include "sync_bench_model.h"

namespace wsync_bench {

// One JSON object on one line, keys in the order added: {"key": value, ...}.
class JsonObject {
 public:
  JsonObject& text(const char* key, const std::string& value);  // a string (no escaping needed)
  JsonObject& integer(const char* key, int64_t value);
  JsonObject& count(const char* key, uint64_t value);
  JsonObject& boolean(const char* key, bool value);
  // A fixed-point number with `decimals` digits after the point (printf's %.*f).
  JsonObject& number(const char* key, double value, int decimals);
  // As number(), or null when !valid or the value is not finite.
  JsonObject& numberOrNull(const char* key, bool valid, double value, int decimals);
  // As boolean(), or null when !valid.
  JsonObject& booleanOrNull(const char* key, bool valid, bool value);
  JsonObject& object(const char* key, const JsonObject& value);
  std::string str() const { return "{" + body_ + "}"; }

 private:
  JsonObject& raw(const char* key, const std::string& json);
  std::string body_;
};

// Host memory: wsync against the memcpy limit and the baseline (`baseline` unused when
// !opt.baseline). `load_start`: the load averages when the run started.
// `checked`: the wsync phase run again with checksums on (--checksums), or null.
void printHostReport(const Options& opt, const Roles& roles,
                     const std::vector<wsync_demo::TensorSpec>& tensors, const SyncResult& sync,
                     const HostLimits& limits, const BaselineResult& baseline,
                     const std::string& load_start, const SyncResult* checked);

// Device memory: wsync against the device copies, with the targets and the phase times.
void printDeviceReport(const Options& opt, const Roles& roles,
                       const std::vector<wsync_demo::TensorSpec>& tensors, const SyncResult& sync,
                       const DeviceLimits& limits, const LayoutSizes& sizes,
                       const PhaseClock& phases);

}  // namespace wsync_bench
