#include "support/reference_executor.h"

#include <Eigen/Core>
#include <cstring>
#include <sstream>
#include <type_traits>

#include "layout/box.h"

namespace wsync {
namespace {

constexpr uint8_t kTrainerPoison = 0xcd;
constexpr uint8_t kRolloutFill = 0xab;

uint64_t mix64(uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t hashName(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (const char c : s) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

bool supported(DType t) {
  return t != DType::kFloat8E4M3 && t != DType::kFloat8E5M2;
}

bool isReal(DType t) {
  return t == DType::kFloat32 || t == DType::kBFloat16 || t == DType::kFloat16;
}

float toFloat(const uint8_t* p, DType t) {
  switch (t) {
    case DType::kFloat32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::kBFloat16: {
      Eigen::bfloat16 b;
      std::memcpy(&b, p, 2);
      return static_cast<float>(b);
    }
    case DType::kFloat16: {
      Eigen::half h;
      std::memcpy(&h, p, 2);
      return static_cast<float>(h);
    }
    default:
      return 0.0f;
  }
}

void fromFloat(float f, DType t, uint8_t* p) {
  switch (t) {
    case DType::kFloat32:
      std::memcpy(p, &f, 4);
      break;
    case DType::kBFloat16: {
      const Eigen::bfloat16 b(f);
      std::memcpy(p, &b, 2);
      break;
    }
    case DType::kFloat16: {
      const Eigen::half h(f);
      std::memcpy(p, &h, 2);
      break;
    }
    default:
      break;
  }
}

// Converts one element from `from` at s into `to` at d.
void convertElement(const uint8_t* s, DType from, uint8_t* d, DType to) {
  if (from == to) {
    std::memcpy(d, s, dtypeSize(from));
  } else {
    fromFloat(toFloat(s, from), to, d);
  }
}

uint64_t loadBits(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  std::memcpy(&v, p, n);  // little-endian host
  return v;
}

std::string hex(uint64_t v, size_t bytes) {
  std::ostringstream os;
  os << "0x" << std::hex;
  os.width(static_cast<std::streamsize>(2 * bytes));
  os.fill('0');
  os << v;
  return os.str();
}

// Calls f(global flat index, local element offset) for every element of `piece` of a tensor of
// shape `shape`, row-major over the box.
template <typename F>
void forEachElement(const Dims& shape, const Piece& piece, F&& f) {
  if (piece.box.empty()) return;
  const int r = piece.box.rank();
  const Dims global_strides = rowMajorStrides(shape);
  int64_t index[kMaxRank] = {};
  for (;;) {
    int64_t global = 0;
    int64_t local = piece.local_offset;
    for (int d = 0; d < r; ++d) {
      global += (piece.box.offset[d] + index[d]) * global_strides[d];
      local += index[d] * piece.local_strides[d];
    }
    f(global, local);
    int d = r - 1;
    while (d >= 0 && ++index[d] == piece.box.extent[d]) {
      index[d] = 0;
      --d;
    }
    if (d < 0) return;
  }
}

// True when [lo, hi] of the elements a region side touches lies in [0, n).
bool regionInside(int64_t offset, const int64_t count[3], const int64_t stride[2], int64_t n) {
  if (count[0] < 1 || count[1] < 1 || count[2] < 1) return false;
  __int128 lo = offset;
  __int128 hi = static_cast<__int128>(offset) + count[0] - 1;
  for (int k = 0; k < 2; ++k) {
    const __int128 span = static_cast<__int128>(count[k + 1] - 1) * stride[k];
    if (span < 0) {
      lo += span;
    } else {
      hi += span;
    }
  }
  return lo >= 0 && hi < n;
}

std::string describe(const WriteOp& op, const Region& r) {
  return "write op (tensor " + std::to_string(op.tensor) + ", trainer " +
         std::to_string(op.src_rank) + " buffer " + std::to_string(op.src_buffer) + " @" +
         std::to_string(r.src_offset) + " -> rollout " + std::to_string(op.dst_rank) + " buffer " +
         std::to_string(op.dst_buffer) + " @" + std::to_string(r.dst_offset) + ", counts [" +
         std::to_string(r.count[0]) + ", " + std::to_string(r.count[1]) + ", " +
         std::to_string(r.count[2]) + "])";
}

}  // namespace

uint64_t referenceValueBits(std::string_view tensor, int64_t index, DType dtype) {
  const uint64_t h = mix64(hashName(tensor) ^ mix64(static_cast<uint64_t>(index)));
  if (isReal(dtype)) {
    const uint32_t sign = static_cast<uint32_t>(h >> 63) << 31;
    const uint32_t exponent = (120u + static_cast<uint32_t>((h >> 40) % 16)) << 23;
    const uint32_t mantissa = static_cast<uint32_t>(h) & 0x7fffffu;
    const uint32_t bits = sign | exponent | mantissa;
    float f;
    std::memcpy(&f, &bits, 4);
    uint8_t out[8] = {};
    fromFloat(f, dtype, out);
    return loadBits(out, dtypeSize(dtype));
  }
  switch (dtype) {
    case DType::kBool:
      return h & 1;
    case DType::kFloat8E4M3:
    case DType::kFloat8E5M2:
      return 0;
    default: {
      const size_t n = dtypeSize(dtype);
      return n == 8 ? h : (h & ((uint64_t{1} << (8 * n)) - 1));
    }
  }
}

Result<ReferenceExecutor> ReferenceExecutor::create(const std::vector<Registration>& trainers,
                                                    const std::vector<Registration>& rollouts) {
  ReferenceExecutor ex(trainers, rollouts);
  for (const Registration& reg : trainers) {
    for (const LocalBuffer& buf : reg.buffers) {
      if (!supported(buf.dtype)) {
        return invalidArgument("reference executor: trainer " + std::to_string(reg.rank) +
                               " buffer '" + buf.name + "' is " + dtypeName(buf.dtype) +
                               " (float8 is not supported)");
      }
      for (const Piece& piece : buf.pieces) {
        const std::string& name = reg.tensors.at(static_cast<size_t>(piece.tensor)).name;
        auto [it, inserted] = ex.trainer_dtype_.emplace(name, buf.dtype);
        if (!inserted && it->second != buf.dtype) {
          return invalidArgument("reference executor: tensor '" + name +
                                 "' is held in two dtypes by trainers");
        }
      }
    }
  }
  for (const Registration& reg : rollouts) {
    for (const LocalBuffer& buf : reg.buffers) {
      if (!supported(buf.dtype)) {
        return invalidArgument("reference executor: rollout " + std::to_string(reg.rank) +
                               " buffer '" + buf.name + "' is " + dtypeName(buf.dtype) +
                               " (float8 is not supported)");
      }
    }
  }
  ex.trainer_bytes_.resize(trainers.size());
  for (size_t t = 0; t < trainers.size(); ++t) {
    const Registration& reg = trainers[t];
    auto& bufs = ex.trainer_bytes_[t];
    bufs.resize(reg.buffers.size());
    for (size_t b = 0; b < reg.buffers.size(); ++b) {
      const LocalBuffer& buf = reg.buffers[b];
      const size_t size = dtypeSize(buf.dtype);
      bufs[b].assign(static_cast<size_t>(buf.num_elements) * size, kTrainerPoison);
      for (const Piece& piece : buf.pieces) {
        const TensorDecl& decl = reg.tensors.at(static_cast<size_t>(piece.tensor));
        forEachElement(decl.shape, piece, [&](int64_t global, int64_t local) {
          const uint64_t bits = referenceValueBits(decl.name, global, buf.dtype);
          std::memcpy(bufs[b].data() + static_cast<size_t>(local) * size, &bits, size);
        });
      }
    }
  }
  ex.rollout_bytes_.resize(rollouts.size());
  ex.write_count_.resize(rollouts.size());
  for (size_t j = 0; j < rollouts.size(); ++j) {
    const Registration& reg = rollouts[j];
    ex.rollout_bytes_[j].resize(reg.buffers.size());
    ex.write_count_[j].resize(reg.buffers.size());
    for (size_t b = 0; b < reg.buffers.size(); ++b) {
      const LocalBuffer& buf = reg.buffers[b];
      ex.rollout_bytes_[j][b].assign(static_cast<size_t>(buf.num_elements) * dtypeSize(buf.dtype),
                                     kRolloutFill);
      ex.write_count_[j][b].assign(static_cast<size_t>(buf.num_elements), 0);
    }
  }
  return ex;
}

Status ReferenceExecutor::execute(const Plan& plan) {
  const auto& trainers = *trainers_;
  const auto& rollouts = *rollouts_;
  auto trainerBuffer = [&](int32_t rank, int32_t buffer) -> const LocalBuffer* {
    if (rank < 0 || static_cast<size_t>(rank) >= trainers.size()) return nullptr;
    const auto& bufs = trainers[static_cast<size_t>(rank)].buffers;
    if (buffer < 0 || static_cast<size_t>(buffer) >= bufs.size()) return nullptr;
    return &bufs[static_cast<size_t>(buffer)];
  };
  auto rolloutBuffer = [&](int32_t rank, int32_t buffer) -> const LocalBuffer* {
    if (rank < 0 || static_cast<size_t>(rank) >= rollouts.size()) return nullptr;
    const auto& bufs = rollouts[static_cast<size_t>(rank)].buffers;
    if (buffer < 0 || static_cast<size_t>(buffer) >= bufs.size()) return nullptr;
    return &bufs[static_cast<size_t>(buffer)];
  };
  auto bump = [](uint8_t& c) { c = c == 255 ? 255 : static_cast<uint8_t>(c + 1); };

  for (size_t gi = 0; gi < plan.groups.size(); ++gi) {
    const BroadcastGroup& g = plan.groups[gi];
    const std::string what = "group " + std::to_string(gi);
    const LocalBuffer* src = trainerBuffer(g.src.rank, g.src.buffer);
    if (src == nullptr || src->dtype != g.src_dtype || g.num_elements < 0 || g.src.offset < 0 ||
        g.src.offset + g.num_elements > src->num_elements) {
      return invalidArgument(what + ": bad source trainer " + std::to_string(g.src.rank) +
                             " buffer " + std::to_string(g.src.buffer));
    }
    const uint8_t* s =
        trainer_bytes_[static_cast<size_t>(g.src.rank)][static_cast<size_t>(g.src.buffer)].data();
    const size_t src_size = dtypeSize(g.src_dtype);
    const size_t dst_size = dtypeSize(g.dst_dtype);
    for (const BufferSpan& d : g.dst) {
      const LocalBuffer* dst = rolloutBuffer(d.rank, d.buffer);
      if (dst == nullptr || dst->dtype != g.dst_dtype || d.offset < 0 ||
          d.offset + g.num_elements > dst->num_elements) {
        return invalidArgument(what + ": bad destination rollout " + std::to_string(d.rank) +
                               " buffer " + std::to_string(d.buffer));
      }
      uint8_t* out =
          rollout_bytes_[static_cast<size_t>(d.rank)][static_cast<size_t>(d.buffer)].data();
      auto& count = write_count_[static_cast<size_t>(d.rank)][static_cast<size_t>(d.buffer)];
      for (int64_t i = 0; i < g.num_elements; ++i) {
        convertElement(s + static_cast<size_t>(g.src.offset + i) * src_size, g.src_dtype,
                       out + static_cast<size_t>(d.offset + i) * dst_size, g.dst_dtype);
        bump(count[static_cast<size_t>(d.offset + i)]);
      }
    }
  }

  for (const WriteOp& op : plan.writes) {
    const LocalBuffer* src = trainerBuffer(op.src_rank, op.src_buffer);
    const LocalBuffer* dst = rolloutBuffer(op.dst_rank, op.dst_buffer);
    if (!op.oneD() && op.shapeIndex() >= static_cast<int64_t>(plan.shapes.size())) {
      return invalidArgument("bad write op (tensor " + std::to_string(op.tensor) + "): shape " +
                             std::to_string(op.shapeIndex()) + " of " +
                             std::to_string(plan.shapes.size()));
    }
    const Region r = plan.region(op);
    if (src == nullptr || dst == nullptr || src->dtype != op.src_dtype ||
        dst->dtype != op.dst_dtype ||
        !regionInside(r.src_offset, r.count, r.src_stride, src->num_elements) ||
        !regionInside(r.dst_offset, r.count, r.dst_stride, dst->num_elements)) {
      return invalidArgument("bad " + describe(op, r));
    }
    const uint8_t* s =
        trainer_bytes_[static_cast<size_t>(op.src_rank)][static_cast<size_t>(op.src_buffer)].data();
    uint8_t* out =
        rollout_bytes_[static_cast<size_t>(op.dst_rank)][static_cast<size_t>(op.dst_buffer)].data();
    auto& count =
        write_count_[static_cast<size_t>(op.dst_rank)][static_cast<size_t>(op.dst_buffer)];
    const size_t src_size = dtypeSize(op.src_dtype);
    const size_t dst_size = dtypeSize(op.dst_dtype);
    for (int64_t k2 = 0; k2 < r.count[2]; ++k2) {
      for (int64_t k1 = 0; k1 < r.count[1]; ++k1) {
        const int64_t so = r.src_offset + k1 * r.src_stride[0] + k2 * r.src_stride[1];
        const int64_t dof = r.dst_offset + k1 * r.dst_stride[0] + k2 * r.dst_stride[1];
        for (int64_t k0 = 0; k0 < r.count[0]; ++k0) {
          convertElement(s + static_cast<size_t>(so + k0) * src_size, op.src_dtype,
                         out + static_cast<size_t>(dof + k0) * dst_size, op.dst_dtype);
          bump(count[static_cast<size_t>(dof + k0)]);
        }
      }
    }
  }
  return Status::ok();
}

Status ReferenceExecutor::verify() const {
  const auto& rollouts = *rollouts_;
  for (size_t j = 0; j < rollouts.size(); ++j) {
    const Registration& reg = rollouts[j];
    for (size_t b = 0; b < reg.buffers.size(); ++b) {
      const LocalBuffer& buf = reg.buffers[b];
      const std::vector<uint8_t>& bytes = rollout_bytes_[j][b];
      const std::vector<uint8_t>& count = write_count_[j][b];
      const size_t size = dtypeSize(buf.dtype);
      std::vector<uint8_t> wanted(static_cast<size_t>(buf.num_elements), 0);
      for (const Piece& piece : buf.pieces) {
        const TensorDecl& decl = reg.tensors.at(static_cast<size_t>(piece.tensor));
        auto it = trainer_dtype_.find(decl.name);
        if (piece.box.empty()) continue;
        if (it == trainer_dtype_.end()) {
          return mismatch("reference executor: no trainer holds tensor '" + decl.name + "'");
        }
        const DType from = it->second;
        Status status;
        forEachElement(decl.shape, piece, [&](int64_t global, int64_t local) {
          if (!status.isOk()) return;
          const size_t at = static_cast<size_t>(local);
          wanted[at] = 1;
          const uint64_t src_bits = referenceValueBits(decl.name, global, from);
          uint8_t want[8] = {};
          convertElement(reinterpret_cast<const uint8_t*>(&src_bits), from, want, buf.dtype);
          const uint64_t want_bits = loadBits(want, size);
          const uint64_t got_bits = loadBits(bytes.data() + at * size, size);
          if (count[at] != 1 || got_bits != want_bits) {
            status = mismatch("rollout " + std::to_string(j) + " buffer '" + buf.name +
                              "' element " + std::to_string(local) + " (tensor '" + decl.name +
                              "' global index " + std::to_string(global) + "): got " +
                              hex(got_bits, size) + ", want " + hex(want_bits, size) +
                              ", written " + std::to_string(count[at]) + " time(s)");
          }
        });
        WSYNC_RETURN_IF_ERROR(status);
      }
      for (size_t e = 0; e < count.size(); ++e) {
        if (count[e] != 0 && wanted[e] == 0) {
          return mismatch("rollout " + std::to_string(j) + " buffer '" + buf.name + "' element " +
                          std::to_string(e) + " is in no piece but was written " +
                          std::to_string(count[e]) + " time(s)");
        }
      }
    }
  }
  return Status::ok();
}

namespace {

class PlanComparer {
 public:
  template <typename T>
  bool same(const std::string& field, const T& a, const T& b) {
    if (a == b) return true;
    if (diff_.empty()) diff_ = field + ": " + show(a) + " vs " + show(b);
    return false;
  }
  const std::string& diff() const { return diff_; }

 private:
  template <typename T>
  static std::string show(const T& v) {
    if constexpr (std::is_same_v<T, Dims>) {
      return v.toString();
    } else if constexpr (std::is_same_v<T, Box>) {
      return v.toString();
    } else if constexpr (std::is_same_v<T, DType>) {
      return dtypeName(v);
    } else if constexpr (std::is_same_v<T, std::string>) {
      return "'" + v + "'";
    } else {
      return std::to_string(v);
    }
  }
  std::string diff_;
};

void compareSpan(PlanComparer& c, const std::string& f, const BufferSpan& a, const BufferSpan& b) {
  c.same(f + ".rank", a.rank, b.rank);
  c.same(f + ".buffer", a.buffer, b.buffer);
  c.same(f + ".offset", a.offset, b.offset);
}

}  // namespace

Status comparePlans(const Plan& a, const Plan& b) {
  PlanComparer c;
  if (c.same("tensors.size", a.tensors.size(), b.tensors.size())) {
    for (size_t i = 0; i < a.tensors.size(); ++i) {
      const std::string f = "tensors[" + std::to_string(i) + "]";
      c.same(f + ".name", a.tensors[i].name, b.tensors[i].name);
      c.same(f + ".shape", a.tensors[i].shape, b.tensors[i].shape);
    }
  }
  if (c.same("groups.size", a.groups.size(), b.groups.size())) {
    for (size_t i = 0; i < a.groups.size() && c.diff().empty(); ++i) {
      const BroadcastGroup& x = a.groups[i];
      const BroadcastGroup& y = b.groups[i];
      const std::string f = "groups[" + std::to_string(i) + "]";
      c.same(f + ".tensor", x.tensor, y.tensor);
      c.same(f + ".box", x.box, y.box);
      c.same(f + ".replica", x.replica, y.replica);
      c.same(f + ".num_elements", x.num_elements, y.num_elements);
      c.same(f + ".src_dtype", x.src_dtype, y.src_dtype);
      c.same(f + ".dst_dtype", x.dst_dtype, y.dst_dtype);
      compareSpan(c, f + ".src", x.src, y.src);
      if (c.same(f + ".dst.size", x.dst.size(), y.dst.size())) {
        for (size_t k = 0; k < x.dst.size(); ++k) {
          compareSpan(c, f + ".dst[" + std::to_string(k) + "]", x.dst[k], y.dst[k]);
        }
      }
    }
  }
  if (c.same("writes.size", a.writes.size(), b.writes.size())) {
    for (size_t i = 0; i < a.writes.size() && c.diff().empty(); ++i) {
      const WriteOp& x = a.writes[i];
      const WriteOp& y = b.writes[i];
      const std::string f = "writes[" + std::to_string(i) + "]";
      c.same(f + ".tensor", x.tensor, y.tensor);
      c.same(f + ".src_rank", x.src_rank, y.src_rank);
      c.same(f + ".src_buffer", x.src_buffer, y.src_buffer);
      c.same(f + ".dst_rank", x.dst_rank, y.dst_rank);
      c.same(f + ".dst_buffer", x.dst_buffer, y.dst_buffer);
      c.same(f + ".src_dtype", x.src_dtype, y.src_dtype);
      c.same(f + ".dst_dtype", x.dst_dtype, y.dst_dtype);
      const auto inside = [](const Plan& plan, const WriteOp& w) {
        return w.oneD() || w.shapeIndex() < static_cast<int64_t>(plan.shapes.size());
      };
      if (!inside(a, x) || !inside(b, y)) {
        c.same(f + " shape inside the first plan's table", inside(a, x), true);
        c.same(f + " shape inside the second plan's table", inside(b, y), true);
        continue;
      }
      const Region p = a.region(x);
      const Region q = b.region(y);
      c.same(f + ".region.src_offset", p.src_offset, q.src_offset);
      c.same(f + ".region.dst_offset", p.dst_offset, q.dst_offset);
      for (int k = 0; k < 3; ++k) {
        c.same(f + ".region.count[" + std::to_string(k) + "]", p.count[k], q.count[k]);
      }
      for (int k = 0; k < 2; ++k) {
        c.same(f + ".region.src_stride[" + std::to_string(k) + "]", p.src_stride[k],
               q.src_stride[k]);
        c.same(f + ".region.dst_stride[" + std::to_string(k) + "]", p.dst_stride[k],
               q.dst_stride[k]);
      }
    }
  }
  if (c.same("shapes.size", a.shapes.size(), b.shapes.size())) {
    for (size_t i = 0; i < a.shapes.size() && c.diff().empty(); ++i) {
      const RegionShape& x = a.shapes[i];
      const RegionShape& y = b.shapes[i];
      const std::string f = "shapes[" + std::to_string(i) + "]";
      for (int k = 0; k < 3; ++k) {
        c.same(f + ".count[" + std::to_string(k) + "]", x.count[k], y.count[k]);
      }
      for (int k = 0; k < 2; ++k) {
        const std::string n = "[" + std::to_string(k) + "]";
        c.same(f + ".src_stride" + n, x.src_stride[k], y.src_stride[k]);
        c.same(f + ".dst_stride" + n, x.dst_stride[k], y.dst_stride[k]);
      }
    }
  }
  const PlanStats& s = a.stats;
  const PlanStats& t = b.stats;
  c.same("stats.trainer_ranks", s.trainer_ranks, t.trainer_ranks);
  c.same("stats.rollout_ranks", s.rollout_ranks, t.rollout_ranks);
  c.same("stats.replicas", s.replicas, t.replicas);
  c.same("stats.bytes_total", s.bytes_total, t.bytes_total);
  c.same("stats.broadcast_bytes", s.broadcast_bytes, t.broadcast_bytes);
  c.same("stats.write_bytes", s.write_bytes, t.write_bytes);
  if (c.same("stats.bytes_per_sender.size", s.bytes_per_sender.size(), t.bytes_per_sender.size())) {
    for (size_t i = 0; i < s.bytes_per_sender.size(); ++i) {
      c.same("stats.bytes_per_sender[" + std::to_string(i) + "]", s.bytes_per_sender[i],
             t.bytes_per_sender[i]);
    }
  }
  if (c.diff().empty()) return Status::ok();
  return internalError("plans differ: " + c.diff());
}

Status executeAndVerify(const std::vector<Registration>& trainers,
                        const std::vector<Registration>& rollouts, const Plan& plan) {
  WSYNC_ASSIGN_OR_RETURN(ReferenceExecutor ex, ReferenceExecutor::create(trainers, rollouts));
  WSYNC_RETURN_IF_ERROR(ex.execute(plan));
  return ex.verify();
}

}  // namespace wsync
