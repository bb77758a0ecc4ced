// wsync_block_quant_cli SPEC: block-quantizes a raw weight piece-wise with the host quantizer
// (quant/block_quant.h), for tests/python/test_block_quant_vllm.py to compare with vLLM's own
// quantizers. Each piece is copied into its own strided buffer (padded rows, garbage in the
// padding), then amax per piece -> mergeAmax -> scalesFromAmax -> quantizeBlocksHost per piece,
// on every host path the CPU has (they must agree, else exit 3).
// SPEC, one item per line:
//   dtype <float32|bfloat16|float16>
//   shape <d0> <d1> [<d2>]
//   block <rows> <cols>
//   format <float32|pow2_float32|e8m0>
//   input <raw row-major weight file>
//   values <output: e4m3 bytes, row-major>
//   scales <output: float32 (little-endian) or e8m0 bytes, row-major over the scale grid>
//   piece <offset...> <extent...>        (one line per piece; the pieces tile the weight)
// Exit 0 on success, 2 on a bad spec or I/O error (message on stderr).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "support/block_quant_testing.h"

namespace {

using namespace wsync;
namespace bqt = wsync::block_quant_testing;

int fail(const std::string& why) {
  std::cerr << "wsync_block_quant_cli: " << why << "\n";
  return 2;
}

Dims readDims(std::istringstream& in) {
  Dims d;
  int64_t v;
  while (in >> v)
    d.v[d.rank++] = v;
  return d;
}

bool writeFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(out);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return fail("usage: wsync_block_quant_cli SPEC");
  std::ifstream spec(argv[1]);
  if (!spec) return fail(std::string("cannot read ") + argv[1]);
  bqt::HostTensor t;
  BlockScaling s;
  s.scale_tensor = "scales";
  std::string input, values_path, scales_path;
  std::vector<Dims> piece_dims;
  std::string line;
  while (std::getline(spec, line)) {
    std::istringstream in(line);
    std::string key;
    if (!(in >> key)) continue;
    if (key == "dtype") {
      std::string name;
      in >> name;
      const auto d = parseDType(name);
      if (!d) return fail("unknown dtype " + name);
      t.dtype = *d;
    } else if (key == "shape") {
      t.shape = readDims(in);
    } else if (key == "block") {
      in >> s.block_rows >> s.block_cols;
    } else if (key == "format") {
      std::string f;
      in >> f;
      if (f == "float32")
        s.format = ScaleFormat::kFloat32;
      else if (f == "pow2_float32")
        s.format = ScaleFormat::kPow2Float32;
      else if (f == "e8m0")
        s.format = ScaleFormat::kE8M0;
      else
        return fail("unknown format " + f);
    } else if (key == "input") {
      in >> input;
    } else if (key == "values") {
      in >> values_path;
    } else if (key == "scales") {
      in >> scales_path;
    } else if (key == "piece") {
      piece_dims.push_back(readDims(in));
    } else {
      return fail("unknown spec key " + key);
    }
  }
  std::ifstream raw(input, std::ios::binary);
  t.bytes.assign(std::istreambuf_iterator<char>(raw), std::istreambuf_iterator<char>());
  if (t.shape.size() < 2 ||
      t.bytes.size() != static_cast<size_t>(t.shape.product()) * t.elementSize()) {
    return fail("input " + input + " holds " + std::to_string(t.bytes.size()) + " bytes, not a " +
                dtypeName(t.dtype) + " weight of shape " + t.shape.toString());
  }
  std::mt19937_64 rng(12345);
  std::vector<bqt::HeldPiece> pieces;
  const int r = t.shape.size();
  for (const Dims& d : piece_dims) {
    if (d.size() != 2 * r) return fail("a piece line needs " + std::to_string(2 * r) + " numbers");
    Box b;
    b.offset = Dims::zeros(r);
    b.extent = Dims::zeros(r);
    for (int i = 0; i < r; ++i) {
      b.offset[i] = d[i];
      b.extent[i] = d[r + i];
    }
    pieces.push_back(bqt::holdPiece(rng, t, b, 7));
  }
  bqt::Quantized first;
  bool have_first = false;
  for (HostQuantKernel k : {HostQuantKernel::kScalar, HostQuantKernel::kAvx512}) {
    if (!hostQuantKernelAvailable(k)) continue;
    bqt::Quantized q;
    const Status st = bqt::quantizePiecewiseHost(k, pieces, t.shape, s, &q);
    if (!st) return fail(st.toString());
    if (have_first && !(q == first)) {
      std::cerr << "wsync_block_quant_cli: " << hostQuantKernelName(k) << " differs from scalar\n";
      return 3;
    }
    first = q;
    have_first = true;
  }
  if (!writeFile(values_path, first.values) || !writeFile(scales_path, first.scales)) {
    return fail("cannot write the outputs");
  }
  return 0;
}
