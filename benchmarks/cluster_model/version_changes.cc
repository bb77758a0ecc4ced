#include "version_changes.h"

#include <cmath>
#include <cstring>

namespace wsync::cluster {
namespace {

float fromBFloat16(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f = 0;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t toBFloat16(float f) {  // exact for the small integers used here
  uint32_t bits = 0;
  std::memcpy(&bits, &f, sizeof bits);
  return static_cast<uint16_t>(bits >> 16);
}

uint64_t splitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Calls visit(local_index, global_flat_index) for every element of `piece` of a tensor of
// global shape `shape`.
template <typename Visit>
void forEachElement(const Piece& piece, const Dims& shape, Visit visit) {
  const int rank = shape.size();
  if (piece.box.empty()) return;
  const Dims global_strides = rowMajorStrides(shape);
  Dims idx = Dims::zeros(rank);
  const int64_t inner = rank == 0 ? 1 : piece.box.extent[rank - 1];
  while (true) {
    int64_t local = piece.local_offset, global = 0;
    for (int d = 0; d < rank; ++d) {
      local += idx[d] * piece.local_strides[d];
      global += (piece.box.offset[d] + idx[d]) * global_strides[d];
    }
    for (int64_t i = 0; i < inner; ++i)
      visit(local + i, global + i);
    int d = rank - 2;
    while (d >= 0 && ++idx[d] == piece.box.extent[d])
      idx[d--] = 0;
    if (d < 0) return;
  }
}

// The local index of global element `flat` in `piece`, or -1 when the piece does not hold it.
int64_t localIndex(const Piece& piece, const Dims& shape, int64_t flat) {
  int64_t local = piece.local_offset;
  for (int d = shape.size() - 1; d >= 0; --d) {
    const int64_t c = flat % shape[d];
    flat /= shape[d];
    const int64_t rel = c - piece.box.offset[d];
    if (rel < 0 || rel >= piece.box.extent[d]) return -1;
    local += rel * piece.local_strides[d];
  }
  return local;
}

}  // namespace

uint32_t tensorNameHash(const std::string& name) {
  uint32_t h = 2166136261u;
  for (char c : name)
    h = (h ^ static_cast<uint8_t>(c)) * 16777619u;
  return h;
}

float initialValue(uint32_t tensor_hash, int64_t flat) {
  return static_cast<float>((tensor_hash + static_cast<uint64_t>(flat)) % 251);
}

int64_t fillOrCheckInitial(const Registration& reg, const LocalBuffer& buf, void* data,
                           bool check) {
  int64_t wrong = 0;
  for (const Piece& piece : buf.pieces) {
    const TensorDecl& t = reg.tensors[piece.tensor];
    const uint32_t h = tensorNameHash(t.name);
    if (buf.dtype == DType::kFloat32) {
      float* p = static_cast<float*>(data);
      forEachElement(piece, t.shape, [&](int64_t local, int64_t flat) {
        if (check)
          wrong += p[local] != initialValue(h, flat);
        else
          p[local] = initialValue(h, flat);
      });
    } else {
      uint16_t* p = static_cast<uint16_t*>(data);
      forEachElement(piece, t.shape, [&](int64_t local, int64_t flat) {
        if (check)
          wrong += p[local] != toBFloat16(initialValue(h, flat));
        else
          p[local] = toBFloat16(initialValue(h, flat));
      });
    }
  }
  return wrong;
}

int64_t countPieceMismatches(const Registration& reg, const LocalBuffer& buf, const void* a,
                             const void* b) {
  const size_t e = dtypeSize(buf.dtype);
  const auto* pa = static_cast<const uint8_t*>(a);
  const auto* pb = static_cast<const uint8_t*>(b);
  int64_t wrong = 0;
  for (const Piece& piece : buf.pieces)
    forEachElement(piece, reg.tensors[piece.tensor].shape, [&](int64_t local, int64_t) {
      wrong += std::memcmp(pa + local * e, pb + local * e, e) != 0;
    });
  return wrong;
}

VersionChanges::VersionChanges(const Registration& reg, double changed_share)
    : reg_(reg), share_(changed_share), holders_(reg.tensors.size()) {
  for (size_t b = 0; b < reg.buffers.size(); ++b)
    for (size_t i = 0; i < reg.buffers[b].pieces.size(); ++i) {
      const Piece& p = reg.buffers[b].pieces[i];
      if (!p.box.empty())
        holders_[p.tensor].push_back({static_cast<int32_t>(b), static_cast<int32_t>(i)});
    }
}

int64_t VersionChanges::apply(uint64_t v, const std::vector<void*>& data) const {
  int64_t applied = 0;
  if (share_ <= 0) return 0;
  for (size_t t = 0; t < reg_.tensors.size(); ++t) {
    if (holders_[t].empty()) continue;
    const TensorDecl& decl = reg_.tensors[t];
    const int64_t n = decl.shape.product();
    const int64_t draws = std::llround(share_ * static_cast<double>(n));
    uint64_t state = (uint64_t{tensorNameHash(decl.name)} << 32) ^ (v * 0xD1B54A32D192ED03ull);
    for (int64_t k = 0; k < draws; ++k) {
      const int64_t flat = static_cast<int64_t>(splitMix64(state) % static_cast<uint64_t>(n));
      const uint32_t step = 1 + static_cast<uint32_t>(splitMix64(state) % 250);  // 1 .. 250
      for (const Holder& h : holders_[t]) {
        const LocalBuffer& buf = reg_.buffers[h.buffer];
        const int64_t local = localIndex(buf.pieces[h.piece], decl.shape, flat);
        if (local < 0) continue;
        ++applied;
        if (buf.dtype == DType::kFloat32) {
          float* p = static_cast<float*>(data[h.buffer]) + local;
          *p = static_cast<float>((static_cast<uint32_t>(*p) + step) % 251);
        } else {
          uint16_t* p = static_cast<uint16_t*>(data[h.buffer]) + local;
          *p = toBFloat16(
              static_cast<float>((static_cast<uint32_t>(fromBFloat16(*p)) + step) % 251));
        }
      }
    }
  }
  return applied;
}

}  // namespace wsync::cluster
