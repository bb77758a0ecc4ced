#include "bench_pattern.h"

namespace wsync_bench {

bool patternPieces(const std::vector<wsync_demo::TensorSpec>& tensors,
                   const std::vector<wsync_demo::BufferSpec>& layout,
                   const std::vector<void*>& data, std::vector<size_t>* buffer_of,
                   std::vector<PatternPiece>* pieces, std::string* error) {
  pieces->clear();
  buffer_of->clear();
  for (size_t b = 0; b < layout.size(); ++b) {
    for (const wsync_demo::PieceSpec& p : layout[b].pieces) {
      const wsync_demo::TensorSpec& t = tensors[static_cast<size_t>(p.tensor)];
      PatternPiece q;
      q.data = data[b];
      q.tensor = p.tensor;
      q.local_offset = p.local_offset;
      if (t.shape.size() == 1 && p.strides[0] == 1) {
        q.rows = 1;
        q.cols = p.extent[0];
        q.local_row_stride = q.cols;
        q.flat_base = p.offset[0];
        q.global_row_stride = t.shape[0];
      } else if (t.shape.size() == 2 && p.strides[1] == 1) {
        q.rows = p.extent[0];
        q.cols = p.extent[1];
        q.local_row_stride = p.strides[0];
        q.flat_base = p.offset[0] * t.shape[1] + p.offset[1];
        q.global_row_stride = t.shape[1];
      } else {
        *error = "tensor '" + t.name + "' (buffer '" + layout[b].name + "') has rank " +
                 std::to_string(t.shape.size()) +
                 " or a strided innermost dim: the device check handles row-major boxes of rank "
                 "1 and 2";
        return false;
      }
      pieces->push_back(q);
      buffer_of->push_back(b);
    }
  }
  return true;
}

}  // namespace wsync_bench
