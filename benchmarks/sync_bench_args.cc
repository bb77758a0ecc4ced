// wsync-sync-bench: flags, roles and communicators (see the header).
#include "sync_bench_args.h"

#include <cstdio>
#include <cxxopts.hpp>

namespace wsync_bench {
namespace {

void addFlags(cxxopts::Options& options) {
  options.add_options()("memory", "host | device (device: every rank on --cuda-device)",
                        cxxopts::value<std::string>()->default_value("host"))(
      "model", "generic (the demo policy scaled to --bytes) | llama3-8b (real names and shapes)",
      cxxopts::value<std::string>()->default_value("generic"))(
      "bytes",
      "generic model: size in bytes of the trainers' dtype (host: float32; the demo policy scaled "
      "to about this)",
      cxxopts::value<int64_t>()->default_value("1073741824"))(
      "layout",
      "rollout layout: match (the trainers' boxes) | differ (every tensor split along its last "
      "dim) | mixed (vLLM-like)",
      cxxopts::value<std::string>()->default_value("differ"))(
      "dtype",
      "float32 | bfloat16 | float16; host: the rollouts' (trainers hold float32; default "
      "float32); device: trainers' and rollouts' (default bfloat16)",
      cxxopts::value<std::string>()->default_value(""))(
      "cuda-device", "device memory: the CUDA device of every rank",
      cxxopts::value<int>()->default_value("0"))(
      "snapshot", "device memory: trainers publish in snapshot mode (time publish blocks)")(
      "copy-flip", "device memory: rollouts register live buffers and time wsync_copy_flip")(
      "device-transport",
      "device memory: the rollouts' slots: cuda_ipc (within a node) | staged (the cross-node "
      "path through pinned host memory) | ucx_cuda (UCX device puts when UCX handles CUDA)",
      cxxopts::value<std::string>()->default_value("cuda_ipc"))(
      "flip-iters", "timed copy flips per rollout rank (after one untimed)",
      cxxopts::value<int>()->default_value("5"))(
      "trainers", "trainer ranks (the first ones of the world); 0 = half the world",
      cxxopts::value<int>()->default_value("0"))("replicas",
                                                 "rollout replicas; TP = rollout ranks / replicas",
                                                 cxxopts::value<int>()->default_value("1"))(
      "slots", "version slots per rollout rank (config.num_slots, >= 2)",
      cxxopts::value<int>()->default_value("2"))("iters", "timed versions",
                                                 cxxopts::value<int>()->default_value("5"))(
      "warmup", "untimed versions first", cxxopts::value<int>()->default_value("1"))(
      "baseline-iters", "timed baseline versions (-1: --iters)",
      cxxopts::value<int>()->default_value("-1"))("no-baseline", "skip the baseline")(
      "no-reader", "no lease reader thread on the rollout ranks")(
      "checksums",
      "host memory: run the wsync phase a second time with checksums on (config.checksums) and "
      "report the cost")("reader-sleep-us", "sleep between two leases of the reader thread",
                         cxxopts::value<int>()->default_value("50"))(
      "timeout-ms", "wsync timeout", cxxopts::value<int>()->default_value("120000"))("h,help",
                                                                                     "this help");
}

void readFlags(const cxxopts::ParseResult& args, Options* opt) {
  opt->device = args["memory"].as<std::string>() == "device";
  opt->model = args["model"].as<std::string>();
  opt->cuda_device = args["cuda-device"].as<int>();
  opt->snapshot = args.count("snapshot") > 0;
  opt->copy_flip = args.count("copy-flip") > 0;
  opt->device_transport = args["device-transport"].as<std::string>();
  opt->flip_iters = args["flip-iters"].as<int>();
  opt->bytes = args["bytes"].as<int64_t>();
  opt->layout_name = args["layout"].as<std::string>();
  opt->dtype_name = args["dtype"].as<std::string>();
  if (opt->dtype_name.empty()) opt->dtype_name = opt->device ? "bfloat16" : "float32";
  opt->trainers = args["trainers"].as<int>();
  opt->replicas = args["replicas"].as<int>();
  opt->slots = args["slots"].as<int>();
  opt->iters = args["iters"].as<int>();
  opt->warmup = args["warmup"].as<int>();
  opt->baseline_iters = args["baseline-iters"].as<int>();
  opt->baseline = args.count("no-baseline") == 0;
  opt->reader = args.count("no-reader") == 0;
  opt->checksums_ab = args.count("checksums") > 0;
  opt->reader_sleep_us = args["reader-sleep-us"].as<int>();
  opt->timeout_ms = args["timeout-ms"].as<int>();
}

// The first problem with the flags, or "" when there is none.
std::string checkFlags(const cxxopts::ParseResult& args, Options* opt) {
  const std::string memory = args["memory"].as<std::string>();
  if (memory != "host" && memory != "device") return "bad --memory " + memory;
  if (opt->model != "generic" && opt->model != "llama3-8b") return "bad --model " + opt->model;
  if (opt->model != "generic" && args.count("bytes") > 0)
    return "--bytes sizes the generic model; --model " + opt->model + " has its own size";
  if (!opt->device && (opt->snapshot || opt->copy_flip || args.count("cuda-device") > 0))
    return "--snapshot, --copy-flip and --cuda-device need --memory device";
  if (opt->cuda_device < 0 || opt->flip_iters < 1)
    return "--cuda-device must be non-negative and --flip-iters positive";
  if (!wsync_demo::parseRolloutLayout(opt->layout_name, &opt->layout))
    return "bad --layout " + opt->layout_name;
  if (!wsync_demo::parseDtype(opt->dtype_name, &opt->dtype))
    return "bad --dtype " + opt->dtype_name;
  if (opt->bytes <= 0 || opt->iters < 1 || opt->warmup < 0 || opt->reader_sleep_us < 0 ||
      opt->timeout_ms <= 0) {
    return "--bytes and --iters must be positive, --warmup and --reader-sleep-us non-negative";
  }
  return "";
}

// Fills the roles from the world and the flags; the problem with them, or "".
std::string assignRoles(const Options& opt, Roles* roles) {
  roles->trainers = opt.trainers > 0 ? opt.trainers : roles->world_size / 2;
  roles->rollouts = roles->world_size - roles->trainers;
  if (roles->trainers < 1 || roles->rollouts < 1) {
    return "needs at least one trainer and one rollout rank (world of " +
           std::to_string(roles->world_size) + ", --trainers " + std::to_string(opt.trainers) + ")";
  }
  if (opt.replicas < 1 || roles->rollouts % opt.replicas != 0) {
    return std::to_string(roles->rollouts) + " rollout ranks cannot form " +
           std::to_string(opt.replicas) + " equal replicas";
  }
  roles->trainer = roles->world_rank < roles->trainers;
  roles->role_rank = roles->trainer ? roles->world_rank : roles->world_rank - roles->trainers;
  roles->tp = roles->rollouts / opt.replicas;
  roles->replica = roles->trainer ? 0 : roles->role_rank / roles->tp;
  roles->tp_rank = roles->trainer ? 0 : roles->role_rank % roles->tp;
  return "";
}

}  // namespace

int parseArguments(int argc, char** argv, Options* opt, Roles* roles) {
  cxxopts::Options options(
      "wsync-sync-bench",
      "Weight sync: wsync against gather-to-rank-0 + broadcast (host memory), or against a plain\n"
      "device-to-device copy (device memory, every rank on one GPU).\n"
      "  mpirun -np 4 wsync-sync-bench --bytes 1073741824 --layout differ\n"
      "  mpirun -np 4 wsync-sync-bench --memory device --model llama3-8b --layout mixed\n"
      "The first half of the world ranks are trainers, the rest rollout ranks.");
  addFlags(options);
  const auto args = options.parse(argc, argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &roles->world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &roles->world_size);
  if (args.count("help")) {
    if (roles->world_rank == 0) std::printf("%s\n", options.help().c_str());
    return 0;
  }
  readFlags(args, opt);
  std::string problem = checkFlags(args, opt);
  if (problem.empty()) problem = assignRoles(*opt, roles);
  if (problem.empty()) return -1;
  if (roles->world_rank == 0) std::fprintf(stderr, "wsync-sync-bench: %s\n", problem.c_str());
  return 2;
}

Comms::~Comms() {
  for (MPI_Comm* c : {&bench, &trainer, &bcast}) {
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
  }
}

void makeComms(const Roles& roles, Comms* comms) {
  MPI_Comm_dup(MPI_COMM_WORLD, &comms->bench);
  MPI_Comm_split(MPI_COMM_WORLD, roles.trainer ? 0 : MPI_UNDEFINED, roles.world_rank,
                 &comms->trainer);
  MPI_Comm_split(MPI_COMM_WORLD, (roles.world_rank == 0 || !roles.trainer) ? 0 : MPI_UNDEFINED,
                 roles.world_rank, &comms->bcast);
}

}  // namespace wsync_bench
