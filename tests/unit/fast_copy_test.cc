// copy2d: every kind copies exactly the rows asked for, whatever the alignment, row length and
// pitches, and writes nothing else.
#include "common/fast_copy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace wsync {
namespace {

struct Shape {
  size_t row_bytes;
  size_t rows;
  size_t src_pitch;
  size_t dst_pitch;
  size_t src_shift;  // bytes past an aligned start, to exercise unaligned heads
  size_t dst_shift;
};

// Copies with `kind` into a canary-filled buffer and checks every byte of it.
void checkCopy(HostCopyKind kind, const Shape& sh) {
  const size_t src_bytes = sh.src_shift + (sh.rows - 1) * sh.src_pitch + sh.row_bytes;
  const size_t dst_bytes = sh.dst_shift + (sh.rows - 1) * sh.dst_pitch + sh.row_bytes + 64;
  std::vector<uint8_t> src(src_bytes);
  for (size_t i = 0; i < src.size(); ++i)
    src[i] = static_cast<uint8_t>(i * 131 + 7);
  std::vector<uint8_t> dst(dst_bytes, 0xA5);
  copy2dWith(kind, dst.data() + sh.dst_shift, sh.dst_pitch, src.data() + sh.src_shift, sh.src_pitch,
             sh.row_bytes, sh.rows);
  const std::string what = std::string(hostCopyKindName(kind)) + " rows " +
                           std::to_string(sh.rows) + " x " + std::to_string(sh.row_bytes) +
                           " pitches " + std::to_string(sh.src_pitch) + "/" +
                           std::to_string(sh.dst_pitch) + " shifts " +
                           std::to_string(sh.src_shift) + "/" + std::to_string(sh.dst_shift);
  size_t wrong = 0;
  for (size_t i = 0; i < dst.size(); ++i) {
    uint8_t expected = 0xA5;
    if (i >= sh.dst_shift) {
      const size_t off = i - sh.dst_shift;
      const size_t pitch = sh.rows == 1 ? dst.size() : sh.dst_pitch;  // one row: pitch unused
      const size_t row = off / pitch;
      const size_t col = off % pitch;
      if (row < sh.rows && col < sh.row_bytes)
        expected = src[sh.src_shift + row * sh.src_pitch + col];
    }
    if (dst[i] != expected) ++wrong;
  }
  EXPECT_EQ(wrong, 0u) << what;
}

const HostCopyKind kKinds[] = {HostCopyKind::kMemcpy, HostCopyKind::kStreamAvx2,
                               HostCopyKind::kStreamAvx512};

TEST(FastCopy, LargeStridedRowsEveryKindAndAlignment) {
  // Large enough to take the streaming path (kStreamMinBytes) with rows of various lengths.
  for (HostCopyKind kind : kKinds) {
    for (size_t row : {size_t{256}, size_t{2048}, size_t{2048 + 40}, size_t{6144 + 63}}) {
      const size_t rows = kStreamMinBytes / row + 3;
      for (size_t shift : {size_t{0}, size_t{1}, size_t{33}}) {
        checkCopy(kind, {row, rows, 2 * row + 16, row, shift, (shift * 7) % 64});
        checkCopy(kind, {row, rows, row, row + 8, 64 - shift, shift});
      }
    }
  }
}

TEST(FastCopy, ContiguousRunsAndSingleRows) {
  for (HostCopyKind kind : kKinds) {
    checkCopy(kind, {4096, 300, 4096, 4096, 3, 5});               // contiguous: one run
    checkCopy(kind, {kStreamMinBytes * 2 + 13, 1, 0, 0, 0, 17});  // one long row
    checkCopy(kind, {kStreamMinBytes + 1, 1, 0, 0, 9, 0});
  }
}

TEST(FastCopy, SmallAndNarrowCopiesUseMemcpyPathCorrectly) {
  for (HostCopyKind kind : kKinds) {
    checkCopy(kind, {100, 5, 300, 128, 1, 2});                      // small total
    checkCopy(kind, {16, kStreamMinBytes / 16 + 1, 48, 16, 0, 3});  // narrow rows, large total
    checkCopy(kind, {1, 1, 0, 0, 0, 0});
  }
}

TEST(FastCopy, EmptyCopiesWriteNothing) {
  std::vector<uint8_t> dst(64, 0xA5);
  const std::vector<uint8_t> src(64, 1);
  for (HostCopyKind kind : kKinds) {
    copy2dWith(kind, dst.data(), 8, src.data(), 8, 0, 4);
    copy2dWith(kind, dst.data(), 8, src.data(), 8, 8, 0);
  }
  for (uint8_t b : dst)
    EXPECT_EQ(b, 0xA5);
}

// Three copies taking the adjoining column blocks of one row-major source (as the column shards
// of one tensor for three ranks), plus one with other rows: each lands exactly in its target.
TEST(FastCopy, InterleavedCopiesLandLikeSeparateOnes) {
  const size_t rows = 300;
  const size_t widths[3] = {2048, 1024 + 8, 4096 - 8};
  const size_t src_pitch = widths[0] + widths[1] + widths[2] + 64;
  std::vector<uint8_t> src(rows * src_pitch + 8192);
  for (size_t i = 0; i < src.size(); ++i)
    src[i] = static_cast<uint8_t>(i * 29 + 3);
  std::vector<std::vector<uint8_t>> dst(4);
  std::vector<Copy2d> copies;
  size_t col = 0;
  for (size_t k = 0; k < 3; ++k) {
    dst[k].assign(rows * widths[k] + 1, 0xA5);  // contiguous target rows, one canary byte
    copies.push_back({dst[k].data(), widths[k], src.data() + col, src_pitch, widths[k], rows});
    col += widths[k];
  }
  dst[3].assign(5 * 3000 + 1, 0xA5);
  copies.push_back({dst[3].data(), 3000, src.data() + 7, 4000, 3000, 5});
  copy2dInterleaved(copies.data(), copies.size());
  for (size_t k = 0; k < copies.size(); ++k) {
    const Copy2d& c = copies[k];
    size_t wrong = 0;
    for (size_t r = 0; r < c.rows; ++r) {
      for (size_t b = 0; b < c.row_bytes; ++b) {
        const uint8_t expected = static_cast<const uint8_t*>(c.src)[r * c.src_pitch + b];
        if (dst[k][r * c.dst_pitch + b] != expected) ++wrong;
      }
    }
    EXPECT_EQ(wrong, 0u) << "copy " << k;
    EXPECT_EQ(dst[k].back(), 0xA5) << "copy " << k << " wrote past its target";
  }
}

TEST(FastCopy, ChosenKindHasAName) {
  const std::string name = hostCopyKindName(hostCopyKind());
  EXPECT_TRUE(name == "memcpy" || name == "avx2" || name == "avx512") << name;
}

}  // namespace
}  // namespace wsync
