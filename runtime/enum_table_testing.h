// Test-only (GoogleTest): the round trip every enum table's folder checks.
#ifndef ATTNKIT_RUNTIME_ENUM_TABLE_TESTING_H_
#define ATTNKIT_RUNTIME_ENUM_TABLE_TESTING_H_

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <type_traits>

#include "runtime/enum_table.h"

namespace attnkit::testing {

// Every entry survives Name -> Parse and Parse -> Name, names are unique,
// non-empty and not "invalid", Names() lists them in order, and a value
// outside the table (200: no enum here comes close) is "invalid".
template <typename Table>
void ExpectRoundTrip(const Table& table, const char* what) {
  SCOPED_TRACE(what);
  EXPECT_TRUE(table.RoundTrips());
  std::set<std::string> names;
  std::string joined;
  for (const auto& e : table) {
    EXPECT_TRUE(table.IsValid(e.value)) << e.name;
    EXPECT_EQ(table.Name(e.value), e.name);
    const auto parsed = table.Parse(e.name);
    ASSERT_TRUE(parsed.has_value()) << e.name;
    EXPECT_EQ(*parsed, e.value) << e.name;
    EXPECT_NE(e.name, "invalid");
    names.insert(std::string(e.name));
    joined += (joined.empty() ? "" : "|") + std::string(e.name);
  }
  EXPECT_EQ(names.size(), table.size());
  EXPECT_EQ(table.Names(), joined);
  using E = std::remove_cvref_t<decltype(table[0].value)>;
  EXPECT_FALSE(table.IsValid(static_cast<E>(200)));
  EXPECT_EQ(table.Name(static_cast<E>(200)), "invalid");
  EXPECT_FALSE(table.Parse("invalid").has_value());
}

}  // namespace attnkit::testing

#endif  // ATTNKIT_RUNTIME_ENUM_TABLE_TESTING_H_
