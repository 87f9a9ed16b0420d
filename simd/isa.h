// The ISA layer of the simd kernels: one vector abstraction (XVec over an
// xsimd architecture, SVec for the portable fallback) with bf16 widening,
// exp2, horizontal sums and transpose-reduces, plus the row loads the kernels
// share. Nothing here knows about attention.
//
// Include ONLY from the per-ISA kernel headers (through flash_impl.h, from
// flash_<isa>.cc after defining ATTNKIT_SIMD_NS): everything here lives in
// that per-ISA namespace, so no inline function compiled with one ISA's
// flags can be picked by the linker for another's (an ODR trap of multi-ISA
// builds). For the same reason these headers avoid out-of-line std::
// algorithms.
#ifndef ATTNKIT_SIMD_NS
#error "define ATTNKIT_SIMD_NS before including simd/isa.h"
#endif

#ifndef ATTNKIT_SIMD_ISA_H_
#define ATTNKIT_SIMD_ISA_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "runtime/exp2_poly.h"
#include "runtime/problem.h"
#include "simd/kernel.h"
#include "xsimd/xsimd.hpp"

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

// How the kernels' named steps are compiled. Cutting a kernel into steps
// must leave its machine code as it was, but GCC 12's heuristics compiled the
// cut kernels differently: micro-kernels moved out of line, a hot P.V loop
// no longer unswitched and spilling, a prefetch-only step judged pure and
// dropped -- up to 5% more instructions (simd/README.md, "Checking that a
// refactor kept the speed"). So the steps (QkTile, SoftmaxTile, ...) are
// always_inline, and the functions that run them per tile
// (PrefillKernel::RunTile, DecodeKernel::Run) are flatten: GCC does not
// early-inline ordinary helpers such as TensorView::Offset into an
// always_inline function, and left some as calls per key. Micro-kernels that
// must stay out of line say so (noinline).
#define ATTNKIT_SIMD_STEP [[gnu::always_inline]]

namespace attnkit::simd::internal::ATTNKIT_SIMD_NS {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kLog2e = 1.4426950408889634f;

// exp2 polynomial on [-0.5, 0.5]: runtime/exp2_poly.h (the compiled tier's
// AVX-512 exp2 evaluates the same one).
constexpr float kE0 = kExp2Nearest[0], kE1 = kExp2Nearest[1],
                kE2 = kExp2Nearest[2], kE3 = kExp2Nearest[3],
                kE4 = kExp2Nearest[4], kE5 = kExp2Nearest[5];

inline float Bf16ToF32(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// One element widened to f32 (the scalar tails of the vector loops).
inline float LoadOne(const float* p) { return *p; }
inline float LoadOne(const uint16_t* p) { return Bf16ToF32(*p); }

// The vector layer over xsimd architecture A. kDot: the ISA has vdpbf16ps
// (the kernels then take bf16 QK^T through it).
template <class A, bool kDot>
struct XVec {
  using V = xsimd::batch<float, A>;
  using I = xsimd::batch<int32_t, A>;
  static constexpr int W = static_cast<int>(V::size);
  static constexpr bool kBf16Dot = kDot;
  static V Zero() { return V(0.0f); }
  static V Set(float x) { return V(x); }
  static V Load(const float* p) { return V::load_unaligned(p); }
  // W bf16 values widened to f32 in registers (zero-extend, shift left 16).
  static V Load(const uint16_t* p) {
#if defined(__AVX512F__)
    if constexpr (W == 16) {
      return V(_mm512_castsi512_ps(_mm512_slli_epi32(
          _mm512_cvtepu16_epi32(
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))),
          16)));
    }
#endif
#if defined(__AVX2__)
    if constexpr (W == 8) {
      return V(_mm256_castsi256_ps(_mm256_slli_epi32(
          _mm256_cvtepu16_epi32(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
          16)));
    }
#endif
    alignas(64) float t[W];
    for (int i = 0; i < W; ++i) t[i] = Bf16ToF32(p[i]);
    return V::load_aligned(t);
  }
  // W int8 values (a quantized K/V row, before its scale) converted to f32
  // in registers: sign-extend to 32 bits, then cvtdq2ps (exact: |q| <= 127).
  static V Load(const int8_t* p) {
#if defined(__AVX512F__)
    if constexpr (W == 16) {
      return V(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))));
    }
#endif
#if defined(__AVX2__)
    if constexpr (W == 8) {
      return V(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)))));
    }
#endif
    alignas(64) float t[W];
    for (int i = 0; i < W; ++i) t[i] = static_cast<float>(p[i]);
    return V::load_aligned(t);
  }
  static void Store(float* p, const V& v) { v.store_unaligned(p); }
  // A store past the caches (movntps) to p aligned to the vector (W * 4
  // bytes); StreamFence orders such stores before what follows.
  static void Stream(float* p, const V& v) {
#if defined(__AVX512F__)
    if constexpr (W == 16) return _mm512_stream_ps(p, v);
#endif
#if defined(__AVX2__)
    if constexpr (W == 8) return _mm256_stream_ps(p, v);
#endif
    v.store_aligned(p);
  }
  static void StreamFence() {
#if defined(__AVX2__) || defined(__AVX512F__)
    _mm_sfence();
#endif
  }
  static V Fma(const V& a, const V& b, const V& c) {
    return xsimd::fma(a, b, c);
  }
  static V Max(const V& a, const V& b) { return xsimd::max(a, b); }
  static float HSum(const V& v) { return xsimd::hadd(v); }
  static float HMax(const V& v) {
    alignas(64) float t[W];
    v.store_aligned(t);
    float m = t[0];
    for (int i = 1; i < W; ++i) m = t[i] > m ? t[i] : m;
    return m;
  }
  // W accumulators -> one vector of their W horizontal sums.
  static V HAddP(const V* rows) {
#if defined(__AVX512F__)
    // xsimd 8.1's AVX-512 haddp returns lanes 2-5 and 10-13 permuted, so
    // the 16-wide transpose-reduce is spelled out: two unpack levels sum
    // within 128-bit blocks, then two block shuffles sum across them.
    if constexpr (W == 16) {
      __m512 q[4];
      for (int k = 0; k < 4; ++k) {
        const __m512 r0 = rows[4 * k], r1 = rows[4 * k + 1],
                     r2 = rows[4 * k + 2], r3 = rows[4 * k + 3];
        const __m512 s01 = _mm512_add_ps(_mm512_unpacklo_ps(r0, r1),
                                         _mm512_unpackhi_ps(r0, r1));
        const __m512 s23 = _mm512_add_ps(_mm512_unpacklo_ps(r2, r3),
                                         _mm512_unpackhi_ps(r2, r3));
        const __m512d a = _mm512_castps_pd(s01), b = _mm512_castps_pd(s23);
        q[k] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
      }
      const __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(q[0], q[1], 0x44),
                                      _mm512_shuffle_f32x4(q[0], q[1], 0xEE));
      const __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(q[2], q[3], 0x44),
                                      _mm512_shuffle_f32x4(q[2], q[3], 0xEE));
      return V(_mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88),
                             _mm512_shuffle_f32x4(ab, cd, 0xDD)));
    }
#endif
    return xsimd::haddp(rows);
  }
#if defined(__AVX2__) || defined(__AVX512F__)
  // Transpose's first two stages on W-float registers R (t: scratch).
  template <class R>
  static void Blocks4x4(const V* m, R* t, R* u) {
    constexpr bool kZmm = sizeof(R) == 64;
    auto unpack = [](R a, R b, bool hi) {
      if constexpr (kZmm)
        return hi ? _mm512_unpackhi_ps(a, b) : _mm512_unpacklo_ps(a, b);
      else
        return hi ? _mm256_unpackhi_ps(a, b) : _mm256_unpacklo_ps(a, b);
    };
    // (x[0], x[1], y[0], y[1]) or, kHigh, (x[2], x[3], y[2], y[3]) per block.
    auto shuffle = []<bool kHigh>(R x, R y) {
      if constexpr (kZmm)
        return _mm512_shuffle_ps(x, y, kHigh ? 0xEE : 0x44);
      else
        return _mm256_shuffle_ps(x, y, kHigh ? 0xEE : 0x44);
    };
    for (int i = 0; i < W; i += 2) {
      t[i] = unpack(m[i], m[i + 1], false);
      t[i + 1] = unpack(m[i], m[i + 1], true);
    }
    for (int k = 0; k < W; k += 4) {
      u[k] = shuffle.template operator()<false>(t[k], t[k + 2]);
      u[k + 1] = shuffle.template operator()<true>(t[k], t[k + 2]);
      u[k + 2] = shuffle.template operator()<false>(t[k + 1], t[k + 3]);
      u[k + 3] = shuffle.template operator()<true>(t[k + 1], t[k + 3]);
    }
  }
#endif
  // Transposes the W x W matrix of rows m[0..W) in place (m[i] lane j <-
  // m[j] lane i): the prefill path's Q^T packing and O^T write-back, whose
  // strided scalar copies took ~8% of a short prefill's time. Unpacks and
  // in-block shuffles make 4 x 4 blocks (u[4k + c], 128-bit block b: rows
  // 4k..4k+3 of column 4b + c); block shuffles put each column's blocks in
  // order (two rounds of 4 blocks on AVX-512, one of 2 on AVX2).
  static void Transpose(V* m) {
#if defined(__AVX512F__)
    if constexpr (W == 16) {
      __m512 t[16], u[16];
      Blocks4x4(m, t, u);
      for (int h = 0; h < 16; h += 8)
        for (int c = 0; c < 4; ++c) {
          t[h + c] = _mm512_shuffle_f32x4(u[h + c], u[h + 4 + c], 0x88);
          t[h + 4 + c] = _mm512_shuffle_f32x4(u[h + c], u[h + 4 + c], 0xDD);
        }
      for (int c = 0; c < 8; ++c) {
        m[c] = V(_mm512_shuffle_f32x4(t[c], t[8 + c], 0x88));
        m[8 + c] = V(_mm512_shuffle_f32x4(t[c], t[8 + c], 0xDD));
      }
      return;
    }
#endif
#if defined(__AVX2__)
    if constexpr (W == 8) {
      __m256 t[8], u[8];
      Blocks4x4(m, t, u);
      for (int c = 0; c < 4; ++c) {
        m[c] = V(_mm256_permute2f128_ps(u[c], u[4 + c], 0x20));
        m[4 + c] = V(_mm256_permute2f128_ps(u[c], u[4 + c], 0x31));
      }
      return;
    }
#endif
    alignas(64) float a[W][W];
    for (int i = 0; i < W; ++i) m[i].store_aligned(a[i]);
    for (int i = 0; i < W; ++i) {
      alignas(64) float col[W];
      for (int j = 0; j < W; ++j) col[j] = a[j][i];
      m[i] = V::load_aligned(col);
    }
  }
  // 2^x for x <= ~9 (callers guarantee it); x <= -127 and -inf give +0, so a
  // masked logit contributes exactly nothing; NaN stays NaN. max/min take
  // the constant first: on x86 they return the second operand for a NaN.
  // (microkernel_test's Exp2KeepsItsContract checks this on every ISA.)
  static V Exp2(const V& x) {
#if defined(__AVX512F__)
    // p * 2^n in one vscalefps, zeroed below -125.5 by its write mask;
    // f = x - round(x) from one vreduceps, n = x - f (exact). 10 vector uops
    // (the generic form below takes 16): vrndscaleps + vsubps, as the first
    // AVX-512 form had it, take three FMA-port slots on Intel cores, a
    // vreduceps + vsubps two (Xeon family 6 model 207, GCC 12.2,
    // 2026-11-27). No clamp above: x >= 128 scales to +inf. The mask, not a
    // clamp, makes the zeros: a vscalefps whose result underflows costs a
    // microcode assist (without the mask a causal MHA prefill, whose masked
    // scores all take that path, ran 1.2x slower; same host).
    if constexpr (W == 16) {
      // Not (x < -125.5): NaN lanes stay in, and stay NaN.
      const __mmask16 keep =
          _mm512_cmp_ps_mask(x, _mm512_set1_ps(-125.5f), _CMP_NLT_UQ);
      // Masked too: reducing -inf would raise the invalid-operation flag.
      const __m512 f = _mm512_maskz_reduce_ps(
          keep, x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m512 n = _mm512_sub_ps(x, f);
      __m512 p = _mm512_set1_ps(kE0);
      p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(kE1));
      p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(kE2));
      p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(kE3));
      p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(kE4));
      p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(kE5));
      p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
      return V(_mm512_maskz_scalef_ps(keep, p, n));
    }
#endif
    V xc = xsimd::min(V(64.0f), xsimd::max(V(-127.0f), x));
    V n = xsimd::nearbyint(xc);
    V f = xc - n;
    V p = V(kE0);
    p = xsimd::fma(p, f, V(kE1));
    p = xsimd::fma(p, f, V(kE2));
    p = xsimd::fma(p, f, V(kE3));
    p = xsimd::fma(p, f, V(kE4));
    p = xsimd::fma(p, f, V(kE5));
    p = xsimd::fma(p, f, V(1.0f));
    I e = (xsimd::to_int(n) + I(127)) << 23;
    return p * xsimd::bitwise_cast<V>(e);
  }
  // Lane-wise select, lazy-rescale helpers (flash_impl.h).
  static V NewMax(const V& m_old, const V& tmax) {
    return xsimd::select(tmax > m_old + V(kLazyRescaleLog2), tmax, m_old);
  }
  static V UsableMax(const V& m) {
    return xsimd::select(m == V(kNegInf), V(0.0f), m);
  }
  static bool AllEqual(const V& a, const V& b) { return xsimd::all(a == b); }
  // s where lo <= j < hi, else -inf (a lane-wise mask of keys j).
  static V KeepIn(const V& s, const V& j, const V& lo, const V& hi) {
    return xsimd::select((j >= lo) & (j < hi), s, V(kNegInf));
  }
};

// The portable fallback: a 4-float "vector" in plain C++ (no intrinsics; at
// -march=x86-64 the compiler may use SSE2, which every x86-64 CPU has).
struct SV4 {
  float v[4];
  friend SV4 operator+(const SV4& a, const SV4& b) {
    return {
        {a.v[0] + b.v[0], a.v[1] + b.v[1], a.v[2] + b.v[2], a.v[3] + b.v[3]}};
  }
  friend SV4 operator-(const SV4& a, const SV4& b) {
    return {
        {a.v[0] - b.v[0], a.v[1] - b.v[1], a.v[2] - b.v[2], a.v[3] - b.v[3]}};
  }
  friend SV4 operator*(const SV4& a, const SV4& b) {
    return {
        {a.v[0] * b.v[0], a.v[1] * b.v[1], a.v[2] * b.v[2], a.v[3] * b.v[3]}};
  }
};

struct SVec {
  using V = SV4;
  static constexpr int W = 4;
  static constexpr bool kBf16Dot = false;
  static V Zero() { return Set(0.0f); }
  static V Set(float x) { return {{x, x, x, x}}; }
  static V Load(const float* p) { return {{p[0], p[1], p[2], p[3]}}; }
  static V Load(const uint16_t* p) {
    return {
        {Bf16ToF32(p[0]), Bf16ToF32(p[1]), Bf16ToF32(p[2]), Bf16ToF32(p[3])}};
  }
  static V Load(const int8_t* p) {
    return {{static_cast<float>(p[0]), static_cast<float>(p[1]),
             static_cast<float>(p[2]), static_cast<float>(p[3])}};
  }
  static void Store(float* p, const V& a) {
    for (int i = 0; i < 4; ++i) p[i] = a.v[i];
  }
  static void Stream(float* p, const V& a) { Store(p, a); }
  static void StreamFence() {}
  // Baseline x86-64 has no FMA instruction; std::fma would be a libm call.
  static V Fma(const V& a, const V& b, const V& c) { return a * b + c; }
  static V Max(const V& a, const V& b) {  // NaN in b propagates, as on x86
    V r;
    for (int i = 0; i < 4; ++i) r.v[i] = a.v[i] > b.v[i] ? a.v[i] : b.v[i];
    return r;
  }
  static float HSum(const V& a) {
    return (a.v[0] + a.v[1]) + (a.v[2] + a.v[3]);
  }
  static float HMax(const V& a) {
    float m = a.v[0];
    for (int i = 1; i < 4; ++i) m = a.v[i] > m ? a.v[i] : m;
    return m;
  }
  static V HAddP(const V* rows) {
    return {{HSum(rows[0]), HSum(rows[1]), HSum(rows[2]), HSum(rows[3])}};
  }
  static void Transpose(V* m) {
    for (int i = 0; i < 4; ++i)
      for (int j = i + 1; j < 4; ++j) {
        const float x = m[i].v[j];
        m[i].v[j] = m[j].v[i];
        m[j].v[i] = x;
      }
  }
  static float Exp2One(float x) {
    if (x != x) return x;
    if (!(x > -127.0f)) return 0.0f;
    return std::exp2(x < 64.0f ? x : 64.0f);
  }
  static V Exp2(const V& a) {
    return {
        {Exp2One(a.v[0]), Exp2One(a.v[1]), Exp2One(a.v[2]), Exp2One(a.v[3])}};
  }
  static V NewMax(const V& m_old, const V& tmax) {
    V r;
    for (int i = 0; i < 4; ++i)
      r.v[i] =
          tmax.v[i] > m_old.v[i] + kLazyRescaleLog2 ? tmax.v[i] : m_old.v[i];
    return r;
  }
  static V UsableMax(const V& m) {
    V r;
    for (int i = 0; i < 4; ++i) r.v[i] = m.v[i] == kNegInf ? 0.0f : m.v[i];
    return r;
  }
  static bool AllEqual(const V& a, const V& b) {
    for (int i = 0; i < 4; ++i)
      if (!(a.v[i] == b.v[i])) return false;
    return true;
  }
  static V KeepIn(const V& s, const V& j, const V& lo, const V& hi) {
    V r;
    for (int i = 0; i < 4; ++i)
      r.v[i] = j.v[i] >= lo.v[i] && j.v[i] < hi.v[i] ? s.v[i] : kNegInf;
    return r;
  }
};

// dst[x] = src[x * stride] widened to f32, x < n (auto-vectorized when
// stride == 1: vpmovzxwd + vpslld for bf16, vpmovsxbd + vcvtdq2ps for i8).
// An i8 row widens to its integers: the caller applies the row's scale.
inline void LoadRow(const TensorView& t, int64_t off, int64_t stride, int64_t n,
                    float* dst) {
  if (t.dtype == DType::kI8) {
    const int8_t* s = static_cast<const int8_t*>(t.data) + off;
    if (stride == 1) {
      for (int64_t x = 0; x < n; ++x) dst[x] = static_cast<float>(s[x]);
    } else {
      for (int64_t x = 0; x < n; ++x)
        dst[x] = static_cast<float>(s[x * stride]);
    }
  } else if (t.dtype == DType::kF32) {
    const float* s = t.As<float>() + off;
    if (stride == 1) {
      for (int64_t x = 0; x < n; ++x) dst[x] = s[x];
    } else {
      for (int64_t x = 0; x < n; ++x) dst[x] = s[x * stride];
    }
  } else {
    const uint16_t* s = static_cast<const uint16_t*>(t.data) + off;
    if (stride == 1) {
      for (int64_t x = 0; x < n; ++x) {
        const uint32_t u = static_cast<uint32_t>(s[x]) << 16;
        std::memcpy(dst + x, &u, 4);
      }
    } else {
      for (int64_t x = 0; x < n; ++x) dst[x] = Bf16ToF32(s[x * stride]);
    }
  }
}

inline void ZeroFloats(float* p, int64_t n) {
  for (int64_t x = 0; x < n; ++x) p[x] = 0.0f;
}

}  // namespace
}  // namespace attnkit::simd::internal::ATTNKIT_SIMD_NS

#endif  // ATTNKIT_SIMD_ISA_H_
