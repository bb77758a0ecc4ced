// libFuzzer target: delta patches (src/delta/delta_patch.h) arrive from trainers over the network;
// validatePatch / applyPatch must refuse anything malformed without reading or writing out of
// bounds. The first bytes pick the region's shape, the rest is the patch.
#include <cstdint>
#include <cstring>
#include <vector>

#include "delta/delta_patch.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const int elem_bytes = 1 << (data[0] % 4);
  const int64_t chunk_elements = 1 + (data[1] | (data[2] << 8)) % 4096;
  const int64_t num_elements = data[3] * 37;
  wsync::delta::PatchShape shape;
  shape.num_elements = num_elements;
  shape.elem_bytes = elem_bytes;
  shape.chunk_elements = chunk_elements;
  std::vector<uint8_t> base(num_elements * elem_bytes, 0x11), out(base.size(), 0x22);
  const wsync::Status s =
      wsync::delta::applyPatch(shape, data + 4, size - 4, base.data(), out.data());
  if (!s.isOk() && out != std::vector<uint8_t>(base.size(), 0x22)) __builtin_trap();
  // A patch that applied re-encodes to one that applies to the same result.
  if (s.isOk()) {
    std::vector<uint8_t> again;
    if (!wsync::delta::encodePatch(shape, base.data(), out.data(), &again).isOk()) __builtin_trap();
    std::vector<uint8_t> out2(base.size());
    if (!wsync::delta::applyPatch(shape, again.data(), again.size(), base.data(), out2.data())
             .isOk() ||
        out2 != out)
      __builtin_trap();
  }
  return 0;
}
