// The demo processes of one mpirun job, talking among themselves for what wsync does not do for
// them: pacing the rollouts' full checks out of the timed transfers, and collecting one summary.
//
// The communicator holds every trainer and rollout process of the job. A job may also hold one
// wsync-coordinator process, which takes part in nothing here: wsync's MPI bootstrap puts it at
// world rank 0, so when the world has one process more than the trainers and rollouts, world rank 0
// is left out. Any other shape of job gets no communicator (active() is false): nothing is paced
// and the summary lacks the rollouts' numbers.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "trainer_integration/demo_report.h"

namespace wsync_demo {

class DemoJob {
 public:
  // Collective over every trainer and rollout process, after wsync_context_create (no wsync call
  // may be pending on another rank). `role_rank`: the wsync rank within the role; `versions`: the
  // last version this process publishes (trainer) or waits for (rollout).
  DemoJob(bool trainer, int role_rank, int num_trainers, int num_rollouts, int versions);
  ~DemoJob();
  DemoJob(const DemoJob&) = delete;
  DemoJob& operator=(const DemoJob&) = delete;

  bool active() const { return comm_ != MPI_COMM_NULL; }
  // Checks are paced: active, and every process agrees on the number of versions.
  bool paced() const { return paced_; }
  const std::string& notPacedReason() const { return not_paced_reason_; }
  // Trainer rank 0: it times the versions and prints the summary.
  bool isReporter() const { return reporter_; }
  int processesOnNode() const { return processes_on_node_; }

  // Waits until every process of the job has called it, sleeping between polls (a spinning
  // barrier would take the CPU the checks need). Paced jobs call it once per version but the last:
  // trainers before publishing versions 2..N, rollouts after checking versions 1..N-1.
  void barrier() const;

  // Collective, once, at the end. The reporter gives the timed transfer windows (its steady clock);
  // each rollout gives its generation steps (its clock), counts the ones that overlapped a window
  // (clock offsets estimated by ping-pong), and sends its report. Returns every rollout's report
  // on the reporter, nothing elsewhere.
  std::vector<RolloutReport> collectReports(const std::vector<Interval>& transfer_windows,
                                            RolloutReport mine,
                                            const std::vector<Interval>& my_steps) const;

 private:
  // The reporter's steady clock minus this rollout's, from the ping-pong of least round trip.
  double clockOffsetToReporter() const;

  MPI_Comm comm_ = MPI_COMM_NULL;
  std::vector<int> roles_;  // by rank in comm_: 0 trainer, 1 rollout, 2 the reporter
  int rank_ = 0;
  int reporter_rank_ = 0;
  bool trainer_ = false;
  bool reporter_ = false;
  bool paced_ = false;
  std::string not_paced_reason_;
  int processes_on_node_ = 0;
};

}  // namespace wsync_demo
