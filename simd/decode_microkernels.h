// The decode path's micro-kernels (few rows; lanes = d or keys): QK^T of a
// group of rows against W keys reduced by haddp, P.V over V rows in blocks
// of rows x vectors, and the software prefetch both issue from inside their
// loops. decode_kernel.h runs them over a work item.
//
// Include ONLY from decode_kernel.h (see simd/isa.h: everything here lives in
// the per-ISA namespace ATTNKIT_SIMD_NS).
#ifndef ATTNKIT_SIMD_NS
#error "define ATTNKIT_SIMD_NS before including simd/decode_microkernels.h"
#endif

#ifndef ATTNKIT_SIMD_DECODE_MICROKERNELS_H_
#define ATTNKIT_SIMD_DECODE_MICROKERNELS_H_

#include <cstdint>
#include <type_traits>

#include "simd/isa.h"
#include "simd/kernel.h"

namespace attnkit::simd::internal::ATTNKIT_SIMD_NS {
namespace {

template <class X>
struct DecodeMicroKernels {
  using V = typename X::V;
  static constexpr int W = X::W;

  // Software prefetch (into L2: prefetcht1) of the rows a loop will read
  // PrefetchKeys() keys later, issued one row at a time from inside the loop's
  // compute: Fetch(j) fetches row j of [base + j*stride, + bytes), rows j < n
  // exist. Spread over the work, one row per key, not in bursts per block of
  // keys: the bursts ran decode markedly slower (simd/README.md, "Prefetch
  // spacing").
  // Fetch only from code that has other effects, or inline: to GCC a
  // function whose only effect is prefetching is pure, and it drops calls to
  // it (GCC 12 dropped a PrefetchNextVt that was not inlined).
  struct AheadRows {
    const char* base = nullptr;  // null: nothing to fetch
    int64_t stride = 0, n = 0, bytes = 0;
    // `len` bytes of row j (a compile-time constant where the caller knows
    // it, so the lines unroll).
    void Fetch(int64_t j, int64_t len) const {
      if (base == nullptr || j >= n) return;
      for (int64_t x = 0; x < len; x += 64)
        __builtin_prefetch(base + j * stride + x, 0, 2);
    }
    void Fetch(int64_t j) const { Fetch(j, bytes); }
    // Rows `skip` on of the `rows` at `first` (`stride` bytes apart, `bytes`
    // of each): row j here is row skip + j there; empty when skip >= rows.
    static AheadRows Skipping(const void* first, int64_t stride, int64_t skip,
                              int64_t rows, int64_t bytes) {
      if (skip >= rows) return AheadRows{};
      return AheadRows{static_cast<const char*>(first) + skip * stride, stride,
                       rows - skip, bytes};
    }
    void FetchAll() const {
      for (int64_t j = 0; j < n; ++j) Fetch(j);
    }
  };

  // ---- P.V micro-kernels
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
      // measured slower in this loop: simd/README.md, "Prefetch spacing").
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
  // Whether PvRowsAll takes the whole-row path for rows of De values of T,
  // vs apart.
  template <typename T>
  static constexpr bool PvWholeRows(int64_t De, int64_t vs) {
    return W >= 16 && sizeof(T) == 4 && De == 2 * kPvCols * W && vs == De;
  }
  // O += P V over a tile of nt keys (P rows ss apart), in blocks of 4 rows x
  // kPvCols vectors.
  //
  // When a row is wider than a block (d = 128 on AVX-512), a column block reads
  // only part of every V row. On AVX-512, with rows up to 512 bytes, each
  // column block runs over the whole tile: every row's lines are in L2 by
  // then (the first row block's prefetch of its own columns), and a call per
  // 4 KiB chunk of keys cost more than it saved -- each call loads and
  // stores its 16 accumulators, and GCC 12 moves them through the stack on
  // the way (simd/README.md, "V in chunks"). Narrower ISAs and wider rows
  // (not measured) keep the chunks of about 4 KiB of V, every column block
  // of a chunk before the next, the others re-reading the chunk from L1:
  // without the software prefetch, a stream that skips lines and comes back
  // for them was followed poorly by the hardware prefetcher. An int8 V with
  // a whole row block (4+ rows per kv head) runs whole tiles on every ISA:
  // its pass is bound by the widening and the multiply-adds, not by the
  // stream.
  //
  // f32 rows of d = 128 (two column blocks) adjacent in memory (BHSD, or the
  // workspace's widened copies; PvWholeRows) go another way: whole rows, two
  // rows of P at a time (PvRows<2, 8>: 16 accumulators, 8 V vectors).
  //
  // pf_rows: rows that exist from vbase on (the keys left in the work item):
  // the first row block (whole rows: the first row pair) prefetches rows
  // PrefetchKeys() ahead up to there; 0 for nothing to prefetch (a workspace
  // copy, or rows the decode kernel's ReadAhead has read). The whole-row path
  // prefetches only when `whole_rows_ahead` (the decode kernel: K/V above the
  // private caches, BlockJob::prefetch_keys). The whole-row path's last row
  // pair, when there are two or more, fetches `next_k` (row j at key j: the
  // next tile's K rows) -- that pair re-reads the tile's V from L2, and without
  // it the core's DRAM stream stood idle until the next QK^T (simd/README.md,
  // "The next tile's K during P.V").
  //
  // Never inlined: compiled on its own, its loops are split at the end of
  // the prefetched rows and unswitched on whether to prefetch at all; inlined
  // into the decode kernel GCC 12 did neither (4 more instructions per key
  // and row block, simd/README.md, "Checking that a refactor kept the
  // speed"). One call per tile and kv head.
  template <typename T>
  [[gnu::noinline]] static void PvRowsAll(int64_t R, int64_t De,
                                          const float* sm, int64_t ss,
                                          int64_t nt, const T* vbase,
                                          int64_t vs, float* o, int64_t pf_rows,
                                          bool whole_rows_ahead,
                                          const AheadRows& next_k) {
    if constexpr (W >= 16 && sizeof(T) == 4) {
      if (PvWholeRows<T>(De, vs)) {
        // The first row pair reads the tile as one address-ordered stream
        // (the next pairs re-read it from L2), whole rows of V prefetched
        // PrefetchKeys() ahead: decode f32 BHSD ran 0.84-0.96x the time of
        // the half-row column passes with their prefetch on a Zen 5, where
        // the hardware prefetchers followed the stream; on a Xeon, whose
        // cores read DRAM at half the rate without the software prefetch,
        // prefetching the rows measured 0.85-0.96x at kv 16k
        // (simd/README.md, "P.V over whole rows").
        const int64_t row_bytes = De * static_cast<int64_t>(sizeof(T));
        const AheadRows v_ahead =
            whole_rows_ahead ? AheadRows::Skipping(
                                   vbase, vs * static_cast<int64_t>(sizeof(T)),
                                   PrefetchKeys(row_bytes), pf_rows, row_bytes)
                             : AheadRows{};
        for (int64_t r0 = 0; r0 < R; r0 += 2) {
          if (R - r0 >= 2) {
            PvRows<2, 2 * kPvCols>(sm + r0 * ss, ss, nt, vbase, vs, o + r0 * De,
                                   De,
                                   r0 == 0       ? v_ahead
                                   : r0 + 2 >= R ? next_k
                                                 : AheadRows{});
          } else {
            PvRows<1, 2 * kPvCols>(sm + r0 * ss, ss, nt, vbase, vs, o + r0 * De,
                                   De, r0 == 0 ? v_ahead : AheadRows{});
          }
        }
        return;
      }
    }
    const int64_t row_bytes = De * static_cast<int64_t>(sizeof(T));
    const bool whole_tile = De <= kPvCols * W ||
                            (W >= 16 && row_bytes <= 512) ||
                            (sizeof(T) == 1 && R >= 4);
    const int64_t chunk =
        whole_tile ? nt : (row_bytes >= 1024 ? 4 : 4096 / row_bytes);
    const int64_t ahead_keys = PrefetchKeys(row_bytes);
    for (int64_t j0 = 0; j0 < nt; j0 += chunk) {
      const int64_t nj = nt - j0 < chunk ? nt - j0 : chunk;
      const T* vj = vbase + j0 * vs;
      for (int64_t r0 = 0; r0 < R; r0 += 4) {
        const int64_t rb = R - r0 < 4 ? R - r0 : 4;
        const float* pm = sm + r0 * ss + j0;
        for (int64_t e0 = 0; e0 < De; e0 += kPvCols * W) {
          const int dv = static_cast<int>(
              (De - e0) / W < kPvCols ? (De - e0) / W : kPvCols);
          float* orow = o + r0 * De + e0;
          const AheadRows ahead =
              r0 == 0 ? AheadRows::Skipping(
                            vj + e0, vs * static_cast<int64_t>(sizeof(T)),
                            ahead_keys, pf_rows - j0,
                            dv * W * static_cast<int64_t>(sizeof(T)))
                      : AheadRows{};
          switch (rb) {
            case 1:
              PvRowsDv<1>(dv, pm, ss, nj, vj + e0, vs, orow, De, ahead);
              break;
            case 2:
              PvRowsDv<2>(dv, pm, ss, nj, vj + e0, vs, orow, De, ahead);
              break;
            case 3:
              PvRowsDv<3>(dv, pm, ss, nj, vj + e0, vs, orow, De, ahead);
              break;
            default:
              PvRowsDv<4>(dv, pm, ss, nj, vj + e0, vs, orow, De, ahead);
              break;
          }
        }
      }
    }
  }

  // ---- QK^T micro-kernels
  // QK^T for few rows: RP rows x KB = W / RP keys per call, one accumulator
  // per (row, key), so the W accumulators reduce to one vector with a single
  // HAddP (lane r * KB + k). Each K vector is loaded once for all rows: a
  // row-at-a-time dot loop loads every K vector RP times, and QK^T then cost
  // far more than P.V (simd/README.md, "QK^T register-blocked over rows").
  //
  // Two forms: QkInPlace on AVX-512 (below), and QkGroup / QkBlock on
  // narrower ISAs, where the W = 8 accumulators leave too few ymm for Q, so
  // Q is read from L1 at each FMA (a memory operand), each K vector still
  // feeds RP of them, and the keys go one by one, each K row's lines in
  // address order (walking d across the rows stopped the hardware
  // prefetchers before K rows were prefetched in software: simd/README.md,
  // "K load order").
  static constexpr int kQkRowGroup = W < 8 ? W : 8;
  template <int RP, typename T>
  static V QkBlock(const float* const* qr, const void* const* kp, int64_t De) {
    V acc[W];
    for (int i = 0; i < W; ++i) acc[i] = X::Zero();
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
    return X::HAddP(acc);
  }
#if defined(__AVX512F__)
  static constexpr bool kQkInPlace = W == 16;
#else
  static constexpr bool kQkInPlace = false;
#endif
#if defined(__AVX512F__)
  // ---- QK^T on AVX-512 (K rows in place, or widened in the workspace)
  // S[r][0 .. 16) = scale[kk] * (Q[r] . K[kk]) for rn <= RP rows (padded
  // rows read the zero row and are dropped) and the 16 K rows at
  // k + kk * ks, kk < nk (the rest read the zero row); scale 1 unless K is
  // int8. Compiled on its own, never inlined into the flattened decode
  // kernel (there GCC spilled the accumulators around the reduction and
  // QK^T took about twice the cycles it takes here), with a Q segment of
  // 8 / RP registers (QkPairQ: 2 per vector), so the 16 accumulators, the Q
  // segment and the (widened) K vector fit in the 32 zmm registers. The keys'
  // scales multiply the reduced dot products in registers (lane r * KB + kk
  // takes key kk's), so S is stored once, scaled (a separate pass over S
  // re-read it right after these narrow stores, and stalled on store
  // forwarding).
  template <int RP, int QR = 1>
  static constexpr int kQkSegInPlace = 8 / (RP * QR) > 1 ? 8 / (RP * QR) : 1;
  // sv's lanes in HAddP's order for the keys [kb, kb + KB): lane i takes
  // key kb + i % KB.
  template <int KB>
  static __m512 BlockScales(__m512 sv, int kb) {
    const __m512i lane =
        _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i idx =
        _mm512_add_epi32(_mm512_set1_epi32(kb),
                         _mm512_and_si512(lane, _mm512_set1_epi32(KB - 1)));
    return _mm512_permutexvar_ps(idx, sv);
  }
  // How QK^T multiplies one vector of Q by one of K (stored as KT), per Q
  // dtype: f32 q, L = 16 values per vector, the K vector loaded (f32) or
  // widened (bf16, int8) to f32, one multiply-add; bf16 q (vdpbf16ps),
  // L = 32 values, a bf16 K vector as stored or an int8 one widened, then
  // rounded to bf16 in its order (exact: |q| <= 127 has 7 bits), one dot
  // instruction -- half the multiply-add work.
  template <typename KT>
  struct QkF32Q {
    using T = float;
    using K = KT;
    using QV = __m512;
    static constexpr int L = 16;
    static constexpr int kQRegs = 1;  // zmm registers per QV
    static QV LoadQ(const T* p) { return _mm512_loadu_ps(p); }
    static QV LoadK(const K* p) { return X::Load(p); }  // widened as stored
    static __m512 MulAdd(__m512 acc, QV q, QV k) {
      return _mm512_fmadd_ps(q, k, acc);
    }
  };
#if defined(__AVX512BF16__)
  template <typename KT>
  struct QkBf16Q {
    using T = uint16_t;
    using K = KT;
    using QV = __m512bh;
    static constexpr int L = 32;
    static constexpr int kQRegs = 1;
    static QV LoadQ(const T* p) { return (__m512bh)_mm512_loadu_si512(p); }
    static QV LoadK(const K* p) {
      if constexpr (std::is_same_v<K, int8_t>) {
        return _mm512_cvtne2ps_pbh(X::Load(p + 16), X::Load(p));
      } else {
        return (__m512bh)_mm512_loadu_si512(p);
      }
    }
    static __m512 MulAdd(__m512 acc, QV q, QV k) {
      return _mm512_dpbf16_ps(acc, q, k);
    }
  };
#endif
  // f32 q against bf16 K where the bf16 dot does not pay (CpuBf16DotPays),
  // L = 32 values per vector: each 32-bit lane of K holds a pair of bf16,
  // the even one widened by a shift, the odd one by a mask -- one
  // instruction per 16 values where QkF32Q<uint16_t>'s vpmovzxwd + vpslld
  // take two. The q rows hold each 32 values' even ones, then its odd ones
  // (PairQueryRow), so the two multiply-adds meet their own K halves.
  struct QkPairQ {
    using T = float;
    using K = uint16_t;
    struct QV {
      __m512 even, odd;
    };
    static constexpr int L = 32;
    static constexpr int kQRegs = 2;
    static QV LoadQ(const T* p) {
      return {_mm512_loadu_ps(p), _mm512_loadu_ps(p + 16)};
    }
    static QV LoadK(const K* p) {
      const __m512i pairs = _mm512_loadu_si512(p);
      return {_mm512_castsi512_ps(_mm512_slli_epi32(pairs, 16)),
              _mm512_castsi512_ps(_mm512_and_si512(
                  pairs, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))))};
    }
    static __m512 MulAdd(__m512 acc, QV q, QV k) {
      return _mm512_fmadd_ps(q.odd, k.odd,
                             _mm512_fmadd_ps(q.even, k.even, acc));
    }
  };
  // Rearranges a row of n f32 values (n % 32 == 0) for QkPairQ: each 32
  // values' even ones, then its odd ones.
  static void PairQueryRow(float* row, int64_t n) {
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14,
                                          12, 10, 8, 6, 4, 2, 0);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    for (int64_t e = 0; e < n; e += 32) {
      const __m512 lo = _mm512_loadu_ps(row + e);
      const __m512 hi = _mm512_loadu_ps(row + e + 16);
      _mm512_storeu_ps(row + e, _mm512_permutex2var_ps(lo, even, hi));
      _mm512_storeu_ps(row + e + 16, _mm512_permutex2var_ps(lo, odd, hi));
    }
  }
  // acc[r * KB + kk] += Q[r] . K[kk] over one segment of NS vectors from
  // e0, the keys' vectors in turn at each step along d, so the 16
  // accumulators are 16 independent multiply-add chains. Unrolled
  // completely: every accumulator index is a constant, and the accumulators
  // stay in registers (with a key-group loop left rolled GCC kept them in
  // memory, one dependent chain of loads, multiply-adds and stores per key,
  // twice the cycles).
  template <class Q, int RP, int NS>
  [[gnu::always_inline]] static void QkSegmentInPlace(
      const typename Q::T* const* qr, const typename Q::K* const* k, int64_t e0,
      __m512* acc) {
    constexpr int KB = 16 / RP;
    typename Q::QV qv[RP][NS];
#pragma GCC unroll 8
    for (int r = 0; r < RP; ++r)
#pragma GCC unroll 8
      for (int s = 0; s < NS; ++s) qv[r][s] = Q::LoadQ(qr[r] + e0 + Q::L * s);
#pragma GCC unroll 8
    for (int s = 0; s < NS; ++s) {
#pragma GCC unroll 16
      for (int kk = 0; kk < KB; ++kk) {
        const typename Q::QV kv = Q::LoadK(k[kk] + e0 + Q::L * s);
#pragma GCC unroll 8
        for (int r = 0; r < RP; ++r)
          acc[r * KB + kk] = Q::MulAdd(acc[r * KB + kk], qv[r][s], kv);
      }
    }
  }
  // Segments of NS vectors while they fit in the n values, then the rest in
  // halving sizes (NS is a power of two).
  template <class Q, int RP, int NS>
  [[gnu::always_inline]] static void QkSegmentsInPlace(
      const typename Q::T* const* qr, const typename Q::K* const* k,
      int64_t& e0, int64_t n, __m512* acc) {
    for (; e0 + NS * Q::L <= n; e0 += NS * Q::L)
      QkSegmentInPlace<Q, RP, NS>(qr, k, e0, acc);
    if constexpr (NS > 1) QkSegmentsInPlace<Q, RP, NS / 2>(qr, k, e0, n, acc);
  }
  // Where QkInPlace's sums go: row r0 + r's 16 values at p + r * stride,
  // stored (S) or added to what is there (O, for P.V over transposed V).
  struct DotOut {
    float* p;
    int64_t stride;
    bool add;
  };
  // q: rows of n values of Q::T at q + row * qs (the rows' Q in the
  // workspace: f32 rows of De, bf16 rows of d; or P rows for transposed V),
  // rows r0 .. r0 + rn. sv: the 16 keys' scales (1 past nk, and for a K
  // that is not int8).
  template <class Q, int RP>
  [[gnu::noinline]] static void QkInPlace(const typename Q::T* q, int64_t qs,
                                          int64_t n, int64_t r0, int rn,
                                          const typename Q::K* k, int64_t ks,
                                          int64_t nk, const float* zero,
                                          __m512 sv, DotOut out,
                                          const AheadRows& ahead) {
    using T = typename Q::T;
    using K = typename Q::K;
    constexpr int KB = 16 / RP;
    const K* kz = reinterpret_cast<const K*>(zero);
    const T* qr[RP];
    for (int r = 0; r < RP; ++r)
      qr[r] = r < rn ? q + (r0 + r) * qs : reinterpret_cast<const T*>(zero);
    for (int kb = 0; kb < 16; kb += KB) {
      const K* kr[KB];
      if constexpr (KB <= 8) {
        // The prefetches first, then the K row pointers in a loop of their
        // own, unrolled: so they stay in registers. Set between the
        // prefetch loops, GCC kept them on the stack, and each block's K
        // loads waited on reloading them: a block of RP 4 rows x 4 keys
        // (bf16, d 128: 64 vdpbf16ps) took 56 cycles in L1, now 41 (f32
        // 76 -> 70; simd/README.md, "QK^T's K row pointers"). A block of
        // 16 keys (one row) measured no faster so (bf16 30.5 -> 31.5
        // cycles per four keys) and keeps the interleaved loop.
        for (int kk = 0; kk < KB; ++kk) ahead.Fetch(kb + kk);
#pragma GCC unroll 8
        for (int kk = 0; kk < KB; ++kk)
          kr[kk] = kb + kk < nk ? k + (kb + kk) * ks : kz;
      } else {
        for (int kk = 0; kk < KB; ++kk) {
          ahead.Fetch(kb + kk);
          kr[kk] = kb + kk < nk ? k + (kb + kk) * ks : kz;
        }
      }
      __m512 acc[16];
      for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
      int64_t e0 = 0;
      QkSegmentsInPlace<Q, RP, kQkSegInPlace<RP, Q::kQRegs>>(qr, kr, e0, n,
                                                             acc);
      V accv[16];
      for (int i = 0; i < 16; ++i) accv[i] = acc[i];
      const __m512 st = _mm512_mul_ps(X::HAddP(accv), BlockScales<KB>(sv, kb));
      // Row r's KB sums are lanes [r * KB, r * KB + KB): one store per row,
      // of those lanes only, at the address that puts lane r * KB at column
      // kb of row r (masked loads and stores touch no other lane's memory).
      for (int r = 0; r < rn; ++r) {
        float* dst = out.p + r * (out.stride - KB) + kb;
        const auto m = static_cast<__mmask16>(((1u << KB) - 1) << (r * KB));
        _mm512_mask_storeu_ps(
            dst, m,
            out.add ? _mm512_add_ps(st, _mm512_maskz_loadu_ps(m, dst)) : st);
      }
    }
  }
#endif
  // S[r0 + r][0 .. W) (srow + r * ss) for rn <= RP rows (padded rows read the
  // zero row and are dropped) against the W keys kp, rows of `k_type` (f32,
  // bf16 or i8: an i8 row's dot is in its integers, the caller applies its
  // scale); ahead.Fetch(kk) for each key.
  template <int RP>
  static void QkGroup(DType k_type, const float* q, int64_t De, int64_t r0,
                      int rn, const void* const* kp, const float* zero,
                      float* srow, int64_t ss, const AheadRows& ahead) {
    static_assert(RP <= W);
    constexpr int KB = W / RP;
    alignas(64) float t[W];
    const float* qr[RP];
    for (int r = 0; r < RP; ++r) qr[r] = r < rn ? q + (r0 + r) * De : zero;
    for (int kb = 0; kb < W; kb += KB) {
      for (int kk = kb; kk < kb + KB; ++kk) ahead.Fetch(kk);
      X::Store(t, k_type == DType::kBF16
                      ? QkBlock<RP, uint16_t>(qr, kp + kb, De)
                  : k_type == DType::kI8 ? QkBlock<RP, int8_t>(qr, kp + kb, De)
                                         : QkBlock<RP, float>(qr, kp + kb, De));
      for (int r = 0; r < rn; ++r)
        for (int kk = 0; kk < KB; ++kk) srow[r * ss + kb + kk] = t[r * KB + kk];
    }
  }
};

}  // namespace
}  // namespace attnkit::simd::internal::ATTNKIT_SIMD_NS

#endif  // ATTNKIT_SIMD_DECODE_MICROKERNELS_H_
