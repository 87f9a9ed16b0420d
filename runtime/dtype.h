// Storage dtypes. Math is always f32 (or f64 in the oracle); bf16 and i8 are
// storage formats only. i8 is for K and V alone (a quantized KV cache): each
// row of head_dim values (one token of one kv head) is stored as int8 with
// one f32 scale, value = q * scale (QuantizeRowI8 below).
#ifndef ATTNKIT_RUNTIME_DTYPE_H_
#define ATTNKIT_RUNTIME_DTYPE_H_

#include <bit>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string_view>

#include "runtime/enum_table.h"

namespace attnkit {

enum class DType : uint8_t { kF32 = 0, kBF16 = 1, kI8 = 2 };

constexpr int64_t DTypeSize(DType t) {
  switch (t) {
    case DType::kBF16:
      return 2;
    case DType::kI8:
      return 1;
    case DType::kF32:
      break;
  }
  return 4;
}
inline constexpr auto kDTypeNames = MakeEnumTable<DType>({
    {DType::kF32, "f32"},
    {DType::kBF16, "bf16"},
    {DType::kI8, "i8"},
});
static_assert(kDTypeNames.RoundTrips());
// The dtypes of q, out and weights (every tensor but a quantized K/V): what
// a --dtype flag offers.
inline constexpr auto kFloatDTypeNames = MakeEnumTable<DType>({
    {DType::kF32, "f32"},
    {DType::kBF16, "bf16"},
});
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

// The int8 quantization rule of a quantized KV cache -- the one definition
// every writer (the cache append, the tester's inputs, every backend) uses,
// so a cache's bytes are bit-exact across backends:
//   scale = absmax / 127  (absmax = max |x| over the row; f32 division)
//   q[e]  = round-half-to-even(x[e] / scale), within [-127, 127]
// A row whose scale is not positive (all zeros, or an absmax so small that
// absmax / 127 underflows to 0) gets scale 1 and stores zeros. Symmetric:
// -128 is never produced. The row's values must be finite (the append
// refuses others: an int8 cannot hold them).
inline float I8ScaleOf(float absmax) {
  const float scale = absmax / 127.0f;
  return scale > 0.0f ? scale : 1.0f;
}
inline int8_t QuantizeI8(float x, float scale) {
  // nearbyint rounds in the current mode: to nearest, ties to even (the
  // mode attnkit never changes), as the vector cvtps2dq does. The clamp is
  // fmin(fmax(r, -127), 127) -- a NaN becomes -127, never a cast of NaN --
  // written as compares, which GCC inlines where fmax/fmin were libm calls
  // per element.
  float r = std::nearbyint(x / scale);
  r = r > -127.0f ? r : -127.0f;
  r = r < 127.0f ? r : 127.0f;
  return static_cast<int8_t>(r);
}
// The running absmax of QuantizeRowI8: fmax(m, |x|) for finite x (a NaN x
// leaves m), as a compare.
inline float I8AbsMax(float m, float x) {
  const float a = std::fabs(x);
  return a > m ? a : m;
}

}  // namespace attnkit

#endif  // ATTNKIT_RUNTIME_DTYPE_H_
