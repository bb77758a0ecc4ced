#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "common/status.h"
#include "common/wire.h"
#include "layout/box.h"
#include "layout/dtype.h"
#include "layout/registration.h"

namespace wsync {
namespace {

TEST(DType, SizesAndNamesRoundTrip) {
  const std::pair<DType, size_t> expected[] = {
      {DType::kFloat32, 4},    {DType::kBFloat16, 2}, {DType::kFloat16, 2}, {DType::kFloat8E4M3, 1},
      {DType::kFloat8E5M2, 1}, {DType::kInt8, 1},     {DType::kInt16, 2},   {DType::kInt32, 4},
      {DType::kInt64, 8},      {DType::kUInt8, 1},    {DType::kBool, 1}};
  for (auto [t, size] : expected) {
    EXPECT_EQ(dtypeSize(t), size) << dtypeName(t);
    EXPECT_EQ(parseDType(dtypeName(t)), t);
  }
  EXPECT_EQ(parseDType("torch.bfloat16"), DType::kBFloat16);
  EXPECT_EQ(parseDType("half"), DType::kFloat16);
  EXPECT_FALSE(parseDType("complex64").has_value());
  EXPECT_FALSE(validDType(kNumDTypes));
  EXPECT_FALSE(validDType(-1));
}

TEST(DType, Conversions) {
  EXPECT_TRUE(canConvert(DType::kFloat32, DType::kBFloat16));
  EXPECT_TRUE(canConvert(DType::kBFloat16, DType::kFloat8E4M3));
  EXPECT_TRUE(canConvert(DType::kInt64, DType::kInt64));
  EXPECT_FALSE(canConvert(DType::kInt32, DType::kFloat32));
  EXPECT_FALSE(canConvert(DType::kBool, DType::kUInt8));
  EXPECT_FALSE(canConvert(DType::kFloat8E4M3, DType::kFloat8E5M2));
  EXPECT_TRUE(canConvert(DType::kFloat8E5M2, DType::kFloat32));
}

TEST(Box, IntersectOverlapContain) {
  const Box a{{0, 0}, {4, 8}};
  const Box b{{2, 6}, {4, 4}};
  const Box i = intersect(a, b);
  EXPECT_EQ(i, (Box{{2, 6}, {2, 2}}));
  EXPECT_TRUE(overlaps(a, b));
  EXPECT_FALSE(overlaps(a, Box{{4, 0}, {1, 8}}));  // touching is not overlapping
  EXPECT_TRUE(intersect(a, Box{{4, 0}, {1, 8}}).empty());
  EXPECT_TRUE(a.contains(i));
  EXPECT_FALSE(i.contains(a));
  EXPECT_TRUE(a.fitsIn({4, 8}));
  EXPECT_FALSE(b.fitsIn({4, 8}));
  EXPECT_EQ(a.toString(), "[0:4, 0:8]");
  EXPECT_EQ(rowMajorStrides({2, 3, 4}), (Dims{12, 4, 1}));
}

// Every 2-D box with offsets in [0, 3] and extents in [0, 3] (empty ones included).
std::vector<Box> smallBoxes2d() {
  std::vector<Box> boxes;
  for (int64_t o0 = 0; o0 < 4; ++o0) {
    for (int64_t o1 = 0; o1 < 4; ++o1) {
      for (int64_t e0 = 0; e0 < 4; ++e0) {
        for (int64_t e1 = 0; e1 < 4; ++e1)
          boxes.push_back(Box{{o0, o1}, {e0, e1}});
      }
    }
  }
  return boxes;
}

bool holds(const Box& b, int64_t x, int64_t y) {
  return x >= b.offset[0] && x < b.end(0) && y >= b.offset[1] && y < b.end(1);
}

TEST(Box, IntersectIntoAgreesWithIntersect) {
  const std::vector<Box> boxes = smallBoxes2d();
  int met = 0;
  for (const Box& a : boxes) {
    for (const Box& b : boxes) {
      const Box expected = intersect(a, b);
      Box out;
      const bool meet = intersectInto(a, b, &out);
      ASSERT_EQ(meet, !expected.empty()) << a.toString() << " " << b.toString();
      ASSERT_EQ(meet, overlaps(a, b)) << a.toString() << " " << b.toString();
      if (meet) {
        ASSERT_EQ(out, expected) << a.toString() << " " << b.toString();
        ++met;
      }
    }
  }
  EXPECT_GT(met, 1000);
  Box out{{7}, {7}};
  EXPECT_FALSE(intersectInto(Box{{0}, {4}}, Box{{4}, {2}}, &out));  // touching
  EXPECT_TRUE(intersectInto(Box{}, Box{}, &out));                   // rank 0: the one element
  EXPECT_EQ(out.rank(), 0);
  EXPECT_EQ(out.volume(), 1);
}

TEST(Box, OrderByOffsetThenExtent) {
  const Box a{{0, 5}, {2, 1}};
  const Box b{{1, 0}, {1, 1}};
  const Box c{{1, 0}, {2, 1}};
  EXPECT_LT(compareBoxes(a, b), 0);  // dim 0 offset decides before dim 1
  EXPECT_LT(compareBoxes(b, c), 0);  // same offset: the extent decides
  EXPECT_GT(compareBoxes(c, b), 0);
  EXPECT_EQ(compareBoxes(c, Box{{1, 0}, {2, 1}}), 0);
  EXPECT_TRUE(boxLess(a, b));
  EXPECT_FALSE(boxLess(c, c));
  EXPECT_FALSE(offsetLess(b, c));  // offsetLess ignores the extents
  EXPECT_FALSE(offsetLess(c, b));
  EXPECT_TRUE(offsetLess(a, b));
  // A strict weak order over all small boxes, consistent with ==.
  const std::vector<Box> boxes = smallBoxes2d();
  for (const Box& x : boxes) {
    for (const Box& y : boxes) {
      const int xy = compareBoxes(x, y);
      ASSERT_EQ(xy, -compareBoxes(y, x));
      ASSERT_EQ(xy == 0, x == y);
      ASSERT_EQ(boxLess(x, y), xy < 0);
    }
  }
}

TEST(Box, DifferenceIsDisjointAndCoversExactlyWhatIsOutside) {
  const Box a{{0, 0}, {4, 4}};
  std::vector<Box> out;
  appendDifference(a, Box{{1, 1}, {1, 2}}, &out);
  // Cut along dim 0 first (below, then above), then along dim 1 inside b's rows.
  const std::vector<Box> expected = {Box{{0, 0}, {1, 4}}, Box{{2, 0}, {2, 4}}, Box{{1, 0}, {1, 1}},
                                     Box{{1, 3}, {1, 1}}};
  EXPECT_EQ(out, expected);

  const std::vector<Box> boxes = smallBoxes2d();
  for (const Box& x : boxes) {
    if (x.empty()) continue;
    for (const Box& y : boxes) {
      out.clear();
      appendDifference(x, y, &out);
      if (!overlaps(x, y)) {
        ASSERT_EQ(out, std::vector<Box>{x}) << x.toString() << " \\ " << y.toString();
        continue;
      }
      ASSERT_LE(out.size(), 4u);
      for (int64_t i = 0; i < 8; ++i) {
        for (int64_t j = 0; j < 8; ++j) {
          int covered = 0;
          for (const Box& part : out)
            covered += holds(part, i, j) ? 1 : 0;
          const int want = holds(x, i, j) && !holds(y, i, j) ? 1 : 0;
          ASSERT_EQ(covered, want)
              << x.toString() << " \\ " << y.toString() << " at " << i << ", " << j;
        }
      }
    }
  }
  out.clear();
  appendDifference(Box{}, Box{}, &out);  // rank 0: equal scalars leave nothing
  EXPECT_TRUE(out.empty());
}

TEST(Box, SubtractFromEachRemovesEveryCutBox) {
  std::vector<Box> parts = {Box{{0, 0}, {6, 6}}};
  std::vector<Box> scratch = {Box{{9, 9}, {1, 1}}};  // its contents do not matter
  const std::vector<Box> cuts = {Box{{1, 1}, {2, 2}}, Box{{2, 0}, {4, 3}}, Box{{5, 5}, {3, 3}}};
  for (const Box& cut : cuts)
    subtractFromEach(&parts, cut, &scratch);
  int64_t volume = 0;
  for (const Box& p : parts)
    volume += p.volume();
  int64_t expected = 0;
  for (int64_t i = 0; i < 6; ++i) {
    for (int64_t j = 0; j < 6; ++j) {
      bool cut = false;
      for (const Box& c : cuts)
        cut = cut || holds(c, i, j);
      int covered = 0;
      for (const Box& p : parts)
        covered += holds(p, i, j) ? 1 : 0;
      ASSERT_EQ(covered, cut ? 0 : 1) << i << ", " << j;
      expected += cut ? 0 : 1;
    }
  }
  EXPECT_EQ(volume, expected);
  EXPECT_EQ(expected, 36 - 4 - 10 - 1);
}

TEST(Registration, DeclareTensorIsIdempotentAndChecksShape) {
  Registration r;
  EXPECT_EQ(r.declareTensor("w", {2, 3}), 0);
  EXPECT_EQ(r.declareTensor("v", {5}), 1);
  EXPECT_EQ(r.declareTensor("w", {2, 3}), 0);
  EXPECT_EQ(r.declareTensor("w", {3, 2}), -1);
  r.tensors.push_back({"u", {1}});  // direct edits keep the index right
  EXPECT_EQ(r.declareTensor("u", {1}), 2);
}

// A piece whose fields all depend on `k`, to tell pieces apart.
Piece pieceNo(int32_t k) {
  return {k, Box{{k, 0}, {1, k + 1}}, 10 * k, Dims{k + 1, 1}};
}

void expectPiece(const Piece& p, int32_t k) {
  EXPECT_EQ(p.tensor, k);
  EXPECT_EQ(p.box, (Box{{k, 0}, {1, k + 1}}));
  EXPECT_EQ(p.local_offset, 10 * k);
  EXPECT_EQ(p.local_strides, (Dims{k + 1, 1}));
}

TEST(PieceList, OnePieceLivesInsideTheBuffer) {
  LocalBuffer buf;
  EXPECT_TRUE(buf.pieces.empty());
  buf.pieces.push_back(pieceNo(3));
  ASSERT_EQ(buf.pieces.size(), 1u);
  EXPECT_EQ(buf.pieces.capacity(), 1u);
  const auto* begin = reinterpret_cast<const char*>(&buf);
  const auto* piece = reinterpret_cast<const char*>(buf.pieces.data());
  EXPECT_GE(piece, begin);  // no heap block of its own
  EXPECT_LE(piece + sizeof(Piece), begin + sizeof(LocalBuffer));
  expectPiece(buf.pieces[0], 3);
  expectPiece(buf.pieces.front(), 3);
  expectPiece(buf.pieces.back(), 3);
}

TEST(PieceList, GrowsCopiesAndMovesLikeAVector) {
  PieceList list;
  for (int32_t k = 0; k < 20; ++k) {
    list.push_back(pieceNo(k));
    ASSERT_EQ(list.size(), static_cast<size_t>(k) + 1);
    ASSERT_GE(list.capacity(), list.size());
  }
  int32_t k = 0;
  for (const Piece& p : list)
    expectPiece(p, k++);
  EXPECT_EQ(k, 20);

  PieceList copy = list;  // deep
  copy[0].tensor = 99;
  EXPECT_EQ(list[0].tensor, 0);
  expectPiece(copy[19], 19);

  PieceList moved = std::move(copy);
  EXPECT_TRUE(copy.empty());  // NOLINT(bugprone-use-after-move): moved-from is empty
  ASSERT_EQ(moved.size(), 20u);
  EXPECT_EQ(moved[0].tensor, 99);

  PieceList one{pieceNo(7)};
  PieceList moved_one = std::move(one);
  ASSERT_EQ(moved_one.size(), 1u);
  expectPiece(moved_one[0], 7);
  moved = moved_one;  // heap -> inline by assignment
  ASSERT_EQ(moved.size(), 1u);
  expectPiece(moved[0], 7);
  moved_one = list;  // inline -> heap
  ASSERT_EQ(moved_one.size(), 20u);
  expectPiece(moved_one[12], 12);
  const PieceList& alias = moved_one;
  moved_one = alias;  // self-assignment keeps the pieces
  ASSERT_EQ(moved_one.size(), 20u);
  expectPiece(moved_one[19], 19);
}

TEST(PieceList, PushBackOfItsOwnElementWhileGrowing) {
  PieceList list{pieceNo(1)};
  list.push_back(list[0]);  // reallocates: the argument must be read before
  list.push_back(list[1]);
  ASSERT_EQ(list.size(), 3u);
  for (const Piece& p : list)
    expectPiece(p, 1);
}

TEST(PieceList, ResizeEmplaceClearAndShrink) {
  PieceList list(3);
  ASSERT_EQ(list.size(), 3u);
  for (const Piece& p : list) {
    EXPECT_EQ(p.tensor, -1);  // Piece{}
    EXPECT_EQ(p.local_offset, 0);
  }
  Piece& added = list.emplace_back();
  added.tensor = 5;
  ASSERT_EQ(list.size(), 4u);
  EXPECT_EQ(list.back().tensor, 5);
  list.resize(1);
  list.shrink_to_fit();  // back to the inline piece
  EXPECT_EQ(list.capacity(), 1u);
  EXPECT_EQ(list[0].tensor, -1);
  list.clear();
  EXPECT_TRUE(list.empty());
  EXPECT_EQ(list.begin(), list.end());
  list.reserve(8);
  EXPECT_EQ(list.capacity(), 8u);
  list.shrink_to_fit();  // empty: back inline
  EXPECT_EQ(list.capacity(), 1u);
}

TEST(Wire, RoundTripAndTruncation) {
  ByteWriter w;
  w.varu(300);
  w.vari(-5);
  w.str("qkv");
  w.fixed64(0x0102030405060708ULL);
  const auto bytes = w.take();
  ByteReader r(bytes);
  uint64_t u = 0, f = 0;
  int64_t i = 0;
  std::string s;
  ASSERT_TRUE(r.varu(u) && r.vari(i) && r.str(s, 16) && r.fixed64(f));
  EXPECT_EQ(u, 300u);
  EXPECT_EQ(i, -5);
  EXPECT_EQ(s, "qkv");
  EXPECT_EQ(f, 0x0102030405060708ULL);
  EXPECT_TRUE(r.atEnd());
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    ByteReader t(bytes.data(), cut);
    const bool all = t.varu(u) && t.vari(i) && t.str(s, 16) && t.fixed64(f);
    EXPECT_FALSE(all) << "cut at " << cut;
    EXPECT_FALSE(t.ok());
  }
  ByteReader bounded(bytes);
  EXPECT_FALSE(bounded.varuMax(u, 299));  // over the caller's bound
  EXPECT_FALSE(bounded.ok());
}

TEST(Status, CodesAndContext) {
  const Status s = mismatch("tensor 'w'").withContext("commit");
  EXPECT_EQ(s.code(), WSYNC_ERR_MISMATCH);
  EXPECT_EQ(s.toString(), "WSYNC_ERR_MISMATCH: commit: tensor 'w'");
  EXPECT_TRUE(Status::ok().withContext("x").isOk());
  Result<int> r = timeoutError("late");
  EXPECT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), WSYNC_ERR_TIMEOUT);
}

}  // namespace
}  // namespace wsync
