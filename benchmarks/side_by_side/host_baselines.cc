// wsync-host-baselines: what open RL frameworks do to move host-memory weights, on the model of
// wsync-sync-bench (the demo policy scaled to --bytes of float32, the same tensor list), in one
// SPMD run under mpirun. The first --trainers world ranks are trainers (each tensor Shard(0) over
// them, torch.chunk rule), the other ranks rollouts that each want the whole model (TP 1).
//
//   memcpy                  rank 0: one process memcpy of the model's bytes (buffers of at most
//                           512 MiB copied repeatedly), best of 3, everyone else asleep in a
//                           barrier.
//   gather_bcast_per_tensor per tensor: MPI_Gatherv of the shards to trainer 0, MPI_Bcast of the
//                           tensor from trainer 0 into every rollout's parameter.
//   bucketed_bcast          trainer 0 gathers tensors into a bucket of --bucket-mb (at least the
//                           largest tensor), broadcasts it with MPI_Ibcast while it packs the next
//                           into the second bucket (ping-pong); rollouts unpack each bucket into
//                           their parameters while the next one arrives.
//
// Each method: --warmup untimed versions, --iters timed ones (a sleeping barrier, the version, a
// sleeping barrier; rank 0's wall time), then a version of fresh values checked element by element
// on every rollout. Prints one JSON object per method on rank 0, each with ratio_to_memcpy.
#include <mpi.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <cxxopts.hpp>
#include <string>
#include <thread>
#include <vector>

#include "models/demo_policy.h"

namespace {

using wsync_demo::BufferSpec;
using wsync_demo::TensorSpec;

struct Setup {
  int64_t bytes = 0;
  int trainers = 1;
  int iters = 5;
  int warmup = 1;
  int64_t bucket_bytes = 64 << 20;
  std::string tag;
  int rank = 0, world = 0, rollouts = 0;
  bool trainer = false;
  MPI_Comm trainer_comm = MPI_COMM_NULL;  // the trainers
  MPI_Comm bcast_comm = MPI_COMM_NULL;    // trainer 0 (rank 0 in it) and the rollouts
};

// A barrier that sleeps while it waits, so that waiting ranks leave the cores to the others.
void sleepingBarrier(MPI_Comm comm) {
  MPI_Request req;
  MPI_Ibarrier(comm, &req);
  int done = 0;
  while (!done) {
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (!done) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int64_t rowElements(const TensorSpec& t) {
  int64_t n = 1;
  for (size_t d = 1; d < t.shape.size(); ++d)
    n *= t.shape[d];
  return n;
}

// Every rank's parameters: a trainer's Shard(0) pieces, or a rollout's whole tensors.
struct Model {
  std::vector<TensorSpec> tensors;
  std::vector<int64_t> elements;  // per tensor
  std::vector<BufferSpec> layout;
  std::vector<std::vector<float>> data;
  // trainers only: per tensor, every trainer's element count and displacement (for Gatherv)
  std::vector<std::vector<int>> counts, displs;
  int64_t total_elements = 0;
  int64_t largest_elements = 0;
};

void buildModel(const Setup& s, Model* m) {
  m->tensors = wsync_demo::policyTensors(wsync_demo::policyShapeForBytes(s.bytes));
  m->layout = s.trainer ? wsync_demo::trainerLayout(m->tensors, s.trainers, s.rank)
                        : wsync_demo::trainerLayout(m->tensors, 1, 0);
  for (const BufferSpec& b : m->layout)
    m->data.emplace_back(static_cast<size_t>(b.num_elements), 0.0f);
  for (const TensorSpec& t : m->tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape)
      n *= d;
    m->elements.push_back(n);
    m->total_elements += n;
    m->largest_elements = std::max(m->largest_elements, n);
  }
  if (!s.trainer) return;
  for (size_t t = 0; t < m->tensors.size(); ++t) {
    std::vector<int> counts(static_cast<size_t>(s.trainers)), displs(counts.size());
    for (int r = 0; r < s.trainers; ++r) {
      const BufferSpec b = wsync_demo::trainerLayout({m->tensors[t]}, s.trainers, r)[0];
      counts[static_cast<size_t>(r)] = static_cast<int>(b.num_elements);
      displs[static_cast<size_t>(r)] =
          static_cast<int>(b.pieces[0].offset[0] * rowElements(m->tensors[t]));
    }
    m->counts.push_back(counts);
    m->displs.push_back(displs);
  }
}

// The trainers' gather of tensor t into `full` (significant on trainer 0 only).
void gatherTensor(const Setup& s, Model& m, size_t t, float* full) {
  MPI_Gatherv(m.data[t].data(), static_cast<int>(m.data[t].size()), MPI_FLOAT, full,
              m.counts[t].data(), m.displs[t].data(), MPI_FLOAT, 0, s.trainer_comm);
}

// Per tensor: gather to trainer 0, broadcast from it into every rollout's parameter.
void gatherBcastPerTensor(const Setup& s, Model& m, std::vector<float>& full) {
  for (size_t t = 0; t < m.tensors.size(); ++t) {
    if (s.trainer) gatherTensor(s, m, t, full.data());
    if (s.bcast_comm == MPI_COMM_NULL) continue;
    float* buf = s.rank == 0 ? full.data() : m.data[t].data();
    MPI_Bcast(buf, static_cast<int>(m.elements[t]), MPI_FLOAT, 0, s.bcast_comm);
  }
}

// Buckets of consecutive tensors, [first, last), at most `cap` elements each unless one tensor
// alone is larger.
std::vector<std::pair<size_t, size_t>> makeBuckets(const Model& m, int64_t cap) {
  std::vector<std::pair<size_t, size_t>> out;
  size_t first = 0;
  int64_t used = 0;
  for (size_t t = 0; t < m.tensors.size(); ++t) {
    if (used + m.elements[t] > cap && t > first) {
      out.emplace_back(first, t);
      first = t;
      used = 0;
    }
    used += m.elements[t];
  }
  out.emplace_back(first, m.tensors.size());
  return out;
}

int64_t bucketElements(const Model& m, std::pair<size_t, size_t> bucket) {
  int64_t n = 0;
  for (size_t t = bucket.first; t < bucket.second; ++t)
    n += m.elements[t];
  return n;
}

void bucketedBcast(const Setup& s, Model& m, std::vector<float> bufs[2],
                   const std::vector<std::pair<size_t, size_t>>& buckets) {
  MPI_Request reqs[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  auto post = [&](size_t k) {
    MPI_Ibcast(bufs[k % 2].data(), static_cast<int>(bucketElements(m, buckets[k])), MPI_FLOAT, 0,
               s.bcast_comm, &reqs[k % 2]);
  };
  if (s.trainer) {
    // Trainers gather bucket k into trainer 0's free buffer (its broadcast k-2 done), then
    // trainer 0 broadcasts it; MPI_Test between tensors drives the broadcast in flight.
    for (size_t k = 0; k < buckets.size(); ++k) {
      if (s.rank == 0) MPI_Wait(&reqs[k % 2], MPI_STATUS_IGNORE);
      int64_t off = 0;
      for (size_t t = buckets[k].first; t < buckets[k].second; ++t) {
        gatherTensor(s, m, t, s.rank == 0 ? bufs[k % 2].data() + off : nullptr);
        off += m.elements[t];
        int flag = 0;
        if (s.rank == 0) MPI_Test(&reqs[(k + 1) % 2], &flag, MPI_STATUS_IGNORE);
      }
      if (s.rank == 0) post(k);
    }
    if (s.rank == 0) MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE);
    return;
  }
  // Rollouts: bucket k+1 arrives while bucket k is unpacked.
  post(0);
  for (size_t k = 0; k < buckets.size(); ++k) {
    MPI_Wait(&reqs[k % 2], MPI_STATUS_IGNORE);
    if (k + 1 < buckets.size()) post(k + 1);
    const float* src = bufs[k % 2].data();
    for (size_t t = buckets[k].first; t < buckets[k].second; ++t) {
      std::memcpy(m.data[t].data(), src, m.data[t].size() * sizeof(float));
      src += m.data[t].size();
    }
  }
}

// GB/s of one process memcpy of `bytes` (buffers of at most 512 MiB copied repeatedly), best of 3.
double memcpyGbps(int64_t bytes) {
  const size_t size = static_cast<size_t>(std::min<int64_t>(bytes, int64_t{512} << 20));
  std::vector<char> src(size, 1), dst(size, 2);
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const double t0 = MPI_Wtime();
    for (int64_t left = bytes; left > 0; left -= static_cast<int64_t>(size)) {
      std::memcpy(dst.data(), src.data(), std::min<size_t>(size, static_cast<size_t>(left)));
    }
    best = std::min(best, MPI_Wtime() - t0);
  }
  return static_cast<double>(bytes) / best / 1e9;
}

struct Timing {
  std::vector<double> seconds;
  int64_t mismatches = 0;
};

// --warmup + --iters versions of `version_fn`, then a checked version of fresh values.
template <typename Fn>
Timing timeMethod(const Setup& s, Model& m, Fn&& version_fn) {
  Timing out;
  for (int i = 0; i < s.warmup + s.iters; ++i) {
    sleepingBarrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    version_fn();
    sleepingBarrier(MPI_COMM_WORLD);
    if (i >= s.warmup) out.seconds.push_back(MPI_Wtime() - t0);
  }
  static uint64_t version = 1;
  ++version;
  for (size_t b = 0; b < m.layout.size(); ++b) {
    if (s.trainer) {
      wsync_demo::fillTrainerBuffer(m.tensors, m.layout[b], version, m.data[b].data());
    } else {
      std::fill(m.data[b].begin(), m.data[b].end(), 0.0f);
    }
  }
  sleepingBarrier(MPI_COMM_WORLD);
  version_fn();
  int64_t bad = 0;
  std::string first;
  for (size_t b = 0; !s.trainer && b < m.layout.size(); ++b) {
    bad += wsync_demo::countMismatches(m.tensors, m.layout[b], WSYNC_DTYPE_FLOAT32,
                                       m.data[b].data(), version, &first);
  }
  if (bad > 0)
    std::fprintf(stderr, "[baselines] rank %d: %" PRId64 " wrong; %s\n", s.rank, bad,
                 first.c_str());
  MPI_Allreduce(&bad, &out.mismatches, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  return out;
}

void printResult(const Setup& s, const Model& m, const char* method, const Timing& t,
                 double memcpy_gbps, const std::string& extra) {
  const double sec = median(t.seconds);
  const int64_t bytes = m.total_elements * 4;
  const int64_t delivered = bytes * s.rollouts;
  const double gbps = static_cast<double>(delivered) / sec / 1e9;
  std::printf(
      "{\"suite\": \"host_side_by_side\", \"method\": \"%s\", \"model\": \"generic\", "
      "\"bytes\": %" PRId64 ", \"bytes_delivered\": %" PRId64
      ", \"tensors\": %zu, \"trainers\": %d, \"rollouts\": %d, \"iters\": %d, \"warmup\": %d, "
      "\"seconds\": %.6f, \"seconds_min\": %.6f, \"seconds_max\": %.6f, \"gbps\": %.3f, "
      "\"memcpy_gbps\": %.3f, \"ratio_to_memcpy\": %.4f, \"verified\": %s%s, \"tag\": \"%s\"}\n",
      method, bytes, delivered, m.tensors.size(), s.trainers, s.rollouts, s.iters, s.warmup, sec,
      *std::min_element(t.seconds.begin(), t.seconds.end()),
      *std::max_element(t.seconds.begin(), t.seconds.end()), gbps, memcpy_gbps, gbps / memcpy_gbps,
      t.mismatches == 0 ? "true" : "false", extra.c_str(), s.tag.c_str());
  std::fflush(stdout);
}

// Flags into `s`; -1 to go on, else the exit status.
int parseFlags(int argc, char** argv, Setup* s) {
  cxxopts::Options options("wsync-host-baselines",
                           "Host weight-sync baselines (gather + per-tensor broadcast, bucketed "
                           "broadcast) and a memcpy reference, on wsync-sync-bench's model.");
  options.add_options()("bytes", "model size in bytes of float32 (the demo policy scaled)",
                        cxxopts::value<int64_t>()->default_value("1073741824"))(
      "trainers", "trainer ranks (the first ones of the world)",
      cxxopts::value<int>()->default_value("1"))("iters", "timed versions",
                                                 cxxopts::value<int>()->default_value("5"))(
      "warmup", "untimed versions first", cxxopts::value<int>()->default_value("1"))(
      "bucket-mb", "bucketed_bcast: bucket size in MiB",
      cxxopts::value<int64_t>()->default_value("64"))(
      "tag", "text copied into every line", cxxopts::value<std::string>()->default_value(""))(
      "h,help", "this help");
  const auto args = options.parse(argc, argv);
  if (args.count("help")) {
    if (s->rank == 0) std::printf("%s\n", options.help().c_str());
    return 0;
  }
  s->bytes = args["bytes"].as<int64_t>();
  s->trainers = args["trainers"].as<int>();
  s->iters = args["iters"].as<int>();
  s->warmup = args["warmup"].as<int>();
  s->bucket_bytes = args["bucket-mb"].as<int64_t>() << 20;
  s->tag = args["tag"].as<std::string>();
  s->rollouts = s->world - s->trainers;
  if (s->trainers < 1 || s->rollouts < 1 || s->iters < 1 || s->warmup < 0 || s->bytes <= 0) {
    if (s->rank == 0) std::fprintf(stderr, "wsync-host-baselines: bad flags or world size\n");
    return 2;
  }
  return -1;
}

int run(Setup& s) {
  s.trainer = s.rank < s.trainers;
  MPI_Comm_split(MPI_COMM_WORLD, s.trainer ? 0 : MPI_UNDEFINED, s.rank, &s.trainer_comm);
  MPI_Comm_split(MPI_COMM_WORLD, (s.rank == 0 || !s.trainer) ? 0 : MPI_UNDEFINED, s.rank,
                 &s.bcast_comm);
  Model m;
  buildModel(s, &m);
  const int64_t delivered = m.total_elements * 4 * s.rollouts;
  sleepingBarrier(MPI_COMM_WORLD);
  double memcpy_gbps = 0;
  if (s.rank == 0) memcpy_gbps = memcpyGbps(delivered);
  sleepingBarrier(MPI_COMM_WORLD);
  int64_t failures = 0;
  if (s.rank == 0) {
    std::printf(
        "{\"suite\": \"host_side_by_side\", \"method\": \"memcpy\", \"model\": \"generic\", "
        "\"bytes\": %" PRId64 ", \"bytes_delivered\": %" PRId64
        ", \"trainers\": %d, \"rollouts\": %d, \"seconds\": %.6f, \"gbps\": %.3f, "
        "\"memcpy_gbps\": %.3f, \"ratio_to_memcpy\": 1.0, \"tag\": \"%s\"}\n",
        m.total_elements * 4, delivered, s.trainers, s.rollouts,
        static_cast<double>(delivered) / memcpy_gbps / 1e9, memcpy_gbps, memcpy_gbps,
        s.tag.c_str());
  }
  std::vector<float> full(s.rank == 0 ? static_cast<size_t>(m.largest_elements) : 0);
  Timing per_tensor = timeMethod(s, m, [&] { gatherBcastPerTensor(s, m, full); });
  if (s.rank == 0) printResult(s, m, "gather_bcast_per_tensor", per_tensor, memcpy_gbps, "");
  full = {};
  failures += per_tensor.mismatches;

  const int64_t cap = std::max(s.bucket_bytes / 4, m.largest_elements);
  const auto buckets = makeBuckets(m, cap);
  std::vector<float> bufs[2];
  if (s.rank == 0 || !s.trainer) {
    for (auto& b : bufs)
      b.assign(static_cast<size_t>(cap), 0.0f);
  }
  Timing bucketed = timeMethod(s, m, [&] { bucketedBcast(s, m, bufs, buckets); });
  if (s.rank == 0) {
    const std::string extra = ", \"bucket_bytes\": " + std::to_string(cap * 4) +
                              ", \"buckets\": " + std::to_string(buckets.size());
    printResult(s, m, "bucketed_bcast", bucketed, memcpy_gbps, extra);
  }
  failures += bucketed.mismatches;
  for (MPI_Comm* c : {&s.trainer_comm, &s.bcast_comm}) {
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Setup s;
  MPI_Comm_rank(MPI_COMM_WORLD, &s.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &s.world);
  int rc = parseFlags(argc, argv, &s);
  if (rc < 0) rc = run(s);
  MPI_Finalize();
  return rc;
}
