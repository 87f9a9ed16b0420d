// The flash-attention kernel, written once over a vector abstraction and
// instantiated per ISA. Include ONLY from flash_<isa>.cc after defining
// ATTNKIT_SIMD_NS: everything here lives in that per-ISA namespace, so no
// inline function compiled with one ISA's flags can be picked by the linker
// for another's (an ODR trap of multi-ISA builds). For the same reason this
// file avoids out-of-line std:: algorithms.
//
// Timings quoted in this file were measured on a 2-core AMD EPYC Zen 5 family
// 26, GCC 12.2 (2026-11-21), as % of a paired read pass (bench/README.md)
// unless stated.
//
// Algorithm (FlashAttention-2 on a CPU). One work item = rows R (queries x the
// query heads of one KV head) and a key range. For each KV tile:
//   S = Q K^T (log2 units: scale*log2(e) folded into one constant c, so the
//   softmax needs exp2, whose range reduction is a plain round + exponent
//   insert), mask, running max m, P = exp2(S - m), l = l*alpha + rowsum(P),
//   O = O*alpha + P V.     out = O / l at the end (zeros when l == 0).
// No S x S buffer exists: S lives for one tile.
//
// Two paths, one per kernel family, chosen by R:
//  * prefill (R >= vector width), lanes = rows: S^T[key][row], O^T[d][row].
//    QK^T broadcasts K[j][e] against a vector of Q^T[e][rows]; P.V broadcasts
//    V[j][e] against P^T[j][rows]. Broadcasting from memory reads K and V
//    through any strides, so every KV layout (BHSD, BSHD, transposed V) runs
//    the same register-blocked micro-kernels with no transposition, and the
//    row max/sum of the online softmax are lane-wise (no shuffles).
//  * decode (R < vector width: one query, or a few), lanes = d or keys: dot
//  products of Q rows
//    with K rows along d, reduced 16 at a time by haddp; P.V broadcasts P
//    against V rows, or, for transposed V, dots P rows with V^T rows along
//    the keys. No lane is wasted on a 4-row GQA group.
//
// Lazy rescale. The running max m is raised only when a tile's max exceeds
// it by more than tau = kLazyRescaleLog2 = 8 (log2 units); otherwise m stays,
// alpha is exactly 1 (exp2(0) == 1 in our polynomial) and the O rescale is
// skipped, bit-identical to performing it. Why the result is still exact:
//  * out = sum_j 2^(s_j - m) v_j / sum_j 2^(s_j - m) does not depend on m at
//    all (2^-m cancels); m only keeps exp2 in range.
//  * Range: every p_j = 2^(s_j - m) <= 2^tau = 256, so l <= 256 * n and O <=
//    256 * n * max|v|: no overflow for any n < 2^100.
//  * Rounding: scaling every p, l and O by the same power of two is exact in
//    binary floating point (absent over/underflow), so the rounding errors
//    are those of the eager update. The only difference is underflow: a key
//    whose logit sits more than 126 - tau below the true max flushes to 0,
//    a relative change < 2^-118 of l, far below f32's 2^-24.
//  * -inf: m stays -inf until a finite logit arrives, and m_use = 0 is used
//    for the subtraction, so -inf - -inf (NaN) never happens; exp2(-inf) = 0.
#ifndef ATTNKIT_SIMD_NS
#error "define ATTNKIT_SIMD_NS before including simd/flash_impl.h"
#endif

#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "runtime/problem.h"
#include "simd/kernel.h"
#include "xsimd/xsimd.hpp"

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace attnkit::simd::internal::ATTNKIT_SIMD_NS {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kLog2e = 1.4426950408889634f;

// exp2 polynomial on [-0.5, 0.5] (Cephes exp2f: ~2 ulp). p(0) == 1 exactly,
// so alpha = exp2(0) is exactly 1 and an unchanged max rescales nothing.
constexpr float kE0 = 1.535336188319500e-4f, kE1 = 1.339887440266574e-3f,
                kE2 = 9.618437357674640e-3f, kE3 = 5.550332471162809e-2f,
                kE4 = 2.402264791363012e-1f, kE5 = 6.931472028550421e-1f;

// ---------------------------------------------------------------- vectors
inline float Bf16ToF32(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

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
  static void Store(float* p, const V& v) { v.store_unaligned(p); }
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
  // 2^x for x <= ~9 (callers guarantee it); x <= -127 and -inf give +0, so a
  // masked logit contributes exactly nothing; NaN stays NaN. max/min take
  // the constant first: on x86 they return the second operand for a NaN.
  static V Exp2(const V& x) {
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
  // Lane-wise select, lazy-rescale helpers.
  static V NewMax(const V& m_old, const V& tmax) {
    return xsimd::select(tmax > m_old + V(kLazyRescaleLog2), tmax, m_old);
  }
  static V UsableMax(const V& m) {
    return xsimd::select(m == V(kNegInf), V(0.0f), m);
  }
  static bool AllEqual(const V& a, const V& b) { return xsimd::all(a == b); }
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
  static void Store(float* p, const V& a) {
    for (int i = 0; i < 4; ++i) p[i] = a.v[i];
  }
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
};

// ------------------------------------------------------------ conversions

// dst[x] = src[x * stride] widened to f32, x < n (auto-vectorized when
// stride == 1: vpmovzxwd + vpslld).
inline void LoadRow(const TensorView& t, int64_t off, int64_t stride, int64_t n,
                    float* dst) {
  if (t.dtype == DType::kF32) {
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

// ---------------------------------------------------------------- kernel
template <class X>
struct Flash {
  using V = typename X::V;
  static constexpr int W = X::W;

  struct Rows {
    int64_t n = 0;  // valid rows
    int64_t h[kMaxRows], i[kMaxRows];
    int64_t lo[kMaxRows], hi[kMaxRows];
    const float* bias[kMaxRows];  // row of bias (stride bias_stride) or null
  };

  // ---- prefill path (lanes = rows): micro-kernels ----------------------
  // S^T[j][rows] for NK keys: Q^T is [d][rp] (rp = RV*W rows), K row pointers
  // kp + kk*ks. 4x6 on AVX-512: 24 accumulators + 4 Q vectors + 1 broadcast
  // of 32 zmm; per e: 10 loads feed 24 FMAs, and 24 independent chains cover
  // the 4-cycle FMA latency many times over.
  template <int RV, int NK>
  static void QkLanes(const float* qt, int64_t d, int64_t rp, const float* kp,
                      int64_t ks, float* st) {
    V acc[NK][RV];
    for (int kk = 0; kk < NK; ++kk)
      for (int rv = 0; rv < RV; ++rv) acc[kk][rv] = X::Zero();
#pragma GCC unroll 2
    for (int64_t e = 0; e < d; ++e) {
      V qv[RV];
      for (int rv = 0; rv < RV; ++rv) qv[rv] = X::Load(qt + e * rp + rv * W);
      for (int kk = 0; kk < NK; ++kk) {
        const V kb = X::Set(kp[kk * ks + e]);
        for (int rv = 0; rv < RV; ++rv)
          acc[kk][rv] = X::Fma(kb, qv[rv], acc[kk][rv]);
      }
    }
    for (int kk = 0; kk < NK; ++kk)
      for (int rv = 0; rv < RV; ++rv)
        X::Store(st + kk * rp + rv * W, acc[kk][rv]);
  }

#if defined(__AVX512BF16__)
  // The same with vdpbf16ps: Q^T holds bf16 pairs [d/2][rp][2]; each lane
  // accumulates q[2p]k[2p] + q[2p+1]k[2p+1] in f32 (products of bf16 are
  // exact in f32), halving the FMA count. K pairs are 32-bit broadcasts
  // straight from the stored bf16 rows (d even).
  template <int RV, int NK>
  static void QkLanesBf16(const uint16_t* qp, int64_t d2, int64_t rp,
                          const uint16_t* kp, int64_t ks, float* st) {
    __m512 acc[NK][RV];
    for (int kk = 0; kk < NK; ++kk)
      for (int rv = 0; rv < RV; ++rv) acc[kk][rv] = _mm512_setzero_ps();
    for (int64_t p = 0; p < d2; ++p) {
      __m512bh qv[RV];
      for (int rv = 0; rv < RV; ++rv)
        qv[rv] = (__m512bh)_mm512_loadu_si512(qp + (p * rp + rv * 16) * 2);
      for (int kk = 0; kk < NK; ++kk) {
        uint32_t pair;
        std::memcpy(&pair, kp + kk * ks + 2 * p, 4);
        const __m512bh kb = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair));
        for (int rv = 0; rv < RV; ++rv)
          acc[kk][rv] = _mm512_dpbf16_ps(acc[kk][rv], qv[rv], kb);
      }
    }
    for (int kk = 0; kk < NK; ++kk)
      for (int rv = 0; rv < RV; ++rv)
        _mm512_storeu_ps(st + kk * rp + rv * 16, acc[kk][rv]);
  }
#endif

  // O^T[e0..e0+ND][rows] += sum_j V(j, e) P^T[j][rows]; V(j, e) at
  // v[j*sj + e*sd] (any layout). 6x4 on AVX-512, as QkLanes.
  template <int RV, int ND>
  static void PvLanes(const float* pt, int64_t rp, int64_t nt, const float* v,
                      int64_t sj, int64_t sd, float* ot) {
    V acc[ND][RV];
    for (int dd = 0; dd < ND; ++dd)
      for (int rv = 0; rv < RV; ++rv)
        acc[dd][rv] = X::Load(ot + dd * rp + rv * W);
#pragma GCC unroll 2
    for (int64_t j = 0; j < nt; ++j) {
      V pv[RV];
      for (int rv = 0; rv < RV; ++rv) pv[rv] = X::Load(pt + j * rp + rv * W);
      for (int dd = 0; dd < ND; ++dd) {
        const V vb = X::Set(v[j * sj + dd * sd]);
        for (int rv = 0; rv < RV; ++rv)
          acc[dd][rv] = X::Fma(vb, pv[rv], acc[dd][rv]);
      }
    }
    for (int dd = 0; dd < ND; ++dd)
      for (int rv = 0; rv < RV; ++rv)
        X::Store(ot + dd * rp + rv * W, acc[dd][rv]);
  }

  template <int RV>
  static void PrefillTile(const BlockJob& job, const Rows& rows, float* ws,
                          const WorkspaceLayout& L, int64_t j0, int64_t nt,
                          bool partial_tile) {
    // Keys / d per micro-kernel call: RV x NB accumulators + RV Q (or P)
    // vectors + 1 broadcast within the register file (32 zmm: 8, 8, 8, 6;
    // 16 ymm: 8, 6, 4, 2 -- AVX2 with the AVX-512 blocks spilled them).
    constexpr int kRegs = W >= 16 ? 32 : 16;
    constexpr int NB = (kRegs - 1 - RV) / RV < 8 ? (kRegs - 1 - RV) / RV : 8;
    const AttentionProblem& p = *job.p;
    const AttentionArgs& a = *job.a;
    const int64_t d = p.head_dim, rp = RV * W;
    float* st = ws + L.s;
    float* ot = ws + L.o;
    float* m = ws + L.m;
    float* l = ws + L.l;
    const bool bf16 = p.dtype == DType::kBF16;

    // ---- S^T = Q K^T
    const int64_t ks = a.k.strides[2];
    bool dot = false;
#if defined(__AVX512BF16__)
    dot = X::kBf16Dot && bf16 && d % 2 == 0;
    if (dot) {
      const uint16_t* qp = reinterpret_cast<const uint16_t*>(ws + L.q);
      const uint16_t* kb = static_cast<const uint16_t*>(a.k.data) +
                           a.k.Offset(job.b, job.kvh, j0, 0);
      int64_t j = 0;
      for (; j + NB <= nt; j += NB)
        QkLanesBf16<RV, NB>(qp, d / 2, rp, kb + j * ks, ks, st + j * rp);
      for (; j < nt; ++j)
        QkLanesBf16<RV, 1>(qp, d / 2, rp, kb + j * ks, ks, st + j * rp);
    }
#endif
    if (!dot) {
      const float* kb;
      int64_t kstride;
      if (bf16) {  // widen the tile once; every row block reuses it
        float* kw = ws + L.kw;
        for (int64_t j = 0; j < nt; ++j)
          LoadRow(a.k, a.k.Offset(job.b, job.kvh, j0 + j, 0), 1, d, kw + j * d);
        kb = kw;
        kstride = d;
      } else {
        kb = a.k.As<float>() + a.k.Offset(job.b, job.kvh, j0, 0);
        kstride = ks;
      }
      const float* qt = ws + L.q;
      int64_t j = 0;
      for (; j + NB <= nt; j += NB)
        QkLanes<RV, NB>(qt, d, rp, kb + j * kstride, kstride, st + j * rp);
      for (; j < nt; ++j)
        QkLanes<RV, 1>(qt, d, rp, kb + j * kstride, kstride, st + j * rp);
    }

    // ---- online softmax, lane-wise over rows
    const V c = X::Set(job.c);
    for (int64_t j = 0; j < nt; ++j)
      for (int rv = 0; rv < RV; ++rv)
        X::Store(st + j * rp + rv * W, X::Load(st + j * rp + rv * W) * c);
    if (partial_tile) {
      for (int64_t r = 0; r < rows.n; ++r) {
        const int64_t lo = rows.lo[r] - j0, hi = rows.hi[r] - j0;
        const float* br = rows.bias[r];
        const int64_t bs = a.bias.strides[3];
        for (int64_t j = 0; j < nt; ++j) {
          float& s = st[j * rp + r];
          if (j < lo || j >= hi) {
            s = kNegInf;
          } else if (br != nullptr) {
            s += br[(j0 + j) * bs] * kLog2e;
          }
        }
      }
    }
    bool rescale = false;
    for (int rv = 0; rv < RV; ++rv) {
      V tmax = X::Set(kNegInf);
      for (int64_t j = 0; j < nt; ++j)
        tmax = X::Max(tmax, X::Load(st + j * rp + rv * W));
      const V m_old = X::Load(m + rv * W);
      const V m_new = X::NewMax(m_old, tmax);
      const V m_use = X::UsableMax(m_new);
      V sum = X::Zero();
      for (int64_t j = 0; j < nt; ++j) {
        const V pj = X::Exp2(X::Load(st + j * rp + rv * W) - m_use);
        X::Store(st + j * rp + rv * W, pj);
        sum = sum + pj;
      }
      if (!X::AllEqual(m_new, m_old)) {
        rescale = true;
        const V alpha = X::Exp2(m_old - m_use);
        X::Store(ws + L.alpha + rv * W, alpha);
        X::Store(l + rv * W, X::Load(l + rv * W) * alpha + sum);
      } else {
        X::Store(ws + L.alpha + rv * W, X::Set(1.0f));
        X::Store(l + rv * W, X::Load(l + rv * W) + sum);
      }
      X::Store(m + rv * W, m_new);
    }
    if (rescale) {
      V alpha[RV];
      for (int rv = 0; rv < RV; ++rv)
        alpha[rv] = X::Load(ws + L.alpha + rv * W);
      for (int64_t e = 0; e < d; ++e)
        for (int rv = 0; rv < RV; ++rv)
          X::Store(ot + e * rp + rv * W,
                   X::Load(ot + e * rp + rv * W) * alpha[rv]);
    }

    // ---- O^T += V^T P^T
    const float* vb;
    int64_t sj, sd;
    if (bf16) {  // widen in the stored orientation (no transpose)
      float* vw = ws + L.vw;
      if (p.layout == KvLayout::kTransposedV) {
        for (int64_t e = 0; e < d; ++e)
          LoadRow(a.v, a.v.Offset(job.b, job.kvh, j0, e), 1, nt,
                  vw + e * kPrefillTileKeys);
        sj = 1;
        sd = kPrefillTileKeys;
      } else {
        for (int64_t j = 0; j < nt; ++j)
          LoadRow(a.v, a.v.Offset(job.b, job.kvh, j0 + j, 0), 1, d, vw + j * d);
        sj = d;
        sd = 1;
      }
      vb = vw;
    } else {
      vb = a.v.As<float>() + a.v.Offset(job.b, job.kvh, j0, 0);
      sj = a.v.strides[2];
      sd = a.v.strides[3];
    }
    int64_t e = 0;
    for (; e + NB <= d; e += NB)
      PvLanes<RV, NB>(st, rp, nt, vb + e * sd, sj, sd, ot + e * rp);
    for (; e < d; ++e)
      PvLanes<RV, 1>(st, rp, nt, vb + e * sd, sj, sd, ot + e * rp);
  }

  template <int RV>
  static void RunPrefill(const BlockJob& job, const Rows& rows, float* ws,
                         const WorkspaceLayout& L, int64_t blo, int64_t bhi) {
    const AttentionProblem& p = *job.p;
    const AttentionArgs& a = *job.a;
    const int64_t d = p.head_dim, rp = RV * W;
    // Pack Q^T (f32 [d][rp], or bf16 pairs [d/2][rp][2] for vdpbf16ps);
    // padded rows are zero.
    bool dot = X::kBf16Dot && p.dtype == DType::kBF16 && d % 2 == 0;
    if (dot) {
      uint16_t* qp = reinterpret_cast<uint16_t*>(ws + L.q);
      const uint16_t* q = static_cast<const uint16_t*>(a.q.data);
      for (int64_t r = 0; r < rp; ++r)
        for (int64_t e = 0; e < d; ++e)
          qp[((e / 2) * rp + r) * 2 + (e & 1)] =
              r < rows.n ? q[a.q.Offset(job.b, rows.h[r], rows.i[r], e)] : 0;
    } else {
      float* qt = ws + L.q;
      float row[kMaxDim];
      for (int64_t r = 0; r < rp; ++r) {
        if (r < rows.n) {
          LoadRow(a.q, a.q.Offset(job.b, rows.h[r], rows.i[r], 0), 1, d, row);
        } else {
          ZeroFloats(row, d);
        }
        for (int64_t e = 0; e < d; ++e) qt[e * rp + r] = row[e];
      }
    }
    float* ot = ws + L.o;
    ZeroFloats(ot, d * rp);
    for (int64_t r = 0; r < rp; ++r) {
      ws[L.m + r] = kNegInf;
      ws[L.l + r] = 0.0f;
    }
    const bool has_bias = p.mask == MaskKind::kBias;
    for (int64_t j0 = blo; j0 < bhi; j0 += kPrefillTileKeys) {
      const int64_t nt =
          bhi - j0 < kPrefillTileKeys ? bhi - j0 : kPrefillTileKeys;
      bool full = !has_bias, empty = true;
      for (int64_t r = 0; r < rows.n; ++r) {
        if (rows.lo[r] > j0 || rows.hi[r] < j0 + nt) full = false;
        if (rows.lo[r] < j0 + nt && rows.hi[r] > j0 && rows.lo[r] < rows.hi[r])
          empty = false;
      }
      if (empty) continue;  // fully masked tile (causal / window): skipped
      PrefillTile<RV>(job, rows, ws, L, j0, nt, !full);
    }
    // ---- write out
    for (int64_t r = 0; r < rows.n; ++r) {
      const float lr = ws[L.l + r];
      if (job.partial != nullptr) {
        const PartialLayout pl = PartialLayoutFor(d);
        float* po = pl.o(job.partial, r);
        for (int64_t e = 0; e < d; ++e) po[e] = ot[e * rp + r];
        *pl.m(job.partial, r) = ws[L.m + r];
        *pl.l(job.partial, r) = lr;
        continue;
      }
      float* out =
          a.out.As<float>() + a.out.Offset(job.b, rows.h[r], rows.i[r], 0);
      const float inv = lr > 0.0f ? 1.0f / lr : 0.0f;
      for (int64_t e = 0; e < d; ++e)
        out[e] = lr > 0.0f ? ot[e * rp + r] * inv : 0.0f;
    }
  }

  static constexpr int64_t kMaxDim = kMaxHeadDim;

  // ---- entry --------------------------------------------------------------
  static void RunBlock(const BlockJob& job, float* ws) {
    const AttentionProblem& p = *job.p;
    const AttentionArgs& a = *job.a;
    const WorkspaceLayout L = ComputeLayout(p.head_dim);
    Rows rows;
    const int64_t G = p.group_size();
    int64_t blo = job.kv_end, bhi = job.kv_begin;
    // Row r = (kv head k, query ii, head gg), k outermost: RunDecode takes
    // each kv head's rows as one contiguous block.
    for (int64_t k = 0; k < job.nkv; ++k) {
      for (int64_t ii = 0; ii < job.qn; ++ii) {
        for (int64_t gg = 0; gg < job.gn; ++gg) {
          const int64_t r = rows.n++;
          rows.h[r] = (job.kvh + k) * G + job.g0 + gg;
          rows.i[r] = job.i0 + ii;
          const KeyRange kr = VisibleKeys(p, job.b, rows.i[r]);
          rows.lo[r] = kr.begin > job.kv_begin ? kr.begin : job.kv_begin;
          rows.hi[r] = kr.end < job.kv_end ? kr.end : job.kv_end;
          if (rows.lo[r] < rows.hi[r]) {
            blo = rows.lo[r] < blo ? rows.lo[r] : blo;
            bhi = rows.hi[r] > bhi ? rows.hi[r] : bhi;
          }
          rows.bias[r] = nullptr;
          if (p.mask == MaskKind::kBias) {
            // Not Offset(): the key extent may be 0 (every kv_len 0).
            const int64_t hb = a.bias.shape[1] == 1 ? 0 : rows.h[r];
            rows.bias[r] = a.bias.As<float>() + job.b * a.bias.strides[0] +
                           hb * a.bias.strides[1] +
                           rows.i[r] * a.bias.strides[2];
          }
        }
      }
    }
    assert(rows.n <= kMaxRows);
    // The prefill path takes one kv head's rows (nkv > 1 only for few rows).
    if (job.qn * job.gn >= W) {
      assert(job.nkv == 1);
      switch ((rows.n + W - 1) / W) {
        case 1:
          return RunPrefill<1>(job, rows, ws, L, blo, bhi);
        case 2:
          return RunPrefill<2>(job, rows, ws, L, blo, bhi);
        case 3:
          return RunPrefill<3>(job, rows, ws, L, blo, bhi);
        case 4:
          return RunPrefill<4>(job, rows, ws, L, blo, bhi);
        default:
          break;
      }
      assert(false && "more rows than KernelOps::max_rows");
      return;
    }
    RunDecode(job, rows, ws, L, blo, bhi);
  }

  // ---- decode path (lanes = d / keys, few rows) ----------------------------
  // Software prefetch (into L1) of the rows a loop will read PrefetchKeys()
  // keys later, issued one row at a time from inside the loop's compute:
  // Fetch(j) fetches row j of [base + j*stride, + bytes), rows j < n exist.
  // Spreading the prefetches over the work matters (measured as above): the
  // same rows fetched in bursts of 16 per 16-key block ran bf16 decode (d=128,
  // kv 16k) at 52-58% of a paired read pass on one core, one row per key at
  // 75-80%.
  struct AheadRows {
    const char* base = nullptr;  // null: nothing to fetch
    int64_t stride = 0, n = 0, bytes = 0;
    // `len` bytes of row j (a compile-time constant where the caller knows
    // it, so the lines unroll).
    void Fetch(int64_t j, int64_t len) const {
      if (base == nullptr || j >= n) return;
      for (int64_t x = 0; x < len; x += 64)
        __builtin_prefetch(base + j * stride + x, 0, 3);
    }
    void Fetch(int64_t j) const { Fetch(j, bytes); }
    void FetchAll() const {
      for (int64_t j = 0; j < n; ++j) Fetch(j);
    }
  };

  // O[r][e0 .. e0 + DV*W) += sum_j P[r][j] V[j][..] for RB rows; V rows at
  // v + j*sj. 4x4 on AVX-512: 16 accumulators, per key 4 V loads + 4 P
  // broadcasts feed 16 FMAs. 4x2 on AVX2: 8 accumulators + 2 V + 1 broadcast
  // of its 16 ymm registers (4x4 kept its accumulators on the stack).
  static constexpr int kPvCols = W >= 16 ? 4 : 2;
  template <int RB, int DV, typename T>
  static void PvRows(const float* pm, int64_t sp, int64_t nt, const T* v,
                     int64_t sj, float* o, int64_t so, const AheadRows& ahead) {
    V acc[RB][DV];
    for (int r = 0; r < RB; ++r)
      for (int c = 0; c < DV; ++c) acc[r][c] = X::Load(o + r * so + c * W);
    for (int64_t j = 0; j < nt; ++j) {
      // This block's columns of the row ahead: ahead.bytes, passed as the
      // constant it is here so the lines unroll (the runtime-length Fetch(j)
      // in this loop measured ~5% slower, 1 thread, bf16 kv 16k).
      ahead.Fetch(j, DV * W * static_cast<int64_t>(sizeof(T)));
      V vv[DV];
      for (int c = 0; c < DV; ++c) vv[c] = X::Load(v + j * sj + c * W);
      for (int r = 0; r < RB; ++r) {
        const V pb = X::Set(pm[r * sp + j]);
        for (int c = 0; c < DV; ++c) acc[r][c] = X::Fma(pb, vv[c], acc[r][c]);
      }
    }
    for (int r = 0; r < RB; ++r)
      for (int c = 0; c < DV; ++c) X::Store(o + r * so + c * W, acc[r][c]);
  }
  template <int RB, typename T>
  static void PvRowsDv(int dv, const float* pm, int64_t sp, int64_t nt,
                       const T* v, int64_t sj, float* o, int64_t so,
                       const AheadRows& ahead) {
    if constexpr (kPvCols == 2) {  // dv <= kPvCols
      if (dv == 1) return PvRows<RB, 1>(pm, sp, nt, v, sj, o, so, ahead);
      return PvRows<RB, 2>(pm, sp, nt, v, sj, o, so, ahead);
    } else {
      switch (dv) {
        case 1:
          return PvRows<RB, 1>(pm, sp, nt, v, sj, o, so, ahead);
        case 2:
          return PvRows<RB, 2>(pm, sp, nt, v, sj, o, so, ahead);
        case 3:
          return PvRows<RB, 3>(pm, sp, nt, v, sj, o, so, ahead);
        default:
          return PvRows<RB, 4>(pm, sp, nt, v, sj, o, so, ahead);
      }
    }
  }
  // O += P V over a tile of nt keys, in blocks of 4 rows x kPvCols vectors.
  //
  // When a row is wider than a block (d = 128 on AVX-512), a column block reads
  // only part of every V row; running each column block over the whole tile
  // would hand the hardware prefetcher a stream that skips lines and comes
  // back for them, which it follows poorly (without arithmetic: two half-row
  // passes over 256-key tiles stream ~20% slower than whole rows, 4 KiB
  // chunks as fast). So the keys go in chunks of about 4 KiB of V, every
  // column block of a chunk runs before the next chunk, and the other column
  // blocks re-read the chunk from L1.
  //
  // pf_rows: rows that exist from vbase on (the keys left in the work item):
  // the first row block prefetches rows PrefetchKeys() ahead up to there; 0
  // for a workspace copy (nothing to prefetch).
  template <typename T>
  static void PvRowsAll(int64_t R, int64_t De, const float* sm, int64_t nt,
                        const T* vbase, int64_t vs, float* o, int64_t pf_rows) {
    const int64_t row_bytes = De * static_cast<int64_t>(sizeof(T));
    const int64_t chunk =
        De <= kPvCols * W ? nt : (row_bytes >= 1024 ? 4 : 4096 / row_bytes);
    const int64_t ahead_keys = PrefetchKeys(row_bytes);
    for (int64_t j0 = 0; j0 < nt; j0 += chunk) {
      const int64_t nj = nt - j0 < chunk ? nt - j0 : chunk;
      const T* vj = vbase + j0 * vs;
      for (int64_t r0 = 0; r0 < R; r0 += 4) {
        const int64_t rb = R - r0 < 4 ? R - r0 : 4;
        const float* pm = sm + r0 * kDecodeTileKeys + j0;
        for (int64_t e0 = 0; e0 < De; e0 += kPvCols * W) {
          const int dv = static_cast<int>(
              (De - e0) / W < kPvCols ? (De - e0) / W : kPvCols);
          float* orow = o + r0 * De + e0;
          AheadRows ahead;
          if (r0 == 0 && j0 + ahead_keys < pf_rows) {
            ahead.base =
                reinterpret_cast<const char*>(vj + ahead_keys * vs + e0);
            ahead.stride = vs * static_cast<int64_t>(sizeof(T));
            ahead.n = pf_rows - (j0 + ahead_keys);
            ahead.bytes = dv * W * static_cast<int64_t>(sizeof(T));
          }
          switch (rb) {
            case 1:
              PvRowsDv<1>(dv, pm, kDecodeTileKeys, nj, vj + e0, vs, orow, De,
                          ahead);
              break;
            case 2:
              PvRowsDv<2>(dv, pm, kDecodeTileKeys, nj, vj + e0, vs, orow, De,
                          ahead);
              break;
            case 3:
              PvRowsDv<3>(dv, pm, kDecodeTileKeys, nj, vj + e0, vs, orow, De,
                          ahead);
              break;
            default:
              PvRowsDv<4>(dv, pm, kDecodeTileKeys, nj, vj + e0, vs, orow, De,
                          ahead);
              break;
          }
        }
      }
    }
  }
  // QK^T for few rows (decode): RP rows x KB = W / RP keys per call, one
  // accumulator per (row, key), so the W accumulators reduce to one vector
  // with a single HAddP (lane r * KB + k). Each K vector is loaded once for
  // all rows (a row-at-a-time dot loop loads every K vector RP times, which
  // made QK twice the cost of P.V).
  //
  // Load order: key by key, each K row's lines in address order. Walking d
  // in the outer loop instead (one vector of each of the KB rows in turn)
  // jumps back and forth across KB rows, and the hardware prefetchers
  // then stop streaming K: from DRAM QK^T cost 98 cycles/key that way and 41
  // key by key (bf16 d=128, 4 rows, no software prefetch; 17 in cache).
  // On AVX-512 a segment of Q (kQkSeg vectors of d per row) sits in the 16
  // zmm registers the W accumulators and one K vector leave free; on AVX2
  // the W = 8 accumulators leave too few ymm, so Q is read from L1 at each
  // FMA (a memory operand) and each K vector still feeds RP of them.
  static constexpr int kQkRowGroup = W < 8 ? W : 8;
  template <int RP>
  static constexpr int kQkSeg = 16 / RP > 1 ? 16 / RP : 1;
  // acc[r * KB + kk] += Q[r][e0 + s*W ...] . K[kk][...] for NS vectors s.
  template <int RP, int NS, typename T>
  static void QkSegment(const float* const* qr, const void* const* kp,
                        int64_t e0, V* acc) {
    constexpr int KB = W / RP;
    V qv[RP][NS];
    for (int r = 0; r < RP; ++r)
      for (int s = 0; s < NS; ++s) qv[r][s] = X::Load(qr[r] + e0 + s * W);
    for (int kk = 0; kk < KB; ++kk) {
      const T* k = static_cast<const T*>(kp[kk]) + e0;
      for (int s = 0; s < NS; ++s) {
        const V kv = X::Load(k + s * W);
        for (int r = 0; r < RP; ++r)
          acc[r * KB + kk] = X::Fma(qv[r][s], kv, acc[r * KB + kk]);
      }
    }
  }
  // Segments of NS vectors while they fit, then the rest in halving sizes
  // (NS is a power of two).
  template <int RP, int NS, typename T>
  static void QkSegments(const float* const* qr, const void* const* kp,
                         int64_t& e0, int64_t De, V* acc) {
    for (; e0 + NS * W <= De; e0 += NS * W)
      QkSegment<RP, NS, T>(qr, kp, e0, acc);
    if constexpr (NS > 1) QkSegments<RP, NS / 2, T>(qr, kp, e0, De, acc);
  }
  template <int RP, typename T>
  static V QkBlock(const float* const* qr, const void* const* kp, int64_t De) {
    V acc[W];
    for (int i = 0; i < W; ++i) acc[i] = X::Zero();
    if constexpr (W >= 16) {
      int64_t e0 = 0;
      QkSegments<RP, kQkSeg<RP>, T>(qr, kp, e0, De, acc);
    } else {
      // One key's row at a time: its RP sums would be RP dependent FMA
      // chains (4-cycle latency, 2 FMAs/cycle: 8 chains needed), so each
      // sum is split over NA interleaved partial accumulators.
      constexpr int KB = W / RP;
      constexpr int NA = 8 / RP > 1 ? 8 / RP : 1;
      for (int kk = 0; kk < KB; ++kk) {
        const T* k = static_cast<const T*>(kp[kk]);
        V part[NA][RP];
        for (int a = 0; a < NA; ++a)
          for (int r = 0; r < RP; ++r) part[a][r] = X::Zero();
        int64_t e = 0;
        for (; e + NA * W <= De; e += NA * W) {
          for (int a = 0; a < NA; ++a) {
            const V kv = X::Load(k + e + a * W);
            for (int r = 0; r < RP; ++r)
              part[a][r] = X::Fma(X::Load(qr[r] + e + a * W), kv, part[a][r]);
          }
        }
        for (; e < De; e += W) {
          const V kv = X::Load(k + e);
          for (int r = 0; r < RP; ++r)
            part[0][r] = X::Fma(X::Load(qr[r] + e), kv, part[0][r]);
        }
        for (int r = 0; r < RP; ++r) {
          V sum = part[0][r];
          for (int a = 1; a < NA; ++a) sum = sum + part[a][r];
          acc[r * KB + kk] = sum;
        }
      }
    }
    return X::HAddP(acc);
  }
#if defined(__AVX512BF16__)
  // The same with vdpbf16ps over bf16 Q and K rows (d % 32 == 0): NS vectors
  // of 32 bf16 per segment.
  template <int RP, int NS>
  static void QkSegmentDot(const uint16_t* const* qr, const void* const* kp,
                           int64_t e0, __m512* acc) {
    constexpr int KB = 16 / RP;
    __m512bh qv[RP][NS];
    for (int r = 0; r < RP; ++r)
      for (int s = 0; s < NS; ++s)
        qv[r][s] = (__m512bh)_mm512_loadu_si512(qr[r] + e0 + 32 * s);
    for (int kk = 0; kk < KB; ++kk) {
      const uint16_t* k = static_cast<const uint16_t*>(kp[kk]) + e0;
      for (int s = 0; s < NS; ++s) {
        const __m512bh kv = (__m512bh)_mm512_loadu_si512(k + 32 * s);
        for (int r = 0; r < RP; ++r)
          acc[r * KB + kk] = _mm512_dpbf16_ps(acc[r * KB + kk], qv[r][s], kv);
      }
    }
  }
  template <int RP, int NS>
  static void QkSegmentsDot(const uint16_t* const* qr, const void* const* kp,
                            int64_t& e0, int64_t d, __m512* acc) {
    for (; e0 + NS * 32 <= d; e0 += NS * 32)
      QkSegmentDot<RP, NS>(qr, kp, e0, acc);
    if constexpr (NS > 1) QkSegmentsDot<RP, NS / 2>(qr, kp, e0, d, acc);
  }
  template <int RP>
  static V QkBlockDot(const uint16_t* const* qr, const void* const* kp,
                      int64_t d) {
    __m512 dacc[16];
    for (int i = 0; i < 16; ++i) dacc[i] = _mm512_setzero_ps();
    int64_t e0 = 0;
    QkSegmentsDot<RP, kQkSeg<RP>>(qr, kp, e0, d, dacc);
    V acc[16];
    for (int i = 0; i < 16; ++i) acc[i] = dacc[i];
    return X::HAddP(acc);
  }
#endif
  // S[r0 + r][0 .. W) for rn <= RP rows (padded rows read the zero row and
  // are dropped) against the W keys kp; ahead.Fetch(kk) for each key.
  template <int RP>
  static void QkGroup(bool dot, bool bf16, const float* q, int64_t De,
                      int64_t d, int64_t r0, int rn, const void* const* kp,
                      const float* zero, float* srow, const AheadRows& ahead) {
    static_assert(RP <= W);
    constexpr int KB = W / RP;
    alignas(64) float t[W];
    const float* qr[RP];
    for (int r = 0; r < RP; ++r) qr[r] = r < rn ? q + (r0 + r) * De : zero;
    for (int kb = 0; kb < W; kb += KB) {
      for (int kk = kb; kk < kb + KB; ++kk) ahead.Fetch(kk);
#if defined(__AVX512BF16__)
      if (dot) {
        const uint16_t* qb[RP];
        for (int r = 0; r < RP; ++r)
          qb[r] = r < rn ? reinterpret_cast<const uint16_t*>(q) + (r0 + r) * d
                         : reinterpret_cast<const uint16_t*>(zero);
        X::Store(t, QkBlockDot<RP>(qb, kp + kb, d));
      } else
#endif
      {
        (void)dot;
        (void)d;
        X::Store(t, bf16 ? QkBlock<RP, uint16_t>(qr, kp + kb, De)
                         : QkBlock<RP, float>(qr, kp + kb, De));
      }
      for (int r = 0; r < rn; ++r)
        for (int kk = 0; kk < KB; ++kk)
          srow[r * kDecodeTileKeys + kb + kk] = t[r * KB + kk];
    }
  }
  static void RunDecode(const BlockJob& job, const Rows& rows, float* ws,
                        const WorkspaceLayout& L, int64_t blo, int64_t bhi) {
    const AttentionProblem& p = *job.p;
    const AttentionArgs& a = *job.a;
    const int64_t d = p.head_dim, R = rows.n;
    const int64_t Rh = R / job.nkv;  // rows per kv head (RunBlock's order)
    const int64_t De = (d + W - 1) / W * W;  // f32 row length, zero padded
    const bool bf16 = p.dtype == DType::kBF16;
    const bool tv = p.layout == KvLayout::kTransposedV;
    const bool dot = X::kBf16Dot && bf16 && d % 32 == 0;
    const bool k_direct = d % W == 0;     // f32 or bf16 widened in registers
    const bool k_u16 = bf16 && k_direct;  // K rows read as bf16
    const bool v_direct = d % W == 0;
    const int64_t esize = DTypeSize(p.dtype);
    const int64_t ahead_keys = PrefetchKeys(d * esize);
    const char* kdata = static_cast<const char*>(a.k.data);
    const char* vdata = static_cast<const char*>(a.v.data);
    float* q = ws + L.q;
    float* sm = ws + L.s;  // S / P [R][kDecodeTileKeys]
    float* o = ws + L.o;   // O [R][De]
    float* m = ws + L.m;
    float* l = ws + L.l;
    const float* zero = ws + L.zero;
    for (int64_t r = 0; r < R; ++r) {
      if (dot) {
        std::memcpy(reinterpret_cast<uint16_t*>(q) + r * d,
                    static_cast<const uint16_t*>(a.q.data) +
                        a.q.Offset(job.b, rows.h[r], rows.i[r], 0),
                    static_cast<size_t>(d) * 2);
      } else {
        LoadRow(a.q, a.q.Offset(job.b, rows.h[r], rows.i[r], 0), 1, d,
                q + r * De);
        ZeroFloats(q + r * De + d, De - d);
      }
      ZeroFloats(o + r * De, De);
      m[r] = kNegInf;
      l[r] = 0.0f;
    }
    const bool has_bias = p.mask == MaskKind::kBias;
    for (int64_t j0 = blo; j0 < bhi; j0 += kDecodeTileKeys) {
      const int64_t nt =
          bhi - j0 < kDecodeTileKeys ? bhi - j0 : kDecodeTileKeys;
      const int64_t ntp = (nt + W - 1) / W * W;
      bool full = !has_bias, empty = true;
      for (int64_t r = 0; r < R; ++r) {
        if (rows.lo[r] > j0 || rows.hi[r] < j0 + nt) full = false;
        if (rows.lo[r] < j0 + nt && rows.hi[r] > j0 && rows.lo[r] < rows.hi[r])
          empty = false;
      }
      if (empty) continue;

      // ---- S = Q K^T, W keys at a time, reduced by haddp. Keys past the
      // tile point at a zero row (masked below), so the loop is uniform.
      // Per kv head of the job (several only for BSHD decode: their rows
      // at one key are adjacent in memory, see simd_backend.cc).
      for (int64_t hk = 0; hk < job.nkv; ++hk) {
        const int64_t kvh = job.kvh + hk, s0 = hk * Rh;
        for (int64_t jb = 0; jb < ntp; jb += W) {
          const void* kp[W];
          for (int kk = 0; kk < W; ++kk) {
            const int64_t j = jb + kk;
            if (j >= nt) {
              kp[kk] = zero;
            } else if (dot || k_direct) {
              kp[kk] = kdata + a.k.Offset(job.b, kvh, j0 + j, 0) * esize;
            } else {
              float* kw = ws + L.kw + kk * De;
              LoadRow(a.k, a.k.Offset(job.b, kvh, j0 + j, 0), 1, d, kw);
              ZeroFloats(kw + d, De - d);
              kp[kk] = kw;
            }
          }
          // K rows ahead_keys ahead of the W dotted now, fetched by the first
          // row group's dot loop (see kernel.h).
          AheadRows k_ahead;
          const int64_t jk = j0 + jb + ahead_keys;
          if (jk < bhi) {
            k_ahead.base = kdata + a.k.Offset(job.b, kvh, jk, 0) * esize;
            k_ahead.stride = a.k.strides[2] * esize;
            k_ahead.n = bhi - jk;
            k_ahead.bytes = d * esize;
          }
          if (tv && j0 + kDecodeTileKeys < bhi) {
            // V^T rows are d rows along the keys: a slice of them over the
            // next tile's keys per W keys of this tile.
            const int64_t per = (d * W + ntp - 1) / ntp;
            const int64_t e0 = jb / W * per;
            const int64_t ne = d - e0 < per ? d - e0 : per;
            const int64_t nk = bhi - (j0 + kDecodeTileKeys) < kDecodeTileKeys
                                   ? bhi - (j0 + kDecodeTileKeys)
                                   : kDecodeTileKeys;
            if (ne > 0)
              AheadRows{
                  vdata +
                      a.v.Offset(job.b, kvh, j0 + kDecodeTileKeys, e0) * esize,
                  a.v.strides[3] * esize, ne, nk * esize}
                  .FetchAll();
          }
          for (int64_t r0 = s0; r0 < s0 + Rh; r0 += kQkRowGroup) {
            const int rn = static_cast<int>(
                s0 + Rh - r0 < kQkRowGroup ? s0 + Rh - r0 : kQkRowGroup);
            float* srow = sm + r0 * kDecodeTileKeys + jb;
            const AheadRows& ahead = r0 == s0 ? k_ahead : AheadRows{};
            if (rn == 1) {
              QkGroup<1>(dot, k_u16, q, De, d, r0, rn, kp, zero, srow, ahead);
            } else if (rn == 2) {
              QkGroup<2>(dot, k_u16, q, De, d, r0, rn, kp, zero, srow, ahead);
            } else if (rn <= 4) {
              QkGroup<4>(dot, k_u16, q, De, d, r0, rn, kp, zero, srow, ahead);
            } else {
              QkGroup<kQkRowGroup>(dot, k_u16, q, De, d, r0, rn, kp, zero, srow,
                                   ahead);
            }
          }
        }
      }

      // ---- online softmax per row
      const V c = X::Set(job.c);
      for (int64_t r = 0; r < R; ++r) {
        float* sr = sm + r * kDecodeTileKeys;
        for (int64_t j = 0; j < ntp; j += W)
          X::Store(sr + j, X::Load(sr + j) * c);
        if (!full) {
          const int64_t lo = rows.lo[r] - j0, hi = rows.hi[r] - j0;
          const float* br = rows.bias[r];
          const int64_t bs = has_bias ? a.bias.strides[3] : 0;
          for (int64_t j = 0; j < nt; ++j) {
            if (j < lo || j >= hi) {
              sr[j] = kNegInf;
            } else if (br != nullptr) {
              sr[j] += br[(j0 + j) * bs] * kLog2e;
            }
          }
        }
        for (int64_t j = nt; j < ntp; ++j) sr[j] = kNegInf;
        V vmax = X::Set(kNegInf);
        for (int64_t j = 0; j < ntp; j += W)
          vmax = X::Max(vmax, X::Load(sr + j));
        const float tmax = X::HMax(vmax);
        const float m_old = m[r];
        const float m_new = tmax > m_old + kLazyRescaleLog2 ? tmax : m_old;
        const float m_use = m_new == kNegInf ? 0.0f : m_new;
        const V mu = X::Set(m_use);
        V sum = X::Zero();
        for (int64_t j = 0; j < ntp; j += W) {
          const V pj = X::Exp2(X::Load(sr + j) - mu);
          X::Store(sr + j, pj);
          sum = sum + pj;
        }
        if (m_new != m_old) {
          const float alpha = std::exp2(m_old - m_use);
          l[r] = l[r] * alpha + X::HSum(sum);
          const V av = X::Set(alpha);
          for (int64_t e = 0; e < De; e += W)
            X::Store(o + r * De + e, X::Load(o + r * De + e) * av);
        } else {
          l[r] += X::HSum(sum);
        }
        m[r] = m_new;
      }

      // ---- O += P V, per kv head of the job
      for (int64_t hk = 0; hk < job.nkv; ++hk) {
        const int64_t kvh = job.kvh + hk, s0 = hk * Rh;
        if (tv) {
          // V^T rows (one per e) along the keys; dot with P rows, W of e at a
          // time, reduced by haddp. A full f32 tile is read in place; a tail
          // or bf16 tile is widened into zero-padded rows.
          const bool direct = !bf16 && nt == ntp;
          const float* vbase = nullptr;
          int64_t vs = kDecodeTileKeys;
          if (direct) {
            vbase = a.v.As<float>() + a.v.Offset(job.b, kvh, j0, 0);
            vs = a.v.strides[3];
          } else {
            float* vw = ws + L.vw;
            for (int64_t e = 0; e < d; ++e) {
              LoadRow(a.v, a.v.Offset(job.b, kvh, j0, e), 1, nt,
                      vw + e * kDecodeTileKeys);
              ZeroFloats(vw + e * kDecodeTileKeys + nt, ntp - nt);
            }
            vbase = vw;
          }
          for (int64_t r = s0; r < s0 + Rh; ++r) {
            const float* pr = sm + r * kDecodeTileKeys;
            for (int64_t e0 = 0; e0 < De; e0 += W) {
              const float* vp[W];
              for (int k = 0; k < W; ++k)
                vp[k] = e0 + k < d ? vbase + (e0 + k) * vs : zero;
              V acc[W];
              for (int k = 0; k < W; ++k) acc[k] = X::Zero();
              for (int64_t j = 0; j < ntp; j += W) {
                const V pv = X::Load(pr + j);
                for (int k = 0; k < W; ++k)
                  acc[k] = X::Fma(pv, X::Load(vp[k] + j), acc[k]);
              }
              X::Store(o + r * De + e0,
                       X::Load(o + r * De + e0) + X::HAddP(acc));
            }
          }
        } else if (v_direct) {
          // V rows read in place (bf16 widened in registers).
          const int64_t off = a.v.Offset(job.b, kvh, j0, 0);
          if (bf16) {
            PvRowsAll(Rh, De, sm + s0 * kDecodeTileKeys, nt,
                      static_cast<const uint16_t*>(a.v.data) + off,
                      a.v.strides[2], o + s0 * De, bhi - j0);
          } else {
            PvRowsAll(Rh, De, sm + s0 * kDecodeTileKeys, nt,
                      a.v.As<float>() + off, a.v.strides[2], o + s0 * De,
                      bhi - j0);
          }
        } else {  // d not a multiple of W: zero-padded f32 copy
          float* vw = ws + L.vw;
          AheadRows v_ahead;
          if (j0 + ahead_keys < bhi) {
            v_ahead.base =
                vdata + a.v.Offset(job.b, kvh, j0 + ahead_keys, 0) * esize;
            v_ahead.stride = a.v.strides[2] * esize;
            v_ahead.n = bhi - (j0 + ahead_keys);
            v_ahead.bytes = d * esize;
          }
          for (int64_t j = 0; j < nt; ++j) {
            v_ahead.Fetch(j);
            LoadRow(a.v, a.v.Offset(job.b, kvh, j0 + j, 0), 1, d, vw + j * De);
            ZeroFloats(vw + j * De + d, De - d);
          }
          PvRowsAll(Rh, De, sm + s0 * kDecodeTileKeys, nt,
                    static_cast<const float*>(vw), De, o + s0 * De, 0);
        }
      }
    }
    // ---- write out
    for (int64_t r = 0; r < R; ++r) {
      const float* orow = o + r * De;
      if (job.partial != nullptr) {
        const PartialLayout pl = PartialLayoutFor(d);
        float* po = pl.o(job.partial, r);
        for (int64_t e = 0; e < d; ++e) po[e] = orow[e];
        *pl.m(job.partial, r) = m[r];
        *pl.l(job.partial, r) = l[r];
        continue;
      }
      float* out =
          a.out.As<float>() + a.out.Offset(job.b, rows.h[r], rows.i[r], 0);
      const float lr = l[r];
      const float inv = lr > 0.0f ? 1.0f / lr : 0.0f;
      for (int64_t e = 0; e < d; ++e) out[e] = lr > 0.0f ? orow[e] * inv : 0.0f;
    }
  }
};

// The ops table of this translation unit's ISA.
template <class X>
const KernelOps& MakeOps(Isa isa) {
  static const KernelOps ops{isa, X::W,
                             4 * X::W < kMaxRows ? 4 * X::W : kMaxRows,
                             &Flash<X>::RunBlock};
  return ops;
}

}  // namespace
}  // namespace attnkit::simd::internal::ATTNKIT_SIMD_NS
