#include "plan/block_scaling_plan.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>
#include <utility>

namespace wsync {
namespace {

// A block of one table entry: (entry, row-major index in the scale tensor).
struct BlockKey {
  int32_t entry = 0;
  int64_t index = 0;
  bool operator==(const BlockKey& o) const { return entry == o.entry && index == o.index; }
};
struct BlockKeyHash {
  size_t operator()(const BlockKey& k) const {
    return std::hash<int64_t>()(k.index * 1000003 + k.entry);
  }
};

std::string rankLabel(const Registration& reg) {
  return std::string(roleName(reg.role)) + " " + std::to_string(reg.rank);
}

// The parts of `box` between the cuts of `s` (ScaledTensor::cuts) that lie strictly inside it and
// on block boundaries, row-major; {box} where none does.
std::vector<Box> partsOf(const Box& box, const ScaledTensor& s) {
  const int rank = box.rank();
  std::vector<std::vector<int64_t>> bounds(static_cast<size_t>(rank));
  for (int d = 0; d < rank; ++d) {
    const int64_t block = d == rank - 1   ? s.scaling.block_cols
                          : d == rank - 2 ? s.scaling.block_rows
                                          : 1;
    std::vector<int64_t>& b = bounds[static_cast<size_t>(d)];
    b.push_back(box.offset[d]);
    if (static_cast<size_t>(d) < s.cuts.size()) {
      for (int64_t c : s.cuts[static_cast<size_t>(d)]) {
        if (c > box.offset[d] && c < box.offset[d] + box.extent[d] && block > 0 && c % block == 0)
          b.push_back(c);
      }
    }
    std::sort(b.begin(), b.end());
    b.erase(std::unique(b.begin(), b.end()), b.end());
    b.push_back(box.offset[d] + box.extent[d]);
  }
  std::vector<Box> parts;
  std::vector<size_t> at(static_cast<size_t>(rank), 0);  // odometer over the intervals
  while (true) {
    Box part = box;
    for (int d = 0; d < rank; ++d) {
      const std::vector<int64_t>& b = bounds[static_cast<size_t>(d)];
      const size_t i = at[static_cast<size_t>(d)];
      part.offset[d] = b[i];
      part.extent[d] = b[i + 1] - b[i];
    }
    parts.push_back(part);
    int d = rank - 1;
    while (d >= 0 && ++at[static_cast<size_t>(d)] + 1 == bounds[static_cast<size_t>(d)].size()) {
      at[static_cast<size_t>(d)] = 0;
      --d;
    }
    if (d < 0) break;
  }
  return parts;
}

// Whether each row (or column) block of [offset, offset + extent) of a dim of `size` elements is
// only partly inside it: the first and the last block can be.
void partialBlocksAlong(int64_t offset, int64_t extent, int64_t size, int64_t block,
                        std::vector<int64_t>* partial) {
  if (extent <= 0) return;
  const int64_t first = offset / block;
  const int64_t last = (offset + extent - 1) / block;
  auto isPartial = [&](int64_t b) {
    return offset > b * block || offset + extent < std::min((b + 1) * block, size);
  };
  if (isPartial(first)) partial->push_back(first);
  if (last != first && isPartial(last)) partial->push_back(last);
}

// Calls f(leading, row) for every leading-dims index tuple and row block of `cover`, where
// `leading` is the row-major index of the tuple over the scale tensor's leading dims.
template <class F>
void forEachCoverRow(const Box& cover, const Dims& scale_shape, F&& f) {
  const int r = cover.rank();
  Dims index = cover.offset;
  const int64_t lead_count = [&] {
    int64_t n = 1;
    for (int d = 0; d < r - 2; ++d)
      n *= cover.extent[d];
    return n;
  }();
  for (int64_t i = 0; i < lead_count; ++i) {
    int64_t rem = i;
    int64_t leading = 0;
    for (int d = r - 3; d >= 0; --d) {
      index[d] = cover.offset[d] + rem % cover.extent[d];
      rem /= cover.extent[d];
    }
    for (int d = 0; d < r - 2; ++d)
      leading = leading * scale_shape[d] + index[d];
    for (int64_t row = cover.offset[r - 2]; row < cover.end(r - 2); ++row)
      f(leading, row);
  }
}

}  // namespace

std::string valuesName(const ScaledTensor& t) {
  return t.tensor + "@" + schemeTag(t.scaling);
}
std::string scalesName(const ScaledTensor& t) {
  return valuesName(t) + "/scales";
}

Status applyRolloutScalings(Registration& reg, const std::vector<ScaledTensor>& scalings) {
  std::unordered_map<std::string, int32_t> index;
  for (size_t i = 0; i < reg.tensors.size(); ++i)
    index.emplace(reg.tensors[i].name, static_cast<int32_t>(i));
  std::set<std::string> seen;
  std::vector<std::string> rename(reg.tensors.size());
  for (const ScaledTensor& s : scalings) {
    const std::string what =
        rankLabel(reg) + ", tensor '" + s.tensor + "' (" + describe(s.scaling) + ")";
    if (!seen.insert(s.tensor).second || !seen.insert("\x01" + s.scaling.scale_tensor).second) {
      return invalidArgument(what + ": the tensor or its scale tensor '" + s.scaling.scale_tensor +
                             "' is scaled twice");
    }
    auto weight = index.find(s.tensor);
    auto scales = index.find(s.scaling.scale_tensor);
    if (weight == index.end()) {
      if (scales == index.end()) continue;  // this rank holds neither
      return mismatch(what + ": the rank registers the scale tensor '" + s.scaling.scale_tensor +
                      "' but not the weight");
    }
    const Dims& shape = reg.tensors[static_cast<size_t>(weight->second)].shape;
    if (std::string why = checkBlockScaling(s.scaling, shape); !why.empty()) {
      return invalidArgument(what + ": " + why);
    }
    rename[static_cast<size_t>(weight->second)] = valuesName(s);
    if (scales != index.end()) {
      const Dims& declared = reg.tensors[static_cast<size_t>(scales->second)].shape;
      const Dims want = scaleShape(shape, s.scaling);
      if (declared != want) {
        return mismatch(what + ": the scale tensor '" + s.scaling.scale_tensor +
                        "' is declared with shape " + declared.toString() + ", but blocks of " +
                        std::to_string(s.scaling.block_rows) + "x" +
                        std::to_string(s.scaling.block_cols) + " over " + shape.toString() +
                        " make " + want.toString());
      }
      rename[static_cast<size_t>(scales->second)] = scalesName(s);
    }
    const int r = shape.size();
    const int64_t block[2] = {s.scaling.block_rows, s.scaling.block_cols};
    for (const LocalBuffer& b : reg.buffers) {
      for (const Piece& p : b.pieces) {
        if (scales != index.end() && p.tensor == scales->second &&
            b.dtype != scaleDType(s.scaling.format)) {
          return mismatch(what + ": buffer '" + b.name + "' holds scales as " + dtypeName(b.dtype) +
                          "; " + scaleFormatName(s.scaling.format) + " scales are " +
                          dtypeName(scaleDType(s.scaling.format)));
        }
        if (p.tensor != weight->second) continue;
        if (b.dtype != DType::kFloat8E4M3) {
          return mismatch(what + ": buffer '" + b.name + "' holds it as " + dtypeName(b.dtype) +
                          "; block-scaled weights are float8_e4m3");
        }
        for (int k = 0; k < 2; ++k) {
          const int d = r - 2 + k;
          const bool starts = p.box.offset[d] % block[k] == 0;
          const bool ends = p.box.end(d) % block[k] == 0 || p.box.end(d) == shape[d];
          if (!starts || !ends) {
            return mismatch(what + ": buffer '" + b.name + "' holds " + p.box.toString() +
                            ", which cuts blocks of " + std::to_string(block[k]) + " along dim " +
                            std::to_string(d) +
                            " (a block-scaled shard must start and end on block boundaries)");
          }
        }
      }
    }
  }
  for (size_t i = 0; i < rename.size(); ++i) {
    if (!rename[i].empty()) reg.tensors[i].name = rename[i];
  }
  return Status::ok();
}

Result<std::vector<ScaledTensor>> jobScalingTable(const std::vector<RolloutScalings>& rollouts) {
  // Per (replica, tensor): the first rank holding pieces of it and its scheme ("" = none).
  std::map<std::pair<int32_t, std::string>, std::pair<int32_t, std::string>> held;
  std::map<std::pair<std::string, std::string>, ScaledTensor> table;
  for (const RolloutScalings& r : rollouts) {
    std::unordered_map<std::string, const ScaledTensor*> scaled;
    for (const ScaledTensor& s : *r.scalings) {
      scaled.emplace(s.tensor, &s);
    }
    std::vector<bool> has(r.reg->tensors.size(), false);
    for (const LocalBuffer& b : r.reg->buffers)
      for (const Piece& p : b.pieces)
        has[static_cast<size_t>(p.tensor)] = true;
    for (size_t i = 0; i < has.size(); ++i) {
      if (!has[i]) continue;
      const std::string& name = r.reg->tensors[i].name;
      auto it = scaled.find(name);
      const std::string tag = it == scaled.end() ? "" : describe(it->second->scaling);
      auto [entry, fresh] =
          held.emplace(std::make_pair(r.reg->replica, name), std::make_pair(r.reg->rank, tag));
      if (!fresh && entry->second.second != tag) {
        auto label = [](const std::string& t) { return t.empty() ? std::string("unscaled") : t; };
        return mismatch("replica " + std::to_string(r.reg->replica) + ", tensor '" + name +
                        "': rollout " + std::to_string(entry->second.first) + " holds it " +
                        label(entry->second.second) + ", rollout " + std::to_string(r.reg->rank) +
                        " " + label(tag) + " (ranks of one replica must agree)");
      }
      if (it != scaled.end()) {
        table.emplace(std::make_pair(name, schemeTag(it->second->scaling) + "\x01" +
                                               it->second->scaling.scale_tensor),
                      *it->second);
      }
    }
  }
  std::vector<ScaledTensor> out;
  out.reserve(table.size());
  for (auto& [key, s] : table)
    out.push_back(s);
  return out;
}

void setRolloutCuts(std::vector<ScaledTensor>& table, const std::vector<Registration>& rollouts) {
  for (ScaledTensor& entry : table) {
    const std::string name = valuesName(entry);
    std::vector<std::set<int64_t>> cuts;
    for (const Registration& reg : rollouts) {
      int32_t tensor = -1;
      for (size_t i = 0; i < reg.tensors.size(); ++i) {
        if (reg.tensors[i].name == name) tensor = static_cast<int32_t>(i);
      }
      if (tensor < 0) continue;
      const Dims& shape = reg.tensors[static_cast<size_t>(tensor)].shape;
      cuts.resize(static_cast<size_t>(shape.rank));
      for (const LocalBuffer& b : reg.buffers) {
        for (const Piece& p : b.pieces) {
          if (p.tensor != tensor) continue;
          for (int d = 0; d < p.box.rank(); ++d) {
            for (int64_t c : {p.box.offset[d], p.box.offset[d] + p.box.extent[d]}) {
              if (c > 0 && c < shape[d]) cuts[static_cast<size_t>(d)].insert(c);
            }
          }
        }
      }
    }
    entry.cuts.assign(cuts.size(), {});
    for (size_t d = 0; d < cuts.size(); ++d)
      entry.cuts[d].assign(cuts[d].begin(), cuts[d].end());
  }
}

Result<std::vector<QuantizedSource>> addQuantizedSources(Registration& reg,
                                                         const std::vector<ScaledTensor>& table) {
  std::unordered_map<std::string, std::vector<int32_t>> entries;
  for (size_t e = 0; e < table.size(); ++e)
    entries[table[e].tensor].push_back(static_cast<int32_t>(e));
  std::vector<QuantizedSource> out;
  const size_t own_buffers = reg.buffers.size();
  for (size_t b = 0; b < own_buffers; ++b) {
    for (size_t p = 0; p < reg.buffers[b].pieces.size(); ++p) {
      const Piece piece = reg.buffers[b].pieces[p];
      const TensorDecl decl = reg.tensors[static_cast<size_t>(piece.tensor)];
      auto it = entries.find(decl.name);
      if (it == entries.end() || piece.box.empty()) continue;
      const DType dtype = reg.buffers[b].dtype;
      if (dtype != DType::kFloat32 && dtype != DType::kBFloat16 && dtype != DType::kFloat16) {
        return Status(WSYNC_ERR_UNSUPPORTED,
                      rankLabel(reg) + " holds '" + decl.name + "' as " + dtypeName(dtype) +
                          " in buffer '" + reg.buffers[b].name +
                          "'; block-scaled rollouts quantize float32, bfloat16 or float16");
      }
      for (int32_t e : it->second) {
        const ScaledTensor& s = table[static_cast<size_t>(e)];
        const int32_t values = reg.declareTensor(valuesName(s), decl.shape);
        const int32_t scales = reg.declareTensor(scalesName(s), scaleShape(decl.shape, s.scaling));
        if (values < 0 || scales < 0) {
          return mismatch(rankLabel(reg) + " declares '" + valuesName(s) + "' itself");
        }
        const std::vector<Box> parts = partsOf(piece.box, s);
        for (size_t k = 0; k < parts.size(); ++k) {
          QuantizedSource q;
          q.source_buffer = static_cast<int32_t>(b);
          q.source_piece = static_cast<int32_t>(p);
          q.entry = e;
          q.box = parts[k];
          q.cover = blockCover(q.box, s.scaling);
          q.shape = decl.shape;
          std::string base = "wsync.quantized/" + reg.buffers[b].name + "/" + std::to_string(p) +
                             "/" + schemeTag(s.scaling);
          if (parts.size() > 1) base += "/part" + std::to_string(k);
          LocalBuffer vb;
          vb.name = base;
          vb.dtype = DType::kFloat8E4M3;
          vb.memory = reg.buffers[b].memory;
          vb.num_elements = q.box.volume();
          vb.pieces.push_back(Piece{values, q.box, 0, rowMajorStrides(q.box.extent)});
          LocalBuffer sb;
          sb.name = base + "/scales";
          sb.dtype = scaleDType(s.scaling.format);
          sb.memory = vb.memory;
          sb.num_elements = q.cover.volume();
          sb.pieces.push_back(Piece{scales, q.cover, 0, rowMajorStrides(q.cover.extent)});
          q.values_buffer = static_cast<int32_t>(reg.buffers.size());
          reg.buffers.push_back(std::move(vb));
          q.scales_buffer = static_cast<int32_t>(reg.buffers.size());
          reg.buffers.push_back(std::move(sb));
          out.push_back(q);
        }
      }
    }
  }
  return out;
}

MaximaExchange planMaximaExchange(const std::vector<std::vector<QuantizedSource>>& sources,
                                  const std::vector<ScaledTensor>& table) {
  // 1. Blocks some source holds only part of, bucketed by (entry, leading index, row block).
  struct RowKey {
    int32_t entry;
    int64_t leading;
    int64_t row;
    bool operator<(const RowKey& o) const {
      return std::tie(entry, leading, row) < std::tie(o.entry, o.leading, o.row);
    }
  };
  std::map<RowKey, std::set<int64_t>> partial;  // -> column blocks
  std::vector<bool> entry_partial(table.size(), false);
  for (const auto& trainer : sources) {
    for (const QuantizedSource& q : trainer) {
      const BlockScaling& s = table[static_cast<size_t>(q.entry)].scaling;
      const Dims scale_shape = scaleShape(q.shape, s);
      const int r = q.shape.size();
      std::vector<int64_t> rows;
      std::vector<int64_t> cols;
      partialBlocksAlong(q.box.offset[r - 2], q.box.extent[r - 2], q.shape[r - 2], s.block_rows,
                         &rows);
      partialBlocksAlong(q.box.offset[r - 1], q.box.extent[r - 1], q.shape[r - 1], s.block_cols,
                         &cols);
      if (rows.empty() && cols.empty()) continue;
      entry_partial[static_cast<size_t>(q.entry)] = true;
      forEachCoverRow(q.cover, scale_shape, [&](int64_t leading, int64_t row) {
        auto& bucket = partial[RowKey{q.entry, leading, row}];
        if (std::find(rows.begin(), rows.end(), row) != rows.end()) {
          for (int64_t c = q.cover.offset[r - 1]; c < q.cover.end(r - 1); ++c)
            bucket.insert(c);
        } else {
          bucket.insert(cols.begin(), cols.end());
        }
      });
    }
  }
  // 2. Every source holding a block of that set contributes to it.
  MaximaExchange out;
  out.exchanged.resize(sources.size());
  out.block_of.resize(sources.size());
  std::unordered_map<BlockKey, uint32_t, BlockKeyHash> ids;
  for (size_t t = 0; t < sources.size(); ++t) {
    uint64_t base = 0;
    for (const QuantizedSource& q : sources[t]) {
      const uint64_t grid = static_cast<uint64_t>(q.cover.volume());
      if (entry_partial[static_cast<size_t>(q.entry)]) {
        const BlockScaling& s = table[static_cast<size_t>(q.entry)].scaling;
        const Dims scale_shape = scaleShape(q.shape, s);
        const int r = q.shape.size();
        const int64_t cols = q.cover.extent[r - 1];
        uint64_t row_in_cover = 0;
        forEachCoverRow(q.cover, scale_shape, [&](int64_t leading, int64_t row) {
          auto bucket = partial.find(RowKey{q.entry, leading, row});
          if (bucket != partial.end()) {
            auto lo = bucket->second.lower_bound(q.cover.offset[r - 1]);
            auto hi = bucket->second.lower_bound(q.cover.end(r - 1));
            for (auto c = lo; c != hi; ++c) {
              const BlockKey key{q.entry,
                                 (leading * scale_shape[r - 2] + row) * scale_shape[r - 1] + *c};
              auto [id, fresh] = ids.emplace(key, static_cast<uint32_t>(ids.size()));
              out.exchanged[t].push_back(base + row_in_cover * static_cast<uint64_t>(cols) +
                                         static_cast<uint64_t>(*c - q.cover.offset[r - 1]));
              out.block_of[t].push_back(id->second);
              (void)fresh;
            }
          }
          ++row_in_cover;
        });
      }
      base += grid;
    }
  }
  out.num_blocks = static_cast<uint32_t>(ids.size());
  return out;
}

}  // namespace wsync
