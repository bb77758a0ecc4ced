#include "rollout_format.h"

#include <algorithm>
#include <unordered_set>

namespace wsync::cluster {
namespace {

bool endsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Block sizes per dim of a weight of rank r: 1 on leading dims, then rows, cols.
int64_t blockExtent(const BlockScaling& s, int rank, int d) {
  if (d == rank - 1) return s.block_cols;
  if (d == rank - 2) return s.block_rows;
  return 1;
}

// Along one dim: block indices [lo, hi] intersect [o, e); [full_lo, full_hi] are held whole.
struct DimBlocks {
  int64_t lo, hi, full_lo, full_hi;
  bool full(int64_t j) const { return j >= full_lo && j <= full_hi; }
  int64_t fullCount() const { return std::max<int64_t>(0, full_hi - full_lo + 1); }
};

DimBlocks dimBlocks(int64_t o, int64_t e, int64_t size, int64_t b) {
  DimBlocks r{};
  r.lo = o / b;
  r.hi = (e - 1) / b;
  r.full_lo = (o + b - 1) / b;
  r.full_hi = e == size ? r.hi : e / b - 1;
  return r;
}

// The map key of (rank, tensor).
uint64_t key(int32_t rank, int32_t tensor) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(rank)) << 32) | static_cast<uint32_t>(tensor);
}

}  // namespace

int FormatCosts::elemBytes(int32_t tensor, DType registered) const {
  switch (format) {
    case RolloutFormat::kAsRegistered:
      return static_cast<int>(dtypeSize(registered));
    case RolloutFormat::kBf16:
      return 2;
    default:
      return quantized[static_cast<size_t>(tensor)] ? 1 : 2;
  }
}

double FormatCosts::scaleRatio(int32_t dst_rank, int32_t tensor) const {
  if (scale_bytes_per_element.empty()) return 0;
  const auto it = scale_bytes_per_element.find(key(dst_rank, tensor));
  return it == scale_bytes_per_element.end() ? 0.0 : it->second;
}

bool quantizedTensor(const std::string& name, const Dims& shape) {
  if (shape.size() < 2) return false;
  return name.find("embed_tokens") == std::string::npos &&
         name.find("lm_head") == std::string::npos && !endsWith(name, "mlp.gate.weight");
}

std::optional<BlockScaling> formatScaling(RolloutFormat f) {
  BlockScaling s;
  switch (f) {
    case RolloutFormat::kFp8Block128:
      return s;
    case RolloutFormat::kFp8Block128Pow2:
      s.format = ScaleFormat::kPow2Float32;
      return s;
    case RolloutFormat::kMxfp8:
      s.format = ScaleFormat::kE8M0;
      s.block_rows = 1;
      s.block_cols = 32;
      return s;
    default:
      return std::nullopt;
  }
}

int64_t partialBlocks(const Box& box, const Dims& shape, const BlockScaling& s) {
  if (box.empty()) return 0;
  const int r = shape.size();
  int64_t cover = 1, full = 1;
  for (int d = 0; d < r; ++d) {
    const DimBlocks b = dimBlocks(box.offset[d], box.end(d), shape[d], blockExtent(s, r, d));
    cover *= b.hi - b.lo + 1;
    full *= b.fullCount();
  }
  return cover - full;
}

Result<FormatCosts> buildFormatCosts(const Plan& plan, const std::vector<Registration>& trainers,
                                     const std::vector<Registration>& rollouts,
                                     RolloutFormat format) {
  FormatCosts c;
  c.format = format;
  c.quantized.assign(plan.tensors.size(), 0);
  const std::optional<BlockScaling> scaling = formatScaling(format);
  if (!scaling) return c;
  const BlockScaling& s = *scaling;
  const double scale_bytes = static_cast<double>(dtypeSize(scaleDType(s.format)));
  std::unordered_map<std::string, int32_t> index;
  for (size_t t = 0; t < plan.tensors.size(); ++t) {
    index.emplace(plan.tensors[t].name, static_cast<int32_t>(t));
    if (quantizedTensor(plan.tensors[t].name, plan.tensors[t].shape)) {
      c.quantized[t] = 1;
      ++c.quantized_tensors;
    }
  }
  auto planTensor = [&](const Registration& reg, int32_t local) -> Result<int32_t> {
    const auto it = index.find(reg.tensors[static_cast<size_t>(local)].name);
    if (it == index.end())
      return invalidArgument("buildFormatCosts: tensor " + reg.tensors[local].name +
                             " of a registration is not in the plan");
    return it->second;
  };
  // Scales per rollout rank and tensor: the blocks its pieces intersect.
  for (const Registration& reg : rollouts) {
    std::unordered_map<int32_t, std::pair<double, double>> per_tensor;  // scales, elements
    for (const LocalBuffer& buf : reg.buffers)
      for (const Piece& p : buf.pieces) {
        WSYNC_ASSIGN_OR_RETURN(int32_t t, planTensor(reg, p.tensor));
        if (!c.quantized[t] || p.box.empty()) continue;
        auto& acc = per_tensor[t];
        acc.first += static_cast<double>(blockCover(p.box, s).volume()) * scale_bytes;
        acc.second += static_cast<double>(p.box.volume());
      }
    for (const auto& [t, acc] : per_tensor) {
      c.scale_bytes += acc.first;
      if (acc.second > 0) c.scale_bytes_per_element[key(reg.rank, t)] = acc.first / acc.second;
    }
  }
  // Partial maxima: every trainer piece of a quantized tensor (replicated shards each quantize
  // their own copy and exchange, as the coordinator's MaximaRelay counts them).
  std::unordered_set<uint64_t> straddling;  // tensor << 40 | block index
  for (const Registration& reg : trainers) {
    bool involved = false;
    for (const LocalBuffer& buf : reg.buffers)
      for (const Piece& p : buf.pieces) {
        WSYNC_ASSIGN_OR_RETURN(int32_t t, planTensor(reg, p.tensor));
        if (!c.quantized[t] || p.box.empty()) continue;
        const Dims& shape = plan.tensors[t].shape;
        const int64_t partial = partialBlocks(p.box, shape, s);
        if (partial == 0) continue;
        involved = true;
        c.partial_maxima += partial;
        // The partial blocks themselves: those with a partial index along some dim.
        const int r = shape.size();
        std::vector<DimBlocks> dims;
        for (int d = 0; d < r; ++d)
          dims.push_back(dimBlocks(p.box.offset[d], p.box.end(d), shape[d], blockExtent(s, r, d)));
        const Dims scale_shape = scaleShape(shape, s);
        Dims idx;
        idx.rank = static_cast<uint8_t>(r);
        for (int d = 0; d < r; ++d)
          idx[d] = dims[d].lo;
        while (true) {
          bool others_full = true;
          int64_t flat = 0;
          for (int d = 0; d < r; ++d) {
            if (d < r - 1) others_full = others_full && dims[d].full(idx[d]);
            flat = flat * scale_shape[d] + idx[d];
          }
          const bool last_full = dims[r - 1].full(idx[r - 1]);
          if (!(others_full && last_full))
            straddling.insert((static_cast<uint64_t>(t) << 40) | static_cast<uint64_t>(flat));
          else  // a run of whole blocks: jump to its end
            idx[r - 1] = dims[r - 1].full_hi;
          int d = r - 1;
          while (d >= 0 && ++idx[d] > dims[d].hi) {
            idx[d] = dims[d].lo;
            --d;
          }
          if (d < 0) break;
        }
      }
    c.amax_trainers += involved ? 1 : 0;
  }
  c.straddling_blocks = static_cast<int64_t>(straddling.size());
  c.amax_bytes_in = 4.0 * static_cast<double>(c.partial_maxima);
  c.amax_bytes_out = c.amax_bytes_in;
  return c;
}

}  // namespace wsync::cluster
