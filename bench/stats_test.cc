#include "bench/stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace attnkit::bench {
namespace {

// Expected values come from an independent implementation (enumeration of
// all C(n1+n2, n1) splits for the exact p; the textbook normal formula with
// tie and continuity corrections), and match scipy.stats.mannwhitneyu's
// documented example (males vs females: U = 17, exact p = 1/9, asymptotic
// p = 0.11134688653314).

TEST(MannWhitneyTest, ExactSmallSamplesWithoutTies) {
  const std::vector<double> males{19, 22, 16, 29, 24}, females{20, 11, 17, 12};
  auto r = MannWhitneyU(males, females);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->exact);
  EXPECT_DOUBLE_EQ(r->u, 17);
  EXPECT_NEAR(r->p, 1.0 / 9.0, 1e-12);
  // The test is symmetric: swapping the samples gives U' = n1 n2 - U, same p.
  auto s = MannWhitneyU(females, males);
  ASSERT_TRUE(s.ok());
  EXPECT_DOUBLE_EQ(s->u, 3);
  EXPECT_NEAR(s->p, 1.0 / 9.0, 1e-12);
}

TEST(MannWhitneyTest, ExactExtremes) {
  // Complete separation: p = 2 / C(n1 + n2, n1).
  auto r =
      MannWhitneyU(std::vector<double>{1, 2, 3}, std::vector<double>{4, 5, 6});
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->u, 0);
  EXPECT_NEAR(r->p, 0.1, 1e-12);
  std::vector<double> lo, hi;
  for (int i = 0; i < 9; ++i) {
    lo.push_back(i);
    hi.push_back(100 + i);
  }
  r = MannWhitneyU(hi, lo);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->u, 81);
  EXPECT_NEAR(r->p, 2.0 / 48620.0, 1e-15);  // C(18, 9) = 48620
  // Nine repetitions can reach p < 0.01; three never can (min p = 0.1), which
  // is why gated runs use >= 9.
  EXPECT_LT(r->p, 0.01);
}

TEST(MannWhitneyTest, ExactOverlapping9v9) {
  const std::vector<double> x{1, 2, 3, 4, 5, 6, 7, 8, 9};
  const std::vector<double> y{1.5, 2.5, 10, 11, 12, 13, 14, 15, 16};
  auto r = MannWhitneyU(x, y);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->exact);
  EXPECT_DOUBLE_EQ(r->u, 15);
  EXPECT_NEAR(r->p, 0.024434389140271493, 1e-12);
}

TEST(MannWhitneyTest, NormalApproximationWithTies) {
  auto r = MannWhitneyU(std::vector<double>{1, 2, 2, 3, 3, 3, 4},
                        std::vector<double>{3, 4, 4, 5, 5, 6});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->exact);
  EXPECT_DOUBLE_EQ(r->u, 3.5);
  EXPECT_NEAR(r->p, 0.012999854364387314, 1e-12);
}

TEST(MannWhitneyTest, NormalApproximationForLargeSamples) {
  // 21 + 21 > kMannWhitneyExactMax: the normal approximation, which for
  // complete separation gives z = (220.5 - 0.5) / sqrt(21*21*43/12).
  std::vector<double> a, b;
  for (int i = 0; i < 21; ++i) {
    a.push_back(i);
    b.push_back(50 + i);
  }
  auto r = MannWhitneyU(a, b);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->exact);
  const double z = 220.0 / std::sqrt(21.0 * 21.0 * 43.0 / 12.0);
  EXPECT_NEAR(r->p, std::erfc(z / std::sqrt(2.0)), 1e-15);
  EXPECT_LT(r->p, 1e-6);
}

TEST(MannWhitneyTest, IdenticalSamplesGiveOne) {
  const std::vector<double> x{5, 5, 5}, y{5, 5, 5, 5};
  auto r = MannWhitneyU(x, y);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->p, 1.0);
}

TEST(MannWhitneyTest, RejectsEmptyAndNaN) {
  auto r = MannWhitneyU(std::vector<double>{}, std::vector<double>{1});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("n1=0"), std::string::npos);
  r = MannWhitneyU(std::vector<double>{1}, std::vector<double>{NAN});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("sample 2"), std::string::npos);
}

}  // namespace
}  // namespace attnkit::bench
