// The in-process block-scaled job of tests/unit/block_scaled_job_test.cc: a coordinator through
// the C++ API and trainer and rollout ranks on threads (WSYNC_BOOTSTRAP_EXPLICIT, real UCX writes)
// registering pieces of two weights, w [300, 256] and experts e [3, 64, 96], whose trainer row
// shards cut 128x128 blocks; each rollout rank checks every version it reads.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/coordinator.h"
#include "support/block_quant_testing.h"
#include "support/explicit_job.h"
#include "wsync/wsync.h"

namespace block_scaled_job {

namespace bq = wsync::block_quant_testing;
inline constexpr char kSecret[] = "block-scaled-job-secret";

struct Coordinator {
  std::unique_ptr<wsync::Coordinator> coordinator;
  std::string address;
};

// `delta`: delta versions (which imply checksums).
inline Coordinator startCoordinator(int trainers, int rollouts, bool checksums,
                                    bool delta = false) {
  wsync::CoordinatorOptions opt;
  opt.job.checksums = checksums || delta;
  opt.job.delta = delta;
  opt.num_trainers = trainers;
  opt.num_rollouts = rollouts;
  opt.control.secret = kSecret;
  opt.timeout = std::chrono::milliseconds(20000);
  // Every replica takes every version (late when its reader holds the slot), so that each rank
  // checks every version however slowly it runs (sanitizers, loaded machines).
  opt.max_staleness = 0;
  auto c = wsync::Coordinator::start(std::move(opt));
  EXPECT_TRUE(c.isOk()) << c.status().toString();
  Coordinator job;
  job.address = "127.0.0.1:" + std::to_string((*c)->port());
  job.coordinator = std::move(c).value();
  return job;
}

// One registered buffer: pieces of one tensor (a box each), its dtype.
struct Piece {
  std::string tensor;
  std::vector<int64_t> shape, offset, extent;
};
struct Buffer {
  std::string name;
  wsync_dtype_t dtype;
  std::vector<Piece> pieces;
  int64_t elements() const {
    int64_t n = 0;
    for (const Piece& p : pieces) {
      int64_t v = 1;
      for (int64_t e : p.extent)
        v *= e;
      n += v;
    }
    return n;
  }
};

inline size_t elementBytes(const Buffer& b) {
  return b.dtype == WSYNC_DTYPE_FLOAT32 ? 4 : b.dtype == WSYNC_DTYPE_BFLOAT16 ? 2 : 1;
}

inline int registerBuffer(wsync_context_t ctx, const Buffer& b, void* data) {
  std::vector<wsync_piece_t> pieces;
  int64_t local = 0;
  for (const Piece& p : b.pieces) {
    wsync_piece_t w = WSYNC_PIECE_INITIALIZER;
    w.tensor = p.tensor.c_str();
    w.ndim = static_cast<int>(p.shape.size());
    w.global_shape = p.shape.data();
    w.box_offset = p.offset.data();
    w.box_extent = p.extent.data();
    w.local_offset = local;
    int64_t v = 1;
    for (int64_t e : p.extent)
      v *= e;
    local += v;
    pieces.push_back(w);
  }
  int index = -1;
  EXPECT_EQ(
      wsync_register_buffer(ctx, b.name.c_str(), b.dtype, WSYNC_MEMORY_HOST, data, b.elements(),
                            static_cast<int>(pieces.size()), pieces.data(), &index),
      WSYNC_SUCCESS)
      << wsync_last_error(ctx);
  return index;
}

// The elements of `box` of a row-major tensor of `shape` (element size `size`), packed.
inline std::vector<uint8_t> boxBytes(const std::vector<uint8_t>& all,
                                     const std::vector<int64_t>& shape,
                                     const std::vector<int64_t>& offset,
                                     const std::vector<int64_t>& extent, size_t size) {
  wsync::Box box;
  wsync::Dims s;
  box.offset.rank = box.extent.rank = s.rank = static_cast<uint8_t>(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    box.offset[static_cast<int>(d)] = offset[d];
    box.extent[static_cast<int>(d)] = extent[d];
    s[static_cast<int>(d)] = shape[d];
  }
  std::vector<uint8_t> out;
  bq::forEachIndex(box, [&](const wsync::Dims& i) {
    const auto at = static_cast<size_t>(bq::linearIndex(i, s)) * size;
    out.insert(out.end(), all.begin() + static_cast<std::ptrdiff_t>(at),
               all.begin() + static_cast<std::ptrdiff_t>(at + size));
  });
  return out;
}

inline wsync::Dims dimsOf(const std::vector<int64_t>& v) {
  wsync::Dims d = wsync::Dims::zeros(static_cast<int>(v.size()));
  for (size_t i = 0; i < v.size(); ++i)
    d[static_cast<int>(i)] = v[i];
  return d;
}

// The job: trainers and rollout ranks (replica, scalings, buffers) on threads.
struct RolloutRank {
  int replica = 0;
  // > 0: a one-rank replica that joins the running job once trainer 0 published this version
  // (WSYNC_BOOTSTRAP_EXPLICIT with replica_size 1); joiners come after the fixed ranks.
  uint64_t join_after = 0;
  std::vector<std::pair<std::string, wsync_block_scaling_t>> scalings;
  std::vector<Buffer> buffers;
};

inline const std::vector<int64_t> kW = {300, 256};   // rows cut by the trainers at 100 and 210
inline const std::vector<int64_t> kE = {3, 64, 96};  // experts; rows cut at 40

inline wsync_block_scaling_t scaling(wsync_scale_format_t f, int64_t rows, int64_t cols,
                                     const char* scales) {
  wsync_block_scaling_t s = WSYNC_BLOCK_SCALING_INITIALIZER;
  s.format = f;
  s.block_rows = rows;
  s.block_cols = cols;
  s.scale_tensor = scales;
  return s;
}

inline wsync::BlockScaling internal(const wsync_block_scaling_t& s) {
  wsync::BlockScaling b;
  b.format = static_cast<wsync::ScaleFormat>(s.format);
  b.block_rows = s.block_rows;
  b.block_cols = s.block_cols;
  b.scale_tensor = s.scale_tensor;
  return b;
}

// Trainer t's bfloat16 buffers: rows [cut t, cut t+1) of w, and of every expert of e (t < 2).
inline std::vector<Buffer> trainerBuffers(int t) {
  const int64_t w_cuts[] = {0, 100, 210, 300};
  std::vector<Buffer> out;
  out.push_back(
      {"w", WSYNC_DTYPE_BFLOAT16, {{"w", kW, {w_cuts[t], 0}, {w_cuts[t + 1] - w_cuts[t], kW[1]}}}});
  if (t < 2) {
    const int64_t e_cuts[] = {0, 40, 64};
    out.push_back({"e",
                   WSYNC_DTYPE_BFLOAT16,
                   {{"e", kE, {0, e_cuts[t], 0}, {kE[0], e_cuts[t + 1] - e_cuts[t], kE[2]}}}});
  }
  return out;
}

struct Outcome {
  std::vector<wsync_status_t> commit;  // per rollout rank
  std::vector<std::string> errors;
  std::vector<double> commit_ms;  // per rollout rank: how long its wsync_commit took
  int failures = 0;
  int patched_versions = 0;  // versions trainer 0 sent with fewer bytes on the wire than dense
};

// Runs the job for `versions` versions; each rollout rank checks every version with `check`.
// `data`: each buffer's bytes in `version`, under a lease.
using Check =
    std::function<void(int rank, uint64_t version, const std::vector<const uint8_t*>& data)>;
// The trainers' buffers (bfloat16 or float32 pieces; `weights` in the same dtype), per trainer.
struct JobSpec {
  std::vector<std::vector<Buffer>> trainers;
  std::vector<RolloutRank> rollouts;
  int versions = 1;
  bool checksums = false;
  bool delta = false;
  int publish_gap_ms = 0;  // between a trainer's versions
  std::function<bq::HostTensor(const std::string&, uint64_t)> weights;
};

inline Outcome runJob(const JobSpec& spec, const Check& check) {
  const auto& rollouts = spec.rollouts;
  const auto& weights = spec.weights;
  const int versions = spec.versions;
  const int kTrainers = static_cast<int>(spec.trainers.size());
  const int all = static_cast<int>(rollouts.size());
  const int n = static_cast<int>(std::count_if(
      rollouts.begin(), rollouts.end(), [](const RolloutRank& r) { return r.join_after == 0; }));
  Coordinator job = startCoordinator(kTrainers, n, spec.checksums, spec.delta);
  std::atomic<int> patched_versions{0};
  std::atomic<uint64_t> published{0};
  Outcome out;
  out.commit.assign(static_cast<size_t>(all), WSYNC_SUCCESS);
  out.errors.resize(static_cast<size_t>(all));
  out.commit_ms.resize(static_cast<size_t>(all));
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kTrainers; ++t) {
    threads.emplace_back([&, t] {
      wsync_config_t cfg =
          wsync_test::explicitConfig(job.address, kSecret, WSYNC_ROLE_TRAINER, t, -1, kTrainers, n);
      wsync_context_t ctx = nullptr;
      if (wsync_context_create(&cfg, &ctx) != WSYNC_SUCCESS) return void(++failures);
      const std::vector<Buffer>& buffers = spec.trainers[static_cast<size_t>(t)];
      std::vector<std::vector<uint8_t>> data(buffers.size());
      for (size_t b = 0; b < buffers.size(); ++b) {
        data[b].resize(static_cast<size_t>(buffers[b].elements()) * elementBytes(buffers[b]));
        registerBuffer(ctx, buffers[b], data[b].data());
      }
      if (wsync_commit(ctx) == WSYNC_SUCCESS) {
        for (uint64_t v = 1; v <= static_cast<uint64_t>(versions); ++v) {
          for (size_t b = 0; b < buffers.size(); ++b) {
            if (buffers[b].pieces.empty()) continue;
            const Piece& p = buffers[b].pieces[0];
            const std::vector<uint8_t> bytes = boxBytes(
                weights(p.tensor, v).bytes, p.shape, p.offset, p.extent, elementBytes(buffers[b]));
            std::memcpy(data[b].data(), bytes.data(), bytes.size());  // the registered memory
          }
          wsync_request_t req = nullptr;
          ASSERT_EQ(wsync_publish(ctx, v, &req), WSYNC_SUCCESS) << wsync_last_error(ctx);
          EXPECT_EQ(wsync_request_wait(req, -1), WSYNC_SUCCESS) << wsync_request_error(req);
          wsync_request_free(req);
          wsync_version_stats_t stats = WSYNC_VERSION_STATS_INITIALIZER;
          if (t == 0 && wsync_version_stats(ctx, &stats) == WSYNC_SUCCESS &&
              stats.wire_bytes < stats.full_bytes)
            ++patched_versions;
          if (t == 0) published = v;
          if (spec.publish_gap_ms > 0)
            std::this_thread::sleep_for(std::chrono::milliseconds(spec.publish_gap_ms));
        }
      }
      wsync_context_destroy(ctx);
    });
  }
  for (int r = 0; r < all; ++r) {
    threads.emplace_back([&, r] {
      const RolloutRank& me = rollouts[static_cast<size_t>(r)];
      wsync_config_t cfg = wsync_test::explicitConfig(job.address, kSecret, WSYNC_ROLE_ROLLOUT, r,
                                                      me.replica, kTrainers, n);
      if (me.join_after > 0) {
        while (published.load() < me.join_after)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        cfg.rank = -1;
        cfg.num_rollouts = 0;
        cfg.replica_size = 1;
        cfg.replica_rank = 0;
      }
      wsync_context_t ctx = nullptr;
      if (wsync_context_create(&cfg, &ctx) != WSYNC_SUCCESS) return void(++failures);
      for (const auto& [tensor, s] : me.scalings)
        EXPECT_EQ(wsync_set_block_scaling(ctx, tensor.c_str(), &s), WSYNC_SUCCESS)
            << wsync_last_error(ctx);
      std::vector<int> indices;
      for (const Buffer& b : me.buffers)
        indices.push_back(registerBuffer(ctx, b, nullptr));
      const auto commit_started = std::chrono::steady_clock::now();
      out.commit[static_cast<size_t>(r)] = wsync_commit(ctx);
      out.commit_ms[static_cast<size_t>(r)] = std::chrono::duration<double, std::milli>(
                                                  std::chrono::steady_clock::now() - commit_started)
                                                  .count();
      out.errors[static_cast<size_t>(r)] = wsync_last_error(ctx);
      if (out.commit[static_cast<size_t>(r)] == WSYNC_SUCCESS) {
        uint64_t seen = 0;
        while (seen < static_cast<uint64_t>(versions)) {
          uint64_t newest = 0;
          ASSERT_EQ(wsync_wait_version(ctx, seen, -1, &newest), WSYNC_SUCCESS)
              << wsync_last_error(ctx);
          wsync_lease_t lease = nullptr;  // the newest, held while it is checked
          ASSERT_EQ(wsync_acquire(ctx, WSYNC_VERSION_NEWEST, &lease), WSYNC_SUCCESS)
              << wsync_last_error(ctx);
          uint64_t v = 0;
          ASSERT_EQ(wsync_lease_version(lease, &v), WSYNC_SUCCESS);
          std::vector<const uint8_t*> data;
          for (int index : indices) {
            void* p = nullptr;
            EXPECT_EQ(wsync_lease_buffer(lease, index, &p), WSYNC_SUCCESS);
            data.push_back(static_cast<const uint8_t*>(p));
          }
          check(r, v, data);
          wsync_lease_release(lease);
          seen = v;
        }
      }
      wsync_context_destroy(ctx);
    });
  }
  for (auto& th : threads)
    th.join();
  out.failures = failures.load();
  out.patched_versions = patched_versions.load();
  return out;
}

inline bq::HostTensor weightsOf(const std::string& tensor, uint64_t version) {
  std::mt19937_64 rng(version * 7919 + tensor.size());
  // A few infinities and NaNs from version 3 on: the engines' rules for non-finite values.
  return bq::randomTensor(rng, wsync::DType::kBFloat16, dimsOf(tensor == "w" ? kW : kE),
                          version >= 3 ? 30 : 0);
}

// Weights as an RL step changes them: version 1 as weightsOf, each later version the one before
// with about `per_mille` of its elements replaced by weightsOf(tensor, version)'s (non-finite
// values included from version 3 on), so delta versions have something to patch.
inline bq::HostTensor slowlyChangingWeights(const std::string& tensor, uint64_t version,
                                            int per_mille = 2) {
  bq::HostTensor t = weightsOf(tensor, 1);
  const size_t elements = t.bytes.size() / 2;  // bfloat16
  for (uint64_t v = 2; v <= version; ++v) {
    const bq::HostTensor next = weightsOf(tensor, v);
    std::mt19937_64 rng(v * 131 + tensor.size());
    std::uniform_int_distribution<size_t> pick(0, elements - 1);
    for (size_t i = 0; i < elements * static_cast<size_t>(per_mille) / 1000; ++i) {
      const size_t e = pick(rng);
      std::memcpy(t.bytes.data() + 2 * e, next.bytes.data() + 2 * e, 2);
    }
  }
  return t;
}

}  // namespace block_scaled_job
