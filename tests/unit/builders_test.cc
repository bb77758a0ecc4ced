#include "layout/builders.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

namespace wsync {
namespace {

std::vector<int64_t> sizesOf(int64_t n, int parts, SplitRule rule) {
  std::vector<int64_t> sizes;
  int64_t next = 0;
  for (int i = 0; i < parts; ++i) {
    Result<IndexRange> r = splitRange(n, parts, i, rule);
    EXPECT_TRUE(r.isOk()) << r.status().toString();
    if (!r.isOk()) return {};
    EXPECT_EQ(r->begin, next) << "parts must be contiguous, n " << n << " part " << i;
    next = r->begin + r->size;
    sizes.push_back(r->size);
  }
  EXPECT_EQ(next, n);
  return sizes;
}

// Index (per dim) of the element at row-major flat index `flat` of `shape`.
Dims unravel(const Dims& shape, int64_t flat) {
  Dims idx = Dims::zeros(shape.rank);
  for (int d = shape.rank - 1; d >= 0; --d) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}

bool boxHolds(const Box& box, const Dims& idx) {
  for (int d = 0; d < box.rank(); ++d) {
    if (idx[d] < box.offset[d] || idx[d] >= box.end(d)) return false;
  }
  return true;
}

int64_t localIndex(const Piece& p, const Dims& idx) {
  int64_t local = p.local_offset;
  for (int d = 0; d < p.box.rank(); ++d)
    local += (idx[d] - p.box.offset[d]) * p.local_strides[d];
  return local;
}

// For every element of tensor `tensor`, calls expected(flat) -> the local index the buffer must
// hold it at, or -1 when the buffer must not hold it; checks the pieces agree exactly: boxes
// inside the tensor, disjoint, innermost stride 1, each held element in exactly one piece at the
// expected local index, and the local indices inside the buffer.
void expectMapping(const Registration& reg, const LocalBuffer& buf, int32_t tensor,
                   const std::function<int64_t(int64_t)>& expected) {
  const Dims& shape = reg.tensors[static_cast<size_t>(tensor)].shape;
  std::vector<const Piece*> mine;
  for (const Piece& p : buf.pieces) {
    if (p.tensor != tensor) continue;
    EXPECT_TRUE(p.box.fitsIn(shape)) << p.box.toString() << " in " << shape.toString();
    EXPECT_FALSE(p.box.empty()) << "empty piece " << p.box.toString();
    if (shape.rank > 0) {
      EXPECT_EQ(p.local_strides[shape.rank - 1], 1);
    }
    for (const Piece* q : mine) {
      EXPECT_FALSE(overlaps(p.box, q->box)) << p.box.toString() << " " << q->box.toString();
    }
    mine.push_back(&p);
  }
  for (int64_t g = 0; g < shape.product(); ++g) {
    const Dims idx = unravel(shape, g);
    int holders = 0;
    int64_t local = -1;
    for (const Piece* p : mine) {
      if (boxHolds(p->box, idx)) {
        ++holders;
        local = localIndex(*p, idx);
      }
    }
    const int64_t want = expected(g);
    if (want < 0) {
      EXPECT_EQ(holders, 0) << "element " << g << " of " << shape.toString() << " held";
    } else {
      ASSERT_EQ(holders, 1) << "element " << g << " of " << shape.toString();
      EXPECT_EQ(local, want) << "element " << g << " of " << shape.toString();
      EXPECT_GE(local, 0);
      EXPECT_LT(local, buf.num_elements);
    }
  }
}

// The pieces of a buffer never overlap in the buffer: mark every local element they cover.
void expectLocalDisjoint(const Registration& reg, const LocalBuffer& buf) {
  std::vector<int> used(static_cast<size_t>(buf.num_elements), 0);
  for (const Piece& p : buf.pieces) {
    const Dims& shape = reg.tensors[static_cast<size_t>(p.tensor)].shape;
    for (int64_t g = 0; g < shape.product(); ++g) {
      const Dims idx = unravel(shape, g);
      if (!boxHolds(p.box, idx)) continue;
      const int64_t local = localIndex(p, idx);
      ASSERT_GE(local, 0);
      ASSERT_LT(local, buf.num_elements);
      ++used[static_cast<size_t>(local)];
    }
  }
  for (size_t i = 0; i < used.size(); ++i)
    EXPECT_LE(used[i], 1) << "local element " << i;
}

// Adds 1 to count[g] for every element g of `tensor` that a piece of `buf` holds.
void countCoverage(const LocalBuffer& buf, int32_t tensor, const Dims& shape,
                   std::vector<int>& count) {
  for (const Piece& p : buf.pieces) {
    if (p.tensor != tensor) continue;
    for (int64_t g = 0; g < shape.product(); ++g) {
      if (boxHolds(p.box, unravel(shape, g))) ++count[static_cast<size_t>(g)];
    }
  }
}

struct Snapshot {
  size_t tensors;
  size_t buffers;
};
Snapshot snap(const Registration& r) {
  return {r.tensors.size(), r.buffers.size()};
}

// Expects `res` to fail with `code`, its message naming every string in `names`, and `reg`
// unchanged.
template <typename T>
void expectError(const Result<T>& res, wsync_status_t code, const std::vector<std::string>& names,
                 const Registration& reg, Snapshot before) {
  ASSERT_FALSE(res.isOk());
  EXPECT_EQ(res.status().code(), code) << res.status().toString();
  for (const std::string& n : names) {
    EXPECT_NE(res.status().message().find(n), std::string::npos)
        << "message does not name " << n << ": " << res.status().message();
  }
  EXPECT_EQ(reg.tensors.size(), before.tensors);
  EXPECT_EQ(reg.buffers.size(), before.buffers);
}

// ---- splitRange / splitBox -------------------------------------------------------------------

TEST(SplitRange, TorchChunkAndBalancedOnConcreteNumbers) {
  EXPECT_EQ(sizesOf(10, 4, SplitRule::kTorchChunk), (std::vector<int64_t>{3, 3, 3, 1}));
  EXPECT_EQ(sizesOf(10, 4, SplitRule::kBalanced), (std::vector<int64_t>{3, 3, 2, 2}));
  // torch.chunk(arange(5), 4) gives 3 chunks [2, 2, 1]; DTensor pads the missing one empty.
  EXPECT_EQ(sizesOf(5, 4, SplitRule::kTorchChunk), (std::vector<int64_t>{2, 2, 1, 0}));
  EXPECT_EQ(sizesOf(5, 4, SplitRule::kBalanced), (std::vector<int64_t>{2, 1, 1, 1}));
  // torch.chunk(arange(4), 3) gives [2, 2]: the third part is empty, not [2, 1, 1].
  EXPECT_EQ(sizesOf(4, 3, SplitRule::kTorchChunk), (std::vector<int64_t>{2, 2, 0}));
  EXPECT_EQ(sizesOf(2, 4, SplitRule::kTorchChunk), (std::vector<int64_t>{1, 1, 0, 0}));
  EXPECT_EQ(sizesOf(2, 4, SplitRule::kBalanced), (std::vector<int64_t>{1, 1, 0, 0}));
  EXPECT_EQ(sizesOf(0, 3, SplitRule::kTorchChunk), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(sizesOf(12, 4, SplitRule::kEven), (std::vector<int64_t>{3, 3, 3, 3}));
  EXPECT_EQ(sizesOf(7, 1, SplitRule::kEven), (std::vector<int64_t>{7}));
  Result<IndexRange> r = splitRange(10, 4, 3, SplitRule::kTorchChunk);
  ASSERT_TRUE(r.isOk());
  EXPECT_EQ(r->begin, 9);
}

TEST(SplitRange, MatchesReferenceRulesForManySizes) {
  for (int64_t n = 0; n <= 40; ++n) {
    for (int parts = 1; parts <= 9; ++parts) {
      const std::vector<int64_t> chunk = sizesOf(n, parts, SplitRule::kTorchChunk);
      const std::vector<int64_t> balanced = sizesOf(n, parts, SplitRule::kBalanced);
      // torch.chunk: chunks of ceil(n / parts) until n is used up.
      const int64_t c = (n + parts - 1) / parts;
      int64_t left = n;
      for (int i = 0; i < parts; ++i) {
        const int64_t want = std::min(c, left);
        EXPECT_EQ(chunk[static_cast<size_t>(i)], want) << n << " / " << parts << " part " << i;
        left -= want;
      }
      // numpy.array_split: the first n % parts parts have n / parts + 1.
      for (int i = 0; i < parts; ++i) {
        EXPECT_EQ(balanced[static_cast<size_t>(i)], n / parts + (i < n % parts ? 1 : 0));
      }
      if (n % parts == 0) {
        EXPECT_EQ(sizesOf(n, parts, SplitRule::kEven), balanced);
      }
    }
  }
}

TEST(SplitRange, Errors) {
  auto code = [](Result<IndexRange> r) { return r.isOk() ? WSYNC_SUCCESS : r.status().code(); };
  EXPECT_EQ(code(splitRange(10, 4, 0, SplitRule::kEven)), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(code(splitRange(10, 0, 0, SplitRule::kBalanced)), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(code(splitRange(10, 4, 4, SplitRule::kBalanced)), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(code(splitRange(10, 4, -1, SplitRule::kBalanced)), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(code(splitRange(-1, 4, 0, SplitRule::kBalanced)), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(code(splitRange(10, 4, 0, static_cast<SplitRule>(9))), WSYNC_ERR_INVALID_ARGUMENT);
  Result<IndexRange> r = splitRange(10, 4, 1, SplitRule::kEven);
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.status().message().find("10"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("4"), std::string::npos) << r.status().message();
}

TEST(SplitBox, AlongEachDim) {
  Result<Box> b = splitBox({6, 10, 4}, 1, 4, 2, SplitRule::kBalanced);
  ASSERT_TRUE(b.isOk()) << b.status().toString();
  EXPECT_EQ(*b, (Box{{0, 6, 0}, {6, 2, 4}}));
  b = splitBox({6, 10, 4}, 0, 4, 3, SplitRule::kTorchChunk);
  ASSERT_TRUE(b.isOk());
  EXPECT_EQ(*b, (Box{{6, 0, 0}, {0, 10, 4}}));  // chunk 2: 2, 2, 2, 0
  EXPECT_TRUE(b->empty());
  EXPECT_FALSE(splitBox({6, 10}, 2, 2, 0, SplitRule::kBalanced).isOk());
  EXPECT_FALSE(splitBox({6, 10}, -1, 2, 0, SplitRule::kBalanced).isOk());
  EXPECT_FALSE(splitBox({6, 0}, 0, 2, 0, SplitRule::kBalanced).isOk());
  EXPECT_FALSE(splitBox(Dims{}, 0, 1, 0, SplitRule::kBalanced).isOk());
}

// ---- replicated and split --------------------------------------------------------------------

TEST(AddReplicated, WholeTensorRowMajor) {
  Registration reg;
  Result<int32_t> i = addReplicated(reg, "embed", {8, 3}, DType::kBFloat16, MemoryKind::kDevice);
  ASSERT_TRUE(i.isOk()) << i.status().toString();
  ASSERT_EQ(*i, 0);
  const LocalBuffer& b = reg.buffers[0];
  EXPECT_EQ(b.name, "embed");
  EXPECT_EQ(b.dtype, DType::kBFloat16);
  EXPECT_EQ(b.memory, MemoryKind::kDevice);
  EXPECT_EQ(b.num_elements, 24);
  ASSERT_EQ(b.pieces.size(), 1u);
  EXPECT_EQ(b.pieces[0].box, Box::whole({8, 3}));
  EXPECT_EQ(b.pieces[0].local_offset, 0);
  EXPECT_EQ(b.pieces[0].local_strides, (Dims{3, 1}));
  ASSERT_EQ(reg.tensors.size(), 1u);
  EXPECT_EQ(reg.tensors[0].name, "embed");
  expectMapping(reg, b, 0, [](int64_t g) { return g; });

  // A scalar and a second buffer of the same tensor (declared once).
  ASSERT_TRUE(addReplicated(reg, "scale", Dims{}, DType::kFloat32).isOk());
  EXPECT_EQ(reg.buffers[1].num_elements, 1);
  ASSERT_EQ(reg.buffers[1].pieces.size(), 1u);
  Result<int32_t> again = addReplicated(reg, "embed", {8, 3}, DType::kFloat32);
  ASSERT_TRUE(again.isOk());
  EXPECT_EQ(*again, 2);
  EXPECT_EQ(reg.tensors.size(), 2u);
  EXPECT_EQ(reg.buffers[2].pieces[0].tensor, 0);
}

TEST(AddSplit, UnevenBalancedAndTorchChunk) {
  Registration reg;
  // Megatron row-parallel: [6, 10] split along dim 1 into 4 -> 3, 3, 2, 2 columns.
  Result<int32_t> i = addSplit(reg, "o_proj", {6, 10}, DType::kFloat32, 1, 4, 2);
  ASSERT_TRUE(i.isOk()) << i.status().toString();
  const LocalBuffer& b = reg.buffers[static_cast<size_t>(*i)];
  EXPECT_EQ(b.name, "o_proj");
  EXPECT_EQ(b.num_elements, 12);
  ASSERT_EQ(b.pieces.size(), 1u);
  EXPECT_EQ(b.pieces[0].box, (Box{{0, 6}, {6, 2}}));
  EXPECT_EQ(b.pieces[0].local_offset, 0);
  EXPECT_EQ(b.pieces[0].local_strides, (Dims{2, 1}));
  expectMapping(reg, b, 0, [](int64_t g) {
    const int64_t row = g / 10, col = g % 10;
    return col >= 6 && col < 8 ? row * 2 + (col - 6) : -1;
  });

  // DTensor Shard(0) of 10 rows on 4 ranks: 3, 3, 3, 1.
  Registration dt;
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(
        addSplit(dt, "w", {10, 2}, DType::kFloat32, 0, 4, r, SplitRule::kTorchChunk).isOk());
  }
  EXPECT_EQ(dt.buffers[0].num_elements, 6);
  EXPECT_EQ(dt.buffers[3].num_elements, 2);
  EXPECT_EQ(dt.buffers[3].pieces[0].box, (Box{{9, 0}, {1, 2}}));

  // An empty DTensor part: 5 rows on 4 ranks -> 2, 2, 1, 0.
  Registration e;
  Result<int32_t> empty =
      addSplit(e, "w", {5, 3}, DType::kFloat32, 0, 4, 3, SplitRule::kTorchChunk);
  ASSERT_TRUE(empty.isOk()) << empty.status().toString();
  EXPECT_EQ(e.buffers[0].num_elements, 0);
  EXPECT_TRUE(e.buffers[0].pieces.empty());
  ASSERT_EQ(e.tensors.size(), 1u);  // still declared
  EXPECT_EQ(e.tensors[0].shape, (Dims{5, 3}));
}

TEST(AddSplit, AllRanksCoverTheTensorExactlyOnce) {
  const Dims shape{7, 5, 3};
  for (SplitRule rule : {SplitRule::kBalanced, SplitRule::kTorchChunk}) {
    for (int dim = 0; dim < 3; ++dim) {
      for (int parts = 1; parts <= 8; ++parts) {
        Registration reg;
        std::vector<int> count(static_cast<size_t>(shape.product()), 0);
        for (int r = 0; r < parts; ++r) {
          Result<int32_t> i = addSplit(reg, "w", shape, DType::kFloat32, dim, parts, r, rule);
          ASSERT_TRUE(i.isOk()) << i.status().toString();
          const LocalBuffer& b = reg.buffers[static_cast<size_t>(*i)];
          int64_t vol = 0;
          for (const Piece& p : b.pieces)
            vol += p.box.volume();
          EXPECT_EQ(vol, b.num_elements);
          expectLocalDisjoint(reg, b);
          countCoverage(b, 0, shape, count);
        }
        for (size_t g = 0; g < count.size(); ++g) {
          ASSERT_EQ(count[g], 1) << "element " << g << " dim " << dim << " parts " << parts
                                 << " rule " << splitRuleName(rule);
        }
      }
    }
  }
}

// ---- flat ranges -----------------------------------------------------------------------------

TEST(AddFlatRange, CutsAcrossRowsIn2D) {
  Registration reg;
  // [4, 3], elements [1, 11): the tail of row 0, rows 1-2, the head of row 3.
  Result<int32_t> i = addFlatRange(reg, "w", {4, 3}, DType::kFloat32, 1, 11);
  ASSERT_TRUE(i.isOk()) << i.status().toString();
  const LocalBuffer& b = reg.buffers[0];
  EXPECT_EQ(b.num_elements, 10);
  ASSERT_EQ(b.pieces.size(), 3u);
  EXPECT_EQ(b.pieces[0].box, (Box{{0, 1}, {1, 2}}));
  EXPECT_EQ(b.pieces[0].local_offset, 0);
  EXPECT_EQ(b.pieces[1].box, (Box{{1, 0}, {2, 3}}));
  EXPECT_EQ(b.pieces[1].local_offset, 2);
  EXPECT_EQ(b.pieces[2].box, (Box{{3, 0}, {1, 2}}));
  EXPECT_EQ(b.pieces[2].local_offset, 8);
  for (const Piece& p : b.pieces)
    EXPECT_EQ(p.local_strides, (Dims{3, 1}));

  // Aligned ranges are one box.
  ASSERT_TRUE(addFlatRange(reg, "w", {4, 3}, DType::kFloat32, 3, 9).isOk());
  ASSERT_EQ(reg.buffers[1].pieces.size(), 1u);
  EXPECT_EQ(reg.buffers[1].pieces[0].box, (Box{{1, 0}, {2, 3}}));
  // Inside one row: one box.
  ASSERT_TRUE(addFlatRange(reg, "w", {4, 3}, DType::kFloat32, 4, 5).isOk());
  ASSERT_EQ(reg.buffers[2].pieces.size(), 1u);
  EXPECT_EQ(reg.buffers[2].pieces[0].box, (Box{{1, 1}, {1, 1}}));
  // Empty range: no piece, tensor declared once.
  ASSERT_TRUE(addFlatRange(reg, "w", {4, 3}, DType::kFloat32, 12, 12).isOk());
  EXPECT_EQ(reg.buffers[3].num_elements, 0);
  EXPECT_TRUE(reg.buffers[3].pieces.empty());
  EXPECT_EQ(reg.tensors.size(), 1u);
}

TEST(AddFlatRange, CutsAcrossRowsIn3DExactBoxes) {
  Registration reg;
  // [2, 3, 4] (strides 12, 4, 1), elements [5, 21): the tail of row (0, 1), the rest of plane 0,
  // rows 0-1 of plane 1, the head of row (1, 2).
  ASSERT_TRUE(addFlatRange(reg, "w", {2, 3, 4}, DType::kFloat32, 5, 21).isOk());
  const PieceList& p = reg.buffers[0].pieces;
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[0].box, (Box{{0, 1, 1}, {1, 1, 3}}));  // 5..7
  EXPECT_EQ(p[0].local_offset, 0);
  EXPECT_EQ(p[1].box, (Box{{0, 2, 0}, {1, 1, 4}}));  // 8..11
  EXPECT_EQ(p[1].local_offset, 3);
  EXPECT_EQ(p[2].box, (Box{{1, 0, 0}, {1, 2, 4}}));  // 12..19
  EXPECT_EQ(p[2].local_offset, 7);
  EXPECT_EQ(p[3].box, (Box{{1, 2, 0}, {1, 1, 1}}));  // 20
  EXPECT_EQ(p[3].local_offset, 15);
  for (const Piece& q : p)
    EXPECT_EQ(q.local_strides, (Dims{12, 4, 1}));

  // The worst case reaches the bound 2 * (rank - 1) + 1 = 5: [1, 35) of [3, 3, 4].
  Registration worst;
  ASSERT_TRUE(addFlatRange(worst, "w", {3, 3, 4}, DType::kFloat32, 1, 35).isOk());
  ASSERT_EQ(worst.buffers[0].pieces.size(), 5u);
  EXPECT_EQ(worst.buffers[0].pieces[2].box, (Box{{1, 0, 0}, {1, 3, 4}}));
  EXPECT_EQ(worst.buffers[0].pieces[2].local_offset, 11);
  ASSERT_TRUE(addFlatRange(reg, "w", {2, 3, 4}, DType::kFloat32, 1, 23).isOk());
  EXPECT_EQ(reg.buffers[1].pieces.size(), 4u);
  // Whole planes are one box.
  ASSERT_TRUE(addFlatRange(reg, "w", {2, 3, 4}, DType::kFloat32, 0, 24).isOk());
  ASSERT_EQ(reg.buffers[2].pieces.size(), 1u);
  EXPECT_EQ(reg.buffers[2].pieces[0].box, Box::whole({2, 3, 4}));
}

TEST(AddFlatRange, BruteForceEveryRangeOfSmallShapes) {
  const std::vector<Dims> shapes = {Dims{},       {5},       {3, 4},       {2, 3, 4},
                                    {2, 1, 3, 2}, {1, 1, 7}, {3, 2, 2, 2}, {2, 2, 1, 2, 3}};
  for (const Dims& shape : shapes) {
    const int64_t numel = shape.product();
    const size_t max_pieces = shape.rank == 0 ? 1 : static_cast<size_t>(2 * (shape.rank - 1) + 1);
    for (int64_t b = 0; b <= numel; ++b) {
      for (int64_t e = b; e <= numel; ++e) {
        Registration reg;
        Result<int32_t> i = addFlatRange(reg, "t", shape, DType::kBFloat16, b, e);
        ASSERT_TRUE(i.isOk()) << i.status().toString();
        const LocalBuffer& buf = reg.buffers[0];
        SCOPED_TRACE(shape.toString() + " [" + std::to_string(b) + ", " + std::to_string(e) + ")");
        EXPECT_EQ(buf.num_elements, e - b);
        EXPECT_LE(buf.pieces.size(), max_pieces);
        int64_t vol = 0;
        for (const Piece& p : buf.pieces) {
          vol += p.box.volume();
          EXPECT_EQ(p.local_strides, rowMajorStrides(shape));
        }
        EXPECT_EQ(vol, e - b);
        expectMapping(reg, buf, 0, [&](int64_t g) { return g >= b && g < e ? g - b : -1; });
      }
    }
  }
}

TEST(AddFlatRange, AllRanksCoverTheTensorExactlyOnce) {
  const Dims shape{5, 3, 4};  // 60 elements
  for (int ranks = 1; ranks <= 7; ++ranks) {
    Registration reg;
    std::vector<int> count(60, 0);
    for (int r = 0; r < ranks; ++r) {
      // FSDP1 shards the flat parameter with torch.chunk.
      Result<IndexRange> range = splitRange(60, ranks, r, SplitRule::kTorchChunk);
      ASSERT_TRUE(range.isOk());
      Result<int32_t> i =
          addFlatRange(reg, "w", shape, DType::kFloat32, range->begin, range->begin + range->size);
      ASSERT_TRUE(i.isOk()) << i.status().toString();
      countCoverage(reg.buffers[static_cast<size_t>(*i)], 0, shape, count);
    }
    for (size_t g = 0; g < count.size(); ++g)
      ASSERT_EQ(count[g], 1) << g << " ranks " << ranks;
  }
}

TEST(AddFlatParameter, MembersConcatenatedAcrossRanks) {
  const std::vector<FlatMember> members = {{"a", {2, 3}}, {"b", {4}}, {"c", {2, 2, 2}}};
  const int64_t starts[] = {0, 6, 10};
  const int64_t total = 18;
  for (int ranks = 1; ranks <= 5; ++ranks) {
    std::vector<std::vector<int>> count = {std::vector<int>(6), std::vector<int>(4),
                                           std::vector<int>(8)};
    for (int r = 0; r < ranks; ++r) {
      Registration reg;
      Result<IndexRange> range = splitRange(total, ranks, r, SplitRule::kTorchChunk);
      ASSERT_TRUE(range.isOk());
      const int64_t b = range->begin, e = range->begin + range->size;
      Result<int32_t> i = addFlatParameter(reg, "flat0", members, DType::kFloat32, b, e);
      ASSERT_TRUE(i.isOk()) << i.status().toString();
      const LocalBuffer& buf = reg.buffers[0];
      EXPECT_EQ(buf.name, "flat0");
      EXPECT_EQ(buf.num_elements, e - b);
      ASSERT_EQ(reg.tensors.size(), 3u);  // every member declared, held or not
      int64_t vol = 0;
      for (const Piece& p : buf.pieces)
        vol += p.box.volume();
      EXPECT_EQ(vol, e - b);
      expectLocalDisjoint(reg, buf);
      for (int32_t m = 0; m < 3; ++m) {
        ASSERT_EQ(reg.tensors[static_cast<size_t>(m)].name, members[static_cast<size_t>(m)].tensor);
        expectMapping(reg, buf, m, [&](int64_t g) {
          const int64_t c = starts[m] + g;  // index in the concatenation
          return c >= b && c < e ? c - b : -1;
        });
        countCoverage(buf, m, members[static_cast<size_t>(m)].shape, count[static_cast<size_t>(m)]);
      }
    }
    for (const auto& c : count) {
      for (int x : c)
        ASSERT_EQ(x, 1) << "ranks " << ranks;
    }
  }
}

TEST(AddFlatParameter, WithOffsetsSkipsPadding) {
  // a [2, 3] at 0, padding 6..8, b [3] at 8, padding 11..16.
  const std::vector<FlatMember> members = {{"a", {2, 3}}, {"b", {3}}};
  const std::vector<int64_t> offsets = {0, 8};
  Registration reg;
  Result<int32_t> i =
      addFlatParameterWithOffsets(reg, "flat", members, offsets, 16, DType::kFloat32, 4, 16);
  ASSERT_TRUE(i.isOk()) << i.status().toString();
  const LocalBuffer& buf = reg.buffers[0];
  EXPECT_EQ(buf.num_elements, 12);
  expectMapping(reg, buf, 0, [](int64_t g) { return g >= 4 ? g - 4 : -1; });
  expectMapping(reg, buf, 1, [](int64_t g) { return 8 + g - 4; });
  expectLocalDisjoint(reg, buf);

  Snapshot before = snap(reg);
  expectError(addFlatParameterWithOffsets(reg, "f2", members, {0, 5}, 16, DType::kFloat32, 0, 4),
              WSYNC_ERR_INVALID_ARGUMENT, {"\"b\"", "5"}, reg, before);
  expectError(addFlatParameterWithOffsets(reg, "f2", members, {0, 8}, 10, DType::kFloat32, 0, 4),
              WSYNC_ERR_INVALID_ARGUMENT, {"f2", "10"}, reg, before);
  expectError(addFlatParameterWithOffsets(reg, "f2", members, {0}, 16, DType::kFloat32, 0, 4),
              WSYNC_ERR_INVALID_ARGUMENT, {"f2"}, reg, before);
  expectError(addFlatParameterWithOffsets(reg, "f2", members, {0, 8}, 16, DType::kFloat32, 0, 17),
              WSYNC_ERR_INVALID_ARGUMENT, {"f2", "17"}, reg, before);
}

// ---- fused -----------------------------------------------------------------------------------

TEST(AddFused, ConcatenatesLocalSlicesAlongDim0) {
  Registration reg;
  const std::vector<FusedPart> parts = {{"x", {4, 6}}, {"y", {8, 6}}};
  Result<int32_t> i = addFused(reg, "xy", parts, 0, DType::kBFloat16, 2, 1);
  ASSERT_TRUE(i.isOk()) << i.status().toString();
  const LocalBuffer& b = reg.buffers[0];
  EXPECT_EQ(b.name, "xy");
  EXPECT_EQ(b.num_elements, (2 + 4) * 6);
  ASSERT_EQ(b.pieces.size(), 2u);
  EXPECT_EQ(b.pieces[0].box, (Box{{2, 0}, {2, 6}}));
  EXPECT_EQ(b.pieces[0].local_offset, 0);
  EXPECT_EQ(b.pieces[1].box, (Box{{4, 0}, {4, 6}}));
  EXPECT_EQ(b.pieces[1].local_offset, 12);
  expectMapping(reg, b, 0, [](int64_t g) { return g >= 12 ? g - 12 : -1; });
  expectMapping(reg, b, 1, [](int64_t g) { return g >= 24 ? 12 + g - 24 : -1; });
}

TEST(AddFused, ConcatenatesAlongDim1AndAllRanksCover) {
  // Parts [3, 4] and [3, 2] fused along dim 1, TP 2: local slices [3, 2] and [3, 1] side by side
  // in a local [3, 3] row-major buffer.
  const std::vector<FusedPart> parts = {{"x", {3, 4}}, {"y", {3, 2}}};
  std::vector<int> cx(12, 0), cy(6, 0);
  for (int r = 0; r < 2; ++r) {
    Registration reg;
    Result<int32_t> i = addFused(reg, "xy", parts, 1, DType::kFloat32, 2, r);
    ASSERT_TRUE(i.isOk()) << i.status().toString();
    const LocalBuffer& b = reg.buffers[0];
    EXPECT_EQ(b.num_elements, 9);
    ASSERT_EQ(b.pieces.size(), 2u);
    EXPECT_EQ(b.pieces[0].local_strides, (Dims{3, 1}));
    EXPECT_EQ(b.pieces[1].local_offset, 2);
    expectMapping(reg, b, 0, [&](int64_t g) {
      const int64_t row = g / 4, col = g % 4;
      return col / 2 == r ? row * 3 + col % 2 : -1;
    });
    expectMapping(reg, b, 1, [&](int64_t g) {
      const int64_t row = g / 2, col = g % 2;
      return col == r ? row * 3 + 2 : -1;
    });
    countCoverage(b, 0, {3, 4}, cx);
    countCoverage(b, 1, {3, 2}, cy);
  }
  for (int c : cx)
    EXPECT_EQ(c, 1);
  for (int c : cy)
    EXPECT_EQ(c, 1);
}

TEST(AddFused, TorchChunkEmptySliceGetsNoPiece) {
  Registration reg;
  // 2 rows of "x" over TP 3 with torch.chunk: 1, 1, 0; "y" 6 rows: 2, 2, 2.
  const std::vector<FusedPart> parts = {{"x", {2, 4}}, {"y", {6, 4}}};
  Result<int32_t> i = addFused(reg, "xy", parts, 0, DType::kFloat32, 3, 2, SplitRule::kTorchChunk);
  ASSERT_TRUE(i.isOk()) << i.status().toString();
  const LocalBuffer& b = reg.buffers[0];
  EXPECT_EQ(b.num_elements, 8);
  ASSERT_EQ(b.pieces.size(), 1u);
  EXPECT_EQ(b.pieces[0].tensor, 1);
  EXPECT_EQ(b.pieces[0].box, (Box{{4, 0}, {2, 4}}));
  EXPECT_EQ(b.pieces[0].local_offset, 0);
  EXPECT_EQ(reg.tensors.size(), 2u);
}

TEST(AddQkv, GqaWithTpNotAboveKvHeads) {
  // 8 q heads, 4 kv heads, head_dim 2, hidden 3, TP 2: rank 1 has q heads 4..7 and kv heads 2..3.
  Registration reg;
  Result<int32_t> i = addQkv(reg, "qkv", "q", "k", "v", 8, 4, 2, 3, DType::kBFloat16, 2, 1);
  ASSERT_TRUE(i.isOk()) << i.status().toString();
  const LocalBuffer& b = reg.buffers[0];
  EXPECT_EQ(b.name, "qkv");
  EXPECT_EQ(b.num_elements, (8 + 4 + 4) * 3);
  ASSERT_EQ(reg.tensors.size(), 3u);
  EXPECT_EQ(reg.tensors[0].shape, (Dims{16, 3}));
  EXPECT_EQ(reg.tensors[1].shape, (Dims{8, 3}));
  EXPECT_EQ(reg.tensors[2].shape, (Dims{8, 3}));
  ASSERT_EQ(b.pieces.size(), 3u);
  EXPECT_EQ(b.pieces[0].box, (Box{{8, 0}, {8, 3}}));
  EXPECT_EQ(b.pieces[0].local_offset, 0);
  EXPECT_EQ(b.pieces[1].box, (Box{{4, 0}, {4, 3}}));
  EXPECT_EQ(b.pieces[1].local_offset, 24);
  EXPECT_EQ(b.pieces[2].box, (Box{{4, 0}, {4, 3}}));
  EXPECT_EQ(b.pieces[2].local_offset, 36);
  for (const Piece& p : b.pieces)
    EXPECT_EQ(p.local_strides, (Dims{3, 1}));
  expectMapping(reg, b, 1, [](int64_t g) { return g >= 12 ? 24 + g - 12 : -1; });
  expectLocalDisjoint(reg, b);
}

TEST(AddQkv, GqaWithTpAboveKvHeadsReplicatesKv) {
  // 8 q heads, 2 kv heads, head_dim 2, hidden 3, TP 4: each rank 2 q heads; kv head r / 2.
  std::vector<int> cq(16 * 3, 0);
  for (int r = 0; r < 4; ++r) {
    Registration reg;
    Result<int32_t> i = addQkv(reg, "qkv", "q", "k", "v", 8, 2, 2, 3, DType::kBFloat16, 4, r);
    ASSERT_TRUE(i.isOk()) << i.status().toString();
    const LocalBuffer& b = reg.buffers[0];
    EXPECT_EQ(b.num_elements, (4 + 2 + 2) * 3);
    ASSERT_EQ(b.pieces.size(), 3u);
    EXPECT_EQ(b.pieces[0].box, (Box{{4 * r, 0}, {4, 3}}));
    EXPECT_EQ(b.pieces[0].local_offset, 0);
    const int64_t kv_head = r / 2;
    EXPECT_EQ(b.pieces[1].box, (Box{{2 * kv_head, 0}, {2, 3}}));
    EXPECT_EQ(b.pieces[1].local_offset, 12);
    EXPECT_EQ(b.pieces[2].box, (Box{{2 * kv_head, 0}, {2, 3}}));
    EXPECT_EQ(b.pieces[2].local_offset, 18);
    expectMapping(reg, b, 2,
                  [&](int64_t g) { return g / 3 / 2 == kv_head ? 18 + g - kv_head * 6 : -1; });
    countCoverage(b, 0, {16, 3}, cq);
  }
  for (int c : cq)
    EXPECT_EQ(c, 1);
}

TEST(AddQkv, Errors) {
  Registration reg;
  ASSERT_TRUE(addReplicated(reg, "k", {5, 5}, DType::kFloat32).isOk());
  const Snapshot before = snap(reg);
  const auto bf = DType::kBFloat16;
  expectError(addQkv(reg, "qkv", "q", "k2", "v", 6, 2, 2, 3, bf, 4, 0), WSYNC_ERR_INVALID_ARGUMENT,
              {"\"q\"", "num_heads 6", "tp_size 4"}, reg, before);
  expectError(addQkv(reg, "qkv", "q", "k2", "v", 8, 6, 2, 3, bf, 4, 0), WSYNC_ERR_INVALID_ARGUMENT,
              {"\"qkv\"", "num_kv_heads 6"}, reg, before);
  expectError(addQkv(reg, "qkv", "q", "k2", "v", 8, 3, 2, 3, bf, 4, 0), WSYNC_ERR_INVALID_ARGUMENT,
              {"\"qkv\"", "num_kv_heads 3"}, reg, before);
  expectError(addQkv(reg, "qkv", "q", "k2", "v", 8, 2, 0, 3, bf, 2, 0), WSYNC_ERR_INVALID_ARGUMENT,
              {"\"qkv\"", "head_dim 0"}, reg, before);
  expectError(addQkv(reg, "qkv", "q", "k2", "v", 8, 2, 2, 3, bf, 2, 2), WSYNC_ERR_INVALID_ARGUMENT,
              {"\"qkv\"", "tp_rank 2"}, reg, before);
  expectError(addQkv(reg, "qkv", "q", "q", "v", 8, 8, 2, 3, bf, 2, 0), WSYNC_ERR_INVALID_ARGUMENT,
              {"\"q\""}, reg, before);
  // "k" exists as [5, 5]: MISMATCH, and "q" (declared first) is rolled back.
  expectError(addQkv(reg, "qkv", "q", "k", "v", 8, 2, 2, 3, bf, 2, 0), WSYNC_ERR_MISMATCH,
              {"\"k\"", "[5, 5]", "[4, 3]"}, reg, before);
  // The rollback left no trace of "q": it declares with any shape now.
  EXPECT_EQ(reg.declareTensor("q", {1, 1}), static_cast<int32_t>(before.tensors));
}

TEST(AddGateUp, BothHalvesSplitByTp) {
  Registration reg;
  Result<int32_t> i = addGateUp(reg, "gate_up", "gate", "up", 8, 4, DType::kBFloat16, 4, 2);
  ASSERT_TRUE(i.isOk()) << i.status().toString();
  const LocalBuffer& b = reg.buffers[0];
  EXPECT_EQ(b.num_elements, 16);
  ASSERT_EQ(b.pieces.size(), 2u);
  EXPECT_EQ(b.pieces[0].box, (Box{{4, 0}, {2, 4}}));
  EXPECT_EQ(b.pieces[0].local_offset, 0);
  EXPECT_EQ(b.pieces[1].box, (Box{{4, 0}, {2, 4}}));
  EXPECT_EQ(b.pieces[1].local_offset, 8);
  EXPECT_EQ(reg.tensors[static_cast<size_t>(b.pieces[1].tensor)].name, "up");
  expectLocalDisjoint(reg, b);

  const Snapshot before = snap(reg);
  expectError(addGateUp(reg, "gu", "g2", "u2", 10, 4, DType::kBFloat16, 4, 0),
              WSYNC_ERR_INVALID_ARGUMENT, {"\"g2\"", "intermediate 10", "tp_size 4"}, reg, before);
  expectError(addGateUp(reg, "gu", "g2", "u2", 8, 0, DType::kBFloat16, 4, 0),
              WSYNC_ERR_INVALID_ARGUMENT, {"\"g2\"", "hidden 0"}, reg, before);
  expectError(addGateUp(reg, "gu", "g2", "g2", 8, 4, DType::kBFloat16, 4, 0),
              WSYNC_ERR_INVALID_ARGUMENT, {"\"g2\""}, reg, before);
  expectError(addGateUp(reg, "gu", "g2", "up", 8, 5, DType::kBFloat16, 4, 0), WSYNC_ERR_MISMATCH,
              {"\"up\"", "[8, 4]", "[8, 5]"}, reg, before);
}

// ---- experts ---------------------------------------------------------------------------------

TEST(Experts, NameTemplate) {
  EXPECT_EQ(expertName("layers.3.experts.{}.w1", 17), "layers.3.experts.17.w1");
  EXPECT_EQ(expertName("e{}_{}", 2), "e2_2");
  EXPECT_EQ(expertName("{}", 0), "0");
}

TEST(Experts, StackedHoldsABalancedContiguousBlock) {
  // 10 experts over EP 4: 3, 3, 2, 2; rank 1 has experts 3, 4, 5.
  Registration reg;
  Result<int32_t> i = addStackedExperts(reg, "w13", "experts.{}.w1", {3, 2}, 10, DType::kBFloat16,
                                        4, 1, MemoryKind::kDevice);
  ASSERT_TRUE(i.isOk()) << i.status().toString();
  const LocalBuffer& b = reg.buffers[0];
  EXPECT_EQ(b.name, "w13");
  EXPECT_EQ(b.memory, MemoryKind::kDevice);
  EXPECT_EQ(b.num_elements, 18);
  ASSERT_EQ(b.pieces.size(), 3u);
  for (size_t j = 0; j < 3; ++j) {
    const Piece& p = b.pieces[j];
    EXPECT_EQ(reg.tensors[static_cast<size_t>(p.tensor)].name,
              "experts." + std::to_string(3 + j) + ".w1");
    EXPECT_EQ(p.box, Box::whole({3, 2}));
    EXPECT_EQ(p.local_offset, static_cast<int64_t>(6 * j));
    EXPECT_EQ(p.local_strides, (Dims{2, 1}));
  }
  EXPECT_EQ(reg.tensors.size(), 3u);  // only this rank's experts
  expectLocalDisjoint(reg, b);

  // Fewer experts than EP ranks: the last rank gets an empty buffer.
  Registration e;
  ASSERT_TRUE(addStackedExperts(e, "w", "x.{}", {2}, 3, DType::kFloat32, 4, 3).isOk());
  EXPECT_EQ(e.buffers[0].num_elements, 0);
  EXPECT_TRUE(e.buffers[0].pieces.empty());
}

TEST(Experts, SeparateAddsOneBufferPerLocalExpert) {
  Registration reg;
  ASSERT_TRUE(addReplicated(reg, "embed", {2, 2}, DType::kFloat32).isOk());
  Result<int32_t> i =
      addSeparateExperts(reg, "layers.0.experts.{}.down", {4, 3}, 10, DType::kFloat32, 4, 3);
  ASSERT_TRUE(i.isOk()) << i.status().toString();
  EXPECT_EQ(*i, 1);
  ASSERT_EQ(reg.buffers.size(), 3u);  // experts 8 and 9
  for (size_t j = 0; j < 2; ++j) {
    const LocalBuffer& b = reg.buffers[1 + j];
    EXPECT_EQ(b.name, "layers.0.experts." + std::to_string(8 + j) + ".down");
    EXPECT_EQ(b.num_elements, 12);
    ASSERT_EQ(b.pieces.size(), 1u);
    EXPECT_EQ(reg.tensors[static_cast<size_t>(b.pieces[0].tensor)].name, b.name);
    EXPECT_EQ(b.pieces[0].box, Box::whole({4, 3}));
  }
  // All EP ranks together hold every expert exactly once.
  std::vector<int> held(10, 0);
  for (int r = 0; r < 4; ++r) {
    Registration one;
    ASSERT_TRUE(addSeparateExperts(one, "e{}", {2}, 10, DType::kFloat32, 4, r).isOk());
    for (const LocalBuffer& b : one.buffers)
      ++held[static_cast<size_t>(std::stoi(b.name.substr(1)))];
  }
  for (int h : held)
    EXPECT_EQ(h, 1);
}

TEST(Experts, Errors) {
  Registration reg;
  ASSERT_TRUE(addReplicated(reg, "e.5", {9}, DType::kFloat32).isOk());
  const Snapshot before = snap(reg);
  const auto f = DType::kFloat32;
  expectError(addSeparateExperts(reg, "e.x", {2}, 8, f, 2, 0), WSYNC_ERR_INVALID_ARGUMENT,
              {"\"e.x\"", "{}"}, reg, before);
  expectError(addSeparateExperts(reg, "e.{}", {2, 0}, 8, f, 2, 0), WSYNC_ERR_INVALID_ARGUMENT,
              {"\"e.{}\"", "[2, 0]"}, reg, before);
  expectError(addSeparateExperts(reg, "e.{}", {2}, 0, f, 2, 0), WSYNC_ERR_INVALID_ARGUMENT,
              {"\"e.{}\"", "0 experts"}, reg, before);
  expectError(addSeparateExperts(reg, "e.{}", {2}, 8, f, 2, 2), WSYNC_ERR_INVALID_ARGUMENT,
              {"\"e.{}\"", "ep_rank 2"}, reg, before);
  expectError(addSeparateExperts(reg, "e.{}", {2}, 3, f, 4, 3), WSYNC_ERR_INVALID_ARGUMENT,
              {"\"e.{}\"", "no expert"}, reg, before);
  expectError(addStackedExperts(reg, "w", "e.{}", {2}, 8, f, 0, 0), WSYNC_ERR_INVALID_ARGUMENT,
              {"\"e.{}\"", "ep_size 0"}, reg, before);
  expectError(addStackedExperts(reg, "", "e.{}", {2}, 8, f, 1, 0), WSYNC_ERR_INVALID_ARGUMENT,
              {"\"e.{}\""}, reg, before);
  // Experts 4..7 of rank 1: "e.4" is new, "e.5" conflicts -> MISMATCH and "e.4" rolled back.
  expectError(addSeparateExperts(reg, "e.{}", {2}, 8, f, 2, 1), WSYNC_ERR_MISMATCH,
              {"\"e.5\"", "[9]", "[2]"}, reg, before);
  expectError(addStackedExperts(reg, "w", "e.{}", {2}, 8, f, 2, 1), WSYNC_ERR_MISMATCH,
              {"\"e.5\"", "[9]", "[2]"}, reg, before);
  EXPECT_EQ(reg.declareTensor("e.4", {7}), static_cast<int32_t>(before.tensors));
}

// ---- validation of the single-tensor builders ------------------------------------------------

TEST(Validation, SingleTensorBuildersNameTheTensorAndLeaveTheRegistrationUnchanged) {
  Registration reg;
  ASSERT_TRUE(addReplicated(reg, "w", {4, 6}, DType::kFloat32).isOk());
  const Snapshot before = snap(reg);
  const auto f = DType::kFloat32;
  const auto inv = WSYNC_ERR_INVALID_ARGUMENT;

  // Shapes.
  expectError(addReplicated(reg, "x", {4, 0}, f), inv, {"\"x\"", "[4, 0]"}, reg, before);
  expectError(addReplicated(reg, "x", {4, -2}, f), inv, {"\"x\"", "[4, -2]"}, reg, before);
  Dims too_big = Dims::filled(kMaxRank, 2);
  too_big.rank = kMaxRank + 1;
  expectError(addReplicated(reg, "x", too_big, f), inv, {"\"x\"", "kMaxRank"}, reg, before);
  expectError(addReplicated(reg, "x", {int64_t{1} << 40, int64_t{1} << 40}, f), inv,
              {"\"x\"", "overflow"}, reg, before);
  expectError(addReplicated(reg, "", {4}, f), inv, {"empty"}, reg, before);
  expectError(addReplicated(reg, "x", {4}, static_cast<DType>(200)), inv, {"\"x\"", "dtype"}, reg,
              before);
  expectError(addReplicated(reg, "x", {4}, f, static_cast<MemoryKind>(7)), inv, {"\"x\"", "memory"},
              reg, before);
  expectError(addReplicated(reg, "w", {6, 4}, f), WSYNC_ERR_MISMATCH, {"\"w\"", "[4, 6]", "[6, 4]"},
              reg, before);

  // Splits.
  expectError(addSplit(reg, "x", {4, 6}, f, 2, 2, 0), inv, {"\"x\"", "[4, 6]", "dim 2"}, reg,
              before);
  expectError(addSplit(reg, "x", {4, 6}, f, -1, 2, 0), inv, {"\"x\"", "dim -1"}, reg, before);
  expectError(addSplit(reg, "x", {4, 6}, f, 0, 0, 0), inv, {"\"x\"", "parts 0"}, reg, before);
  expectError(addSplit(reg, "x", {4, 6}, f, 0, 2, 2), inv, {"\"x\"", "index 2"}, reg, before);
  expectError(addSplit(reg, "x", {4, 6}, f, 0, 2, -1), inv, {"\"x\"", "index -1"}, reg, before);
  expectError(addSplit(reg, "x", {4, 6}, f, 1, 4, 0, SplitRule::kEven), inv,
              {"\"x\"", "[4, 6]", "parts 4", "divisible"}, reg, before);
  expectError(addSplit(reg, "x", Dims{}, f, 0, 1, 0), inv, {"\"x\""}, reg, before);
  expectError(addSplit(reg, "x", {4, 6}, f, 0, 2, 0, static_cast<SplitRule>(5)), inv, {"\"x\""},
              reg, before);
  expectError(addSplit(reg, "w", {4, 7}, f, 0, 2, 0), WSYNC_ERR_MISMATCH, {"\"w\"", "[4, 7]"}, reg,
              before);

  // Flat ranges.
  expectError(addFlatRange(reg, "x", {4, 6}, f, 0, 25), inv, {"\"x\"", "[4, 6]", "25"}, reg,
              before);
  expectError(addFlatRange(reg, "x", {4, 6}, f, -1, 3), inv, {"\"x\"", "-1"}, reg, before);
  expectError(addFlatRange(reg, "x", {4, 6}, f, 5, 3), inv, {"\"x\"", "[5, 3)"}, reg, before);
  expectError(addFlatRange(reg, "x", {4, 0}, f, 0, 0), inv, {"\"x\"", "[4, 0]"}, reg, before);
  expectError(addFlatRange(reg, "w", {24}, f, 0, 3), WSYNC_ERR_MISMATCH, {"\"w\"", "[24]"}, reg,
              before);
}

TEST(Validation, FlatParameterAndFused) {
  Registration reg;
  ASSERT_TRUE(addReplicated(reg, "b", {9}, DType::kFloat32).isOk());
  const Snapshot before = snap(reg);
  const auto f = DType::kFloat32;
  const auto inv = WSYNC_ERR_INVALID_ARGUMENT;

  const std::vector<FlatMember> ok = {{"a", {2, 3}}, {"c", {4}}};
  expectError(addFlatParameter(reg, "flat", ok, f, 0, 11), inv, {"\"flat\"", "11", "10"}, reg,
              before);
  expectError(addFlatParameter(reg, "flat", {}, f, 0, 0), inv, {"\"flat\"", "no members"}, reg,
              before);
  expectError(addFlatParameter(reg, "flat", {{"a", {2, 3}}, {"a", {4}}}, f, 0, 1), inv,
              {"\"flat\"", "\"a\"", "twice"}, reg, before);
  expectError(addFlatParameter(reg, "flat", {{"a", {2, 0}}}, f, 0, 0), inv,
              {"\"flat\"", "\"a\"", "[2, 0]"}, reg, before);
  // "a" is new, "b" conflicts: MISMATCH and "a" rolled back.
  expectError(addFlatParameter(reg, "flat", {{"a", {2, 3}}, {"b", {4}}}, f, 0, 10),
              WSYNC_ERR_MISMATCH, {"\"b\"", "[9]", "[4]"}, reg, before);
  // More than 16 members (the sorted duplicate check).
  std::vector<FlatMember> many;
  for (int m = 0; m < 20; ++m)
    many.push_back({"m" + std::to_string(m), {2}});
  many.push_back({"m7", {2}});
  expectError(addFlatParameter(reg, "flat", many, f, 0, 4), inv, {"\"m7\"", "twice"}, reg, before);
  many.pop_back();
  ASSERT_TRUE(addFlatParameter(reg, "flat", many, f, 3, 35).isOk());
  EXPECT_EQ(reg.buffers.back().num_elements, 32);

  const Snapshot before2 = snap(reg);
  expectError(addFused(reg, "xy", {{"x", {4, 6}}, {"y", {4, 5}}}, 0, f, 2, 0), inv,
              {"\"xy\"", "\"y\"", "[4, 5]", "[4, 6]"}, reg, before2);
  expectError(addFused(reg, "xy", {{"x", {4, 6}}, {"y", {4, 6, 1}}}, 0, f, 2, 0), inv,
              {"\"xy\"", "\"y\"", "[4, 6, 1]"}, reg, before2);
  expectError(addFused(reg, "xy", {{"x", {4, 6}}, {"y", {3, 6}}}, 0, f, 2, 0), inv,
              {"\"xy\"", "\"y\"", "[3, 6]", "divisible"}, reg, before2);
  expectError(addFused(reg, "xy", {{"x", {4, 6}}}, 2, f, 2, 0), inv, {"\"xy\"", "dim 2", "\"x\""},
              reg, before2);
  expectError(addFused(reg, "xy", {}, 0, f, 2, 0), inv, {"\"xy\"", "no parts"}, reg, before2);
  expectError(addFused(reg, "xy", {{"x", {4, 6}}, {"x", {4, 6}}}, 0, f, 2, 0), inv,
              {"\"xy\"", "\"x\"", "twice"}, reg, before2);
  expectError(addFused(reg, "xy", {{"x", {4, 6}}}, 0, f, 2, 3), inv, {"\"xy\"", "tp_rank 3"}, reg,
              before2);
  expectError(addFused(reg, "xy", {{"x", {4, 6}}}, 0, f, 0, 0), inv, {"\"xy\"", "tp_size 0"}, reg,
              before2);
  expectError(addFused(reg, "xy", {{"x", {4, 6}}, {"b", {4, 6}}}, 0, f, 2, 0), WSYNC_ERR_MISMATCH,
              {"\"b\"", "[9]", "[4, 6]"}, reg, before2);
  EXPECT_EQ(reg.declareTensor("x", {1}), static_cast<int32_t>(before2.tensors));
}

}  // namespace
}  // namespace wsync
