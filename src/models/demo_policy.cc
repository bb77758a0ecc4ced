#include "models/demo_policy.h"

#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace wsync_demo {
namespace {

// torch.chunk: parts of ceil(n / parts); trailing parts may be short or empty.
std::pair<int64_t, int64_t> chunk(int64_t n, int parts, int index) {
  const int64_t size = (n + parts - 1) / parts;
  const int64_t begin = std::min(n, size * index);
  return {begin, std::min(n, begin + size) - begin};
}

std::vector<int64_t> rowMajor(const std::vector<int64_t>& extent) {
  std::vector<int64_t> s(extent.size(), 1);
  for (int d = static_cast<int>(extent.size()) - 2; d >= 0; --d)
    s[d] = s[d + 1] * extent[d + 1];
  return s;
}

int64_t product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t x : v)
    p *= x;
  return p;
}

// A buffer holding one box of one tensor, row-major.
BufferSpec boxBuffer(const std::string& name, int tensor, std::vector<int64_t> offset,
                     std::vector<int64_t> extent) {
  BufferSpec b;
  b.name = name;
  b.num_elements = product(extent);
  PieceSpec p;
  p.tensor = tensor;
  p.strides = rowMajor(extent);
  p.offset = std::move(offset);
  p.extent = std::move(extent);
  b.pieces.push_back(std::move(p));
  return b;
}

BufferSpec splitBuffer(const std::vector<TensorSpec>& tensors, int t, int dim, int parts,
                       int index) {
  const TensorSpec& spec = tensors[static_cast<size_t>(t)];
  std::vector<int64_t> offset(spec.shape.size(), 0);
  std::vector<int64_t> extent = spec.shape;
  const auto [begin, size] = chunk(spec.shape[static_cast<size_t>(dim)], parts, index);
  offset[static_cast<size_t>(dim)] = begin;
  extent[static_cast<size_t>(dim)] = size;
  return boxBuffer(spec.name, t, offset, extent);
}

int indexOf(const std::vector<TensorSpec>& tensors, const std::string& name) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

// Calls fn(local_index, global_flat_index, run_length) for each contiguous innermost run of `p`.
template <typename Fn>
void forEachRun(const TensorSpec& tensor, const PieceSpec& p, Fn&& fn) {
  const size_t rank = tensor.shape.size();
  if (rank == 0) {
    fn(p.local_offset, int64_t{0}, int64_t{1});
    return;
  }
  const std::vector<int64_t> global = rowMajor(tensor.shape);
  for (int64_t e : p.extent) {
    if (e == 0) return;
  }
  std::vector<int64_t> idx(rank, 0);
  const int64_t run = p.extent[rank - 1];
  while (true) {
    int64_t local = p.local_offset;
    int64_t flat = 0;
    for (size_t d = 0; d < rank; ++d) {
      local += idx[d] * p.strides[d];
      flat += (p.offset[d] + idx[d]) * global[d];
    }
    fn(local, flat, run);
    int d = static_cast<int>(rank) - 2;
    while (d >= 0 && ++idx[static_cast<size_t>(d)] == p.extent[static_cast<size_t>(d)]) {
      idx[static_cast<size_t>(d)] = 0;
      --d;
    }
    if (d < 0) return;
  }
}

float toFloat(wsync_dtype_t dtype, const void* data, int64_t i) {
  if (dtype == WSYNC_DTYPE_FLOAT32) return static_cast<const float*>(data)[i];
  const uint16_t h = static_cast<const uint16_t*>(data)[i];
  uint32_t bits = 0;
  if (dtype == WSYNC_DTYPE_BFLOAT16) {
    bits = static_cast<uint32_t>(h) << 16;
  } else {  // float16: the demo's values are normal or zero, so no subnormal handling is needed
    const uint32_t sign = (h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1f;
    const uint32_t mant = h & 0x3ff;
    bits = exp == 0 ? sign : sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  float f = 0;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

}  // namespace

bool parseRolloutLayout(const std::string& name, RolloutLayout* out) {
  if (name == "mixed")
    *out = RolloutLayout::kMixed;
  else if (name == "match")
    *out = RolloutLayout::kMatch;
  else if (name == "differ")
    *out = RolloutLayout::kDiffer;
  else
    return false;
  return true;
}

std::vector<TensorSpec> policyTensors(const PolicyShape& s) {
  std::vector<TensorSpec> t;
  const int64_t kv =
      std::max<int64_t>(1, s.hidden / 4);  // grouped-query attention: 4 q heads per kv head
  t.push_back({"model.embed_tokens.weight", {s.vocab, s.hidden}});
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t.push_back({p + "input_layernorm.weight", {s.hidden}});
    t.push_back({p + "self_attn.q_proj.weight", {s.hidden, s.hidden}});
    t.push_back({p + "self_attn.k_proj.weight", {kv, s.hidden}});
    t.push_back({p + "self_attn.v_proj.weight", {kv, s.hidden}});
    t.push_back({p + "self_attn.o_proj.weight", {s.hidden, s.hidden}});
    if (s.post_attention_norm) t.push_back({p + "post_attention_layernorm.weight", {s.hidden}});
    t.push_back({p + "mlp.gate_proj.weight", {s.ffn, s.hidden}});
    t.push_back({p + "mlp.up_proj.weight", {s.ffn, s.hidden}});
    t.push_back({p + "mlp.down_proj.weight", {s.hidden, s.ffn}});
  }
  t.push_back({"model.norm.weight", {s.hidden}});
  if (s.untied_lm_head) t.push_back({"lm_head.weight", {s.vocab, s.hidden}});
  return t;
}

PolicyShape llama3_8b() {
  PolicyShape s;
  s.layers = 32;
  s.hidden = 4096;
  s.ffn = 14336;
  s.vocab = 128256;
  s.post_attention_norm = true;
  s.untied_lm_head = true;
  return s;
}

PolicyShape policyShapeForBytes(int64_t bytes) {
  // hidden 1024 (ffn 3x, vocab 8x) from one layer plus the embedding (~81 MB) on; narrower for
  // smaller sizes, down to hidden 64 (~60 KB), so that a 1 MB model measures the fixed cost.
  auto layer_bytes = [](const PolicyShape& s) {
    return (s.hidden * s.hidden * 2 + s.hidden * s.hidden / 2 + 3 * s.ffn * s.hidden + s.hidden) *
           4;
  };
  PolicyShape s;
  for (int64_t hidden = 1024; hidden >= 64; hidden /= 2) {
    s.hidden = hidden;
    s.ffn = 3 * hidden;
    s.vocab = 8 * hidden;
    if (layer_bytes(s) + s.vocab * s.hidden * 4 <= bytes) break;
  }
  s.layers =
      static_cast<int>(std::max<int64_t>(1, (bytes - s.vocab * s.hidden * 4) / layer_bytes(s)));
  return s;
}

int64_t totalElements(const std::vector<TensorSpec>& tensors) {
  int64_t n = 0;
  for (const TensorSpec& t : tensors)
    n += product(t.shape);
  return n;
}

std::vector<BufferSpec> trainerLayout(const std::vector<TensorSpec>& tensors, int num_trainers,
                                      int trainer) {
  std::vector<BufferSpec> buffers;
  for (size_t t = 0; t < tensors.size(); ++t) {
    buffers.push_back(splitBuffer(tensors, static_cast<int>(t), 0, num_trainers, trainer));
  }
  return buffers;
}

std::vector<BufferSpec> rolloutLayout(const std::vector<TensorSpec>& tensors, RolloutLayout layout,
                                      int tp, int tp_rank) {
  std::vector<BufferSpec> buffers;
  for (size_t t = 0; t < tensors.size(); ++t) {
    const TensorSpec& spec = tensors[t];
    const int ti = static_cast<int>(t);
    const auto has = [&](const char* s) { return spec.name.find(s) != std::string::npos; };
    if (layout == RolloutLayout::kMatch) {  // every tensor split along dim 0
      buffers.push_back(splitBuffer(tensors, ti, 0, tp, tp_rank));
      continue;
    }
    if (layout == RolloutLayout::kDiffer) {
      if (spec.shape.size() == 1) {
        buffers.push_back(boxBuffer(spec.name, ti, {0}, spec.shape));  // replicated
      } else {
        buffers.push_back(
            splitBuffer(tensors, ti, static_cast<int>(spec.shape.size()) - 1, tp, tp_rank));
      }
    } else if (has("k_proj") || has("v_proj")) {
      continue;  // fused into qkv_proj with q_proj below
    } else if (has("q_proj")) {
      // vLLM's QKVParallelLinear: [q; k; v] of this rank's heads, one buffer.
      const std::string base = spec.name.substr(0, spec.name.find("q_proj"));
      BufferSpec qkv;
      qkv.name = base + "qkv_proj.weight";
      for (const char* part : {"q_proj.weight", "k_proj.weight", "v_proj.weight"}) {
        const int pi = indexOf(tensors, base + part);
        BufferSpec one = splitBuffer(tensors, pi, 0, tp, tp_rank);
        PieceSpec piece = one.pieces[0];
        piece.local_offset = qkv.num_elements;
        qkv.num_elements += one.num_elements;
        qkv.pieces.push_back(piece);
      }
      buffers.push_back(std::move(qkv));
    } else if (has("o_proj") || has("down_proj")) {
      buffers.push_back(splitBuffer(tensors, ti, 1, tp, tp_rank));  // row-parallel
    } else if (spec.shape.size() == 1) {
      buffers.push_back(boxBuffer(spec.name, ti, {0}, spec.shape));  // norms: replicated
    } else {
      buffers.push_back(
          splitBuffer(tensors, ti, 0, tp, tp_rank));  // column-parallel, vocab-parallel
    }
  }
  return buffers;
}

void fillTrainerBuffer(const std::vector<TensorSpec>& tensors, const BufferSpec& buffer,
                       uint64_t version, float* data) {
  for (const PieceSpec& p : buffer.pieces) {
    forEachRun(tensors[static_cast<size_t>(p.tensor)], p,
               [&](int64_t local, int64_t flat, int64_t run) {
                 for (int64_t i = 0; i < run; ++i)
                   data[local + i] = expectedValue(p.tensor, flat + i, version);
               });
  }
}

int64_t countMismatches(const std::vector<TensorSpec>& tensors, const BufferSpec& buffer,
                        wsync_dtype_t dtype, const void* data, uint64_t version,
                        std::string* first_error) {
  return countMismatchesInRange(tensors, buffer, dtype, data, version, 0, buffer.num_elements,
                                first_error);
}

int64_t countMismatchesInRange(const std::vector<TensorSpec>& tensors, const BufferSpec& buffer,
                               wsync_dtype_t dtype, const void* data, uint64_t version,
                               int64_t begin, int64_t count, std::string* first_error) {
  const int64_t end = std::min(buffer.num_elements, begin + count);
  int64_t bad = 0;
  for (const PieceSpec& p : buffer.pieces) {
    int64_t last = p.local_offset;  // the piece's last element in the buffer
    for (size_t d = 0; d < p.extent.size(); ++d)
      last += (p.extent[d] - 1) * p.strides[d];
    if (last < begin || p.local_offset >= end) continue;
    forEachRun(
        tensors[static_cast<size_t>(p.tensor)], p, [&](int64_t local, int64_t flat, int64_t run) {
          const int64_t from = std::max(local, begin);
          const int64_t to = std::min(local + run, end);
          for (int64_t e = from; e < to; ++e) {
            const int64_t g = flat + (e - local);
            const float want = expectedValue(p.tensor, g, version);
            const float got = toFloat(dtype, data, e - begin);
            if (got != want) {
              if (bad == 0 && first_error) {
                *first_error = "buffer '" + buffer.name + "' tensor '" +
                               tensors[static_cast<size_t>(p.tensor)].name + "' element " +
                               std::to_string(g) + ": got " + std::to_string(got) + ", want " +
                               std::to_string(want) + " (version " + std::to_string(version) + ")";
              }
              ++bad;
            }
          }
        });
  }
  return bad;
}

wsync_status_t registerBuffers(wsync_context_t ctx, const std::vector<TensorSpec>& tensors,
                               const std::vector<BufferSpec>& buffers, wsync_dtype_t dtype,
                               const std::vector<void*>& data, std::vector<int>* indices,
                               wsync_memory_kind_t memory) {
  indices->clear();
  for (size_t b = 0; b < buffers.size(); ++b) {
    const BufferSpec& buffer = buffers[b];
    std::vector<wsync_piece_t> pieces;
    for (const PieceSpec& p : buffer.pieces) {
      const TensorSpec& t = tensors[static_cast<size_t>(p.tensor)];
      wsync_piece_t c = WSYNC_PIECE_INITIALIZER;
      c.tensor = t.name.c_str();
      c.ndim = static_cast<int>(t.shape.size());
      c.global_shape = t.shape.data();
      c.box_offset = p.offset.data();
      c.box_extent = p.extent.data();
      c.local_offset = p.local_offset;
      c.local_strides = p.strides.data();
      pieces.push_back(c);
    }
    int index = -1;
    const wsync_status_t s = wsync_register_buffer(
        ctx, buffer.name.c_str(), dtype, memory, data.empty() ? nullptr : data[b],
        buffer.num_elements, static_cast<int>(pieces.size()), pieces.data(), &index);
    if (s != WSYNC_SUCCESS) return s;
    indices->push_back(index);
  }
  return WSYNC_SUCCESS;
}

void mpmdAppRank(int* index, int* count) {
  int* appnum = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, &appnum, &flag);
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  // Open MPI lists the size of every app context ("2 4"): no collective needed (a
  // wsync-coordinator rank in the job takes part in no collective of the demo).
  const char* sizes = std::getenv("OMPI_APP_CTX_NUM_PROCS");
  if (flag && sizes) {
    std::vector<int> size;
    for (char* p = const_cast<char*>(sizes); *p;) {
      char* end = nullptr;
      const long n = std::strtol(p, &end, 10);
      if (end == p) break;
      size.push_back(static_cast<int>(n));
      p = end;
    }
    if (*appnum >= 0 && static_cast<size_t>(*appnum) < size.size()) {
      int first = 0;
      for (int a = 0; a < *appnum; ++a)
        first += size[static_cast<size_t>(a)];
      *index = world_rank - first;
      *count = size[static_cast<size_t>(*appnum)];
      return;
    }
  }
  MPI_Comm app = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, flag ? *appnum : 0, world_rank, &app);
  MPI_Comm_rank(app, index);
  MPI_Comm_size(app, count);
  MPI_Comm_free(&app);
}

size_t dtypeBytes(wsync_dtype_t dtype) {
  return dtype == WSYNC_DTYPE_FLOAT32 ? 4 : 2;
}

bool parseDtype(const std::string& name, wsync_dtype_t* out) {
  if (name == "float32")
    *out = WSYNC_DTYPE_FLOAT32;
  else if (name == "bfloat16")
    *out = WSYNC_DTYPE_BFLOAT16;
  else if (name == "float16")
    *out = WSYNC_DTYPE_FLOAT16;
  else
    return false;
  return true;
}

}  // namespace wsync_demo
