#include "reference/tolerance.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace attnkit::reference {
namespace {

TEST(ToleranceTest, BoundsFollowTheFormula) {
  AttentionProblem p;
  ErrorStats naive;
  naive.max_abs = 1e-6;
  naive.mean_abs = 1e-7;
  const Bounds b = ToleranceFor(p, naive, /*value_scale=*/2.0);
  EXPECT_DOUBLE_EQ(b.max_abs,
                   2.0 * 1e-6 + 32 * kEpsF32 * 2.0 + kFlushToZeroAllowance);
  EXPECT_DOUBLE_EQ(b.mean_abs,
                   1.5 * 1e-7 + 8 * kEpsF32 * 2.0 + kFlushToZeroAllowance);
  p.dtype = DType::kBF16;  // storage only: the same f32 floor
  EXPECT_DOUBLE_EQ(ToleranceFor(p, naive, 2.0).max_abs, b.max_abs);
}

TEST(ToleranceTest, RatioAndVerdict) {
  const Bounds b{1e-5, 1e-6};
  ErrorStats e;
  e.max_abs = 5e-6;
  e.mean_abs = 9e-7;
  EXPECT_DOUBLE_EQ(ErrorRatio(e, b), 0.9);
  EXPECT_TRUE(WithinTolerance(e, b));
  e.max_abs = 1.01e-5;  // just over
  EXPECT_FALSE(WithinTolerance(e, b));
  e.max_abs = 0;
  e.mean_abs = 1.2e-6;  // the mean bound alone fails it
  EXPECT_FALSE(WithinTolerance(e, b));
  e.mean_abs = 0;
  e.nonfinite = 1;  // a NaN fails whatever its neighbours do
  EXPECT_FALSE(WithinTolerance(e, b));
  EXPECT_TRUE(std::isinf(ErrorRatio(e, b)));
}

// [1, 2, 2, 3] problem; row 1 of sequence 0 is past q_len and ignored.
struct Fixture {
  AttentionProblem p;
  Tensor out = Tensor::Contiguous(DType::kF32, {1, 2, 2, 3});
  std::vector<double> truth = std::vector<double>(12, 0.5);
  Fixture() {
    p.q_heads = p.kv_heads = 2;
    p.head_dim = 3;
    p.q_lens = {1};
    p.kv_lens = {4};
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 2; ++i)
        for (int64_t e = 0; e < 3; ++e) out.view.Store(0, h, i, e, 0.5f);
  }
};

TEST(MeasureErrorTest, FindsWorstElementsAndCountsMismatches) {
  Fixture f;
  f.out.view.Store(0, 1, 0, 2, 0.5f + 0.25f);  // the worst
  f.out.view.Store(0, 0, 0, 1, 0.5f - 0.125f);
  f.out.view.Store(0, 0, 1, 0, 100.0f);  // row 1 >= q_len: not compared
  const ErrorStats e = MeasureError(f.p, f.truth, f.out.view, 0.1);
  EXPECT_EQ(e.count, 6);  // 2 heads x 1 row x 3
  EXPECT_DOUBLE_EQ(e.max_abs, 0.25);
  EXPECT_EQ(e.max_abs_index, (std::array<int64_t, 4>{0, 1, 0, 2}));
  EXPECT_DOUBLE_EQ(e.max_abs_got, 0.75);
  EXPECT_DOUBLE_EQ(e.max_abs_want, 0.5);
  EXPECT_DOUBLE_EQ(e.max_rel, 0.5);
  EXPECT_DOUBLE_EQ(e.mean_abs, (0.25 + 0.125) / 6);
  EXPECT_EQ(e.mismatched, 2);
  EXPECT_EQ(MeasureError(f.p, f.truth, f.out.view, 0.2).mismatched, 1);
}

TEST(MeasureErrorTest, NanOrInfWhereTheOracleIsFiniteIsCounted) {
  Fixture f;
  f.out.view.Store(0, 1, 0, 1, std::numeric_limits<float>::quiet_NaN());
  f.out.view.Store(0, 0, 0, 0, std::numeric_limits<float>::infinity());
  const ErrorStats e = MeasureError(f.p, f.truth, f.out.view, 1.0);
  EXPECT_EQ(e.nonfinite, 2);
  EXPECT_EQ(e.first_nonfinite_index, (std::array<int64_t, 4>{0, 0, 0, 0}));
  EXPECT_EQ(e.mismatched, 2);
  EXPECT_DOUBLE_EQ(e.max_abs, 0);  // finite elements are all exact
  // Where the oracle itself is not finite there is nothing to hold to.
  f.truth[0] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(MeasureError(f.p, f.truth, f.out.view, 1.0).nonfinite, 1);
}

TEST(ValueScaleTest, IsTheLargestVisibleValue) {
  AttentionProblem p;
  p.head_dim = 2;
  p.q_lens = {1};
  p.kv_lens = {2};
  Tensor v = Tensor::Contiguous(DType::kF32, {1, 1, 3, 2});
  v.view.Store(0, 0, 1, 1, -3.0f);
  v.view.Store(0, 0, 2, 0, 50.0f);  // past kv_len: never visible
  EXPECT_DOUBLE_EQ(ValueScale(p, v.view), 3.0);
}

}  // namespace
}  // namespace attnkit::reference
