#include "runtime/parse.h"

#include <gtest/gtest.h>

namespace attnkit {
namespace {

TEST(ParseTest, WholeStringIntegersOnly) {
  EXPECT_EQ(ParseInt64("-42"), -42);
  EXPECT_EQ(ParseUint64("18446744073709551615"), UINT64_MAX);
  EXPECT_FALSE(ParseInt64("").has_value());
  EXPECT_FALSE(ParseInt64("12x").has_value());
  EXPECT_FALSE(ParseInt64(" 3").has_value());
  EXPECT_FALSE(ParseUint64("-1").has_value());
  EXPECT_FALSE(ParseInt64("9223372036854775808").has_value());  // 2^63
}

}  // namespace
}  // namespace attnkit
