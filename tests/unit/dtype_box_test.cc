#include <gtest/gtest.h>

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

TEST(Registration, DeclareTensorIsIdempotentAndChecksShape) {
  Registration r;
  EXPECT_EQ(r.declareTensor("w", {2, 3}), 0);
  EXPECT_EQ(r.declareTensor("v", {5}), 1);
  EXPECT_EQ(r.declareTensor("w", {2, 3}), 0);
  EXPECT_EQ(r.declareTensor("w", {3, 2}), -1);
  r.tensors.push_back({"u", {1}});  // direct edits keep the index right
  EXPECT_EQ(r.declareTensor("u", {1}), 2);
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
