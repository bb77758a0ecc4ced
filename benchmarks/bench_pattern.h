// The device kernels' view (bench_device.h PatternPiece) of the demo policy's buffers, shared by
// the benchmarks that fill and check device memory (wsync-sync-bench, wsync-cold-start-bench).
#pragma once

#include <string>
#include <vector>

#include "bench_device.h"
#include "models/demo_policy.h"

namespace wsync_bench {

// Every piece of `layout`, buffer b at data[b]; buffer_of[i] is the buffer of piece i. Tensors of
// rank 1 and 2 with row-major boxes only (all of the demo policy's); false with `error` naming the
// tensor and buffer otherwise.
bool patternPieces(const std::vector<wsync_demo::TensorSpec>& tensors,
                   const std::vector<wsync_demo::BufferSpec>& layout,
                   const std::vector<void*>& data, std::vector<size_t>* buffer_of,
                   std::vector<PatternPiece>* pieces, std::string* error);

}  // namespace wsync_bench
