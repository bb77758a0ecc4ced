#include "trainer_integration/demo_job.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <thread>

namespace wsync_demo {
namespace {

constexpr int kJobTag = 0x5744;    // MPI_Comm_create_group of the demo processes
constexpr int kClockTag = 0x5745;  // the clock ping-pong
constexpr int kClockRounds = 8;    // ping-pongs per rollout; the one of least round trip counts
constexpr int kReportFields = 6;   // the int64 fields of a RolloutReport
constexpr int kTrainer = 0, kRollout = 1, kReporter = 2;

}  // namespace

DemoJob::DemoJob(bool trainer, int role_rank, int num_trainers, int num_rollouts, int versions)
    : trainer_(trainer) {
  int world_rank = 0, world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  const int others = world_size - num_trainers - num_rollouts;  // a wsync-coordinator process
  if (others != 0 && others != 1) {
    not_paced_reason_ =
        "the job holds " + std::to_string(others) + " processes besides the trainers and rollouts";
    return;
  }
  MPI_Group world_group = MPI_GROUP_NULL, demos = MPI_GROUP_NULL;
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  int range[1][3] = {{others, world_size - 1, 1}};
  MPI_Group_range_incl(world_group, 1, range, &demos);
  if (MPI_Comm_create_group(MPI_COMM_WORLD, demos, kJobTag, &comm_) != MPI_SUCCESS)
    comm_ = MPI_COMM_NULL;
  MPI_Group_free(&demos);
  MPI_Group_free(&world_group);
  if (comm_ == MPI_COMM_NULL) {
    not_paced_reason_ = "no communicator of the demo processes";
    return;
  }
  int size = 0;
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size);
  const int role = !trainer ? kRollout : role_rank == 0 ? kReporter : kTrainer;
  roles_.assign(static_cast<size_t>(size), 0);
  MPI_Allgather(&role, 1, MPI_INT, roles_.data(), 1, MPI_INT, comm_);
  reporter_rank_ =
      static_cast<int>(std::find(roles_.begin(), roles_.end(), kReporter) - roles_.begin());
  reporter_ = role == kReporter;
  if (reporter_rank_ == size) {  // no trainer in the job: nobody to report to
    MPI_Comm_free(&comm_);
    not_paced_reason_ = "no trainer rank 0 among the demo processes";
    return;
  }
  int bounds[2] = {versions, -versions};  // min and -max over the job
  MPI_Allreduce(MPI_IN_PLACE, bounds, 2, MPI_INT, MPI_MIN, comm_);
  paced_ = bounds[0] == -bounds[1];
  if (!paced_) not_paced_reason_ = "trainers and rollouts were given different --versions";
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &processes_on_node_);
  MPI_Comm_free(&node);
}

DemoJob::~DemoJob() {
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void DemoJob::barrier() const {
  if (!active()) return;
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Ibarrier(comm_, &request);
  int done = 0;
  while (true) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done) return;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

double DemoJob::clockOffsetToReporter() const {
  double best_rtt = std::numeric_limits<double>::infinity();
  double offset = 0;
  for (int k = 0; k < kClockRounds; ++k) {
    const double sent = steadySeconds();
    double reporter_time = 0;
    MPI_Send(&sent, 1, MPI_DOUBLE, reporter_rank_, kClockTag, comm_);
    MPI_Recv(&reporter_time, 1, MPI_DOUBLE, reporter_rank_, kClockTag, comm_, MPI_STATUS_IGNORE);
    const double received = steadySeconds();
    if (received - sent < best_rtt) {
      best_rtt = received - sent;
      offset = reporter_time - (sent + received) / 2;
    }
  }
  return offset;
}

std::vector<RolloutReport> DemoJob::collectReports(const std::vector<Interval>& transfer_windows,
                                                   RolloutReport mine,
                                                   const std::vector<Interval>& my_steps) const {
  if (!active()) return {};
  int n = reporter_ ? static_cast<int>(transfer_windows.size()) : 0;
  MPI_Bcast(&n, 1, MPI_INT, reporter_rank_, comm_);
  std::vector<Interval> windows(static_cast<size_t>(n));
  if (reporter_) windows = transfer_windows;
  static_assert(sizeof(Interval) == 2 * sizeof(double), "Interval is two doubles");
  MPI_Bcast(windows.data(), 2 * n, MPI_DOUBLE, reporter_rank_, comm_);

  if (reporter_) {
    for (int r = 0; r < static_cast<int>(roles_.size()); ++r) {
      if (roles_[static_cast<size_t>(r)] != kRollout) continue;
      for (int k = 0; k < kClockRounds; ++k) {
        double ignored = 0;
        MPI_Recv(&ignored, 1, MPI_DOUBLE, r, kClockTag, comm_, MPI_STATUS_IGNORE);
        const double now = steadySeconds();
        MPI_Send(&now, 1, MPI_DOUBLE, r, kClockTag, comm_);
      }
    }
  } else if (!trainer_) {
    const double offset = clockOffsetToReporter();  // reporter clock - this clock
    for (Interval& w : windows) {
      w.begin_s -= offset;
      w.end_s -= offset;
    }
    mine.steps_during_transfers = stepsInWindows(windows, my_steps);
  }

  int64_t fields[kReportFields] = {};
  if (!trainer_) {
    fields[0] = mine.steps;
    fields[1] = mine.steps_during_transfers;
    fields[2] = mine.versions_verified;
    fields[3] = mine.torn_or_wrong_reads;
    fields[4] = mine.out_of_order_reads;
    fields[5] = mine.acquire_p99_ns;
  }
  std::vector<int64_t> all(reporter_ ? roles_.size() * kReportFields : 0);
  MPI_Gather(fields, kReportFields, MPI_INT64_T, all.data(), kReportFields, MPI_INT64_T,
             reporter_rank_, comm_);
  std::vector<RolloutReport> reports;
  for (size_t r = 0; reporter_ && r < roles_.size(); ++r) {
    if (roles_[r] != kRollout) continue;
    const int64_t* f = &all[r * kReportFields];
    reports.push_back({f[0], f[1], f[2], f[3], f[4], f[5]});
  }
  return reports;
}

}  // namespace wsync_demo
