// The decode path (R < vector width rows: one query, or a few; lanes = d or
// keys): dot products of Q rows with K rows along d, reduced W at a time by
// haddp; P.V broadcasts P against V rows, or, for transposed V, dots P rows
// with V^T rows along the keys. No lane is wasted on a 4-row GQA group.
//
// The K and V streams come from DRAM at long contexts, so this path walks
// them in address order and prefetches them in software (AheadRows in
// decode_microkernels.h, kPrefetchBytes in runtime/split_kv.h); simd/README.md
// has the measurements behind each choice.
//
// Include ONLY from flash_impl.h or tile_steps.h (see simd/isa.h: everything
// here lives in the per-ISA namespace ATTNKIT_SIMD_NS).
#ifndef ATTNKIT_SIMD_NS
#error "define ATTNKIT_SIMD_NS before including simd/decode_kernel.h"
#endif

#ifndef ATTNKIT_SIMD_DECODE_KERNEL_H_
#define ATTNKIT_SIMD_DECODE_KERNEL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "runtime/problem.h"
#include "simd/amx.h"
#include "simd/block.h"
#include "simd/decode_microkernels.h"
#include "simd/isa.h"
#include "simd/kernel.h"

namespace attnkit::simd::internal::ATTNKIT_SIMD_NS {
namespace {

template <class X>
struct DecodeKernel {
  using V = typename X::V;
  static constexpr int W = X::W;
  using Micro = DecodeMicroKernels<X>;
  using AheadRows = typename Micro::AheadRows;
  static constexpr int kQkRowGroup = Micro::kQkRowGroup;

  // ---- the steps of a work item
  // What every step reads: the job, its rows, how its K and V are read, and
  // the workspace regions. Q [R][De] (f32, zero padded) or [R][d] (bf16 for
  // vdpbf16ps); S / P [R][tile]; O [R][De].
  struct Item {
    ATTNKIT_SIMD_STEP Item(const BlockJob& j, const Rows& rs, float* ws,
                           const WorkspaceLayout& L)
        : job(j),
          p(*j.problem),
          a(*j.args),
          rows(rs),
          d(p.head_dim),
          R(rs.count),
          Rh(R / j.kv_heads),
          De((d + W - 1) / W * W),
          end(rs.keys_end),
          kv(p.KvDType()),
          bf16(kv == DType::kBF16),
          i8(kv == DType::kI8),
          tv(p.layout == KvLayout::kTransposedV),
          tile(DecodeTileKeys(p.layout, kv, R, W)),
          dot(X::kBf16Dot && d % 32 == 0 &&
              (bf16 || (i8 && p.dtype == DType::kBF16 && Micro::kQkInPlace))),
          in_place(d % W == 0),
          amx(kAmx && Micro::kQkInPlace && bf16 && d % 32 == 0 &&
              d <= 32 * kAmxQBlocks && Rh <= 16),
          pair_q(Micro::kQkInPlace && bf16 && !dot && !amx && d % 32 == 0),
          read_ahead(Micro::kQkInPlace &&
                     BshdItemReadsAhead(p, j.kv_heads, W, j.kv_from_dram)),
          k_type(in_place ? kv : DType::kF32),
          esize(DTypeSize(kv)),
          ahead_keys(PrefetchKeys(d * esize)),
          kdata(static_cast<const char*>(a.k.data)),
          vdata(static_cast<const char*>(a.v.data)),
          q(ws + L.queries),
          sm(ws + L.scores),
          o(ws + L.out),
          m(ws + L.row_max),
          l(ws + L.row_sum),
          kw(ws + L.k_tile),
          vw(ws + L.v_tile),
          zero(ws + L.zeros) {}
    const BlockJob& job;
    const AttentionProblem& p;
    const AttentionArgs& a;
    const Rows& rows;
    const int64_t d, R;
    const int64_t Rh;   // rows per kv head (MakeRows's order)
    const int64_t De;   // f32 row length, zero padded to W
    const int64_t end;  // one past the last key any row sees
    const DType kv;     // K/V storage (q is f32 or bf16 on its own)
    const bool bf16, i8, tv;
    const int64_t tile;   // keys per tile (DecodeTileKeys)
    const bool dot;       // QK^T on vdpbf16ps: q bf16, K bf16 or int8
    const bool in_place;  // K and V rows read in place: d % W == 0
    // QK^T on AMX tiles (QkAmxBlock): bf16 K, d % 32 == 0 up to 192; q rows
    // packed as each kv head's Q^T pairs [d/2][Rh][2].
    const bool amx;
    // QK^T of f32 q and bf16 K on QkPairQ: q rows in its pair order
    // (PairQueryRow).
    const bool pair_q;
    // BSHD items of several kv heads of a call whose K/V outgrow the
    // last-level cache (BshdItemReadsAhead, kernel.h): each block's rows
    // read once in address order before its compute (ReadAhead), no
    // software prefetch.
    const bool read_ahead;
    const DType k_type;  // K rows as QK^T reads them (widened in registers)
    const int64_t esize, ahead_keys;
    const char* const kdata;
    const char* const vdata;
    float* const q;
    float* const sm;
    float* const o;
    float* const m;
    float* const l;
    float* const kw;
    float* const vw;
    const float* const zero;
  };
  // Keys [j0, j0 + nt) of one tile, ntp = nt rounded up to W.
  struct Tile {
    int64_t j0, nt, ntp;
  };

  // Loads the rows' Q (widened and zero padded, or bf16 as stored for
  // vdpbf16ps) and starts each row's state: O = 0, m = -inf, l = 0.
  ATTNKIT_SIMD_STEP static void LoadQueries(const Item& it) {
    const BlockJob& job = it.job;
    const AttentionArgs& a = it.a;
    const int64_t d = it.d, De = it.De;
    for (int64_t r = 0; r < it.R; ++r) {
      const int64_t off =
          a.q.Offset(job.batch, it.rows.head[r], it.rows.query[r], 0);
      if (it.dot) {
        std::memcpy(reinterpret_cast<uint16_t*>(it.q) + r * d,
                    static_cast<const uint16_t*>(a.q.data) + off,
                    static_cast<size_t>(d) * 2);
      } else if (it.amx) {
        // Row r = hk * Rh + i is column i of kv head hk's Q^T pairs.
        const auto* src = static_cast<const uint16_t*>(a.q.data) + off;
        uint16_t* qh =
            reinterpret_cast<uint16_t*>(it.q) + r / it.Rh * it.Rh * d;
        const int64_t i = r % it.Rh;
        for (int64_t pp = 0; pp < d / 2; ++pp) {
          qh[(pp * it.Rh + i) * 2] = src[2 * pp];
          qh[(pp * it.Rh + i) * 2 + 1] = src[2 * pp + 1];
        }
      } else {
        LoadRow(a.q, off, 1, d, it.q + r * De);
        ZeroFloats(it.q + r * De + d, De - d);
#if defined(__AVX512F__)
        if (it.pair_q) Micro::PairQueryRow(it.q + r * De, De);
#endif
      }
      ZeroFloats(it.o + r * De, De);
      it.m[r] = kNegInf;
      it.l[r] = 0.0f;
    }
  }

  // K row j of kv head kvh widened into workspace row kk (f32, zero padded
  // to De) -- for d not a multiple of W; returns the row.
  ATTNKIT_SIMD_STEP static const float* WidenKeyRow(const Item& it, int64_t kvh,
                                                    int64_t j, int64_t kk) {
    float* kw = it.kw + kk * it.De;
    LoadRow(it.a.k, it.a.k.Offset(it.job.batch, kvh, j, 0), 1, it.d, kw);
    ZeroFloats(kw + it.d, it.De - it.d);
    return kw;
  }

  // kp[kk] = K row j0 + jb + kk of kv head kvh, kk < W: in place, widened
  // into the workspace (d not a multiple of W), or the zero row past the
  // tile (masked later), so the QK^T loop is uniform.
  ATTNKIT_SIMD_STEP static void KeyRows(const Item& it, const Tile& t,
                                        int64_t kvh, int64_t jb,
                                        const void** kp) {
    const AttentionArgs& a = it.a;
    const int64_t b = it.job.batch;
    for (int kk = 0; kk < W; ++kk) {
      const int64_t j = jb + kk;
      if (j >= t.nt) {
        kp[kk] = it.zero;
      } else if (it.in_place) {
        kp[kk] = it.kdata + a.k.Offset(b, kvh, t.j0 + j, 0) * it.esize;
      } else {
        kp[kk] = WidenKeyRow(it, kvh, t.j0 + j, kk);
      }
    }
  }

  // K rows of kv head kvh from `key` to the end of the item's keys (empty
  // from the end on, and for items that read their blocks ahead): the rows
  // KeysAhead and NextTileKeys prefetch.
  ATTNKIT_SIMD_STEP static AheadRows KeyRowsFrom(const Item& it, int64_t kvh,
                                                 int64_t key) {
    if (key >= it.end || it.read_ahead) return AheadRows{};
    return AheadRows{
        it.kdata + it.a.k.Offset(it.job.batch, kvh, key, 0) * it.esize,
        it.a.k.strides[2] * it.esize, it.end - key, it.d * it.esize};
  }

  // The K rows ahead_keys ahead of the W dotted at jb, fetched by the first
  // row group's dot loop -- in calls whose K/V exceed the cores' private
  // caches (BlockJob::prefetch_keys, DecodePrefetchesKeys: below, the
  // prefetch instructions only cost).
  ATTNKIT_SIMD_STEP static AheadRows KeysAhead(const Item& it, const Tile& t,
                                               int64_t kvh, int64_t jb) {
    if (!it.job.prefetch_keys) return AheadRows{};
    return KeyRowsFrom(it, kvh, t.j0 + jb + it.ahead_keys);
  }

  // The next tile's K rows of kv head kvh: what the next QK^T reads,
  // fetched by P.V's last pass over this tile's V (PvRowsAll) in a call
  // whose K/V stream from DRAM (BlockJob::kv_from_dram; from the caches the
  // fetches only cost: kv 1024 / 4096 1.09x / 1.13x the time).
  ATTNKIT_SIMD_STEP static AheadRows NextTileKeys(const Item& it, const Tile& t,
                                                  int64_t kvh) {
    return it.job.kv_from_dram ? KeyRowsFrom(it, kvh, t.j0 + it.tile)
                               : AheadRows{};
  }

  // Transposed V: V^T rows [e0, e0 + ne) of kv head kvh, `bytes` of each
  // from key `key` -- the runs that NextVtRows and NextBlockVt prefetch.
  ATTNKIT_SIMD_STEP static AheadRows VtRuns(const Item& it, int64_t kvh,
                                            int64_t key, int64_t e0, int64_t ne,
                                            int64_t bytes) {
    return AheadRows{
        it.vdata + it.a.v.Offset(it.job.batch, kvh, key, e0) * it.esize,
        it.a.v.strides[3] * it.esize, ne, bytes};
  }

  // Transposed V: V^T rows [e0, e0 + ne) of kv head kvh, their part in the
  // next tile's keys (empty for the last tile): what P.V will read next.
  ATTNKIT_SIMD_STEP static AheadRows NextVtRows(const Item& it, const Tile& t,
                                                int64_t kvh, int64_t e0,
                                                int64_t ne) {
    const int64_t next = t.j0 + it.tile;
    if (next >= it.end || ne <= 0) return AheadRows{};
    const int64_t nk = it.end - next < it.tile ? it.end - next : it.tile;
    return VtRuns(it, kvh, next, e0, ne, nk * it.esize);
  }

  // Transposed V on AVX-512: the heads of V^T rows [e0, e0 + W) (up to d)
  // of kv head kvh in this tile's keys from key j, up to kTvAheadBytes each:
  // what P.V reads after the rows it dots now. The rest of each run (a long
  // tile's 4-8 KiB) the hardware prefetchers stream once they see its head.
  static constexpr int64_t kTvAheadBytes = 1024;
  ATTNKIT_SIMD_STEP static AheadRows NextBlockVt(const Item& it, const Tile& t,
                                                 int64_t kvh, int64_t e0,
                                                 int64_t j, int64_t n) {
    if (e0 >= it.d || n <= 0) return AheadRows{};
    const int64_t bytes = n * it.esize;
    return VtRuns(it, kvh, t.j0 + j, e0, it.d - e0 < W ? it.d - e0 : W,
                  bytes < kTvAheadBytes ? bytes : kTvAheadBytes);
  }

  // Narrower ISAs: the next tile's V^T rows prefetched a part per W keys of
  // this tile's QK^T (nothing for other layouts). On AVX-512
  // PvTransposedRows fetches the next rows' heads during P.V instead.
  ATTNKIT_SIMD_STEP static void PrefetchNextVt(const Item& it, const Tile& t,
                                               int64_t kvh, int64_t jb) {
    if (!it.tv) return;
    const int64_t d = it.d;
    const int64_t per = (d * W + t.ntp - 1) / t.ntp;
    const int64_t e0 = jb / W * per;
    NextVtRows(it, t, kvh, e0, d - e0 < per ? d - e0 : per).FetchAll();
  }

  // S[r][jb .. jb + W) for kv head rows [s0, s0 + Rh), kQkRowGroup rows per
  // call; the first group fetches k_ahead.
  ATTNKIT_SIMD_STEP static void QkRows(const Item& it, const void* const* kp,
                                       int64_t s0, int64_t jb,
                                       const AheadRows& k_ahead) {
    const int64_t Rh = it.Rh;
    for (int64_t r0 = s0; r0 < s0 + Rh; r0 += kQkRowGroup) {
      const int rn = static_cast<int>(s0 + Rh - r0 < kQkRowGroup ? s0 + Rh - r0
                                                                 : kQkRowGroup);
      float* srow = it.sm + r0 * it.tile + jb;
      const AheadRows& ahead = r0 == s0 ? k_ahead : AheadRows{};
      if (rn == 1) {
        Micro::template QkGroup<1>(it.k_type, it.q, it.De, r0, rn, kp, it.zero,
                                   srow, it.tile, ahead);
      } else if (rn == 2) {
        Micro::template QkGroup<2>(it.k_type, it.q, it.De, r0, rn, kp, it.zero,
                                   srow, it.tile, ahead);
      } else if (rn <= 4) {
        Micro::template QkGroup<4>(it.k_type, it.q, it.De, r0, rn, kp, it.zero,
                                   srow, it.tile, ahead);
      } else {
        Micro::template QkGroup<kQkRowGroup>(it.k_type, it.q, it.De, r0, rn, kp,
                                             it.zero, srow, it.tile, ahead);
      }
    }
  }

  // An i8 K/V: the rows [s0, s0 + Rh) of S (or P) at the tile's keys
  // [jb, jb + W) times those keys' scales (kv head kvh of `scales`), so
  // the integer dot products become the logits of the dequantized keys
  // (or P the weights of the dequantized values): one multiply per key and
  // row, no dequantized copy of a row. Keys past the tile get a scale of 1
  // (their logits are masked to -inf, their P are 0).
  ATTNKIT_SIMD_STEP static void ScaleKeys(const Item& it, const Tile& t,
                                          const TensorView& scales, int64_t kvh,
                                          int64_t s0, int64_t jb) {
    const float* sp =
        scales.As<float>() + scales.Offset(it.job.batch, kvh, t.j0 + jb, 0);
    V sv;
    if (t.nt - jb >= W) {
      sv = X::Load(sp);
    } else {
      alignas(64) float tail[W];
      for (int k = 0; k < W; ++k) tail[k] = jb + k < t.nt ? sp[k] : 1.0f;
      sv = X::Load(tail);
    }
    for (int64_t r = s0; r < s0 + it.Rh; ++r) {
      float* sr = it.sm + r * it.tile + jb;
      X::Store(sr, X::Load(sr) * sv);
    }
  }

#if defined(__AVX512F__)
  // 16 K rows of one kv head for QkInPlace: rows k + kk * ks (kk < nk), the
  // keys' scales (1 unless int8), the item's rows from s0, and the K rows
  // the first row group prefetches.
  struct KeyBlock {
    const char* k;
    int64_t ks, nk, s0;
    __m512 sv;
    AheadRows ahead;
  };
  // The row groups of one kv head's rows [s0, s0 + Rh) through QkInPlace
  // with the q/K policy Q: q rows of n values of Q::T at q + row * qs, row
  // s0 + r's sums at out + r * os (stored, or added when `add`).
  template <class Q>
  ATTNKIT_SIMD_STEP static void DotRowGroups(const Item& it, const void* q,
                                             int64_t qs, int64_t n,
                                             const KeyBlock& kb, float* out,
                                             int64_t os, bool add) {
    const auto* qt = static_cast<const typename Q::T*>(q);
    const auto* kt = reinterpret_cast<const typename Q::K*>(kb.k);
    const int64_t s0 = kb.s0;
    for (int64_t r0 = s0; r0 < s0 + it.Rh; r0 += kQkRowGroup) {
      const int rn = static_cast<int>(
          s0 + it.Rh - r0 < kQkRowGroup ? s0 + it.Rh - r0 : kQkRowGroup);
      const typename Micro::DotOut o{out + (r0 - s0) * os, os, add};
      const AheadRows& ahead = r0 == s0 ? kb.ahead : AheadRows{};
      if (rn == 1) {
        Micro::template QkInPlace<Q, 1>(qt, qs, n, r0, rn, kt, kb.ks, kb.nk,
                                        it.zero, kb.sv, o, ahead);
      } else if (rn == 2) {
        Micro::template QkInPlace<Q, 2>(qt, qs, n, r0, rn, kt, kb.ks, kb.nk,
                                        it.zero, kb.sv, o, ahead);
      } else if (rn <= 4) {
        Micro::template QkInPlace<Q, 4>(qt, qs, n, r0, rn, kt, kb.ks, kb.nk,
                                        it.zero, kb.sv, o, ahead);
      } else {
        Micro::template QkInPlace<Q, kQkRowGroup>(
            qt, qs, n, r0, rn, kt, kb.ks, kb.nk, it.zero, kb.sv, o, ahead);
      }
    }
  }
  // QK^T's row groups: q rows of n values, S of the tile's keys from jb.
  template <class Q>
  ATTNKIT_SIMD_STEP static void QkRowGroups(const Item& it, int64_t n,
                                            const KeyBlock& kb, int64_t jb) {
    DotRowGroups<Q>(it, it.q, n, n, kb, it.sm + kb.s0 * it.tile + jb, it.tile,
                    false);
  }
#endif

#if defined(__AMX_BF16__)
  // The AMX form of QK^T (simd/amx.h) for one block of 16 keys of a kv head:
  // A = the 16 K rows in place (or the last nk < 16 in a zero-padded copy),
  // B = the kv head's Q^T pairs (LoadQueries), C[key][row] stored to `c`
  // (16 x Rh floats). Its K rows' prefetch (KeysAhead) goes first. The
  // caller moves C into S's rows (AmxToScores) one block later: read back
  // at once, the tile store held the gathers up (store forwarding).
  ATTNKIT_SIMD_STEP static void QkAmxBlock(const Item& it, const KeyBlock& kb,
                                           float* c) {
    const int64_t d = it.d, Rh = it.Rh;
    for (int64_t kk = 0; kk < 16; ++kk) kb.ahead.Fetch(kk);
    const auto* k = reinterpret_cast<const uint16_t*>(kb.k);
    const uint16_t* a = k;
    int64_t astride = kb.ks * 2;
    if (kb.nk < 16) {
      uint16_t* pad = reinterpret_cast<uint16_t*>(it.kw);
      AmxPadKeys(k, kb.ks, kb.nk, d, pad);
      a = pad;
      astride = d * 2;
    }
    const uint16_t* q = reinterpret_cast<const uint16_t*>(it.q) + kb.s0 * d;
    AmxLoadQ(q, 16 * Rh * 2, Rh * 4, d / 32);
    AmxKeyBlock(a, astride, d / 32, true, q, 16 * Rh * 2, Rh * 4);
    _tile_stored(0, c, Rh * 4);
  }
  // C[key][row] of QkAmxBlock into S[s0 + row][jb + key].
  ATTNKIT_SIMD_STEP static void AmxToScores(const Item& it, const float* c,
                                            int64_t s0, int64_t jb) {
    const int64_t Rh = it.Rh;
    const __m512i idx = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32(static_cast<int>(Rh)));
    for (int64_t r = 0; r < Rh; ++r) {
      const __m512 v = _mm512_i32gather_ps(
          _mm512_add_epi32(idx, _mm512_set1_epi32(static_cast<int>(r))), c, 4);
      _mm512_storeu_ps(it.sm + (s0 + r) * it.tile + jb, v);
    }
  }
#endif

  // S[s0 .. s0 + Rh) at the tile's keys [jb, jb + W) on AVX-512: QkInPlace
  // per row group over the K rows in place (d % 16 == 0) or widened into
  // zero-padded f32 rows of the workspace, an int8 K's scales applied
  // there.
  ATTNKIT_SIMD_STEP static void QkKeyBlock(const Item& it, const Tile& t,
                                           int64_t kvh, int64_t s0,
                                           int64_t jb) {
#if defined(__AVX512F__)
    if constexpr (Micro::kQkInPlace) {
      const AttentionArgs& a = it.a;
      const int64_t b = it.job.batch, j = t.j0 + jb;
      KeyBlock kb{it.kdata + a.k.Offset(b, kvh, j, 0) * it.esize,
                  a.k.strides[2],
                  t.nt - jb < W ? t.nt - jb : W,
                  s0,
                  _mm512_set1_ps(1.0f),
                  KeysAhead(it, t, kvh, jb)};
      if (it.i8) {
        const float* sp =
            a.k_scale.As<float>() + a.k_scale.Offset(b, kvh, j, 0);
        const int64_t ss = a.k_scale.strides[2];
        if (kb.nk == W && ss == 1) {
          kb.sv = _mm512_loadu_ps(sp);
        } else {
          alignas(64) float tail[W];
          for (int kk = 0; kk < W; ++kk)
            tail[kk] = kk < kb.nk ? sp[kk * ss] : 1.0f;
          kb.sv = _mm512_load_ps(tail);
        }
      }
      using M = Micro;
      if (!it.in_place) {
        for (int64_t kk = 0; kk < kb.nk; ++kk) WidenKeyRow(it, kvh, j + kk, kk);
        kb.k = reinterpret_cast<const char*>(it.kw);
        kb.ks = it.De;
        return QkRowGroups<typename M::template QkF32Q<float>>(it, it.De, kb,
                                                               jb);
      }
#if defined(__AVX512BF16__)
      if (it.dot) {  // bf16 q rows of d
        if (it.i8)
          return QkRowGroups<typename M::template QkBf16Q<int8_t>>(it, it.d, kb,
                                                                   jb);
        return QkRowGroups<typename M::template QkBf16Q<uint16_t>>(it, it.d, kb,
                                                                   jb);
      }
#endif
      // f32 q rows of De
      if (it.i8)
        return QkRowGroups<typename M::template QkF32Q<int8_t>>(it, it.De, kb,
                                                                jb);
      if (it.pair_q) return QkRowGroups<typename M::QkPairQ>(it, it.De, kb, jb);
      if (it.bf16)
        return QkRowGroups<typename M::template QkF32Q<uint16_t>>(it, it.De, kb,
                                                                  jb);
      return QkRowGroups<typename M::template QkF32Q<float>>(it, it.De, kb, jb);
    }
#endif
    (void)it, (void)t, (void)kvh, (void)s0, (void)jb;
  }

  // One load of each 64-byte line of [p, p + bytes), eight lines a step:
  // the loads are independent, and the fewer instructions between them the
  // more of them the core keeps in flight (simd/README.md, "BSHD decode
  // items": one load per loop step read 0.72-0.77x as fast).
  ATTNKIT_SIMD_STEP static void TouchLines(const char* p, int64_t bytes) {
    int64_t x = 0;
    for (; x + 512 <= bytes; x += 512)
      for (int64_t l = 0; l < 512; l += 64)
        (void)*static_cast<const volatile char*>(p + x + l);
    for (; x < bytes; x += 64) (void)*static_cast<const volatile char*>(p + x);
  }

  // Reads each line of the item's kv heads' rows of the keys [j, j + n) of
  // `v` once, in address order: one run per key where the heads' rows are
  // adjacent (BSHD), one for the block where the keys' runs are too. The
  // block's compute then reads them, head by head, from the caches. BSHD
  // items of several kv heads (BshdItemReadsAhead, kernel.h) read their
  // blocks so instead of prefetching in software: the compute's order (each
  // head's 16 rows, 4 KiB apart, then the next head's) streamed from DRAM at
  // about two thirds of an address-order pass, prefetched or not
  // (simd/README.md, "BSHD decode items").
  ATTNKIT_SIMD_STEP static void ReadAhead(const Item& it, const TensorView& v,
                                          const char* data, int64_t j,
                                          int64_t n) {
    const int64_t bytes = it.d * it.esize, heads = it.job.kv_heads;
    const bool heads_adjacent = v.strides[1] * it.esize == bytes;
    const int64_t key_run = heads_adjacent ? heads * bytes : bytes;
    const int64_t runs = heads_adjacent ? 1 : heads;
    auto at = [&](int64_t hk, int64_t k) {
      return data +
             v.Offset(it.job.batch, it.job.kv_head + hk, k, 0) * it.esize;
    };
    if (heads_adjacent && v.strides[2] * it.esize == key_run)
      return TouchLines(at(0, j), n * key_run);
    for (int64_t k = j; k < j + n; ++k)
      for (int64_t hk = 0; hk < runs; ++hk) TouchLines(at(hk, k), key_run);
  }

  // S = Q K^T over the tile, W keys at a time, per kv head of the job
  // (several only for BSHD decode: their rows at one key are adjacent in
  // memory, see simd_backend.cc): QkKeyBlock on AVX-512, QkRows (row
  // groups of QkGroup over the rows KeyRows points at) on narrower ISAs.
  // With several kv heads the heads are the inner loop: at each block of W
  // keys the item reads its heads' rows of those keys, adjacent in memory,
  // before the next block (simd/README.md, "BSHD decode items").
  ATTNKIT_SIMD_STEP static void QkTile(const Item& it, const Tile& t) {
#if defined(__AMX_BF16__)
    if (it.amx) return QkTileAmx(it, t);
#endif
    for (int64_t jb = 0; jb < t.ntp; jb += W) {
      if (it.read_ahead)
        ReadAhead(it, it.a.k, it.kdata, t.j0 + jb,
                  t.nt - jb < W ? t.nt - jb : W);
      for (int64_t hk = 0; hk < it.job.kv_heads; ++hk) {
        const int64_t kvh = it.job.kv_head + hk, s0 = hk * it.Rh;
        if constexpr (Micro::kQkInPlace) {
          QkKeyBlock(it, t, kvh, s0, jb);
        } else {
          const void* kp[W];
          KeyRows(it, t, kvh, jb, kp);
          const AheadRows k_ahead = KeysAhead(it, t, kvh, jb);
          PrefetchNextVt(it, t, kvh, jb);
          QkRows(it, kp, s0, jb, k_ahead);
          if (it.i8) ScaleKeys(it, t, it.a.k_scale, kvh, s0, jb);
        }
      }
    }
  }

#if defined(__AMX_BF16__)
  // QkTile on AMX tiles, in its order (key blocks, the kv heads inner); each
  // block's C goes into S one block later, from two buffers per head after
  // the padded K rows in the workspace.
  ATTNKIT_SIMD_STEP static void QkTileAmx(const Item& it, const Tile& t) {
    const int64_t heads = it.job.kv_heads, cn = 16 * it.Rh;
    float* cbuf = reinterpret_cast<float*>(reinterpret_cast<uint16_t*>(it.kw) +
                                           16 * it.d);
    for (int64_t jb = 0; jb < t.ntp; jb += W) {
      if (it.read_ahead)
        ReadAhead(it, it.a.k, it.kdata, t.j0 + jb,
                  t.nt - jb < W ? t.nt - jb : W);
      const int64_t half = jb / W % 2;
      for (int64_t hk = 0; hk < heads; ++hk) {
        const int64_t kvh = it.job.kv_head + hk, s0 = hk * it.Rh;
        const KeyBlock kb{
            it.kdata + it.a.k.Offset(it.job.batch, kvh, t.j0 + jb, 0) * 2,
            it.a.k.strides[2],
            t.nt - jb < W ? t.nt - jb : W,
            s0,
            _mm512_set1_ps(1.0f),
            KeysAhead(it, t, kvh, jb)};
        QkAmxBlock(it, kb, cbuf + (hk * 2 + half) * cn);
        if (jb > 0)
          AmxToScores(it, cbuf + (hk * 2 + 1 - half) * cn, s0, jb - W);
      }
    }
    const int64_t last = (t.ntp - W) / W % 2;
    for (int64_t hk = 0; hk < heads; ++hk)
      AmxToScores(it, cbuf + (hk * 2 + last) * cn, hk * it.Rh, t.ntp - W);
  }
#endif

  // The online softmax of row r over the tile: scale to log2 units, mask
  // (`masked`) and -inf past the tile, raise the running max (lazily),
  // P = exp2(S - m) in place, l = l*alpha + rowsum(P), O *= alpha when the
  // max moved.
  ATTNKIT_SIMD_STEP static void SoftmaxRow(const Item& it, const Tile& t,
                                           int64_t r, bool masked, const V& c) {
    const int64_t ntp = t.ntp;
    float* sr = it.sm + r * it.tile;
    for (int64_t j = 0; j < ntp; j += W) X::Store(sr + j, X::Load(sr + j) * c);
    if (masked) {
      const int64_t bs =
          it.p.mask == MaskKind::kBias ? it.a.bias.strides[3] : 0;
      MaskRow<1>(it.rows, r, t.j0, t.nt, bs, sr);
    }
    for (int64_t j = t.nt; j < ntp; ++j) sr[j] = kNegInf;
    V vmax = X::Set(kNegInf);
    for (int64_t j = 0; j < ntp; j += W) vmax = X::Max(vmax, X::Load(sr + j));
    const RowMax mx = NewRowMax(it, r, vmax);
    const V mu = X::Set(mx.use);
    V sum = X::Zero();
    for (int64_t j = 0; j < ntp; j += W) {
      const V pj = X::Exp2(X::Load(sr + j) - mu);
      X::Store(sr + j, pj);
      sum = sum + pj;
    }
    FinishRow(it, r, mx, sum);
  }
  // Row r's running max after a tile whose (scaled, masked) scores peak in
  // vmax's lanes: m_new raised only past m_old + tau; `use` is what P
  // subtracts (0 while the row has seen no key).
  struct RowMax {
    float m_old, m_new, use;
  };
  ATTNKIT_SIMD_STEP static RowMax NewRowMax(const Item& it, int64_t r,
                                            const V& vmax) {
    const float tmax = X::HMax(vmax);
    const float m_old = it.m[r];
    const float m_new = tmax > m_old + kLazyRescaleLog2 ? tmax : m_old;
    return {m_old, m_new, m_new == kNegInf ? 0.0f : m_new};
  }
  // l = l*alpha + rowsum(P), O *= alpha when the max moved, m = m_new.
  ATTNKIT_SIMD_STEP static void FinishRow(const Item& it, int64_t r,
                                          const RowMax& mx, const V& sum) {
    if (mx.m_new != mx.m_old) {
      const float alpha = std::exp2(mx.m_old - mx.use);
      it.l[r] = it.l[r] * alpha + X::HSum(sum);
      const V av = X::Set(alpha);
      float* o = it.o + r * it.De;
      for (int64_t e = 0; e < it.De; e += W)
        X::Store(o + e, X::Load(o + e) * av);
    } else {
      it.l[r] += X::HSum(sum);
    }
    it.m[r] = mx.m_new;
  }
  // SoftmaxRow for kLockstepRows rows from r0 of a whole tile (no mask, no
  // padding) in lockstep: each pass goes along the keys with the rows inner, so
  // the rows' chains (the max, the row sum) run side by side, and scaling and
  // the max share one pass. Row by row, the softmax of a 4-row tile took
  // ~20% longer, `decode` in cache 1.01-1.05x (simd/README.md, "Decode
  // softmax rows in lockstep"). Each pass reads S from L1; exp2 itself
  // (vreduceps and vscalefps, one a cycle each on Zen 5) sets the pace.
  static constexpr int kLockstepRows = 4;
  ATTNKIT_SIMD_STEP static void SoftmaxRowsWhole(const Item& it, const Tile& t,
                                                 int64_t r0, const V& c) {
    constexpr int NR = kLockstepRows;
    float* sr[NR];
    V vmax[NR], mu[NR], sum[NR];
    RowMax mx[NR];
    for (int r = 0; r < NR; ++r) {
      sr[r] = it.sm + (r0 + r) * it.tile;
      vmax[r] = X::Set(kNegInf);
      sum[r] = X::Zero();
    }
    for (int64_t j = 0; j < t.ntp; j += W) {
      for (int r = 0; r < NR; ++r) {
        const V s = X::Load(sr[r] + j) * c;
        X::Store(sr[r] + j, s);
        vmax[r] = X::Max(vmax[r], s);
      }
    }
    for (int r = 0; r < NR; ++r) {
      mx[r] = NewRowMax(it, r0 + r, vmax[r]);
      mu[r] = X::Set(mx[r].use);
    }
    for (int64_t j = 0; j < t.ntp; j += W) {
      for (int r = 0; r < NR; ++r) {
        const V pj = X::Exp2(X::Load(sr[r] + j) - mu[r]);
        X::Store(sr[r] + j, pj);
        sum[r] = sum[r] + pj;
      }
    }
    for (int r = 0; r < NR; ++r) FinishRow(it, r0 + r, mx[r], sum[r]);
  }
  ATTNKIT_SIMD_STEP static void SoftmaxTile(const Item& it, const Tile& t,
                                            bool masked) {
    const V c = X::Set(it.job.scale_log2e);
    if (masked || t.nt != t.ntp) {
      for (int64_t r = 0; r < it.R; ++r) SoftmaxRow(it, t, r, masked, c);
      return;
    }
    int64_t r = 0;
    for (; r + kLockstepRows <= it.R; r += kLockstepRows)
      SoftmaxRowsWhole(it, t, r, c);
    for (; r < it.R; ++r) SoftmaxRow(it, t, r, false, c);
  }

  // O += P V for transposed V: V^T rows (one per e) along the keys, dotted
  // with P rows, W of e at a time, reduced by haddp. Whole vectors of keys
  // are read in place; a tail's last partial vector is widened into
  // zero-padded rows.
#if defined(__AVX512F__)
  // O[r][e] += P[r] . V^T[e] has QK^T's shape -- P rows for the q rows,
  // V^T rows (along the keys) for the K rows -- so on AVX-512 it runs on
  // QkInPlace, 16 of e at a time: each V^T vector is loaded (and widened)
  // once for all the kv head's rows. The tile's keys [j, j + n) (n a
  // multiple of W): V^T rows of policy Q's type at v + e * vs, n keys each;
  // `ahead`: whether each block of 16 rows prefetches the next block's
  // (NextBlockVt).
  template <class Q>
  ATTNKIT_SIMD_STEP static void PvTransposedRows(const Item& it, const Tile& t,
                                                 int64_t kvh, const char* v,
                                                 int64_t vs, int64_t s0,
                                                 int64_t j, int64_t n,
                                                 bool ahead) {
    const int64_t d = it.d;
    const int64_t vbytes = vs * static_cast<int64_t>(sizeof(typename Q::K));
    for (int64_t e0 = 0; e0 < d; e0 += W) {
      const int64_t ne = d - e0 < W ? d - e0 : W;
      const KeyBlock vb{
          v + e0 * vbytes,
          vs,
          ne,
          s0,
          _mm512_set1_ps(1.0f),
          ahead ? NextBlockVt(it, t, kvh, e0 + W, j, n) : AheadRows{}};
      DotRowGroups<Q>(it, it.sm + j, it.tile, n, vb, it.o + s0 * it.De + e0,
                      it.De, true);
    }
  }
#endif
  ATTNKIT_SIMD_STEP static void PvTransposedV(const Item& it, const Tile& t,
                                              int64_t kvh, int64_t s0) {
#if defined(__AVX512F__)
    if constexpr (Micro::kQkInPlace) {
      const AttentionArgs& a = it.a;
      using M = Micro;
      // The whole vectors of keys, V^T read in place.
      const int64_t whole = t.nt / W * W;
      if (whole > 0) {
        const char* v =
            it.vdata + a.v.Offset(it.job.batch, kvh, t.j0, 0) * it.esize;
        const int64_t vs = a.v.strides[3];
        if (it.i8) {
          PvTransposedRows<typename M::template QkF32Q<int8_t>>(
              it, t, kvh, v, vs, s0, 0, whole, true);
        } else if (it.bf16) {
          PvTransposedRows<typename M::template QkF32Q<uint16_t>>(
              it, t, kvh, v, vs, s0, 0, whole, true);
        } else {
          PvTransposedRows<typename M::template QkF32Q<float>>(
              it, t, kvh, v, vs, s0, 0, whole, true);
        }
      }
      // A last partial vector: widened and zero-padded to W keys.
      if (whole < t.nt) {
        PvTransposedRows<typename M::template QkF32Q<float>>(
            it, t, kvh,
            reinterpret_cast<const char*>(
                WidenVt(it, t, kvh, whole, t.nt - whole, W)),
            W, s0, whole, W, false);
      }
    } else
#endif
    {
      PvTransposedPerRow(it, t, kvh, s0);
    }
  }

  // The tile's V^T rows (d of them) at keys [j, j + n) widened to f32 in the
  // workspace, rows of `len` (>= n) floats, zero past the n keys.
  ATTNKIT_SIMD_STEP static const float* WidenVt(const Item& it, const Tile& t,
                                                int64_t kvh, int64_t j,
                                                int64_t n, int64_t len) {
    const AttentionArgs& a = it.a;
    for (int64_t e = 0; e < it.d; ++e) {
      LoadRow(a.v, a.v.Offset(it.job.batch, kvh, t.j0 + j, e), 1, n,
              it.vw + e * len);
      ZeroFloats(it.vw + e * len + n, len - n);
    }
    return it.vw;
  }

  // Narrower ISAs: each row's P dotted with every V^T row (16 sums per
  // HAddP).
  ATTNKIT_SIMD_STEP static void PvTransposedPerRow(const Item& it,
                                                   const Tile& t, int64_t kvh,
                                                   int64_t s0) {
    const AttentionArgs& a = it.a;
    const int64_t d = it.d, De = it.De, ntp = t.ntp;
    const float* vbase = nullptr;
    int64_t vs = it.tile;
    if (it.kv == DType::kF32 && t.nt == ntp) {
      vbase = a.v.As<float>() + a.v.Offset(it.job.batch, kvh, t.j0, 0);
      vs = a.v.strides[3];
    } else {
      vbase = WidenVt(it, t, kvh, 0, t.nt, it.tile);
    }
    for (int64_t r = s0; r < s0 + it.Rh; ++r) {
      const float* pr = it.sm + r * it.tile;
      float* orow = it.o + r * De;
      for (int64_t e0 = 0; e0 < De; e0 += W) {
        const float* vp[W];
        for (int k = 0; k < W; ++k)
          vp[k] = e0 + k < d ? vbase + (e0 + k) * vs : it.zero;
        V acc[W];
        for (int k = 0; k < W; ++k) acc[k] = X::Zero();
        for (int64_t j = 0; j < ntp; j += W) {
          const V pv = X::Load(pr + j);
          for (int k = 0; k < W; ++k)
            acc[k] = X::Fma(pv, X::Load(vp[k] + j), acc[k]);
        }
        X::Store(orow + e0, X::Load(orow + e0) + X::HAddP(acc));
      }
    }
  }

  // O += P V for V rows of d % W != 0: copied into zero-padded f32 rows,
  // prefetching the rows ahead as the copy goes.
  ATTNKIT_SIMD_STEP static void PvWidened(const Item& it, const Tile& t,
                                          int64_t kvh, int64_t s0) {
    const AttentionArgs& a = it.a;
    const int64_t b = it.job.batch, d = it.d, De = it.De;
    const AheadRows v_ahead = AheadRows::Skipping(
        it.vdata + a.v.Offset(b, kvh, t.j0, 0) * it.esize,
        a.v.strides[2] * it.esize, it.ahead_keys, it.end - t.j0, d * it.esize);
    for (int64_t j = 0; j < t.nt; ++j) {
      v_ahead.Fetch(j);
      LoadRow(a.v, a.v.Offset(b, kvh, t.j0 + j, 0), 1, d, it.vw + j * De);
      ZeroFloats(it.vw + j * De + d, De - d);
    }
    Micro::PvRowsAll(it.Rh, De, it.sm + s0 * it.tile, it.tile, t.nt,
                     static_cast<const float*>(it.vw), De, it.o + s0 * De, 0,
                     false, AheadRows{});
  }

  // O += P V of V rows read in place (bf16 and int8 widened in registers)
  // for kv head kvh (rows from s0), the tile's keys [j, j + nj).
  ATTNKIT_SIMD_STEP static void PvInPlace(const Item& it, const Tile& t,
                                          int64_t kvh, int64_t s0, int64_t j,
                                          int64_t nj) {
    const AttentionArgs& a = it.a;
    const int64_t off = a.v.Offset(it.job.batch, kvh, t.j0 + j, 0);
    const float* pm = it.sm + s0 * it.tile + j;
    float* o = it.o + s0 * it.De;
    const int64_t pf_rows = it.read_ahead ? 0 : it.end - t.j0 - j;
    if (it.bf16) {
      Micro::PvRowsAll(it.Rh, it.De, pm, it.tile, nj,
                       static_cast<const uint16_t*>(a.v.data) + off,
                       a.v.strides[2], o, pf_rows, false, AheadRows{});
    } else if (it.i8) {
      Micro::PvRowsAll(it.Rh, it.De, pm, it.tile, nj,
                       static_cast<const int8_t*>(a.v.data) + off,
                       a.v.strides[2], o, pf_rows, false, AheadRows{});
    } else {
      // An item of one kv head (PvTile hands it the whole tile): its last
      // row pair fetches the next tile's K rows (PvRowsAll). Whole rows are
      // prefetched only where the K rows are (BlockJob::prefetch_keys: K/V
      // above the private caches).
      Micro::PvRowsAll(
          it.Rh, it.De, pm, it.tile, nj, a.v.As<float>() + off, a.v.strides[2],
          o, pf_rows, it.job.prefetch_keys,
          it.job.kv_heads == 1 ? NextTileKeys(it, t, kvh) : AheadRows{});
    }
  }

  // O += P V over the tile, per kv head of the job; several kv heads (BSHD)
  // go W keys at a time with the heads inner, as in QkTile.
  // (An i8 V: P times the V rows' scales first -- l already holds the
  // unscaled sum -- and the integer rows are accumulated.)
  ATTNKIT_SIMD_STEP static void PvTile(const Item& it, const Tile& t) {
    const AttentionArgs& a = it.a;
    const int64_t heads = it.job.kv_heads;
    if (it.i8) {
      for (int64_t hk = 0; hk < heads; ++hk)
        for (int64_t jb = 0; jb < t.ntp; jb += W)
          ScaleKeys(it, t, a.v_scale, it.job.kv_head + hk, hk * it.Rh, jb);
    }
    if (heads > 1 && !it.tv && it.in_place) {
      // Blocks of keys spanning about 64 KiB of position rows (at least W
      // keys): each is one P.V call per head, which loads and stores its
      // accumulators, so short position rows (bf16 Hkv 8: 2 KiB) take more
      // keys per call; wide ones (Hkv 32) keep W, their rows read whole in
      // address order (simd/README.md, "BSHD decode items"). Items that
      // read their blocks ahead take blocks of up to 512 KiB (a whole
      // 128-key tile at f32 Hkv 8): the block is in L2 once read, and the
      // fewer calls per head pay (simd/README.md, "BSHD read-ahead spans").
      // But position rows of 8 KiB and more (Hkv 32 at d 128) read ahead W
      // keys at a time, as their K blocks are: 128 KiB or more per block,
      // and the longer spans measured slower there.
      const int64_t row_bytes = a.v.strides[2] * it.esize;
      const int64_t span_bytes = int64_t{it.read_ahead ? 512 : 64} << 10;
      const int64_t span =
          it.read_ahead && row_bytes >= (8 << 10)
              ? W
              : std::clamp<int64_t>(
                    span_bytes / std::max<int64_t>(row_bytes, 1) / W * W, W,
                    it.tile);
      for (int64_t j = 0; j < t.nt; j += span) {
        const int64_t nj = t.nt - j < span ? t.nt - j : span;
        if (it.read_ahead) ReadAhead(it, a.v, it.vdata, t.j0 + j, nj);
        for (int64_t hk = 0; hk < heads; ++hk)
          PvInPlace(it, t, it.job.kv_head + hk, hk * it.Rh, j, nj);
      }
      return;
    }
    for (int64_t hk = 0; hk < heads; ++hk) {
      const int64_t kvh = it.job.kv_head + hk, s0 = hk * it.Rh;
      if (it.tv) {
        PvTransposedV(it, t, kvh, s0);
      } else if (it.in_place) {
        PvInPlace(it, t, kvh, s0, 0, t.nt);
      } else {
        PvWidened(it, t, kvh, s0);
      }
    }
  }

  ATTNKIT_SIMD_STEP static Tile MakeTile(const Item& it, int64_t j0) {
    const int64_t nt = it.end - j0 < it.tile ? it.end - j0 : it.tile;
    return {j0, nt, (nt + W - 1) / W * W};
  }

  // One work item (any number of rows up to kMaxRows) over its keys
  // (flatten: see ATTNKIT_SIMD_STEP in isa.h).
  [[gnu::flatten]] static void Run(const BlockJob& job, const Rows& rows,
                                   float* ws, const WorkspaceLayout& L) {
    const Item it(job, rows, ws, L);
    const AmxTiles tiles(it.amx, it.Rh);
    LoadQueries(it);
    const bool has_bias = it.p.mask == MaskKind::kBias;
    for (int64_t j0 = rows.keys_begin; j0 < it.end; j0 += it.tile) {
      const Tile t = MakeTile(it, j0);
      const TileCoverage cover = CoverTile(rows, j0, t.nt, has_bias);
      if (cover.empty) continue;
      QkTile(it, t);
      SoftmaxTile(it, t, !cover.full);
      PvTile(it, t);
    }
    const float* o = it.o;
    const int64_t De = it.De;
    WriteRows(job, rows, it.m, it.l,
              [&](int64_t r, int64_t e) { return o[r * De + e]; });
  }
};

}  // namespace
}  // namespace attnkit::simd::internal::ATTNKIT_SIMD_NS

#endif  // ATTNKIT_SIMD_DECODE_KERNEL_H_
