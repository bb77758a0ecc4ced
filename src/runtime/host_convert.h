// dtype conversion on host memory (the sender converts, so fewer bytes travel). Eigen does the
// arithmetic (round-to-nearest-even for bfloat16 and float16).
#pragma once

#include <cstdint>

#include "common/status.h"
#include "layout/dtype.h"

namespace wsync {

// Identical dtypes, or any pair among float32, bfloat16 and float16.
bool hostCanConvert(DType from, DType to);

// Converts `count` contiguous elements. `src` and `dst` must not overlap.
// UNSUPPORTED when !hostCanConvert(from, to).
Status convertHost(const void* src, DType from, void* dst, DType to, int64_t count);

}  // namespace wsync
