// The shard checksum (checksum/checksum.h) of many spans in device memory, in one kernel launch:
// each thread block sums one tile (up to kChecksumTileWords words of one span), reduces it with
// CUB's BlockReduce and adds it to its span's output with one 64-bit atomic add (sums are mod
// 2^64, so the order of the adds does not matter). The result equals the host's accumulateChecksums
// over the same spans and bytes.
//
// Contract: spans live in device memory, sorted by first_tile, with first_tile the running sum of
// checksumTilesOf() of the spans before (planChecksumTiles fills it); every span's bytes
// (base + span.src, or span.src as an address when base is null) are device memory readable on
// `stream`'s device; device_active has an entry for every span's output and device_sums one
// (zeroed by the caller when it wants the sums alone). Launches return at once; errors during
// execution surface at the stream's next synchronization. Thread-safe.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "checksum/checksum.h"
#include "common/status.h"

namespace wsync {

// Words (8 bytes) one thread block sums per tile: floor(kChecksumTileWords / words per run)
// consecutive runs of a plane when runs are shorter, else a kChecksumTileWords piece of one run.
inline constexpr uint64_t kChecksumTileWords = 8192;

// The tiles of `span` (0 for an empty span).
uint64_t checksumTilesOf(const ChecksumSpan& span);

// Sets first_tile of every span (in order) and returns the total number of tiles.
uint64_t planChecksumTiles(std::vector<ChecksumSpan>& spans);

// Adds each active span's checksum to device_sums[span.output] on `stream`. INVALID_ARGUMENT for
// null arrays with num_spans > 0.
Status launchChecksums(const ChecksumSpan* device_spans, int64_t num_spans, uint64_t total_tiles,
                       const uint8_t* base, const uint8_t* device_active, uint64_t* device_sums,
                       cudaStream_t stream);

}  // namespace wsync
