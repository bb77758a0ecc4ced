// The summary the demo job ends with: sync time per version against the copy limit measured in the
// same run, the generation steps the rollouts served while transfers were in flight, and the reads
// that saw a torn or wrong version. Pure functions (no MPI): demo_job.h collects the numbers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace wsync_demo {

// Elements a rollout's light generation step checks (the rest of its step is the lease).
constexpr int64_t kSampleElements = 4096;

// A span of steady-clock time, seconds.
struct Interval {
  double begin_s = 0;
  double end_s = 0;
};

// Seconds on the steady clock (CLOCK_MONOTONIC: one clock for every process of a node).
double steadySeconds();

// The q-quantile (0 <= q <= 1) of `values` by the nearest-rank rule; 0 for no values.
double percentile(std::vector<double> values, double q);

// How many of `steps` overlap one of `windows` (an interval that touches a window counts).
// `windows` are sorted by begin and do not overlap one another.
int64_t stepsInWindows(const std::vector<Interval>& windows, const std::vector<Interval>& steps);

// What one rollout rank did during the job (demo_job.h gathers one per rollout rank).
struct RolloutReport {
  int64_t steps = 0;                   // generation steps (one lease each)
  int64_t steps_during_transfers = 0;  // of which overlapped a timed transfer
  int64_t versions_verified = 0;       // versions whose every byte was checked
  int64_t torn_or_wrong_reads = 0;     // reads that saw a byte of another version (must be 0)
  int64_t out_of_order_reads = 0;      // reads of a version older than the one before
  int64_t acquire_p99_ns = 0;          // 99th percentile of taking a step's version (lease or flip)
};

struct DemoSummary {
  bool device = false;        // device memory (else host)
  std::string memory_detail;  // the GPU's name, or why host memory
  int trainers = 0;
  int rollout_ranks = 0;
  int replicas = 0;
  int versions = 0;
  uint64_t bytes_per_version = 0;  // delivered to all rollout ranks per version
  std::vector<double> sync_s;      // per version: publish -> ready on every replica (trainer 0)
  double limit_gbps = 0;           // memcpy (host) or device-to-device copy of the same bytes
  uint64_t limit_bytes = 0;        // bytes of that copy (bytes_per_version, at most 1 GiB)
  std::vector<RolloutReport> rollouts;  // empty: the job could not collect them
  bool paced = false;                   // each version verified in full outside the timed window
  std::string not_paced_reason;
  int64_t sample_elements = 0;  // elements a light generation step checks
  int processes_on_node = 0;    // demo processes on the reporting node
  int cores_on_node = 0;
  double load_average =
      -1;  // of the reporting node (1 minute) as the versions started; -1: unknown

  double syncMedianS() const { return percentile(sync_s, 0.5); }
  double gbpsAtMedian() const;
  double ratioToLimit() const;
  // Sums; versions_verified: the fewest of any rank; acquire_p99_ns: the largest.
  RolloutReport rolloutTotals() const;
  bool readsOk() const;  // every rank verified every version, no torn, wrong or out-of-order read
};

// The human-readable block (a few lines, no trailing newline on the last) and one JSON line.
std::vector<std::string> summaryLines(const DemoSummary& summary);
std::string summaryJson(const DemoSummary& summary);

}  // namespace wsync_demo
