// Storage dtypes. Math is always f32 (or f64 in the oracle); bf16 is a storage
// format only.
#ifndef ATTNKIT_RUNTIME_DTYPE_H_
#define ATTNKIT_RUNTIME_DTYPE_H_

#include <bit>
#include <cstdint>
#include <optional>
#include <string_view>

#include "runtime/enum_table.h"

namespace attnkit {

enum class DType : uint8_t { kF32 = 0, kBF16 = 1 };

constexpr int64_t DTypeSize(DType t) { return t == DType::kBF16 ? 2 : 4; }
inline constexpr auto kDTypeNames = MakeEnumTable<DType>({
    {DType::kF32, "f32"},
    {DType::kBF16, "bf16"},
});
static_assert(kDTypeNames.RoundTrips());
inline std::string_view DTypeName(DType t) { return kDTypeNames.Name(t); }
inline std::optional<DType> ParseDType(std::string_view s) {
  return kDTypeNames.Parse(s);
}

// bfloat16: the top 16 bits of an IEEE f32. Conversion from f32 rounds to
// nearest, ties to even; NaNs stay NaN (quiet bit forced so truncation can
// never turn a NaN payload into an infinity); finite values that round past
// the largest bf16 become infinities, as IEEE rounding requires.
struct bf16 {
  uint16_t bits = 0;

  static constexpr bf16 FromBits(uint16_t b) {
    bf16 r;
    r.bits = b;
    return r;
  }
  static constexpr bf16 FromFloat(float f) {
    const uint32_t u = std::bit_cast<uint32_t>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN
      return FromBits(static_cast<uint16_t>((u >> 16) | 0x0040u));
    }
    const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
    return FromBits(static_cast<uint16_t>((u + rounding) >> 16));
  }
  constexpr float ToFloat() const {
    return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
  }
  friend constexpr bool operator==(bf16 a, bf16 b) { return a.bits == b.bits; }
};
static_assert(sizeof(bf16) == 2);

}  // namespace attnkit

#endif  // ATTNKIT_RUNTIME_DTYPE_H_
