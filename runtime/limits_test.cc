#include "runtime/limits.h"

#include <gtest/gtest.h>

#include <limits>

namespace attnkit {
namespace {

// Whether `text` contains `part` (printed on failure).
::testing::AssertionResult Has(const std::string& text,
                               const std::string& part) {
  if (text.find(part) != std::string::npos) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "'" << text << "' lacks '" << part << "'";
}

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

TEST(Checked, MulAddProductDetectOverflow) {
  EXPECT_EQ(CheckedMul(3, 4), 12);
  EXPECT_EQ(CheckedMul(kMax, 2), std::nullopt);
  EXPECT_EQ(CheckedAdd(kMax, 1), std::nullopt);
  EXPECT_EQ(CheckedAdd(40, 2), 42);
  EXPECT_EQ(CheckedProduct({2, 3, 7}), 42);
  EXPECT_EQ(CheckedProduct({int64_t{1} << 31, int64_t{1} << 31, 4}),
            std::nullopt);
}

TEST(MemoryEstimate, UnderTheBudgetIsOk) {
  MemoryEstimate e;
  e.Add("a", {10, 4}).Add("b", {2});
  EXPECT_EQ(e.total(), 42);
  EXPECT_TRUE(e.Check(42, "case x").ok());
}

TEST(MemoryEstimate, OverTheBudgetNamesItemsBytesAndFlag) {
  MemoryEstimate e;
  e.Add("q (batch=1 x q_heads=2)", {1, 2, 4}).Add("kv cache", {1e12});
  const Status s = e.Check(1024, "case x");
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(
      Has(s.message(), "case x needs an estimated 1000000000008 bytes"));
  EXPECT_TRUE(Has(s.message(), "--max-memory=1024"));
  // Largest first.
  EXPECT_TRUE(Has(s.message(),
                  "kv cache 1000000000000 bytes, q (batch=1 x "
                  "q_heads=2) 8 bytes"));
}

TEST(MemoryEstimate, AbsurdSizesDoNotOverflow) {
  MemoryEstimate e;
  e.Add("huge", {1e15, 1e15});
  const Status s = e.Check(kMax, "x");
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Has(s.message(), "1e+30 bytes"));
}

TEST(ParseByteSize, SuffixesAndRange) {
  EXPECT_EQ(ParseByteSize("1024"), 1024);
  EXPECT_EQ(ParseByteSize("4K"), 4096);
  EXPECT_EQ(ParseByteSize("512M"), int64_t{512} << 20);
  EXPECT_EQ(ParseByteSize("2g"), int64_t{2} << 30);
  EXPECT_EQ(ParseByteSize("1T"), int64_t{1} << 40);
  EXPECT_EQ(ParseByteSize("0"), std::nullopt);
  EXPECT_EQ(ParseByteSize("-5"), std::nullopt);
  EXPECT_EQ(ParseByteSize("G"), std::nullopt);
  EXPECT_EQ(ParseByteSize("12X"), std::nullopt);
  EXPECT_EQ(ParseByteSize("99999999999T"), std::nullopt);
}

// The sizes sysfs gives a cache (LastLevelCacheBytes reads them so; the
// line without its newline), and what is not one.
TEST(ParseByteSize, SysfsCacheSizes) {
  EXPECT_EQ(ParseByteSize("32768K"), int64_t{32} << 20);
  EXPECT_EQ(ParseByteSize("1024K"), int64_t{1} << 20);
  EXPECT_EQ(ParseByteSize("8M"), int64_t{8} << 20);
  EXPECT_EQ(ParseByteSize("1G"), int64_t{1} << 30);
  EXPECT_EQ(ParseByteSize("512"), 512);
  EXPECT_EQ(ParseByteSize(""), std::nullopt);
  EXPECT_EQ(ParseByteSize("0K"), std::nullopt);
  EXPECT_EQ(ParseByteSize("K"), std::nullopt);
  EXPECT_EQ(ParseByteSize("12Q"), std::nullopt);
  EXPECT_EQ(ParseByteSize("-5K"), std::nullopt);
  EXPECT_EQ(ParseByteSize("99999999999999999999K"), std::nullopt);
}

TEST(DefaultMaxMemory, IsPositive) { EXPECT_GT(DefaultMaxMemory(), 0); }

TEST(Activity, LastOneWins) {
  SetActivity("running case 1");
  SetActivity("running case 2");
  EXPECT_EQ(Activity(), "running case 2");
}

}  // namespace
}  // namespace attnkit
