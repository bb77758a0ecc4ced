// Round trips, truncations, corruptions and hostile records for the Registration / Plan / RankPlan
// codecs (src/codec).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "codec/plan_codec.h"
#include "codec/registration_codec.h"
#include "common/wire.h"

// ---- allocation probe: the largest single operator-new request while armed ----------------------
namespace {
std::atomic<bool> g_probe_armed{false};
std::atomic<size_t> g_probe_largest{0};

void* probedNew(size_t n) {
  if (g_probe_armed.load(std::memory_order_relaxed)) {
    size_t cur = g_probe_largest.load(std::memory_order_relaxed);
    while (n > cur && !g_probe_largest.compare_exchange_weak(cur, n)) {
    }
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
}  // namespace

void* operator new(size_t n) {
  return probedNew(n);
}
void* operator new[](size_t n) {
  return probedNew(n);
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, size_t) noexcept {
  std::free(p);
}

namespace wsync {
namespace {

using codec_detail::frameRecord;
using codec_detail::kPlanRecord;
using codec_detail::kRankPlanRecord;
using codec_detail::kRegistrationRecord;

// ---- field-by-field comparison: "" when equal, else the first difference ------------------------

#define WSYNC_DIFF_FIELD(path, a, b)                                                           \
  do {                                                                                         \
    if (!((a) == (b))) {                                                                       \
      std::ostringstream os_;                                                                  \
      os_ << path << ": " << testing::PrintToString(a) << " != " << testing::PrintToString(b); \
      return os_.str();                                                                        \
    }                                                                                          \
  } while (0)

std::string at(const std::string& base, size_t i) {
  return base + "[" + std::to_string(i) + "]";
}

std::string diffDims(const std::string& p, const Dims& a, const Dims& b) {
  WSYNC_DIFF_FIELD(p + ".rank", int(a.rank), int(b.rank));
  for (int i = 0; i < a.rank; ++i)
    WSYNC_DIFF_FIELD(at(p, i), a[i], b[i]);
  return "";
}

std::string diffBox(const std::string& p, const Box& a, const Box& b) {
  std::string d = diffDims(p + ".offset", a.offset, b.offset);
  return d.empty() ? diffDims(p + ".extent", a.extent, b.extent) : d;
}

std::string diff(const Registration& a, const Registration& b) {
  WSYNC_DIFF_FIELD("role", int(a.role), int(b.role));
  WSYNC_DIFF_FIELD("rank", a.rank, b.rank);
  WSYNC_DIFF_FIELD("replica", a.replica, b.replica);
  WSYNC_DIFF_FIELD("tensors.size", a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    WSYNC_DIFF_FIELD(at("tensors", i) + ".name", a.tensors[i].name, b.tensors[i].name);
    std::string d = diffDims(at("tensors", i) + ".shape", a.tensors[i].shape, b.tensors[i].shape);
    if (!d.empty()) return d;
  }
  WSYNC_DIFF_FIELD("buffers.size", a.buffers.size(), b.buffers.size());
  for (size_t i = 0; i < a.buffers.size(); ++i) {
    const LocalBuffer& x = a.buffers[i];
    const LocalBuffer& y = b.buffers[i];
    const std::string p = at("buffers", i);
    WSYNC_DIFF_FIELD(p + ".name", x.name, y.name);
    WSYNC_DIFF_FIELD(p + ".dtype", int(x.dtype), int(y.dtype));
    WSYNC_DIFF_FIELD(p + ".memory", int(x.memory), int(y.memory));
    WSYNC_DIFF_FIELD(p + ".num_elements", x.num_elements, y.num_elements);
    WSYNC_DIFF_FIELD(p + ".pieces.size", x.pieces.size(), y.pieces.size());
    for (size_t j = 0; j < x.pieces.size(); ++j) {
      const std::string q = at(p + ".pieces", j);
      WSYNC_DIFF_FIELD(q + ".tensor", x.pieces[j].tensor, y.pieces[j].tensor);
      WSYNC_DIFF_FIELD(q + ".local_offset", x.pieces[j].local_offset, y.pieces[j].local_offset);
      std::string d = diffBox(q + ".box", x.pieces[j].box, y.pieces[j].box);
      if (d.empty()) {
        d = diffDims(q + ".local_strides", x.pieces[j].local_strides, y.pieces[j].local_strides);
      }
      if (!d.empty()) return d;
    }
  }
  return "";
}

std::string diffTensors(const std::vector<PlanTensor>& a, const std::vector<PlanTensor>& b) {
  WSYNC_DIFF_FIELD("tensors.size", a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    WSYNC_DIFF_FIELD(at("tensors", i) + ".name", a[i].name, b[i].name);
    std::string d = diffDims(at("tensors", i) + ".shape", a[i].shape, b[i].shape);
    if (!d.empty()) return d;
  }
  return "";
}

std::string diffSpan(const std::string& p, const BufferSpan& a, const BufferSpan& b) {
  WSYNC_DIFF_FIELD(p + ".rank", a.rank, b.rank);
  WSYNC_DIFF_FIELD(p + ".buffer", a.buffer, b.buffer);
  WSYNC_DIFF_FIELD(p + ".offset", a.offset, b.offset);
  return "";
}

std::string diffGroups(const std::vector<BroadcastGroup>& a, const std::vector<BroadcastGroup>& b) {
  WSYNC_DIFF_FIELD("groups.size", a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string p = at("groups", i);
    WSYNC_DIFF_FIELD(p + ".tensor", a[i].tensor, b[i].tensor);
    WSYNC_DIFF_FIELD(p + ".replica", a[i].replica, b[i].replica);
    WSYNC_DIFF_FIELD(p + ".num_elements", a[i].num_elements, b[i].num_elements);
    WSYNC_DIFF_FIELD(p + ".src_dtype", int(a[i].src_dtype), int(b[i].src_dtype));
    WSYNC_DIFF_FIELD(p + ".dst_dtype", int(a[i].dst_dtype), int(b[i].dst_dtype));
    std::string d = diffBox(p + ".box", a[i].box, b[i].box);
    if (d.empty()) d = diffSpan(p + ".src", a[i].src, b[i].src);
    if (!d.empty()) return d;
    WSYNC_DIFF_FIELD(p + ".dst.size", a[i].dst.size(), b[i].dst.size());
    for (size_t j = 0; j < a[i].dst.size(); ++j) {
      d = diffSpan(at(p + ".dst", j), a[i].dst[j], b[i].dst[j]);
      if (!d.empty()) return d;
    }
  }
  return "";
}

// Writes with their shapes tables: the regions must match, and so must the tables (the encoder
// writes regions expanded; the decoder shares equal shapes in order of first use, as the
// generators below and the planner do).
std::string diffWrites(const std::vector<WriteOp>& a, const std::vector<RegionShape>& a_shapes,
                       const std::vector<WriteOp>& b, const std::vector<RegionShape>& b_shapes) {
  WSYNC_DIFF_FIELD("writes.size", a.size(), b.size());
  WSYNC_DIFF_FIELD("shapes.size", a_shapes.size(), b_shapes.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const WriteOp& x = a[i];
    const WriteOp& y = b[i];
    const std::string p = at("writes", i);
    WSYNC_DIFF_FIELD(p + ".tensor", x.tensor, y.tensor);
    WSYNC_DIFF_FIELD(p + ".src_rank", x.src_rank, y.src_rank);
    WSYNC_DIFF_FIELD(p + ".src_buffer", x.src_buffer, y.src_buffer);
    WSYNC_DIFF_FIELD(p + ".dst_rank", x.dst_rank, y.dst_rank);
    WSYNC_DIFF_FIELD(p + ".dst_buffer", x.dst_buffer, y.dst_buffer);
    WSYNC_DIFF_FIELD(p + ".src_dtype", int(x.src_dtype), int(y.src_dtype));
    WSYNC_DIFF_FIELD(p + ".dst_dtype", int(x.dst_dtype), int(y.dst_dtype));
    WSYNC_DIFF_FIELD(p + ".run", x.run, y.run);
    const Region xr = regionOf(x, a_shapes);
    const Region yr = regionOf(y, b_shapes);
    WSYNC_DIFF_FIELD(p + ".region.src_offset", xr.src_offset, yr.src_offset);
    WSYNC_DIFF_FIELD(p + ".region.dst_offset", xr.dst_offset, yr.dst_offset);
    for (size_t k = 0; k < 3; ++k) {
      WSYNC_DIFF_FIELD(at(p + ".region.count", k), xr.count[k], yr.count[k]);
    }
    for (size_t k = 0; k < 2; ++k) {
      WSYNC_DIFF_FIELD(at(p + ".region.src_stride", k), xr.src_stride[k], yr.src_stride[k]);
      WSYNC_DIFF_FIELD(at(p + ".region.dst_stride", k), xr.dst_stride[k], yr.dst_stride[k]);
    }
  }
  return "";
}

std::string diffStats(const PlanStats& a, const PlanStats& b) {
  WSYNC_DIFF_FIELD("stats.trainer_ranks", a.trainer_ranks, b.trainer_ranks);
  WSYNC_DIFF_FIELD("stats.rollout_ranks", a.rollout_ranks, b.rollout_ranks);
  WSYNC_DIFF_FIELD("stats.replicas", a.replicas, b.replicas);
  WSYNC_DIFF_FIELD("stats.bytes_total", a.bytes_total, b.bytes_total);
  WSYNC_DIFF_FIELD("stats.broadcast_bytes", a.broadcast_bytes, b.broadcast_bytes);
  WSYNC_DIFF_FIELD("stats.write_bytes", a.write_bytes, b.write_bytes);
  WSYNC_DIFF_FIELD("stats.bytes_per_sender", a.bytes_per_sender, b.bytes_per_sender);
  return "";
}

std::string diff(const Plan& a, const Plan& b) {
  std::string d = diffTensors(a.tensors, b.tensors);
  if (d.empty()) d = diffGroups(a.groups, b.groups);
  if (d.empty()) d = diffWrites(a.writes, a.shapes, b.writes, b.shapes);
  if (d.empty()) d = diffStats(a.stats, b.stats);
  return d;
}

std::string diff(const RankPlan& a, const RankPlan& b) {
  WSYNC_DIFF_FIELD("role", int(a.role), int(b.role));
  WSYNC_DIFF_FIELD("rank", a.rank, b.rank);
  WSYNC_DIFF_FIELD("peers", a.peers, b.peers);
  std::string d = diffTensors(a.tensors, b.tensors);
  if (d.empty()) d = diffGroups(a.groups, b.groups);
  if (d.empty()) d = diffWrites(a.writes, a.shapes, b.writes, b.shapes);
  if (d.empty()) d = diffStats(a.stats, b.stats);
  return d;
}

// ---- random structs ----------------------------------------------------------------------------

class Gen {
 public:
  explicit Gen(uint64_t seed) : rng_(seed) {}

  int64_t uniform(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  bool coin(double p = 0.5) { return std::bernoulli_distribution(p)(rng_); }
  // Values over the whole range a varint field meets: small, medium, near the int64 limit.
  int64_t magnitude() {
    switch (uniform(0, 3)) {
      case 0:
        return uniform(0, 127);
      case 1:
        return uniform(128, 1 << 20);
      case 2:
        return uniform(1 << 20, int64_t{1} << 40);
      default:
        return uniform(int64_t{1} << 40, INT64_MAX);
    }
  }
  std::string name() {
    const size_t len = coin(0.02) ? codec_detail::kMaxNameBytes : size_t(uniform(0, 40));
    std::string s(len, ' ');
    for (char& c : s)
      c = static_cast<char>(uniform(0, 255));  // any bytes, '\0' included
    return s;
  }
  Dims dims(int rank, int64_t lo, int64_t hi) {
    Dims d = Dims::zeros(rank);
    for (int i = 0; i < rank; ++i)
      d[i] = uniform(lo, hi);
    return d;
  }
  DType dtype() { return static_cast<DType>(uniform(0, kNumDTypes - 1)); }
  Box boxIn(const Dims& shape) {
    Box b{Dims::zeros(shape.rank), Dims::zeros(shape.rank)};
    for (int i = 0; i < shape.rank; ++i) {
      b.offset[i] = uniform(0, shape[i]);
      b.extent[i] = uniform(0, shape[i] - b.offset[i]);
    }
    return b;
  }

  Registration registration() {
    Registration r;
    r.role = coin() ? Role::kTrainer : Role::kRollout;
    r.rank = static_cast<int32_t>(coin() ? uniform(0, 8) : uniform(0, INT32_MAX));
    r.replica = static_cast<int32_t>(uniform(-1, 1000));
    const int num_tensors = static_cast<int>(uniform(0, 6));
    for (int t = 0; t < num_tensors; ++t) {
      r.tensors.push_back({name(), dims(static_cast<int>(uniform(0, kMaxRank)), 0, 5000)});
    }
    const int num_buffers = static_cast<int>(uniform(0, 5));
    for (int i = 0; i < num_buffers; ++i) {
      LocalBuffer b;
      b.name = name();
      b.dtype = dtype();
      b.memory = coin() ? MemoryKind::kHost : MemoryKind::kDevice;
      b.num_elements = magnitude();
      const int num_pieces = num_tensors == 0 ? 0 : static_cast<int>(uniform(0, 4));
      for (int j = 0; j < num_pieces; ++j) {
        Piece p;
        p.tensor = static_cast<int32_t>(uniform(0, num_tensors - 1));
        const Dims& shape = r.tensors[static_cast<size_t>(p.tensor)].shape;
        p.box = boxIn(shape);
        p.local_offset = coin(0.1) ? -magnitude() : magnitude();
        p.local_strides = dims(shape.rank, -(int64_t{1} << 40), int64_t{1} << 40);
        b.pieces.push_back(p);
      }
      r.buffers.push_back(std::move(b));
    }
    return r;
  }

  std::vector<PlanTensor> tensors(int n) {
    std::vector<PlanTensor> t;
    for (int i = 0; i < n; ++i) {
      t.push_back({name(), dims(static_cast<int>(uniform(0, kMaxRank)), 0, 64)});
    }
    return t;
  }
  BufferSpan span(int32_t rank) {
    return {rank, static_cast<int32_t>(uniform(0, 300)), magnitude()};
  }
  std::vector<BroadcastGroup> groups(const std::vector<PlanTensor>& tensors, int n) {
    std::vector<BroadcastGroup> gs;
    for (int i = 0; i < n && !tensors.empty(); ++i) {
      BroadcastGroup g;
      g.tensor = static_cast<int32_t>(uniform(0, int64_t(tensors.size()) - 1));
      g.box = boxIn(tensors[static_cast<size_t>(g.tensor)].shape);
      g.num_elements = g.box.volume();
      g.replica = static_cast<int32_t>(uniform(-1, 64));
      g.src_dtype = dtype();
      g.dst_dtype = dtype();
      g.src = span(static_cast<int32_t>(uniform(0, 255)));
      int32_t rank = static_cast<int32_t>(uniform(0, 10));
      const int num_dst = static_cast<int>(uniform(0, 8));
      for (int j = 0; j < num_dst; ++j) {
        g.dst.push_back(span(rank));
        rank += static_cast<int32_t>(uniform(1, 1000));
      }
      gs.push_back(std::move(g));
    }
    return gs;
  }
  // Writes that look like a planner's (runs sharing ranks and buffers) mixed with arbitrary ones.
  // Strided shapes go to `shapes`, shared in order of first use.
  std::vector<WriteOp> writes(size_t num_tensors, size_t n, std::vector<RegionShape>& shapes) {
    RegionShapeIndex shape_index(shapes);
    std::vector<WriteOp> ws;
    ws.reserve(n);
    WriteOp op;
    for (size_t i = 0; i < n && num_tensors > 0; ++i) {
      if (i == 0 || coin(0.3))
        op.tensor = static_cast<int32_t>(uniform(0, int64_t(num_tensors) - 1));
      if (i == 0 || coin(0.1)) op.src_rank = static_cast<int32_t>(uniform(0, 1023));
      if (i == 0 || coin(0.2)) op.src_buffer = static_cast<int32_t>(uniform(0, 2000));
      if (i == 0 || coin(0.2)) op.dst_rank = static_cast<int32_t>(uniform(0, 511));
      if (i == 0 || coin(0.3)) op.dst_buffer = static_cast<int32_t>(uniform(0, 2000));
      if (i == 0 || coin(0.1)) {
        op.src_dtype = dtype();
        op.dst_dtype = dtype();
      }
      Region r;
      r.src_offset = coin(0.05) ? magnitude() : uniform(0, int64_t{1} << 32);
      r.dst_offset = coin(0.05) ? magnitude() : uniform(0, int64_t{1} << 32);
      r.count[0] = uniform(0, 1 << 16);
      const int64_t shape = uniform(0, 3);
      if (shape >= 1) {
        r.count[1] = uniform(0, 4096);
        r.src_stride[0] = uniform(-(1 << 20), 1 << 20);
        r.dst_stride[0] = uniform(0, 1 << 20);
      }
      if (shape == 3 || (shape == 2 && coin())) {
        r.count[2] = uniform(0, 64);
        r.src_stride[1] = uniform(0, int64_t{1} << 30);
        r.dst_stride[1] = uniform(-(int64_t{1} << 30), int64_t{1} << 30);
      }
      shape_index.setRegion(op, r);
      ws.push_back(op);
    }
    return ws;
  }
  PlanStats stats() {
    PlanStats s;
    s.trainer_ranks = static_cast<int32_t>(uniform(0, 256));
    s.rollout_ranks = static_cast<int32_t>(uniform(0, 256));
    s.replicas = static_cast<int32_t>(uniform(0, 64));
    s.bytes_total = magnitude();
    s.broadcast_bytes = magnitude();
    s.write_bytes = magnitude();
    for (int i = 0; i < s.trainer_ranks % 9; ++i)
      s.bytes_per_sender.push_back(magnitude());
    return s;
  }
  Plan plan(size_t num_writes) {
    Plan p;
    p.tensors = tensors(static_cast<int>(uniform(0, 8)));
    p.groups = groups(p.tensors, static_cast<int>(uniform(0, 6)));
    p.writes = writes(p.tensors.size(), num_writes, p.shapes);
    p.stats = stats();
    return p;
  }
  RankPlan rankPlan(size_t num_writes) {
    RankPlan p;
    p.role = coin() ? Role::kTrainer : Role::kRollout;
    p.rank = static_cast<int32_t>(uniform(0, 4095));
    p.tensors = tensors(static_cast<int>(uniform(0, 8)));
    p.groups = groups(p.tensors, static_cast<int>(uniform(0, 6)));
    p.writes = writes(p.tensors.size(), num_writes, p.shapes);
    for (int i = 0, n = static_cast<int>(uniform(0, 10)); i < n; ++i) {
      p.peers.push_back(static_cast<int32_t>(uniform(0, INT32_MAX)));
    }
    p.stats = stats();
    return p;
  }

 private:
  std::mt19937_64 rng_;
};

// Small fixed records for the exhaustive truncation and corruption tests.
Registration smallRegistration() {
  Registration r;
  r.role = Role::kRollout;
  r.rank = 3;
  r.replica = 1;
  r.declareTensor("model.layers.0.self_attn.q_proj.weight", {64, 32});
  r.declareTensor("model.norm.weight", {32});
  r.declareTensor("scalar", Dims{});
  LocalBuffer qkv{"qkv", DType::kBFloat16, MemoryKind::kDevice, 64 * 32 + 32, {}};
  qkv.pieces.push_back({0, {{0, 0}, {64, 32}}, 0, {32, 1}});
  qkv.pieces.push_back({1, {{0}, {32}}, 64 * 32, {1}});
  LocalBuffer s{"s", DType::kFloat32, MemoryKind::kHost, 1, {{2, {}, 0, {}}}};
  r.buffers = {qkv, s};
  return r;
}

Plan smallPlan() {
  Plan p;
  p.tensors = {{"w", {8, 16}}, {"b", {16}}};
  BroadcastGroup g;
  g.tensor = 1;
  g.box = Box::whole({16});
  g.replica = 0;
  g.num_elements = 16;
  g.src_dtype = DType::kFloat32;
  g.dst_dtype = DType::kBFloat16;
  g.src = {0, 1, 0};
  g.dst = {{0, 0, 0}, {1, 0, 0}};
  p.groups = {g};
  WriteOp a;
  a.tensor = 0;
  a.src_rank = 0;
  a.src_buffer = 0;
  a.dst_rank = 1;
  a.dst_buffer = 2;
  setRegion(a, {0, 128, {8, 4, 1}, {16, 0}, {8, 0}}, p.shapes);
  WriteOp b = a;
  b.src_rank = 1;
  setRegion(b, {300, 136, {8, 4, 2}, {16, 64}, {8, 32}}, p.shapes);
  p.writes = {a, b};
  p.stats = {2, 2, 1, 1024, 64, 960, {512, 512}};
  return p;
}

RankPlan smallRankPlan() {
  const Plan p = smallPlan();
  RankPlan r;
  r.role = Role::kTrainer;
  r.rank = 0;
  r.tensors = p.tensors;
  r.groups = p.groups;
  r.writes = p.writes;
  r.shapes = p.shapes;
  r.peers = {1};
  r.stats = p.stats;
  return r;
}

// ---- round trips -----------------------------------------------------------------------------

TEST(Codec, RegistrationRoundTrips) {
  Gen gen(1);
  for (int i = 0; i < 300; ++i) {
    const Registration reg = i == 0   ? Registration()
                             : i == 1 ? smallRegistration()
                                      : gen.registration();
    const std::vector<uint8_t> bytes = encodeRegistration(reg);
    auto back = decodeRegistration(bytes.data(), bytes.size());
    ASSERT_TRUE(back.isOk()) << "case " << i << ": " << back.status().toString();
    ASSERT_EQ(diff(reg, *back), "") << "case " << i;
    ASSERT_EQ(encodeRegistration(*back), bytes) << "case " << i;  // deterministic
  }
}

TEST(Codec, RegistrationCoversEveryDTypeMemoryKindRoleAndRank) {
  Registration reg;
  reg.role = Role::kRollout;
  reg.declareTensor("scalar", Dims{});
  reg.declareTensor("six", {2, 3, 4, 5, 6, 7});
  for (int t = 0; t < kNumDTypes; ++t) {
    for (MemoryKind m : {MemoryKind::kHost, MemoryKind::kDevice}) {
      LocalBuffer b{std::string("buf") + std::to_string(t), static_cast<DType>(t), m, 5041, {}};
      b.pieces.push_back({0, Box::whole(Dims{}), 5040, Dims{}});
      b.pieces.push_back(
          {1, {{1, 1, 1, 1, 1, 1}, {1, 2, 3, 4, 5, 6}}, 0, rowMajorStrides({2, 3, 4, 5, 6, 7})});
      reg.buffers.push_back(b);
    }
  }
  const std::vector<uint8_t> bytes = encodeRegistration(reg);
  auto back = decodeRegistration(bytes.data(), bytes.size());
  ASSERT_TRUE(back.isOk()) << back.status().toString();
  EXPECT_EQ(diff(reg, *back), "");
  EXPECT_EQ(back->declareTensor("six", {2, 3, 4, 5, 6, 7}),
            1);  // the name index works after decode
}

TEST(Codec, PlanAndRankPlanRoundTrip) {
  Gen gen(2);
  for (int i = 0; i < 200; ++i) {
    const Plan plan = i == 0   ? Plan()
                      : i == 1 ? smallPlan()
                               : gen.plan(static_cast<size_t>(gen.uniform(0, 200)));
    const std::vector<uint8_t> bytes = encodePlan(plan);
    auto back = decodePlan(bytes.data(), bytes.size());
    ASSERT_TRUE(back.isOk()) << "case " << i << ": " << back.status().toString();
    ASSERT_EQ(diff(plan, *back), "") << "case " << i;
    ASSERT_EQ(encodePlan(*back), bytes) << "case " << i;

    const RankPlan rp = i == 0   ? RankPlan()
                        : i == 1 ? smallRankPlan()
                                 : gen.rankPlan(static_cast<size_t>(gen.uniform(0, 200)));
    const std::vector<uint8_t> rbytes = encodeRankPlan(rp);
    auto rback = decodeRankPlan(rbytes.data(), rbytes.size());
    ASSERT_TRUE(rback.isOk()) << "case " << i << ": " << rback.status().toString();
    ASSERT_EQ(diff(rp, *rback), "") << "case " << i;
    ASSERT_EQ(encodeRankPlan(*rback), rbytes) << "case " << i;
  }
}

TEST(Codec, PlannerLikeWritesAreCompact) {
  // A trainer's run of 1-D writes into consecutive rollout offsets: ranks, buffers and dtypes
  // repeat, so each op costs its flags, offsets and count only.
  RankPlan rp;
  rp.tensors = {{"w", {1 << 20}}};
  for (int i = 0; i < 1000; ++i) {
    WriteOp op;
    op.tensor = 0;
    op.src_rank = 0;
    op.src_buffer = 0;
    op.dst_rank = 3;
    op.dst_buffer = 1;
    op.src_offset = i * 1000;
    op.dst_offset = i * 1000 + 7;
    op.run = 1000;
    rp.writes.push_back(op);
  }
  const std::vector<uint8_t> bytes = encodeRankPlan(rp);
  EXPECT_LT(bytes.size(), 1000u * 10);
  auto back = decodeRankPlan(bytes.data(), bytes.size());
  ASSERT_TRUE(back.isOk()) << back.status().toString();
  EXPECT_EQ(diff(rp, *back), "");
}

// ---- truncation and corruption ----------------------------------------------------------------

template <typename Decode>
void expectEveryTruncationFails(const std::vector<uint8_t>& bytes,
                                const codec_detail::RecordKind& kind, Decode decode) {
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    // The record cut short: the header's length check catches it.
    std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(cut));
    auto r = decode(prefix.data(), prefix.size());
    ASSERT_FALSE(r.isOk()) << "cut at " << cut;
    EXPECT_EQ(r.status().code(), WSYNC_ERR_PROTOCOL) << "cut at " << cut;
    // The payload cut short under a valid header: the field decoder must catch it.
    if (cut >= codec_detail::kHeaderSize) {
      const std::vector<uint8_t> payload(bytes.begin() + codec_detail::kHeaderSize,
                                         bytes.begin() + static_cast<ptrdiff_t>(cut));
      const std::vector<uint8_t> framed = frameRecord(kind, kind.version, payload);
      auto f = decode(framed.data(), framed.size());
      ASSERT_FALSE(f.isOk()) << "payload cut at " << cut;
      EXPECT_EQ(f.status().code(), WSYNC_ERR_PROTOCOL);
      EXPECT_NE(f.status().message().find("truncated"), std::string::npos) << f.status().message();
    }
  }
}

TEST(Codec, EveryTruncationFailsCleanly) {
  expectEveryTruncationFails(encodeRegistration(smallRegistration()), kRegistrationRecord,
                             decodeRegistration);
  expectEveryTruncationFails(encodePlan(smallPlan()), kPlanRecord, decodePlan);
  expectEveryTruncationFails(encodeRankPlan(smallRankPlan()), kRankPlanRecord, decodeRankPlan);
}

TEST(Codec, TruncationMessageNamesTheField) {
  const std::vector<uint8_t> bytes = encodePlan(smallPlan());
  // Cut inside the second write: its path must appear.
  const std::vector<uint8_t> payload(bytes.begin() + codec_detail::kHeaderSize, bytes.end() - 10);
  const std::vector<uint8_t> framed = frameRecord(kPlanRecord, kPlanFormatVersion, payload);
  auto r = decodePlan(framed.data(), framed.size());
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.status().message().find("decodePlan: "), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("at byte"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("stats."), std::string::npos) << r.status().message();
}

template <typename Decode>
void expectSingleByteCorruptionsFail(std::vector<uint8_t> bytes, Decode decode, uint64_t seed,
                                     int trials) {
  std::mt19937_64 rng(seed);
  for (int t = 0; t < trials; ++t) {
    const size_t pos = rng() % bytes.size();
    const auto flip = static_cast<uint8_t>(1 + rng() % 255);
    bytes[pos] ^= flip;
    auto r = decode(bytes.data(), bytes.size());
    ASSERT_FALSE(r.isOk()) << "byte " << pos << " ^= " << int(flip) << " decoded";
    ASSERT_EQ(r.status().code(), WSYNC_ERR_PROTOCOL);
    bytes[pos] ^= flip;
  }
  ASSERT_TRUE(decode(bytes.data(), bytes.size()).isOk());
}

TEST(Codec, SingleByteCorruptionsAreAllDetected) {
  Gen gen(3);
  expectSingleByteCorruptionsFail(encodeRegistration(gen.registration()), decodeRegistration, 11,
                                  3000);
  expectSingleByteCorruptionsFail(encodePlan(gen.plan(50)), decodePlan, 12, 3000);
  expectSingleByteCorruptionsFail(encodeRankPlan(gen.rankPlan(50)), decodeRankPlan, 13, 3000);
  // Every position and every header byte of the small plan, with every bit pattern for the header.
  const std::vector<uint8_t> small = encodePlan(smallPlan());
  for (size_t pos = 0; pos < small.size(); ++pos) {
    for (int flip = 1; flip < (pos < codec_detail::kHeaderSize ? 256 : 2); ++flip) {
      std::vector<uint8_t> c = small;
      c[pos] ^= static_cast<uint8_t>(pos < codec_detail::kHeaderSize ? flip : 0x40);
      auto r = decodePlan(c.data(), c.size());
      ASSERT_FALSE(r.isOk()) << "byte " << pos << " ^= " << flip;
      ASSERT_EQ(r.status().code(), WSYNC_ERR_PROTOCOL);
    }
  }
}

// Corrupted payloads under a freshly computed (valid) checksum: what a hostile sender can make.
// Each must fail with WSYNC_ERR_PROTOCOL or decode to something that encodes again; never crash.
template <typename Decode, typename Encode>
void fuzzPayload(const std::vector<uint8_t>& bytes, const codec_detail::RecordKind& kind,
                 Decode decode, Encode encode, uint64_t seed, int trials, int* rejected) {
  std::mt19937_64 rng(seed);
  const std::vector<uint8_t> payload(bytes.begin() + codec_detail::kHeaderSize, bytes.end());
  for (int t = 0; t < trials; ++t) {
    std::vector<uint8_t> p = payload;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits && !p.empty(); ++e) {
      const size_t pos = rng() % p.size();
      switch (rng() % 4) {
        case 0:
          p[pos] ^= static_cast<uint8_t>(1 + rng() % 255);
          break;
        case 1:
          p[pos] = 0xff;
          break;  // long varints, high nibbles
        case 2:
          p[pos] = 0x7f;
          break;  // big one-byte values
        default:
          p.erase(p.begin() + static_cast<ptrdiff_t>(pos));
          break;
      }
    }
    const std::vector<uint8_t> framed = frameRecord(kind, kind.version, p);
    auto r = decode(framed.data(), framed.size());
    if (r.isOk()) {
      (void)encode(*r);  // a decoded record is valid enough to encode again
    } else {
      ASSERT_EQ(r.status().code(), WSYNC_ERR_PROTOCOL);
      ASSERT_NE(r.status().message().find(kind.decoder), std::string::npos);
      ++*rejected;
    }
  }
}

TEST(Codec, HostilePayloadsFailCleanly) {
  Gen gen(4);
  int rejected = 0;
  fuzzPayload(encodeRegistration(smallRegistration()), kRegistrationRecord, decodeRegistration,
              encodeRegistration, 21, 3000, &rejected);
  fuzzPayload(encodePlan(smallPlan()), kPlanRecord, decodePlan, encodePlan, 22, 3000, &rejected);
  fuzzPayload(encodeRankPlan(gen.rankPlan(20)), kRankPlanRecord, decodeRankPlan, encodeRankPlan, 23,
              3000, &rejected);
  EXPECT_GT(rejected, 6000);  // most edits break something the decoder checks
  // Pure noise payloads.
  std::mt19937_64 rng(24);
  for (int t = 0; t < 2000; ++t) {
    std::vector<uint8_t> p(rng() % 64);
    for (uint8_t& b : p)
      b = static_cast<uint8_t>(rng());
    for (const auto* kind : {&kRegistrationRecord, &kPlanRecord, &kRankPlanRecord}) {
      const std::vector<uint8_t> f = frameRecord(*kind, kind->version, p);
      const Status s = kind == &kRegistrationRecord
                           ? decodeRegistration(f.data(), f.size()).status()
                       : kind == &kPlanRecord ? decodePlan(f.data(), f.size()).status()
                                              : decodeRankPlan(f.data(), f.size()).status();
      if (!s.isOk()) {
        ASSERT_EQ(s.code(), WSYNC_ERR_PROTOCOL);
      }
    }
  }
}

// ---- hostile headers and fields, each named in the message ----------------------------------

std::string messageOf(const Status& s) {
  return s.toString();
}

TEST(Codec, HugeCountFailsWithoutAllocating) {
  for (const auto* kind : {&kRegistrationRecord, &kPlanRecord, &kRankPlanRecord}) {
    ByteWriter w;
    if (kind != &kPlanRecord) {
      w.u8(0);    // role
      w.varu(0);  // rank
    }
    if (kind == &kRegistrationRecord) w.vari(-1);  // replica
    w.varu(uint64_t{1} << 60);                     // tensors.size
    for (int i = 0; i < 64; ++i)
      w.u8(0);
    const std::vector<uint8_t> f = frameRecord(*kind, kind->version, w.take());
    g_probe_largest = 0;
    g_probe_armed = true;
    const Status s = kind == &kRegistrationRecord ? decodeRegistration(f.data(), f.size()).status()
                     : kind == &kPlanRecord       ? decodePlan(f.data(), f.size()).status()
                                                  : decodeRankPlan(f.data(), f.size()).status();
    g_probe_armed = false;
    EXPECT_EQ(s.code(), WSYNC_ERR_PROTOCOL);
    EXPECT_NE(
        s.message().find("tensors.size: count 1152921504606846976 cannot fit in the 64 bytes"),
        std::string::npos)
        << s.message();
    EXPECT_LT(g_probe_largest.load(), size_t{4096}) << kind->record;
  }
  // A huge string length, and a huge write count after valid tensors.
  ByteWriter w;
  w.varu(1);
  w.varu(uint64_t{1} << 40);  // tensors[0].name length
  w.u8(0);
  auto f = frameRecord(kPlanRecord, kPlanFormatVersion, w.take());
  g_probe_largest = 0;
  g_probe_armed = true;
  auto r = decodePlan(f.data(), f.size());
  g_probe_armed = false;
  EXPECT_LT(g_probe_largest.load(), size_t{4096});
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.status().message().find("tensors[0].name: length 1099511627776 over the limit 4096"),
            std::string::npos)
      << r.status().message();
}

TEST(Codec, WrongMagicAndUnknownVersionAreNamed) {
  const std::vector<uint8_t> reg = encodeRegistration(smallRegistration());
  auto r = decodePlan(reg.data(), reg.size());
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), WSYNC_ERR_PROTOCOL);
  EXPECT_NE(messageOf(r.status()).find("bad magic 'WSRG'"), std::string::npos)
      << messageOf(r.status());
  EXPECT_NE(messageOf(r.status()).find("'WSPL'"), std::string::npos);

  std::vector<uint8_t> binary = reg;
  binary[0] = 0x01;
  auto b = decodeRegistration(binary.data(), binary.size());
  EXPECT_NE(messageOf(b.status()).find("bad magic 01 53 52 47"), std::string::npos)
      << messageOf(b.status());

  const std::vector<uint8_t> payload(reg.begin() + codec_detail::kHeaderSize, reg.end());
  const std::vector<uint8_t> v7 = frameRecord(kRegistrationRecord, 7, payload);
  auto u = decodeRegistration(v7.data(), v7.size());
  ASSERT_FALSE(u.isOk());
  EXPECT_EQ(u.status().code(), WSYNC_ERR_PROTOCOL);
  EXPECT_NE(u.status().message().find("format version 7"), std::string::npos)
      << u.status().message();
  EXPECT_NE(u.status().message().find("supports version 1"), std::string::npos);

  auto tiny = decodeRankPlan(reg.data(), 5);
  EXPECT_NE(tiny.status().message().find("shorter than the 22-byte record header"),
            std::string::npos)
      << tiny.status().message();
  EXPECT_FALSE(decodeRankPlan(nullptr, 0).isOk());

  std::vector<uint8_t> longer = reg;
  longer.push_back(0);
  auto l = decodeRegistration(longer.data(), longer.size());
  EXPECT_NE(l.status().message().find("payload bytes but"), std::string::npos)
      << l.status().message();

  std::vector<uint8_t> flipped = reg;
  flipped.back() ^= 1;
  auto c = decodeRegistration(flipped.data(), flipped.size());
  EXPECT_NE(c.status().message().find("checksum mismatch"), std::string::npos)
      << c.status().message();
}

// Encodes a struct that is invalid on purpose and expects the decoder to name the field.
template <typename T, typename Encode, typename Decode>
void expectRejected(const T& value, Encode encode, Decode decode, const std::string& expected) {
  const std::vector<uint8_t> bytes = encode(value);
  auto r = decode(bytes.data(), bytes.size());
  ASSERT_FALSE(r.isOk()) << "expected: " << expected;
  EXPECT_EQ(r.status().code(), WSYNC_ERR_PROTOCOL);
  EXPECT_NE(r.status().message().find(expected), std::string::npos) << r.status().message();
}

TEST(Codec, InvalidValuesAreRejectedByName) {
  Registration reg = smallRegistration();
  reg.buffers[1].pieces[0].tensor = 3;  // only 3 tensors
  expectRejected(reg, encodeRegistration, decodeRegistration,
                 "buffers[1].pieces[0].tensor: index 3 outside tensors (3 entries)");
  reg = smallRegistration();
  reg.buffers[0].pieces[1].box.extent[0] = -1;
  expectRejected(reg, encodeRegistration, decodeRegistration,
                 "buffers[0].pieces[1].box: value exceeds int64");
  reg = smallRegistration();
  reg.buffers[0].dtype = static_cast<DType>(kNumDTypes);
  expectRejected(reg, encodeRegistration, decodeRegistration,
                 "buffers[0].dtype: dtype value 11 is not a wsync dtype");
  reg = smallRegistration();
  reg.buffers[0].memory = static_cast<MemoryKind>(2);
  expectRejected(reg, encodeRegistration, decodeRegistration,
                 "buffers[0].memory: memory kind 2 is not host or device");
  reg = smallRegistration();
  reg.role = static_cast<Role>(2);
  expectRejected(reg, encodeRegistration, decodeRegistration, "role: role value 2");
  reg = smallRegistration();
  reg.replica = -2;
  expectRejected(reg, encodeRegistration, decodeRegistration, "replica: value -2 outside [-1");
  reg = smallRegistration();
  reg.rank = -1;
  expectRejected(reg, encodeRegistration, decodeRegistration, "rank: value");
  reg = smallRegistration();
  reg.tensors[1].shape[0] = -5;
  expectRejected(reg, encodeRegistration, decodeRegistration,
                 "tensors[1].shape: value exceeds int64");
  reg = smallRegistration();
  reg.buffers[0].pieces[1].box.offset[0] = INT64_MAX;
  expectRejected(reg, encodeRegistration, decodeRegistration,
                 "buffers[0].pieces[1].box: offset + extent overflows int64 in dim 0");

  Plan plan = smallPlan();
  plan.groups[0].dst = {{2, 0, 0}, {1, 0, 0}};
  expectRejected(plan, encodePlan, decodePlan, "groups[0].dst[1].rank: rank 1 after rank 2");
  plan = smallPlan();
  plan.groups[0].dst = {{1, 0, 0}, {1, 0, 0}};
  expectRejected(plan, encodePlan, decodePlan, "groups[0].dst[1].rank: rank 1 after rank 1");
  plan = smallPlan();
  plan.groups[0].tensor = 2;
  expectRejected(plan, encodePlan, decodePlan, "groups[0].tensor: index 2 outside tensors");
  plan = smallPlan();
  plan.groups[0].box = Box::whole({17});
  expectRejected(plan, encodePlan, decodePlan,
                 "groups[0].box: box [0:17] does not fit tensor 'b' of shape [16]");
  plan = smallPlan();
  plan.groups[0].box = Box::whole({4, 4});
  expectRejected(plan, encodePlan, decodePlan, "groups[0].box: box [0:4, 0:4] does not fit");
  plan = smallPlan();
  plan.groups[0].num_elements = 17;
  expectRejected(plan, encodePlan, decodePlan,
                 "groups[0].num_elements: 17 elements for box [0:16] of tensor 'b'");
  plan = smallPlan();
  plan.writes[1].tensor = 5;
  expectRejected(plan, encodePlan, decodePlan,
                 "writes[1].tensor: index 5 outside tensors (2 entries)");
  plan = smallPlan();
  plan.writes[1].dst_dtype = static_cast<DType>(15);
  expectRejected(plan, encodePlan, decodePlan, "writes[1].dtypes: dtype value 15");
  plan = smallPlan();
  plan.writes[0].dst_buffer = -1;
  expectRejected(plan, encodePlan, decodePlan, "writes[0].dst_buffer: value 18446744073709551615");
  plan = smallPlan();
  plan.shapes[static_cast<size_t>(plan.writes[1].shapeIndex())].count[1] = INT64_MAX;
  expectRejected(plan, encodePlan, decodePlan, "writes[1].region.count: element count overflows");
  plan = smallPlan();
  plan.stats.bytes_per_sender[1] = -1;
  expectRejected(plan, encodePlan, decodePlan, "stats.bytes_per_sender[1].value");

  RankPlan rp = smallRankPlan();
  rp.peers = {4, -3};
  expectRejected(rp, encodeRankPlan, decodeRankPlan, "peers[1].rank");
  rp = smallRankPlan();
  rp.role = static_cast<Role>(9);
  expectRejected(rp, encodeRankPlan, decodeRankPlan, "decodeRankPlan: role: role value 9");

  // Hand-made payloads the encoder never produces.
  ByteWriter w;  // Registration with a rank-7 shape
  w.u8(0);
  w.varu(0);
  w.vari(-1);
  w.varu(1);
  w.str("w");
  w.u8(7);
  for (int i = 0; i < 7; ++i)
    w.varu(1);
  w.varu(0);
  auto f = frameRecord(kRegistrationRecord, kRegistrationFormatVersion, w.take());
  auto r = decodeRegistration(f.data(), f.size());
  EXPECT_NE(r.status().message().find("tensors[0].shape: rank 7 over kMaxRank 6"),
            std::string::npos)
      << r.status().message();

  ByteWriter p;  // Plan whose first write claims "same tensor as the previous write"
  p.varu(1);
  p.str("w");
  p.u8(1);
  p.varu(8);
  p.varu(0);     // groups
  p.varu(1);     // writes
  p.u8(1 << 2);  // kSameTensor
  for (int i = 0; i < 12; ++i)
    p.u8(0);
  auto pf = frameRecord(kPlanRecord, kPlanFormatVersion, p.take());
  auto pr = decodePlan(pf.data(), pf.size());
  EXPECT_NE(pr.status().message().find("writes[0].flags: the first write cannot refer"),
            std::string::npos)
      << pr.status().message();

  std::vector<uint8_t> trailing(encodeRankPlan(smallRankPlan()));
  std::vector<uint8_t> tp(trailing.begin() + codec_detail::kHeaderSize, trailing.end());
  tp.push_back(0);
  tp.push_back(0);
  auto tf = frameRecord(kRankPlanRecord, kRankPlanFormatVersion, tp);
  auto tr = decodeRankPlan(tf.data(), tf.size());
  EXPECT_NE(tr.status().message().find("2 unexpected bytes after the RankPlan"), std::string::npos)
      << tr.status().message();

  std::vector<uint8_t> overlong = {0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
                                   0x80, 0x80, 0x80, 0x80, 0x01};
  auto of = frameRecord(kPlanRecord, kPlanFormatVersion, overlong);
  auto orr = decodePlan(of.data(), of.size());
  EXPECT_NE(orr.status().message().find("tensors.size: malformed varint"), std::string::npos)
      << orr.status().message();
}

// ---- a Kimi-K2-scale rank plan ---------------------------------------------------------------
// Speed is the plan benchmark's business (wsync-plan-bench); this checks a million writes
// round-trip and stay compact on the wire.

TEST(Codec, LargeRankPlanRoundTrips) {
  Gen gen(5);
  RankPlan rp = gen.rankPlan(0);
  rp.tensors = gen.tensors(1000);
  rp.groups = gen.groups(rp.tensors, 100);
  rp.writes = gen.writes(rp.tensors.size(), 1'000'000, rp.shapes);
  const std::vector<uint8_t> bytes = encodeRankPlan(rp);
  auto back = decodeRankPlan(bytes.data(), bytes.size());
  ASSERT_TRUE(back.isOk()) << back.status().toString();
  ASSERT_EQ(diff(rp, *back), "");
  const double per_write =
      static_cast<double>(bytes.size()) / static_cast<double>(rp.writes.size());
  EXPECT_LT(per_write, 64.0) << "varint-coded writes should take tens of bytes each";
}

}  // namespace
}  // namespace wsync
