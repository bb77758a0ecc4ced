// wsync-block-fp8-bench: the model and its layouts per phase (see the header).
#include "block_fp8_model.h"

#include <algorithm>
#include <cstring>

#include "layout/block_scaling.h"
#include "quant/block_quant.h"

namespace wsync_fp8 {
namespace {

using wsync_demo::TensorSpec;

int64_t ceilDiv(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

bool has(const std::string& name, const char* part) {
  return name.find(part) != std::string::npos;
}

int indexOf(const PhaseModel& phase, const std::string& name) {
  for (int i = 0; i < phase.num_weights; ++i)
    if (phase.tensors[static_cast<size_t>(i)].name == name) return i;
  return -1;
}

// Row cut `t` of 0..trainers of a dim-0 split of `rows` rows (see the header).
int64_t trainerCut(int64_t rows, int trainers, int t, int64_t cut_offset) {
  if (t <= 0) return 0;
  if (t >= trainers) return rows;
  const int64_t chunk = ceilDiv(rows, trainers);
  return std::clamp<int64_t>(t * chunk + cut_offset, 0, rows);
}

wsync::BlockScaling internalScaling(const PhaseModel& phase) {
  wsync::BlockScaling s;
  s.format = static_cast<wsync::ScaleFormat>(phase.scaling.format);
  s.block_rows = phase.scaling.block_rows;
  s.block_cols = phase.scaling.block_cols;
  return s;
}

wsync::Dims dimsOf(const std::vector<int64_t>& v) {
  wsync::Dims d = wsync::Dims::zeros(static_cast<int>(v.size()));
  for (size_t i = 0; i < v.size(); ++i)
    d[static_cast<int>(i)] = v[i];
  return d;
}

// Bits of element `i` of `piece` (row-major over its box) into out[i], for every element.
void pieceValues(const PhaseModel& phase, const Piece& p, uint64_t version, uint16_t* out) {
  const std::vector<int64_t>& shape = phase.tensors[static_cast<size_t>(p.tensor)].shape;
  if (shape.size() == 1) {
    for (int64_t i = 0; i < p.extent[0]; ++i)
      out[i] = valueOf(p.tensor, 0, p.offset[0] + i, version);
    return;
  }
  const int64_t cols = shape[1];
  int64_t at = 0;
  for (int64_t r = 0; r < p.extent[0]; ++r) {
    const int64_t row = p.offset[0] + r;
    for (int64_t c = 0; c < p.extent[1]; ++c)
      out[at++] = valueOf(p.tensor, row, row * cols + p.offset[1] + c, version);
  }
}

// A box of `tensor` split evenly along `dim` over `tp`: rank `tp_rank`'s part.
Piece splitPiece(const PhaseModel& phase, int tensor, int dim, int tp, int tp_rank) {
  Piece p;
  p.tensor = tensor;
  p.offset.assign(phase.tensors[static_cast<size_t>(tensor)].shape.size(), 0);
  p.extent = phase.tensors[static_cast<size_t>(tensor)].shape;
  const int64_t part = p.extent[static_cast<size_t>(dim)] / tp;
  p.offset[static_cast<size_t>(dim)] = part * tp_rank;
  p.extent[static_cast<size_t>(dim)] = part;
  return p;
}

// The rows / cols of blocks of a weight piece whose box starts and ends at block boundaries
// (or at the tensor's end): its piece of the scale tensor.
Piece scalePiece(const PhaseModel& phase, const Piece& weight) {
  Piece p;
  p.tensor = phase.scale_of[static_cast<size_t>(weight.tensor)];
  const int64_t block[2] = {phase.scaling.block_rows, phase.scaling.block_cols};
  for (size_t d = 0; d < 2; ++d) {
    const int64_t first = weight.offset[d] / block[d];
    p.offset.push_back(first);
    p.extent.push_back(ceilDiv(weight.offset[d] + weight.extent[d], block[d]) - first);
  }
  return p;
}

}  // namespace

const char* formatName(Format f) {
  return f == Format::kBf16 ? "bf16" : f == Format::kBlockFp8 ? "fp8" : "mxfp8";
}

bool parseFormat(const std::string& name, Format* out) {
  for (Format f : {Format::kBf16, Format::kBlockFp8, Format::kMxfp8}) {
    if (name == formatName(f)) {
      *out = f;
      return true;
    }
  }
  return false;
}

bool quantizedWeight(const TensorSpec& t) {
  return t.shape.size() == 2 && !has(t.name, "embed_tokens") && !has(t.name, "lm_head");
}

PhaseModel makePhase(const std::vector<TensorSpec>& weights, Format format) {
  PhaseModel phase;
  phase.format = format;
  phase.tensors = weights;
  phase.num_weights = static_cast<int>(weights.size());
  phase.scale_of.assign(weights.size(), -1);
  if (format == Format::kBf16) return phase;
  const bool mx = format == Format::kMxfp8;
  phase.scaling.format = mx ? WSYNC_SCALE_E8M0 : WSYNC_SCALE_FLOAT32;
  phase.scaling.block_rows = mx ? 1 : 128;
  phase.scaling.block_cols = mx ? 32 : 128;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (!quantizedWeight(weights[i])) continue;
    phase.scale_of[i] = static_cast<int>(phase.tensors.size());
    phase.tensors.push_back({weights[i].name + (mx ? "_scale" : "_scale_inv"),
                             {ceilDiv(weights[i].shape[0], phase.scaling.block_rows),
                              ceilDiv(weights[i].shape[1], phase.scaling.block_cols)}});
  }
  return phase;
}

int64_t Piece::elements() const {
  int64_t n = 1;
  for (int64_t e : extent)
    n *= e;
  return n;
}

int64_t Buffer::elements() const {
  int64_t n = 0;
  for (const Piece& p : pieces)
    n += p.elements();
  return n;
}

size_t Buffer::elementBytes() const {
  return dtype == WSYNC_DTYPE_FLOAT32 ? 4 : dtype == WSYNC_DTYPE_BFLOAT16 ? 2 : 1;
}

std::vector<Buffer> trainerBuffers(const std::vector<TensorSpec>& weights, int trainers,
                                   int trainer, int64_t cut_offset) {
  std::vector<Buffer> out;
  for (size_t i = 0; i < weights.size(); ++i) {
    const std::vector<int64_t>& shape = weights[i].shape;
    const int64_t r0 = trainerCut(shape[0], trainers, trainer, cut_offset);
    const int64_t r1 = trainerCut(shape[0], trainers, trainer + 1, cut_offset);
    if (r1 <= r0) continue;  // this trainer holds none of it
    Piece p;
    p.tensor = static_cast<int>(i);
    p.offset.assign(shape.size(), 0);
    p.extent = shape;
    p.offset[0] = r0;
    p.extent[0] = r1 - r0;
    out.push_back({weights[i].name, WSYNC_DTYPE_BFLOAT16, {p}, -1});
  }
  return out;
}

std::vector<Buffer> rolloutBuffers(const PhaseModel& phase, int tp, int tp_rank,
                                   std::string* error) {
  std::vector<Buffer> out;
  error->clear();
  for (int i = 0; i < phase.num_weights; ++i) {
    const TensorSpec& t = phase.tensors[static_cast<size_t>(i)];
    if (has(t.name, "k_proj") || has(t.name, "v_proj") || has(t.name, "up_proj")) continue;
    if (t.shape.size() == 1) {  // norms: replicated
      out.push_back({t.name, WSYNC_DTYPE_BFLOAT16, {{i, {0}, t.shape}}, -1});
      continue;
    }
    // vLLM's TP: fused qkv and gate_up column-parallel, o and down row-parallel, the rest
    // (embeddings, lm_head) vocab-parallel along dim 0.
    std::vector<std::string> parts = {t.name};
    std::string name = t.name;
    if (has(t.name, "q_proj")) {
      const std::string base = t.name.substr(0, t.name.find("q_proj"));
      parts = {base + "q_proj.weight", base + "k_proj.weight", base + "v_proj.weight"};
      name = base + "qkv_proj.weight";
    } else if (has(t.name, "gate_proj")) {
      const std::string base = t.name.substr(0, t.name.find("gate_proj"));
      parts = {base + "gate_proj.weight", base + "up_proj.weight"};
      name = base + "gate_up_proj.weight";
    }
    const int dim = has(t.name, "o_proj") || has(t.name, "down_proj") ? 1 : 0;
    const bool quantized = phase.scale_of[static_cast<size_t>(i)] >= 0;
    Buffer values{name, quantized ? WSYNC_DTYPE_FLOAT8_E4M3 : WSYNC_DTYPE_BFLOAT16, {}, -1};
    Buffer scales{name + (phase.format == Format::kMxfp8 ? "_scale" : "_scale_inv"),
                  phase.format == Format::kMxfp8 ? WSYNC_DTYPE_UINT8 : WSYNC_DTYPE_FLOAT32,
                  {},
                  -1};
    for (const std::string& part : parts) {
      const int pi = indexOf(phase, part);
      const TensorSpec& ps = phase.tensors[static_cast<size_t>(pi)];
      const int64_t size = ps.shape[static_cast<size_t>(dim)];
      const int64_t block = dim == 0 ? phase.scaling.block_rows : phase.scaling.block_cols;
      if (size % tp != 0 || (quantized && tp > 1 && (size / tp) % block != 0)) {
        *error = "TP " + std::to_string(tp) + " cannot split dim " + std::to_string(dim) + " of '" +
                 ps.name + "' (" + std::to_string(size) + ")" +
                 (quantized ? " at blocks of " + std::to_string(block) : std::string());
        return {};
      }
      values.pieces.push_back(splitPiece(phase, pi, dim, tp, tp_rank));
      if (quantized) scales.pieces.push_back(scalePiece(phase, values.pieces.back()));
    }
    if (quantized) values.scales = static_cast<int>(out.size()) + 1;
    out.push_back(std::move(values));
    if (quantized) out.push_back(std::move(scales));
  }
  return out;
}

Straddles countStraddles(const PhaseModel& phase, int trainers, int64_t cut_offset) {
  Straddles s;
  const int64_t br = phase.scaling.block_rows, bc = phase.scaling.block_cols;
  if (phase.format == Format::kBf16 || br <= 1) return s;
  for (int i = 0; i < phase.num_weights; ++i) {
    if (phase.scale_of[static_cast<size_t>(i)] < 0) continue;
    const std::vector<int64_t>& shape = phase.tensors[static_cast<size_t>(i)].shape;
    const int64_t block_cols = ceilDiv(shape[1], bc);
    for (int64_t b = 0; b * br < shape[0]; ++b) {
      const int64_t first = b * br, end = std::min(shape[0], first + br);
      int64_t holders = 0;
      for (int t = 0; t < trainers; ++t) {
        const int64_t r0 = trainerCut(shape[0], trainers, t, cut_offset);
        const int64_t r1 = trainerCut(shape[0], trainers, t + 1, cut_offset);
        if (r0 < r1 && r0 < end && first < r1) ++holders;
      }
      if (holders < 2) continue;
      s.blocks += block_cols;
      s.contributions += holders * block_cols;
    }
  }
  return s;
}

wsync_status_t registerBuffer(wsync_context_t ctx, const PhaseModel& phase, const Buffer& buffer,
                              wsync_memory_kind_t memory, void* data, int* index) {
  std::vector<wsync_piece_t> pieces;
  int64_t local = 0;
  for (const Piece& p : buffer.pieces) {
    const TensorSpec& t = phase.tensors[static_cast<size_t>(p.tensor)];
    wsync_piece_t w = WSYNC_PIECE_INITIALIZER;
    w.tensor = t.name.c_str();
    w.ndim = static_cast<int>(t.shape.size());
    w.global_shape = t.shape.data();
    w.box_offset = p.offset.data();
    w.box_extent = p.extent.data();
    w.local_offset = local;
    local += p.elements();
    pieces.push_back(w);
  }
  return wsync_register_buffer(ctx, buffer.name.c_str(), buffer.dtype, memory, data,
                               buffer.elements(), static_cast<int>(pieces.size()), pieces.data(),
                               index);
}

wsync_status_t declareScalings(wsync_context_t ctx, const PhaseModel& phase,
                               const std::vector<Buffer>& buffers) {
  for (const Buffer& b : buffers) {
    if (b.scales < 0) continue;
    for (const Piece& p : b.pieces) {
      wsync_block_scaling_t s = phase.scaling;
      const int scale = phase.scale_of[static_cast<size_t>(p.tensor)];
      s.scale_tensor = phase.tensors[static_cast<size_t>(scale)].name.c_str();
      const wsync_status_t st = wsync_set_block_scaling(
          ctx, phase.tensors[static_cast<size_t>(p.tensor)].name.c_str(), &s);
      if (st != WSYNC_SUCCESS) return st;
    }
  }
  return WSYNC_SUCCESS;
}

uint16_t valueOf(int tensor, int64_t row, int64_t flat, uint64_t version) {
  const uint64_t mix = (static_cast<uint64_t>(tensor) * 0x9E3779B97F4A7C15ull) ^
                       (static_cast<uint64_t>(row) * 0xC2B2AE3D27D4EB4Full) ^
                       (version * 0x165667B19E3779F9ull);
  const int shift = static_cast<int>((mix >> 29) % 8);
  // k / 64 * 2^-shift, |k| <= 128: exact in bfloat16, so the float32's upper half.
  const float f = wsync_demo::expectedValue(tensor, flat, version) / static_cast<float>(1 << shift);
  uint32_t bits = 0;
  std::memcpy(&bits, &f, 4);
  return static_cast<uint16_t>(bits >> 16);
}

void fillBuffer(const PhaseModel& phase, const Buffer& buffer, uint64_t version, uint16_t* data) {
  for (const Piece& p : buffer.pieces) {
    pieceValues(phase, p, version, data);
    data += p.elements();
  }
}

std::vector<size_t> checkedBuffers(const std::vector<Buffer>& buffers, int every) {
  std::vector<bool> is_scales(buffers.size(), false);
  for (const Buffer& b : buffers)
    if (b.scales >= 0) is_scales[static_cast<size_t>(b.scales)] = true;
  std::vector<size_t> out;
  int seen = 0;
  for (size_t b = 0; b < buffers.size(); ++b)
    if (!is_scales[b] && seen++ % every == 0) out.push_back(b);
  return out;
}

int64_t countWrongBytes(const PhaseModel& phase, const std::vector<Buffer>& buffers,
                        const std::vector<const uint8_t*>& data, size_t b, uint64_t version,
                        std::string* first) {
  int64_t wrong = 0;
  const auto note = [&](const Buffer& buf, const std::string& what, int64_t n) {
    if (n > 0 && wrong == 0 && first)
      *first = "buffer '" + buf.name + "': " + std::to_string(n) + " wrong " + what;
    wrong += n;
  };
  const auto differing = [](const uint8_t* x, const uint8_t* y, size_t n) {
    int64_t d = 0;
    for (size_t i = 0; i < n; ++i)
      d += x[i] != y[i] ? 1 : 0;
    return d;
  };
  const wsync::BlockScaling s = internalScaling(phase);
  const size_t scale_bytes = phase.format == Format::kMxfp8 ? 1 : 4;
  const Buffer& buf = buffers[b];
  int64_t local = 0, scale_local = 0;
  for (size_t pi = 0; pi < buf.pieces.size(); ++pi) {
    const Piece& p = buf.pieces[pi];
    std::vector<uint16_t> want(static_cast<size_t>(p.elements()));
    pieceValues(phase, p, version, want.data());
    if (buf.scales < 0) {  // bf16: bit for bit
      note(buf, "bf16 bytes",
           differing(data[b] + 2 * local, reinterpret_cast<const uint8_t*>(want.data()),
                     2 * want.size()));
      local += p.elements();
      continue;
    }
    // fp8: the reference quantizer over the whole blocks this rank holds.
    const Buffer& sb = buffers[static_cast<size_t>(buf.scales)];
    const wsync::Dims shape = dimsOf(phase.tensors[static_cast<size_t>(p.tensor)].shape);
    wsync::Box box;
    box.offset = dimsOf(p.offset);
    box.extent = dimsOf(p.extent);
    const wsync::PieceView view{want.data(), wsync::DType::kBFloat16, box,
                                wsync::Dims{p.extent[1], 1}};
    const int64_t n = wsync::blockCover(box, s).volume();
    std::vector<float> amax(static_cast<size_t>(n));
    std::vector<uint8_t> scales(static_cast<size_t>(n) * scale_bytes);
    std::vector<uint8_t> q(want.size());
    if (!wsync::blockAmaxHost(view, shape, s, amax.data()).isOk() ||
        (wsync::scalesFromAmax(amax.data(), n, s.format, scales.data()), false) ||
        !wsync::quantizeBlocksHost(view, shape, s, scales.data(), q.data()).isOk() ||
        sb.pieces[pi].elements() != n) {
      note(buf, "pieces (the reference quantizer refused it, or its scale piece's shape)", 1);
    } else {
      note(buf, "fp8 bytes", differing(data[b] + local, q.data(), q.size()));
      note(sb, "scale bytes",
           differing(data[static_cast<size_t>(buf.scales)] + scale_local * scale_bytes,
                     scales.data(), scales.size()));
    }
    local += p.elements();
    scale_local += sb.pieces[pi].elements();
  }
  return wrong;
}

}  // namespace wsync_fp8
