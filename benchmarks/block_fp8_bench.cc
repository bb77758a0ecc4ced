// wsync-block-fp8-bench: bf16 trainers -> block-scaled fp8 rollouts, against bf16 -> bf16 in the
// same run. One SPMD binary under mpirun: the first --trainers world ranks (default: half) are
// trainers, the rest rollout ranks in --replicas replicas of TP = rollouts / replicas (world rank
// 0 is a trainer and hosts wsync's coordinator). The model, the layouts and the check:
// block_fp8_model.h. Phases (--phases, one wsync context each, same processes and trainer
// buffers): bf16 (the rollouts hold everything in bf16: the baseline), fp8 (2-D linear weights
// as block fp8 128x128 with float32 scales), mxfp8 (1x32, e8m0 scales).
// Per phase: the median seconds per version (trainers' publish -> request complete, the slowest
// trainer), bytes per version on the wire (values + scales), its ratio to the bf16 phase, the
// blocks that straddle trainers and their partial maxima bytes per version (from the layout), and
// the last version checked on every rollout rank (bf16 bit for bit; fp8 bytes and scales against
// the host reference quantizer). Host memory (UCX) or device memory (--memory device; every rank
// on --cuda-device, CUDA IPC). --kernel: the device quantizer's throughput (block_fp8_kernel.h).
// Output on world rank 0: human lines, then, as the last line, one JSON object.
#include <mpi.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cxxopts.hpp>
#include <exception>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_device.h"
#include "block_fp8_kernel.h"
#include "block_fp8_model.h"
#include "sync_bench_common.h"

namespace wsync_fp8 {
namespace {

using wsync_bench::Clock;
using wsync_bench::dieBench;
using wsync_bench::dieWsync;
using wsync_bench::secondsSince;

struct Options {
  bool device = false;
  int cuda_device = 0;
  std::string model = "generic";
  int64_t bytes = int64_t{256} << 20;  // generic model: bf16 bytes
  std::vector<Format> phases;
  std::string phases_text;
  int trainers = 0;
  int replicas = 1;
  int64_t cut_offset = 0;
  int iters = 5;
  int warmup = 1;
  int slots = 2;
  int check_every = 1;
  int timeout_ms = 120000;
  int threads = 4;
  bool kernel = false;
  int kernel_repeats = 5;
  bool kernel_mxfp8 = false;
};

struct Roles {
  int world_rank = 0, world_size = 0;
  int trainers = 0, rollouts = 0;
  bool trainer = false;
  int role_rank = 0, tp = 1, replica = 0, tp_rank = 0;
};

// -1 to go on, else the exit status (0 after --help, 2 after a usage error).
int parseArguments(int argc, char** argv, Options* opt, Roles* roles) {
  cxxopts::Options options(
      "wsync-block-fp8-bench",
      "bf16 trainers -> block-fp8 rollouts against bf16 -> bf16, in one run.\n"
      "  mpirun -np 2 wsync-block-fp8-bench --bytes 268435456\n"
      "  mpirun -np 4 wsync-block-fp8-bench --memory device --model llama3-8b\n"
      "  wsync-block-fp8-bench --kernel --model llama3-8b");
  options.add_options()("memory", "host | device (every rank on --cuda-device, CUDA IPC)",
                        cxxopts::value<std::string>()->default_value("host"))(
      "cuda-device", "device memory / --kernel: the CUDA device",
      cxxopts::value<int>()->default_value("0"))(
      "model", "generic (scaled to --bytes) | llama3-8b",
      cxxopts::value<std::string>()->default_value("generic"))(
      "bytes", "generic model: its size in bf16 bytes",
      cxxopts::value<int64_t>()->default_value("268435456"))(
      "phases",
      "comma-separated: bf16 (first: the baseline), fp8 (128x128, float32 scales), "
      "mxfp8 (1x32, e8m0)",
      cxxopts::value<std::string>()->default_value("bf16,fp8"))(
      "trainers", "trainer ranks (the first world ranks); 0 = half the world",
      cxxopts::value<int>()->default_value("0"))("replicas",
                                                 "rollout replicas; TP = rollout ranks / replicas",
                                                 cxxopts::value<int>()->default_value("1"))(
      "cut-offset", "rows by which the interior cuts of the trainers' dim-0 shards move",
      cxxopts::value<int64_t>()->default_value("0"))("iters", "timed versions per phase",
                                                     cxxopts::value<int>()->default_value("5"))(
      "warmup", "untimed versions first", cxxopts::value<int>()->default_value("1"))(
      "slots", "version slots per rollout rank", cxxopts::value<int>()->default_value("2"))(
      "check-every", "check every n-th rollout buffer of the last version (1: all)",
      cxxopts::value<int>()->default_value("1"))("timeout-ms", "wsync timeout",
                                                 cxxopts::value<int>()->default_value("120000"))(
      "threads", "threads per rank that fill (trainers) and check (rollouts) the checked version",
      cxxopts::value<int>()->default_value("4"))(
      "kernel", "one process: the device quantizer's GB/s against a device copy")(
      "kernel-repeats", "--kernel: timed rounds (best kept)",
      cxxopts::value<int>()->default_value("5"))(
      "kernel-mxfp8", "--kernel: MXFP8 blocks instead of 128x128")("h,help", "this help");
  const auto args = options.parse(argc, argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &roles->world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &roles->world_size);
  if (args.count("help")) {
    if (roles->world_rank == 0) std::printf("%s\n", options.help().c_str());
    return 0;
  }
  const std::string memory = args["memory"].as<std::string>();
  opt->device = memory == "device";
  opt->cuda_device = args["cuda-device"].as<int>();
  opt->model = args["model"].as<std::string>();
  opt->bytes = args["bytes"].as<int64_t>();
  opt->phases_text = args["phases"].as<std::string>();
  opt->trainers = args["trainers"].as<int>();
  opt->replicas = args["replicas"].as<int>();
  opt->cut_offset = args["cut-offset"].as<int64_t>();
  opt->iters = args["iters"].as<int>();
  opt->warmup = args["warmup"].as<int>();
  opt->slots = args["slots"].as<int>();
  opt->check_every = args["check-every"].as<int>();
  opt->timeout_ms = args["timeout-ms"].as<int>();
  opt->threads = args["threads"].as<int>();
  opt->kernel = args.count("kernel") > 0;
  opt->kernel_repeats = args["kernel-repeats"].as<int>();
  opt->kernel_mxfp8 = args.count("kernel-mxfp8") > 0;
  std::string problem;
  std::stringstream list(opt->phases_text);
  for (std::string name; std::getline(list, name, ',');) {
    Format f{};
    if (!parseFormat(name, &f)) problem = "bad phase '" + name + "' in --phases";
    opt->phases.push_back(f);
  }
  if (memory != "host" && memory != "device") problem = "bad --memory " + memory;
  if (opt->model != "generic" && opt->model != "llama3-8b") problem = "bad --model " + opt->model;
  if (opt->phases.empty() || opt->phases[0] != Format::kBf16)
    problem = "--phases must start with bf16 (the baseline)";
  if (opt->bytes <= 0 || opt->iters < 1 || opt->warmup < 0 || opt->check_every < 1 ||
      opt->kernel_repeats < 1 || opt->slots < 2 || opt->threads < 1)
    problem = "--bytes, --iters, --check-every, --kernel-repeats, --threads positive; --slots >= 2";
  roles->trainers = opt->trainers > 0 ? opt->trainers : roles->world_size / 2;
  roles->rollouts = roles->world_size - roles->trainers;
  if (!opt->kernel && (roles->trainers < 1 || roles->rollouts < 1 || opt->replicas < 1 ||
                       roles->rollouts % opt->replicas != 0))
    problem = "needs >= 1 trainer and rollout ranks forming --replicas equal replicas (world " +
              std::to_string(roles->world_size) + ")";
  if (!problem.empty()) {
    if (roles->world_rank == 0)
      std::fprintf(stderr, "wsync-block-fp8-bench: %s\n", problem.c_str());
    return 2;
  }
  roles->trainer = roles->world_rank < roles->trainers;
  roles->role_rank = roles->trainer ? roles->world_rank : roles->world_rank - roles->trainers;
  roles->tp = std::max(1, roles->rollouts / opt->replicas);
  roles->replica = roles->trainer ? -1 : roles->role_rank / roles->tp;
  roles->tp_rank = roles->trainer ? 0 : roles->role_rank % roles->tp;
  return -1;
}

// fn(0..n-1) on up to --threads threads (device memory: each on --cuda-device first).
void parallelFor(const Options& opt, size_t n, const std::function<void(size_t)>& fn) {
  std::atomic<size_t> next{0};
  const auto work = [&] {
    std::string error;
    if (opt.device) wsync_bench::setDevice(opt.cuda_device, &error);
    for (size_t i = next++; i < n; i = next++)
      fn(i);
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < opt.threads && static_cast<size_t>(t) < n; ++t)
    pool.emplace_back(work);
  work();
  for (std::thread& t : pool)
    t.join();
}

std::vector<wsync_demo::TensorSpec> modelTensors(const Options& opt) {
  if (opt.model == "llama3-8b") return wsync_demo::policyTensors(wsync_demo::llama3_8b());
  return wsync_demo::policyTensors(wsync_demo::policyShapeForBytes(opt.bytes * 2));  // float32
}

// The trainers' bf16 parameters, in host vectors or in one device allocation; hold version 0
// from the start, then whatever fill() last wrote.
class TrainerMemory {
 public:
  TrainerMemory(const Options& opt, const Roles& roles,
                const std::vector<wsync_demo::TensorSpec>& weights)
      : opt_(opt), roles_(roles), phase_(makePhase(weights, Format::kBf16)) {
    if (!roles.trainer) return;
    buffers_ = trainerBuffers(weights, roles.trainers, roles.role_rank, opt.cut_offset);
    size_t total = 0;
    std::vector<size_t> offsets;
    for (const Buffer& b : buffers_) {
      offsets.push_back(total);
      total += (b.bytes() + 255) / 256 * 256;
    }
    std::string error;
    if (opt.device) {
      device_ = wsync_bench::DeviceMemory::allocate(std::max<size_t>(total, 256),
                                                    "trainer parameters", &error);
      if (!device_) dieBench(roles.world_rank, error);
      stream_ = wsync_bench::DeviceStream::create(&error);
      if (!stream_) dieBench(roles.world_rank, error);
      for (size_t o : offsets)
        data_.push_back(device_->data() + o);
    } else {
      host_.resize(buffers_.size());
      for (size_t b = 0; b < buffers_.size(); ++b) {
        host_[b].resize(static_cast<size_t>(buffers_[b].elements()));
        data_.push_back(host_[b].data());
      }
    }
    fill(0);
  }
  const std::vector<Buffer>& buffers() const { return buffers_; }
  const std::vector<void*>& data() const { return data_; }
  wsync_cuda_stream_t stream() const { return stream_ ? stream_->handle() : nullptr; }

  void fill(uint64_t version) {
    std::atomic<bool> failed{false};
    parallelFor(opt_, buffers_.size(), [&](size_t b) {
      std::vector<uint16_t> staging;
      uint16_t* out = nullptr;
      if (opt_.device) {
        staging.resize(static_cast<size_t>(buffers_[b].elements()));
        out = staging.data();
      } else {
        out = host_[b].data();
      }
      fillBuffer(phase_, buffers_[b], version, out);
      std::string error;
      if (opt_.device && !wsync_bench::copyToDevice(data_[b], out, buffers_[b].bytes(), &error)) {
        std::fprintf(stderr, "[world rank %d] %s\n", roles_.world_rank, error.c_str());
        failed = true;
      }
    });
    if (failed) dieBench(roles_.world_rank, "filling the trainer buffers failed");
  }

 private:
  const Options& opt_;
  const Roles& roles_;
  PhaseModel phase_;
  std::vector<Buffer> buffers_;
  std::vector<std::vector<uint16_t>> host_;
  std::unique_ptr<wsync_bench::DeviceMemory> device_;
  std::unique_ptr<wsync_bench::DeviceStream> stream_;
  std::vector<void*> data_;
};

struct PhaseResult {
  Format format = Format::kBf16;
  std::vector<double> seconds;  // per timed version (world rank 0)
  double median_s = 0;
  double commit_s = 0;
  uint64_t plan_bytes = 0;   // wsync_plan_info's bytes_per_version
  uint64_t value_bytes = 0;  // every rollout rank's buffers: weights (fp8 or bf16) ...
  uint64_t scale_bytes = 0;  // ... and scales
  Straddles straddles;
  int64_t wrong = 0;
};

// Rollouts: the bytes of the leased `version`, checked (device buffers copied to the host first).
int64_t checkVersion(wsync_context_t ctx, const Options& opt, const Roles& roles,
                     const PhaseModel& phase, const std::vector<Buffer>& buffers,
                     const std::vector<int>& indices, uint64_t version) {
  wsync_lease_t lease = nullptr;
  const wsync_status_t s = wsync_acquire(ctx, version, &lease);
  if (s != WSYNC_SUCCESS) dieWsync(ctx, roles.world_rank, "wsync_acquire", s);
  std::vector<void*> slot(buffers.size(), nullptr);
  for (size_t b = 0; b < buffers.size(); ++b)
    wsync_lease_buffer(lease, indices[b], &slot[b]);
  // Device memory: a host copy of each buffer checked (and of its scales) first.
  const std::vector<size_t> checked = checkedBuffers(buffers, opt.check_every);
  std::vector<std::string> firsts(checked.size());
  std::vector<int64_t> wrongs(checked.size(), 0);
  parallelFor(opt, checked.size(), [&](size_t i) {
    const size_t b = checked[i];
    std::vector<const uint8_t*> data(buffers.size(), nullptr);
    std::vector<std::vector<uint8_t>> copies;
    copies.reserve(2);
    for (size_t c : {b, static_cast<size_t>(buffers[b].scales)}) {
      if (c >= buffers.size()) continue;  // no scales
      data[c] = static_cast<const uint8_t*>(slot[c]);
      std::string error;
      if (!opt.device) continue;
      copies.emplace_back(buffers[c].bytes());
      if (!wsync_bench::copyToHost(copies.back().data(), slot[c], copies.back().size(), &error)) {
        firsts[i] = error;
        wrongs[i] = 1;
        return;
      }
      data[c] = copies.back().data();
    }
    wrongs[i] = countWrongBytes(phase, buffers, data, b, version, &firsts[i]);
  });
  int64_t wrong = 0;
  std::string first;
  for (size_t i = 0; i < checked.size(); ++i) {
    if (wrongs[i] > 0 && first.empty()) first = firsts[i];
    wrong += wrongs[i];
  }
  wsync_lease_release(lease);
  if (wrong > 0)
    std::fprintf(stderr, "[rollout %d] %s version %" PRIu64 ": %" PRId64 " wrong bytes; %s\n",
                 roles.role_rank, formatName(phase.format), version, wrong, first.c_str());
  return wrong;
}

PhaseResult runPhase(const Options& opt, const Roles& roles, MPI_Comm comm,
                     const std::vector<wsync_demo::TensorSpec>& weights, Format format,
                     TrainerMemory& trainer) {
  PhaseResult out;
  out.format = format;
  const PhaseModel phase = makePhase(weights, format);
  std::vector<Buffer> buffers;
  std::string error;
  if (!roles.trainer) {
    buffers = rolloutBuffers(phase, roles.tp, roles.tp_rank, &error);
    if (!error.empty()) dieBench(roles.world_rank, error);
  }
  wsync_config_t cfg = WSYNC_CONFIG_INITIALIZER;
  cfg.role = roles.trainer ? WSYNC_ROLE_TRAINER : WSYNC_ROLE_ROLLOUT;
  cfg.replica = roles.replica;
  cfg.num_slots = opt.slots;
  cfg.timeout_ms = opt.timeout_ms;
  if (opt.device) cfg.cuda_device = opt.cuda_device;
  wsync_context_t ctx = nullptr;
  wsync_status_t s = wsync_context_create(&cfg, &ctx);
  if (s != WSYNC_SUCCESS) dieWsync(nullptr, roles.world_rank, "wsync_context_create", s);
  const wsync_memory_kind_t kind = opt.device ? WSYNC_MEMORY_DEVICE : WSYNC_MEMORY_HOST;
  std::vector<int> indices;
  if (!roles.trainer) {
    s = declareScalings(ctx, phase, buffers);
    if (s != WSYNC_SUCCESS) dieWsync(ctx, roles.world_rank, "wsync_set_block_scaling", s);
  }
  const std::vector<Buffer>& mine = roles.trainer ? trainer.buffers() : buffers;
  for (size_t b = 0; b < mine.size(); ++b) {
    int index = -1;
    s = registerBuffer(ctx, phase, mine[b], kind, roles.trainer ? trainer.data()[b] : nullptr,
                       &index);
    if (s != WSYNC_SUCCESS) dieWsync(ctx, roles.world_rank, "wsync_register_buffer", s);
    indices.push_back(index);
  }
  const auto t_commit = Clock::now();
  s = wsync_commit(ctx);
  if (s != WSYNC_SUCCESS) dieWsync(ctx, roles.world_rank, "wsync_commit", s);
  out.commit_s = secondsSince(t_commit);
  wsync_plan_info_t info{};
  wsync_plan_info(ctx, &info);
  out.plan_bytes = info.bytes_per_version;
  uint64_t bytes[2] = {0, 0}, sums[2] = {0, 0};
  for (size_t b = 0; !roles.trainer && b < buffers.size(); ++b) {
    const bool scales =
        buffers[b].dtype == WSYNC_DTYPE_FLOAT32 || buffers[b].dtype == WSYNC_DTYPE_UINT8;
    bytes[scales ? 1 : 0] += buffers[b].bytes();
  }
  MPI_Reduce(bytes, sums, 2, MPI_UINT64_T, MPI_SUM, 0, comm);
  out.value_bytes = sums[0];
  out.scale_bytes = sums[1];
  out.straddles = countStraddles(phase, roles.trainers, opt.cut_offset);

  // Versions: a barrier, then trainers publish and wait for delivery, rollouts wait until the
  // version is readable. The slowest trainer's publish -> complete is the version's time.
  const int total = opt.warmup + opt.iters + 1;  // the last one is checked
  for (int i = 1; i <= total; ++i) {
    const auto version = static_cast<uint64_t>(i);
    if (i == total && roles.trainer) trainer.fill(version);
    if (opt.device) {
      MPI_Barrier(comm);
    } else {
      wsync_bench::sleepingBarrier(comm);
    }
    double mine_s = 0;
    if (roles.trainer) {
      const auto t0 = Clock::now();
      wsync_request_t request = nullptr;
      s = wsync_publish_on_stream(ctx, version, trainer.stream(), &request);
      if (s != WSYNC_SUCCESS) dieWsync(ctx, roles.world_rank, "wsync_publish_on_stream", s);
      s = wsync_request_wait(request, -1);
      wsync_request_free(request);
      if (s != WSYNC_SUCCESS) dieWsync(ctx, roles.world_rank, "wsync_request_wait", s);
      mine_s = secondsSince(t0);
    } else {
      uint64_t newest = 0;
      wsync_newest_version(ctx, &newest);
      while (newest < version) {
        s = wsync_wait_version(ctx, newest, -1, &newest);
        if (s != WSYNC_SUCCESS) dieWsync(ctx, roles.world_rank, "wsync_wait_version", s);
      }
    }
    double slowest = 0;
    MPI_Reduce(&mine_s, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, comm);
    if (roles.world_rank == 0 && i > opt.warmup && i < total) out.seconds.push_back(slowest);
  }
  const int64_t wrong = roles.trainer ? 0
                                      : checkVersion(ctx, opt, roles, phase, buffers, indices,
                                                     static_cast<uint64_t>(total));
  MPI_Allreduce(&wrong, &out.wrong, 1, MPI_INT64_T, MPI_SUM, comm);
  s = wsync_context_destroy(ctx);
  if (s != WSYNC_SUCCESS) dieWsync(nullptr, roles.world_rank, "wsync_context_destroy", s);
  wsync_bench::sleepingBarrier(comm);
  out.median_s = wsync_bench::median(out.seconds);
  return out;
}

void printReport(const Options& opt, const Roles& roles, int64_t model_bytes, size_t tensors,
                 const std::string& load, const std::vector<PhaseResult>& phases) {
  const double base = phases[0].median_s;
  std::string json =
      "{\"bench\":\"wsync-block-fp8-bench\",\"memory\":\"" +
      std::string(opt.device ? "device" : "host") + "\",\"model\":\"" + opt.model +
      "\",\"model_bf16_bytes\":" + std::to_string(model_bytes) +
      ",\"tensors\":" + std::to_string(tensors) +
      ",\"trainers\":" + std::to_string(roles.trainers) +
      ",\"rollouts\":" + std::to_string(roles.rollouts) +
      ",\"replicas\":" + std::to_string(opt.replicas) + ",\"tp\":" + std::to_string(roles.tp) +
      ",\"cut_offset\":" + std::to_string(opt.cut_offset) +
      ",\"iters\":" + std::to_string(opt.iters) + ",\"load_start\":\"" + load + "\",\"phases\":[";
  for (size_t p = 0; p < phases.size(); ++p) {
    const PhaseResult& r = phases[p];
    const uint64_t wire = r.value_bytes + r.scale_bytes;
    const double ratio = base > 0 ? r.median_s / base : 0;
    std::printf("[%s] median %.4f s per version (%.2f x bf16); %" PRIu64
                " bytes per version on "
                "the wire (%" PRIu64 " values + %" PRIu64 " scales; plan says %" PRIu64
                "); %.2f GB/s; commit %.3f s\n",
                formatName(r.format), r.median_s, ratio, wire, r.value_bytes, r.scale_bytes,
                r.plan_bytes, r.median_s > 0 ? static_cast<double>(wire) / r.median_s / 1e9 : 0,
                r.commit_s);
    if (r.format != Format::kBf16)
      std::printf("[%s] %" PRId64 " blocks straddle trainers; partial maxima %" PRIu64
                  " bytes per version (4 bytes per block per contributing trainer, each way)\n",
                  formatName(r.format), r.straddles.blocks, r.straddles.maximaBytes());
    std::printf("[%s] last version checked on every rollout rank%s: %s (%" PRId64 " wrong bytes)\n",
                formatName(r.format),
                opt.check_every > 1
                    ? (" (every " + std::to_string(opt.check_every) + "th buffer)").c_str()
                    : "",
                r.wrong == 0 ? "ok" : "FAILED", r.wrong);
    std::string samples;
    for (double x : r.seconds)
      samples += (samples.empty() ? "" : ",") + std::to_string(x);
    json += std::string(p ? "," : "") + "{\"phase\":\"" + formatName(r.format) +
            "\",\"median_s\":" + std::to_string(r.median_s) +
            ",\"ratio_to_bf16\":" + std::to_string(ratio) + ",\"seconds\":[" + samples +
            "],\"wire_bytes\":" + std::to_string(wire) +
            ",\"value_bytes\":" + std::to_string(r.value_bytes) +
            ",\"scale_bytes\":" + std::to_string(r.scale_bytes) +
            ",\"plan_bytes\":" + std::to_string(r.plan_bytes) +
            ",\"straddling_blocks\":" + std::to_string(r.straddles.blocks) +
            ",\"partial_maxima_bytes\":" + std::to_string(r.straddles.maximaBytes()) +
            ",\"commit_s\":" + std::to_string(r.commit_s) + ",\"verified\":\"" +
            (r.wrong == 0 ? "ok" : "FAILED") + "\"}";
  }
  std::printf("%s]}\n", json.c_str());
  std::fflush(stdout);
}

// Collective: whether every rank has device --cuda-device (selected on return).
bool everyRankHasDevice(const Options& opt, const Roles& roles) {
  std::string why;
  int mine = wsync_bench::deviceCount(&why) > opt.cuda_device ? 1 : 0;
  if (mine && !wsync_bench::setDevice(opt.cuda_device, &why)) mine = 0;
  int all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all && roles.world_rank == 0)
    std::printf("[bench] skipped: --memory device needs CUDA device %d on every rank%s%s\n",
                opt.cuda_device, why.empty() ? "" : ": ", why.c_str());
  return all == 1;
}

int run(int argc, char** argv) {
  Options opt;
  Roles roles;
  const int status = parseArguments(argc, argv, &opt, &roles);
  if (status >= 0) return status;
  const auto weights = modelTensors(opt);
  if (opt.kernel) {
    return roles.world_rank == 0 ? runKernelBench(weights, opt.model, opt.cuda_device,
                                                  opt.kernel_repeats, opt.kernel_mxfp8)
                                 : 0;
  }
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  const std::string load = wsync_bench::loadAverage();
  if (opt.device && !everyRankHasDevice(opt, roles)) return kSkipped;
  const int64_t model_bytes = 2 * wsync_demo::totalElements(weights);
  if (roles.world_rank == 0) {
    std::printf("[bench] %s model: %zu tensors, %" PRId64
                " bf16 bytes; %d trainers -> %d "
                "rollout ranks (%d replicas of TP %d), %s memory, trainer cuts moved by %" PRId64
                " rows; phases %s; load %s\n",
                opt.model.c_str(), weights.size(), model_bytes, roles.trainers, roles.rollouts,
                opt.replicas, roles.tp, opt.device ? "device" : "host", opt.cut_offset,
                opt.phases_text.c_str(), load.c_str());
    std::fflush(stdout);
  }
  // Every phase's rollout layout first: a TP shard that would cut a block is a usage error.
  std::string problem;
  for (Format f : opt.phases)
    if (!roles.trainer && problem.empty())
      rolloutBuffers(makePhase(weights, f), roles.tp, roles.tp_rank, &problem);
  int bad = problem.empty() ? 0 : 1, any_bad = 0;
  MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, comm);
  if (any_bad) {
    if (bad && roles.tp_rank == 0 && roles.replica == 0)
      std::fprintf(stderr, "wsync-block-fp8-bench: %s\n", problem.c_str());
    MPI_Comm_free(&comm);
    return 2;
  }
  TrainerMemory trainer(opt, roles, weights);
  std::vector<PhaseResult> results;
  for (Format f : opt.phases) {
    results.push_back(runPhase(opt, roles, comm, weights, f, trainer));
    if (roles.world_rank == 0) {
      std::printf("[%s] versions:", formatName(f));
      for (double x : results.back().seconds)
        std::printf(" %.4f", x);
      std::printf(" s\n");
      std::fflush(stdout);
    }
  }
  if (roles.world_rank == 0) printReport(opt, roles, model_bytes, weights.size(), load, results);
  int64_t wrong = 0;
  for (const PhaseResult& r : results)
    wrong += r.wrong;
  MPI_Comm_free(&comm);
  return wrong == 0 ? 0 : 1;
}

}  // namespace
}  // namespace wsync_fp8

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    std::fprintf(stderr, "wsync-block-fp8-bench: MPI does not provide MPI_THREAD_MULTIPLE\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  int rc = 1;
  try {
    rc = wsync_fp8::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wsync-block-fp8-bench: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  MPI_Finalize();
  return rc;
}
