// wsync-sync-bench: clock, barriers, statistics, fatal errors and phase times (see the header).
#include "sync_bench_common.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

namespace wsync_bench {

double secondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void sleepingBarrier(MPI_Comm comm) {
  MPI_Request req = MPI_REQUEST_NULL;
  MPI_Ibarrier(comm, &req);
  int done = 0;
  while (true) {
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (done) return;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const size_t i =
      std::min(sorted.size() - 1, static_cast<size_t>(q * static_cast<double>(sorted.size())));
  return sorted[i];
}

std::string loadAverage() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

std::vector<double> gatherSamples(const std::vector<double>& samples, MPI_Comm comm) {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  int n = static_cast<int>(samples.size());
  std::vector<int> counts(static_cast<size_t>(size)), displs(static_cast<size_t>(size));
  MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm);
  std::vector<double> all;
  if (rank == 0) {
    int total = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
      displs[i] = total;
      total += counts[i];
    }
    all.resize(static_cast<size_t>(std::max(total, 1)));
  }
  MPI_Gatherv(samples.data(), n, MPI_DOUBLE, all.data(), counts.data(), displs.data(), MPI_DOUBLE,
              0, comm);
  if (rank == 0) all.resize(static_cast<size_t>(displs.back() + counts.back()));
  return all;
}

void dieWsync(wsync_context_t ctx, int world_rank, const char* what, wsync_status_t status) {
  std::fprintf(stderr, "[world rank %d] %s failed: %s: %s\n", world_rank, what,
               wsync_status_string(status), wsync_last_error(ctx));
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

void dieBench(int world_rank, const std::string& what) {
  std::fprintf(stderr, "[world rank %d] %s\n", world_rank, what.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

PhaseClock::PhaseClock(MPI_Comm comm, Clock::time_point process_start)
    : comm_(comm), process_start_(process_start), last_mark_(Clock::now()) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  root_ = rank == 0;
  if (root_) {
    phases_.push_back({"start", std::chrono::duration<double>(last_mark_ - process_start).count()});
  }
}

void PhaseClock::mark(const char* name) {
  sleepingBarrier(comm_);
  if (root_) phases_.push_back({name, secondsSince(last_mark_)});
  last_mark_ = Clock::now();
}

}  // namespace wsync_bench
