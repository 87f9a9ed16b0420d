#include "runtime/enum_table.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "runtime/dtype.h"
#include "runtime/enum_table_testing.h"
#include "runtime/problem.h"
#include "runtime/random.h"
#include "runtime/status.h"

namespace attnkit {
namespace {

enum class Color : uint8_t { kRed = 0, kGreen = 3, kBlue = 7 };
constexpr auto kColors = MakeEnumTable<Color>({
    {Color::kRed, "red"},
    {Color::kGreen, "green"},
    {Color::kBlue, "blue"},
});
static_assert(kColors.RoundTrips());
static_assert(kColors.Name(Color::kGreen) == "green");
static_assert(kColors.Parse("blue") == Color::kBlue);
static_assert(!kColors.IsValid(Color{1}));

TEST(EnumTableTest, NameParseIsValid) {
  EXPECT_EQ(kColors.size(), 3u);
  EXPECT_EQ(kColors.Name(Color::kRed), "red");
  EXPECT_EQ(kColors.Name(Color::kBlue), "blue");
  // A value no entry has (a cast integer, a corrupt byte).
  EXPECT_EQ(kColors.Name(Color{1}), "invalid");
  EXPECT_EQ(kColors.Name(Color{200}, "?"), "?");
  EXPECT_EQ(kColors.Parse("green"), Color::kGreen);
  EXPECT_EQ(kColors.Parse(""), std::nullopt);
  EXPECT_EQ(kColors.Parse("Green"), std::nullopt);  // case-sensitive
  EXPECT_EQ(kColors.Parse("green "), std::nullopt);
  EXPECT_EQ(kColors.Parse("invalid"), std::nullopt);
  EXPECT_TRUE(kColors.IsValid(Color::kGreen));
  EXPECT_FALSE(kColors.IsValid(Color{2}));
}

TEST(EnumTableTest, NamesListsEveryEntryInOrder) {
  EXPECT_EQ(kColors.Names(), "red|green|blue");
  EXPECT_EQ(kColors.Names(", "), "red, green, blue");
  EXPECT_EQ(kColors.NotOneOf("color", "mauve"),
            "color=mauve is not red|green|blue");
  EXPECT_EQ(kColors.NotOneOf("color", ""), "color= is not red|green|blue");
}

TEST(EnumTableTest, RoundTripsRejectsDuplicatesAndEmptyNames) {
  constexpr auto dup_value = MakeEnumTable<Color>({
      {Color::kRed, "red"},
      {Color::kRed, "crimson"},
  });
  constexpr auto dup_name = MakeEnumTable<Color>({
      {Color::kRed, "red"},
      {Color::kBlue, "red"},
  });
  constexpr auto empty_name = MakeEnumTable<Color>({{Color::kRed, ""}});
  static_assert(!dup_value.RoundTrips());
  static_assert(!dup_name.RoundTrips());
  static_assert(!empty_name.RoundTrips());
  EXPECT_FALSE(dup_value.RoundTrips());
}

// The runtime's tables. Those of the floors above (Tier, Outcome, Bug,
// DecodeMode, Isa, Verdict, Stage), which runtime/ may not include, are
// static_assert-ed RoundTrips() where they are defined and go through the
// same ExpectRoundTrip in their folder's tests.
using testing::ExpectRoundTrip;

TEST(EnumTableTest, EveryRuntimeTableRoundTrips) {
  ExpectRoundTrip(kDTypeNames, "DType");
  ExpectRoundTrip(kMaskKindNames, "MaskKind");
  ExpectRoundTrip(kKvLayoutNames, "KvLayout");
  ExpectRoundTrip(kValueProfileNames, "ValueProfile");
  ExpectRoundTrip(kStatusCodeNames, "StatusCode");
  ExpectRoundTrip(kColors, "Color");
}

TEST(EnumTableTest, WrappersAreTheTables) {
  EXPECT_EQ(DTypeName(DType::kBF16), "bf16");
  EXPECT_EQ(ParseDType("f32"), DType::kF32);
  EXPECT_EQ(MaskKindName(MaskKind::kWindow), "window");
  EXPECT_EQ(ParseMaskKind("bias"), MaskKind::kBias);
  EXPECT_EQ(KvLayoutName(KvLayout::kTransposedV), "tv");
  EXPECT_EQ(ParseKvLayout("bshd"), KvLayout::kBSHD);
  EXPECT_EQ(ValueProfileName(ValueProfile::kHugeLogits), "huge_logits");
  EXPECT_EQ(StatusCodeName(StatusCode::kNotFound), "NOT_FOUND");
  EXPECT_EQ(kNumValueProfiles, 5);
  EXPECT_EQ(kMaskKindNames.Names(), "none|causal|window|bias");
}

}  // namespace
}  // namespace attnkit
