#include "runtime/stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace attnkit {
namespace {

TEST(MedianTest, OddEvenEmpty) {
  EXPECT_DOUBLE_EQ(Median(std::vector<double>{3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(Median(std::vector<double>{4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(Median(std::vector<double>{7}), 7);
  EXPECT_TRUE(std::isnan(Median(std::vector<double>{})));
}

TEST(MedianTest, LeavesItsInputAlone) {
  const std::vector<double> v{5, 1, 4, 2, 3};
  EXPECT_DOUBLE_EQ(Median(v), 3);
  EXPECT_EQ(v, (std::vector<double>{5, 1, 4, 2, 3}));
}

}  // namespace
}  // namespace attnkit
