// wsync-sync-bench: the weight-sync benchmark of wsync. Host memory (--memory host, the default):
// wsync against a memcpy of the delivered bytes and against the baseline open RL frameworks use
// today (gather every tensor to trainer rank 0, broadcast it to every rollout rank). Device memory
// (--memory device): wsync on one GPU against plain device-to-device copies of the same bytes.
//
// One SPMD binary: the first --trainers world ranks (default: half) are trainers, the rest rollout
// ranks (world rank 0 is a trainer and hosts wsync's coordinator). The model and its layouts:
// sync_bench_model.h (match: the trainers' boxes; differ: every tensor split along its last dim;
// mixed: vLLM-like, fused qkv, column- and row-parallel). Host memory moves matching boxes by
// broadcast groups and the others by one-sided writes; on one GPU everything goes by CUDA IPC
// one-sided writes (NCCL needs 2 GPUs).
//
// The parts: flags and roles (sync_bench_args.h); the memory kinds, i.e. how buffers are
// allocated, filled and checked and which limit is measured (sync_bench_memory.h); the limits and
// the baseline (sync_bench_limits.h); the one sync loop of both kinds (sync_bench_loop.h); the
// results and the JSON line (sync_bench_report.h). Host memory runs the loop, then the baseline
// (unless --no-baseline). Device memory: every rank on --cuda-device, phases setup and reference
// (the kind's), then the loop's; no baseline.
// Output on rank 0: human lines, then, as the last line, one JSON object.
#include <mpi.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "sync_bench_args.h"
#include "sync_bench_common.h"
#include "sync_bench_limits.h"
#include "sync_bench_loop.h"
#include "sync_bench_memory.h"
#include "sync_bench_model.h"
#include "sync_bench_report.h"

namespace wsync_bench {
namespace {

int runHost(const Options& opt, const Roles& roles, const Comms& comms,
            Clock::time_point process_start, const std::string& load_start) {
  const auto tensors = benchTensors(opt, WSYNC_DTYPE_FLOAT32);  // trainers hold float32
  HostMemory memory(opt, roles, comms, tensors);
  PhaseClock phases(comms.bench, process_start);
  const SyncResult sync = runSync(opt, roles, comms, tensors, memory, phases);
  SyncResult checked;  // --checksums: the same phase with checksums on
  if (opt.checksums_ab) {
    Options with = opt;
    with.checksums = true;
    checked = runSync(with, roles, comms, tensors, memory, phases);
  }
  BaselineResult baseline;
  if (opt.baseline) {
    // The trainers' buffers still hold the verified version.
    baseline = runBaseline(opt, roles, comms, tensors, memory.trainerData(), sync.verified_version);
    if (roles.world_rank == 0) {
      std::printf("[baseline] verified on every rollout rank: %s (%" PRId64 " wrong elements)\n",
                  baseline.mismatches == 0 ? "ok" : "FAILED", baseline.mismatches);
    }
  }
  if (roles.world_rank == 0)
    printHostReport(opt, roles, tensors, sync, memory.limits(), baseline, load_start,
                    opt.checksums_ab ? &checked : nullptr);
  return (sync.mismatches == 0 && checked.mismatches == 0 && baseline.mismatches == 0) ? 0 : 1;
}

// Returns kNoDevice (every rank alike) without a usable GPU: nothing measured.
int runDevice(const Options& opt, const Roles& roles, const Comms& comms,
              Clock::time_point process_start) {
  const auto tensors = benchTensors(opt, opt.dtype);
  PhaseClock phases(comms.bench, process_start);  // "setup" includes starting the CUDA runtime
  if (!DeviceMemoryKind::everyRankHasDevice(opt, roles, comms.bench)) return kNoDevice;
  DeviceMemoryKind memory(opt, roles, comms, tensors, phases);
  const SyncResult sync = runSync(opt, roles, comms, tensors, memory, phases);
  if (roles.world_rank == 0)
    printDeviceReport(opt, roles, tensors, sync, memory.limits(), memory.sizes(), phases);
  return sync.mismatches == 0 ? 0 : 1;
}

int run(int argc, char** argv, Clock::time_point process_start) {
  Options opt;
  Roles roles;
  const int status = parseArguments(argc, argv, &opt, &roles);
  if (status >= 0) return status;
  // Read by the rollouts' contexts (transport_registry.h: WSYNC_DEVICE_TRANSPORT).
  setenv("WSYNC_DEVICE_TRANSPORT", opt.device_transport.c_str(), 1);
  // The benchmark's own communicators, made before wsync starts (every rank takes part).
  Comms comms;
  makeComms(roles, &comms);
  const std::string load_start = loadAverage();
  return opt.device ? runDevice(opt, roles, comms, process_start)
                    : runHost(opt, roles, comms, process_start, load_start);
}

}  // namespace
}  // namespace wsync_bench

int main(int argc, char** argv) {
  const auto process_start = wsync_bench::Clock::now();
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    std::fprintf(stderr, "wsync-sync-bench: MPI does not provide MPI_THREAD_MULTIPLE\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  int rc = 1;
  try {
    rc = wsync_bench::run(argc, argv, process_start);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wsync-sync-bench: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  // Usage errors (2) and "no GPU" (77) are seen by every rank alike; a failed verification (1)
  // is known to every rank through the reductions, so all ranks leave together.
  MPI_Finalize();
  return rc;
}
