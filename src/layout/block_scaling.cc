#include "layout/block_scaling.h"

#include <algorithm>

namespace wsync {
namespace {

int64_t ceilDiv(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

const char* scaleFormatName(ScaleFormat f) {
  switch (f) {
    case ScaleFormat::kFloat32:
      return "float32";
    case ScaleFormat::kPow2Float32:
      return "pow2_float32";
    case ScaleFormat::kE8M0:
      return "e8m0";
    case ScaleFormat::kFloat32Gpu:
      return "float32_gpu";
  }
  return "unknown";
}

bool validScaleFormat(int value) {
  return value >= 1 && value <= kMaxScaleFormat;
}

DType scaleDType(ScaleFormat f) {
  return f == ScaleFormat::kE8M0 ? DType::kUInt8 : DType::kFloat32;
}

std::string describe(const BlockScaling& s) {
  return "block " + std::to_string(s.block_rows) + "x" + std::to_string(s.block_cols) + " " +
         scaleFormatName(s.format) + " scales";
}

std::string schemeTag(const BlockScaling& s) {
  return "fp8_b" + std::to_string(s.block_rows) + "x" + std::to_string(s.block_cols) + "_" +
         scaleFormatName(s.format);
}

std::string checkBlockScaling(const BlockScaling& s, const Dims& shape) {
  if (!validScaleFormat(static_cast<int>(s.format))) return "unknown scale format";
  if (s.block_rows < 1 || s.block_cols < 1) {
    return "block " + std::to_string(s.block_rows) + "x" + std::to_string(s.block_cols) +
           " has an extent below 1";
  }
  if (shape.size() < 2) {
    return "block scaling needs a weight of rank >= 2, not shape " + shape.toString();
  }
  if (s.format == ScaleFormat::kE8M0) {
    const int64_t cols = shape[shape.size() - 1];
    if (s.block_rows != 1) {
      return "e8m0 (MX) scales take blocks of 1 row, not " + std::to_string(s.block_rows);
    }
    if (cols % s.block_cols != 0) {
      return "e8m0 (MX) scales need the last dim (" + std::to_string(cols) +
             ") to be a multiple of the block (" + std::to_string(s.block_cols) + ")";
    }
  }
  if (s.scale_tensor.empty()) return "no scale tensor name";
  return {};
}

Dims scaleShape(const Dims& shape, const BlockScaling& s) {
  Dims out = shape;
  const int r = shape.size();
  out[r - 2] = ceilDiv(shape[r - 2], s.block_rows);
  out[r - 1] = ceilDiv(shape[r - 1], s.block_cols);
  return out;
}

Box blockBox(const Dims& block, const Dims& shape, const BlockScaling& s) {
  const int r = shape.size();
  Box b;
  b.offset = block;
  b.extent = Dims::filled(r, 1);
  const int64_t size[2] = {s.block_rows, s.block_cols};
  for (int k = 0; k < 2; ++k) {
    const int d = r - 2 + k;
    b.offset[d] = block[d] * size[k];
    b.extent[d] = std::max<int64_t>(0, std::min(size[k], shape[d] - b.offset[d]));
  }
  return b;
}

Box blockCover(const Box& box, const BlockScaling& s) {
  const int r = box.rank();
  Box c = box;
  const int64_t size[2] = {s.block_rows, s.block_cols};
  for (int k = 0; k < 2; ++k) {
    const int d = r - 2 + k;
    const int64_t first = box.offset[d] / size[k];
    const int64_t end = box.extent[d] <= 0 ? first : ceilDiv(box.end(d), size[k]);
    c.offset[d] = first;
    c.extent[d] = end - first;
  }
  return c;
}

bool coversBlock(const Box& box, const Dims& block, const Dims& shape, const BlockScaling& s) {
  return box.contains(blockBox(block, shape, s));
}

}  // namespace wsync
