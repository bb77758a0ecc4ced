// wsync-sync-bench: what every part of the benchmark uses: the clock, barriers, statistics of
// samples, fatal errors (every failure of the benchmark aborts the whole MPI job) and phase times.
#pragma once

#include <mpi.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "wsync/wsync.h"

namespace wsync_bench {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t0);

// A barrier that sleeps while it waits: a busy MPI_Barrier would take the CPU from wsync's
// background threads (publisher, receiver, coordinator) on a machine with few cores.
void sleepingBarrier(MPI_Comm comm);

double median(std::vector<double> v);
// The q-quantile (0..1) of sorted samples, nearest rank; 0 without samples.
double quantile(const std::vector<double>& sorted, double q);
// The three load averages of /proc/loadavg, as one string.
std::string loadAverage();

// Every rank's `samples`, concatenated in rank order on rank 0 of `comm` (collective).
std::vector<double> gatherSamples(const std::vector<double>& samples, MPI_Comm comm);

// A wsync call failed: prints `what`, the status and the context's last error, aborts the job.
[[noreturn]] void dieWsync(wsync_context_t ctx, int world_rank, const char* what,
                           wsync_status_t status);
// Anything else failed: prints `what`, aborts the job.
[[noreturn]] void dieBench(int world_rank, const std::string& what);

// Phase times on rank 0 of `comm`, in seconds: the first phase, "start", runs from the process's
// start to the clock's construction; each mark() ends a phase with a sleeping barrier (collective).
class PhaseClock {
 public:
  PhaseClock(MPI_Comm comm, Clock::time_point process_start);
  void mark(const char* name);
  const std::vector<std::pair<std::string, double>>& phases() const { return phases_; }
  // Seconds since the process started.
  double totalSeconds() const { return secondsSince(process_start_); }

 private:
  MPI_Comm comm_;
  bool root_ = false;
  Clock::time_point process_start_;
  Clock::time_point last_mark_;
  std::vector<std::pair<std::string, double>> phases_;
};

}  // namespace wsync_bench
