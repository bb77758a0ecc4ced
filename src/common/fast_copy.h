// Bulk host copies for the one-sided write paths: 2-D copies that use non-temporal (streaming)
// stores for large copies when the CPU has AVX-512 or AVX2, and memcpy otherwise.
//
// Why: a weight version is written once and read later by another process, so caching it in the
// writer's core is useless; streaming stores skip the read-for-ownership of every target line.
// On the 2-core CI box, 2 KiB rows from a 4 KiB-pitch source into shared memory copy at ~7.6 GB/s
// with AVX-512 streaming stores against ~4.4 GB/s with memcpy per row.
#pragma once

#include <cstddef>

namespace wsync {

// How copy2d() copies large regions.
enum class HostCopyKind {
  kMemcpy,        // std::memcpy per row (or once when contiguous)
  kStreamAvx2,    // 32-byte non-temporal stores
  kStreamAvx512,  // 64-byte non-temporal stores
};

// The kind copy2d() uses: the widest streaming kind the CPU supports, unless preferHostCopy()
// asked for another (WSYNC_HOST_COPY, through the options module). Thread-safe.
HostCopyKind hostCopyKind();
// Makes copy2d() use `wanted` from now on in this process (a kind the CPU lacks falls back to the
// widest it has). Thread-safe.
void preferHostCopy(HostCopyKind wanted);
const char* hostCopyKindName(HostCopyKind kind);

// Copies `rows` rows of `row_bytes` bytes from `src` (rows `src_pitch` bytes apart) to `dst` (rows
// `dst_pitch` bytes apart). Source and target must not overlap; pitches are >= row_bytes when
// rows > 1. Rows that are contiguous on both sides are copied as one run. On return every byte is
// written and ordered before this thread's later stores (streaming stores are fenced), as after
// memcpy. Copies below kStreamMinBytes in total always use memcpy.
void copy2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
            size_t rows);
// The same with an explicit kind (a kind the CPU lacks: the widest it has). For tests.
void copy2dWith(HostCopyKind kind, void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                size_t row_bytes, size_t rows);

// One 2-D copy, as copy2d() takes it.
struct Copy2d {
  void* dst;
  size_t dst_pitch;
  const void* src;
  size_t src_pitch;
  size_t row_bytes;
  size_t rows;
};

// Runs `n` copies row by row: row 0 of each, then row 1 of each, and
// so on, so that copies whose source rows lie side by side (the column blocks of one row-major
// source, going to different targets) read the source once, in order. Each copy is copied as by
// copy2d() (kind, small-copy rule); complete and fenced on return.
void copy2dInterleaved(const Copy2d* copies, size_t n);

// Copies smaller than this (rows * row_bytes) go through memcpy: they may be read again soon from
// cache, and a fence per small copy would cost more than it saves.
inline constexpr size_t kStreamMinBytes = size_t{256} << 10;

}  // namespace wsync
