#include "runtime/dtype.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

namespace attnkit {
namespace {

float F(uint32_t bits) { return std::bit_cast<float>(bits); }

TEST(Bf16Test, ExactValuesRoundTrip) {
  for (float f : {0.0f, -0.0f, 1.0f, -2.5f, 0.15625f, 65536.0f}) {
    EXPECT_EQ(bf16::FromFloat(f).ToFloat(), f) << f;
  }
  EXPECT_EQ(bf16::FromFloat(-0.0f).bits, 0x8000);
}

TEST(Bf16Test, RoundsToNearest) {
  // 1 + 2^-8 + 2^-10 is above the midpoint between 1 and 1 + 2^-7.
  EXPECT_EQ(bf16::FromFloat(F(0x3f808000u + 0x2000u)).bits, 0x3f81);
  // Just below the midpoint rounds down.
  EXPECT_EQ(bf16::FromFloat(F(0x3f807fffu)).bits, 0x3f80);
}

TEST(Bf16Test, TiesGoToEven) {
  // Exactly halfway, lower neighbour even (0x3f80): stays.
  EXPECT_EQ(bf16::FromFloat(F(0x3f808000u)).bits, 0x3f80);
  // Exactly halfway, lower neighbour odd (0x3f81): rounds up to 0x3f82.
  EXPECT_EQ(bf16::FromFloat(F(0x3f818000u)).bits, 0x3f82);
}

TEST(Bf16Test, NaNStaysNaNEvenWhenPayloadIsInLowBits) {
  // A NaN whose payload lives only in the low 16 bits would become +inf if
  // truncated; it must stay NaN, sign kept.
  const bf16 n = bf16::FromFloat(F(0x7f800001u));
  EXPECT_TRUE(std::isnan(n.ToFloat()));
  const bf16 neg = bf16::FromFloat(F(0xff800001u));
  EXPECT_TRUE(std::isnan(neg.ToFloat()));
  EXPECT_TRUE(std::signbit(neg.ToFloat()));
  EXPECT_TRUE(std::isnan(
      bf16::FromFloat(std::numeric_limits<float>::quiet_NaN()).ToFloat()));
}

TEST(Bf16Test, InfinitiesAndOverflow) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(bf16::FromFloat(inf).ToFloat(), inf);
  EXPECT_EQ(bf16::FromFloat(-inf).ToFloat(), -inf);
  // FLT_MAX is above the largest bf16 (0x7f7f) by more than half an ulp.
  EXPECT_EQ(bf16::FromFloat(std::numeric_limits<float>::max()).ToFloat(), inf);
  EXPECT_EQ(bf16::FromFloat(F(0x7f7f0000u)).bits, 0x7f7f);
}

TEST(Bf16Test, DenormalsRoundLikeNormals) {
  EXPECT_EQ(bf16::FromFloat(F(0x00010000u)).bits, 0x0001);
  EXPECT_EQ(bf16::FromFloat(F(0x00018000u)).bits, 0x0002);  // tie, to even
  EXPECT_EQ(bf16::FromFloat(F(0x00008000u)).bits, 0x0000);  // tie, to even
}

TEST(DTypeTest, NamesParse) {
  EXPECT_EQ(ParseDType("bf16"), DType::kBF16);
  EXPECT_EQ(ParseDType(DTypeName(DType::kF32)), DType::kF32);
  EXPECT_FALSE(ParseDType("f16").has_value());
  EXPECT_EQ(DTypeSize(DType::kBF16), 2);
}

// The one quantization rule of an i8 cache: scale absmax / 127, values
// rounded half to even, symmetric, scale 1 where absmax / 127 is not
// positive.
TEST(I8QuantizationTest, ScaleIsAbsmaxOver127AndOneForAZeroRow) {
  EXPECT_EQ(I8ScaleOf(127.0f), 1.0f);
  EXPECT_EQ(I8ScaleOf(254.0f), 2.0f);
  EXPECT_EQ(I8ScaleOf(0.0f), 1.0f);
  // absmax / 127 underflows to 0: scale 1 (the row stores zeros).
  EXPECT_EQ(I8ScaleOf(std::numeric_limits<float>::denorm_min()), 1.0f);
  EXPECT_EQ(DTypeSize(DType::kI8), 1);
  EXPECT_EQ(ParseDType("i8"), DType::kI8);
}

TEST(I8QuantizationTest, RoundsHalfToEvenAndSaturatesSymmetrically) {
  EXPECT_EQ(QuantizeI8(2.5f, 1.0f), 2);
  EXPECT_EQ(QuantizeI8(3.5f, 1.0f), 4);
  EXPECT_EQ(QuantizeI8(-2.5f, 1.0f), -2);
  EXPECT_EQ(QuantizeI8(-3.5f, 1.0f), -4);
  EXPECT_EQ(QuantizeI8(2.4999f, 1.0f), 2);
  EXPECT_EQ(QuantizeI8(0.75f, 0.5f), 2);  // 1.5 -> 2
  EXPECT_EQ(QuantizeI8(127.0f, 1.0f), 127);
  EXPECT_EQ(QuantizeI8(-127.0f, 1.0f), -127);
  // Never -128, whatever the input: the range is symmetric.
  EXPECT_EQ(QuantizeI8(-1000.0f, 1.0f), -127);
  EXPECT_EQ(QuantizeI8(1000.0f, 1.0f), 127);
}

}  // namespace
}  // namespace attnkit
