// The prefill path (R >= vector width rows; lanes = rows): S^T[key][row],
// O^T[d][row]. QK^T broadcasts K[j][e] against a vector of Q^T[e][rows]; P.V
// broadcasts V[j][e] against P^T[j][rows]. Broadcasting from memory reads K
// and V through any strides, so every KV layout (BHSD, BSHD, transposed V)
// runs the same register-blocked micro-kernels with no transposition, and
// the row max/sum of the online softmax are lane-wise (no shuffles).
//
// Include ONLY from flash_impl.h or tile_steps.h (see simd/isa.h: everything
// here lives in the per-ISA namespace ATTNKIT_SIMD_NS).
#ifndef ATTNKIT_SIMD_NS
#error "define ATTNKIT_SIMD_NS before including simd/prefill_kernel.h"
#endif

#ifndef ATTNKIT_SIMD_PREFILL_KERNEL_H_
#define ATTNKIT_SIMD_PREFILL_KERNEL_H_

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "runtime/problem.h"
#include "simd/amx.h"
#include "simd/block.h"
#include "simd/isa.h"
#include "simd/kernel.h"

namespace attnkit::simd::internal::ATTNKIT_SIMD_NS {
namespace {

template <class X>
struct PrefillKernel {
  using V = typename X::V;
  static constexpr int W = X::W;

  // Keys / d per micro-kernel call for RV row vectors: at most 8, and RV x
  // NB accumulators + RV Q (or P) vectors + 1 broadcast within the register
  // file (16 ymm: 8, 6, 4, 2 -- AVX2 with the AVX-512 blocks spilled them).
  // On AVX-512 at most 16 accumulators (8, 8, 5, 4): the 64-row block ran
  // 6 x 4 = 24 at first, and 4 x 4 (the compiled kernel's block) took
  // 0.91-1.03x its time on the S 2048 prefill grid (median 0.97; 10
  // interleaved rounds, 2-core AMD EPYC Zen 4 family 25, GCC 12.2,
  // 2026-11-26; Zen 5 had measured the two the same).
  static constexpr int kRegs = W >= 16 ? 32 : 16;
  static constexpr int kMaxAcc = W >= 16 ? 16 : kRegs;
  template <int RV>
  static constexpr int kBlock = std::min({8, (kRegs - 1 - RV) / RV,
                                          kMaxAcc / RV});

  // Runs of a tile's keys, each with the row vectors [lo, hi) that some row
  // sees a key of (lo >= hi: none). In a masked tile (causal, window) the
  // other vectors' scores of the run are all masked (-inf, P = 0), so QK^T
  // and P.V skip them: on a causal diagonal tile of 64 consecutive queries
  // the 16-row vectors see 16, 32, 48 and 64 of its keys, 10 of 16 blocks.
  struct KeyRuns {
    static constexpr int kMax = 8;  // more: one run of every vector
    struct Run {
      int64_t begin, end;
      int lo, hi;
    };
    int n = 0;
    Run run[kMax];
  };
  template <int RV>
  ATTNKIT_SIMD_STEP static KeyRuns WholeTile(int64_t nt) {
    KeyRuns k;
    k.n = 1;
    k.run[0] = {0, nt, 0, RV};
    return k;
  }
  template <int RV>
  ATTNKIT_SIMD_STEP static KeyRuns RunsOf(const Rows& rows, int64_t j0,
                                          int64_t nt, bool masked) {
    if (!masked) return WholeTile<RV>(nt);
    // Per vector, the span of its rows' visible keys (tile-relative; a
    // superset where a vector's rows see disjoint ranges).
    int64_t vb[RV], ve[RV];
    for (int v = 0; v < RV; ++v) {
      vb[v] = nt;
      ve[v] = 0;
    }
    for (int64_t r = 0; r < rows.count; ++r) {
      if (rows.key_begin[r] >= rows.key_end[r]) continue;
      const int v = static_cast<int>(r / W);
      vb[v] = std::min(vb[v], rows.key_begin[r] - j0);
      ve[v] = std::max(ve[v], rows.key_end[r] - j0);
    }
    auto seeing = [&](int64_t j, int& lo, int& hi) {
      lo = RV;
      hi = 0;
      for (int v = 0; v < RV; ++v)
        if (vb[v] <= j && j < ve[v]) {
          lo = std::min(lo, v);
          hi = v + 1;
        }
    };
    KeyRuns k;
    for (int64_t j = 0; j < nt;) {
      int lo, hi;
      seeing(j, lo, hi);
      int64_t e = j + 1;
      for (; e < nt; ++e) {
        int l2, h2;
        seeing(e, l2, h2);
        if (l2 != lo || h2 != hi) break;
      }
      if (k.n == KeyRuns::kMax) return WholeTile<RV>(nt);
      k.run[k.n++] = {j, e, lo, hi};
      j = e;
    }
    return k;
  }

  // f(std::integral_constant<int, N>) for N = n in 1..RV row vectors.
  template <int RV, class F>
  static void WithVectors(int64_t n, F&& f) {
    switch (n) {
      case 1:
        return f(std::integral_constant<int, 1>{});
      case 2:
        if constexpr (RV >= 2) return f(std::integral_constant<int, 2>{});
        break;
      case 3:
        if constexpr (RV >= 3) return f(std::integral_constant<int, 3>{});
        break;
      case 4:
        if constexpr (RV >= 4) return f(std::integral_constant<int, 4>{});
        break;
      default:
        break;
    }
    assert(false && "more vectors than the block has");
  }
  // The same for the RV = ceil(rows / W) row vectors of a work item (1..4).
  template <class F>
  static void WithRowVectors(int64_t rows, F&& f) {
    WithVectors<4>((rows + W - 1) / W, f);
  }

  // Calls f.template operator()<N>(i) over [0, n): blocks of NB, then the
  // rest in blocks of 4, 2 and 1. A 1-wide block feeds RV FMAs with RV + 1
  // loads -- load-bound at about half the FMA rate -- so the tail of a tile
  // past the last whole block (a 48-row block: 64 = 12 x 5 + 4) must not go
  // one at a time.
  template <int NB, typename F>
  static void Blocked(int64_t n, F&& f) {
    int64_t i = 0;
    for (; i + NB <= n; i += NB) f.template operator()<NB>(i);
    if constexpr (NB > 4)
      if (i + 4 <= n) {
        f.template operator()<4>(i);
        i += 4;
      }
    if constexpr (NB > 2)
      if (i + 2 <= n) {
        f.template operator()<2>(i);
        i += 2;
      }
    for (; i < n; ++i) f.template operator()<1>(i);
  }

  // f.template operator()<RS>(run) for each run of `runs` that some vector
  // sees, RS = run.hi - run.lo its row vectors (from run.lo).
  template <int RV, typename F>
  static void ForRuns(const KeyRuns& runs, F&& f) {
    for (int i = 0; i < runs.n; ++i) {
      const typename KeyRuns::Run& run = runs.run[i];
      if (run.lo >= run.hi) continue;
      WithVectors<RV>(run.hi - run.lo, [&](auto vectors) {
        f.template operator()<decltype(vectors)::value>(run);
      });
    }
  }

  // ---- micro-kernels
  // S^T[j][rows] for NK keys: Q^T is [d][rp] (rp = RV*W rows), K row pointers
  // kp + kk*ks. 4x4 on AVX-512: 16 accumulators + 4 Q vectors + 1 broadcast
  // of 32 zmm; per e: 8 loads feed 16 FMAs, and 16 independent chains cover
  // the 4-cycle FMA latency.
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

#if defined(__AMX_BF16__)
  // S^T = K Q^T through AMX tiles (simd/amx.h), 16 keys x 16 rows a product:
  // B = LoadQueries' bf16 pairs of Q^T for one row vector (rows rp * 4 bytes
  // apart), and C[key][row] is S^T's own layout (rows rp * 4 bytes apart),
  // stored in place. Row vectors [lo, hi) of nk keys from k (d % 32 == 0);
  // a last block of fewer than 16 keys goes through `pad` (16 K rows of d
  // bf16, then 16 x 16 floats of C), so no tile reads past the keys or
  // writes past S^T's rows. Up to d 192 a row vector's Q^T stays in tiles
  // across the key blocks; wider rows reload it per block.
  [[gnu::noinline]] static void QkAmx(const uint16_t* qp, int64_t d, int64_t rp,
                                      const uint16_t* k, int64_t ks, int64_t nk,
                                      float* st, int lo, int hi,
                                      uint16_t* pad) {
    const int64_t nb = d / 32;
    const bool resident = nb <= kAmxQBlocks;
    const int64_t whole = nk / 16 * 16;
    float* cpad = reinterpret_cast<float*>(pad + 16 * d);
    if (whole < nk) AmxPadKeys(k + whole * ks, ks, nk - whole, d, pad);
    const int64_t qblock = 16 * rp * 2, qstride = rp * 4;
    for (int rv = lo; rv < hi; ++rv) {
      const uint16_t* qv = qp + rv * 16 * 2;
      if (resident) AmxLoadQ(qv, qblock, qstride, nb);
      for (int64_t j = 0; j < nk; j += 16) {
        const bool tail = j == whole;
        AmxKeyBlock(tail ? pad : k + j * ks, tail ? d * 2 : ks * 2, nb,
                    resident, qv, qblock, qstride);
        if (!tail) {
          _tile_stored(0, st + j * rp + rv * 16, rp * 4);
        } else {
          _tile_stored(0, cpad, 64);
          for (int64_t kk = 0; kk < nk - whole; ++kk)
            std::memcpy(st + (j + kk) * rp + rv * 16, cpad + kk * 16, 64);
        }
      }
    }
  }
#endif

  // O^T[e0..e0+ND][rows] += sum_j V(j, e) P^T[j][rows]; V(j, e) at
  // v[j*sj + e*sd] (any layout). 4x4 on AVX-512, as QkLanes.
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

  // ---- the steps of a work item
  // Whether QK^T goes through vdpbf16ps (bf16 pairs of Q^T and K).
  ATTNKIT_SIMD_STEP static bool UsesBf16Dot(const AttentionProblem& p) {
    return X::kBf16Dot && p.KvDType() == DType::kBF16 && p.head_dim % 2 == 0;
  }
  // Whether QK^T goes through AMX tiles (QkAmx): the avx512amx kernels, bf16
  // K, d a whole number of 32-value tile rows.
  ATTNKIT_SIMD_STEP static bool UsesAmx(const AttentionProblem& p) {
    return kAmx && p.KvDType() == DType::kBF16 && p.head_dim % 32 == 0;
  }
  // Whether Q^T is packed as bf16 pairs [d/2][rp][2] (LoadQueries) and so
  // holds q as given, unscaled.
  ATTNKIT_SIMD_STEP static bool UsesBf16Pairs(const AttentionProblem& p) {
    return UsesBf16Dot(p) || UsesAmx(p);
  }

  // Packs Q^T (f32 [d][rp], or bf16 pairs [d/2][rp][2] for vdpbf16ps) into
  // the workspace, W rows by W columns at a time through in-register
  // transposes (q is unit-stride along d); padded rows are zero.
  template <int RV>
  ATTNKIT_SIMD_STEP static void LoadQueries(const BlockJob& job,
                                            const Rows& rows, float* ws,
                                            const WorkspaceLayout& L) {
    const AttentionProblem& p = *job.problem;
    const AttentionArgs& a = *job.args;
    const int64_t d = p.head_dim, rp = RV * W;
    float* qt = ws + L.queries;
    for (int rv = 0; rv < RV; ++rv) {
      const int64_t r0 = rv * W;
      const int64_t nr =
          std::min<int64_t>(W, std::max<int64_t>(rows.count - r0, 0));
      int64_t off[W];
      for (int64_t i = 0; i < nr; ++i)
        off[i] =
            a.q.Offset(job.batch, rows.head[r0 + i], rows.query[r0 + i], 0);
#if defined(__AVX512F__)
      if (UsesBf16Pairs(p)) {
        // A pair of bf16 is one 32-bit element of the transpose: the bits
        // move as they are (q as given: scaling would round it again).
        static_assert(W == 16);
        const uint16_t* q = static_cast<const uint16_t*>(a.q.data);
        const int64_t d2 = d / 2, dv = d2 / W * W;
        for (int64_t p0 = 0; p0 < dv; p0 += W) {
          V t[W];
          for (int i = 0; i < W; ++i)
            t[i] = i < nr ? V(_mm512_castsi512_ps(
                                _mm512_loadu_si512(q + off[i] + 2 * p0)))
                          : X::Zero();
          X::Transpose(t);
          for (int k = 0; k < W; ++k) X::Store(qt + (p0 + k) * rp + r0, t[k]);
        }
        uint16_t* qp = reinterpret_cast<uint16_t*>(qt);
        for (int64_t pp = dv; pp < d2; ++pp)
          for (int64_t i = 0; i < W; ++i)
            for (int64_t h = 0; h < 2; ++h)
              qp[(pp * rp + r0 + i) * 2 + h] =
                  i < nr ? q[off[i] + 2 * pp + h] : 0;
        continue;
      }
#endif
      // Scaled to log2 units here, once per work item, rather than every
      // tile's logits (see SoftmaxTile).
      const V c = X::Set(job.scale_log2e);
      const int64_t dv = d / W * W;
      auto pack = [&]<class T>(const T* q) {
        for (int64_t e0 = 0; e0 < dv; e0 += W) {
          V t[W];
          for (int i = 0; i < W; ++i)
            t[i] = i < nr ? X::Load(q + off[i] + e0) * c : X::Zero();
          X::Transpose(t);
          for (int k = 0; k < W; ++k) X::Store(qt + (e0 + k) * rp + r0, t[k]);
        }
        for (int64_t e = dv; e < d; ++e)
          for (int64_t i = 0; i < W; ++i)
            qt[e * rp + r0 + i] =
                i < nr ? LoadOne(q + off[i] + e) * job.scale_log2e : 0.0f;
      };
      if (p.dtype == DType::kF32) {
        pack(a.q.As<float>());
      } else {
        pack(static_cast<const uint16_t*>(a.q.data));
      }
    }
  }

  // The end of the work item: O^T [d][rp] into the rows' sinks (WriteRows),
  // W columns of W rows at a time through in-register transposes. A call
  // that outgrows the last-level cache (job.stream_out) writes the output
  // rows aligned to the vector with non-temporal stores: an ordinary store
  // would first read each line from DRAM (simd/README.md, "Output rows
  // streamed past the caches").
  template <int RV>
  ATTNKIT_SIMD_STEP static void WriteOut(const BlockJob& job, const Rows& rows,
                                         const float* ws,
                                         const WorkspaceLayout& L) {
    const int64_t d = job.problem->head_dim, rp = RV * W, dv = d / W * W;
    const float* ot = ws + L.out;
    const bool stream = job.stream_out && job.partial == nullptr;
    bool streamed = false;
    for (int rv = 0; rv < RV && rv * W < rows.count; ++rv) {
      const int64_t r0 = rv * W;
      const int64_t nr = std::min<int64_t>(W, rows.count - r0);
      RowSink sink[W];
      bool aligned[W];
      for (int64_t i = 0; i < nr; ++i) {
        sink[i] = RowSinkOf(job, rows, r0 + i, ws[L.row_max + r0 + i],
                            ws[L.row_sum + r0 + i]);
        aligned[i] =
            stream &&
            reinterpret_cast<uintptr_t>(sink[i].dst) % (W * sizeof(float)) == 0;
        streamed |= aligned[i] && dv > 0;
      }
      for (int64_t e0 = 0; e0 < dv; e0 += W) {
        V t[W];
        for (int k = 0; k < W; ++k) t[k] = X::Load(ot + (e0 + k) * rp + r0);
        X::Transpose(t);
        for (int64_t i = 0; i < nr; ++i) {
          const V o = sink[i].zero ? X::Zero() : t[i] * X::Set(sink[i].scale);
          if (aligned[i]) {
            X::Stream(sink[i].dst + e0, o);
          } else {
            X::Store(sink[i].dst + e0, o);
          }
        }
      }
      for (int64_t i = 0; i < nr; ++i)
        for (int64_t e = dv; e < d; ++e)
          sink[i].dst[e] =
              sink[i].zero ? 0.0f : ot[e * rp + r0 + i] * sink[i].scale;
    }
    if (streamed) X::StreamFence();
  }

  // S^T = Q K^T for the keys [j0, j0 + nt), each run's row vectors only
  // (the others' scores stay as they were: the mask overwrites them).
  template <int RV>
  ATTNKIT_SIMD_STEP static void QkTile(const BlockJob& job, float* ws,
                                       const WorkspaceLayout& L, int64_t j0,
                                       int64_t nt, const KeyRuns& runs) {
    constexpr int NB = kBlock<RV>;
    const AttentionProblem& p = *job.problem;
    const AttentionArgs& a = *job.args;
    const int64_t d = p.head_dim, rp = RV * W;
    float* st = ws + L.scores;
    const int64_t ks = a.k.strides[2];
    bool dot = false;
#if defined(__AMX_BF16__)
    if (UsesAmx(p)) {
      const uint16_t* qp = reinterpret_cast<const uint16_t*>(ws + L.queries);
      const uint16_t* kb = static_cast<const uint16_t*>(a.k.data) +
                           a.k.Offset(job.batch, job.kv_head, j0, 0);
      uint16_t* pad = reinterpret_cast<uint16_t*>(ws + L.k_tile);
      for (int i = 0; i < runs.n; ++i) {
        const typename KeyRuns::Run& run = runs.run[i];
        if (run.lo >= run.hi) continue;
        QkAmx(qp, d, rp, kb + run.begin * ks, ks, run.end - run.begin,
              st + run.begin * rp, run.lo, run.hi, pad);
      }
      return;
    }
#endif
#if defined(__AVX512BF16__)
    dot = UsesBf16Dot(p);
    if (dot) {
      const uint16_t* qp = reinterpret_cast<const uint16_t*>(ws + L.queries);
      const uint16_t* kb = static_cast<const uint16_t*>(a.k.data) +
                           a.k.Offset(job.batch, job.kv_head, j0, 0);
      ForRuns<RV>(runs, [&]<int RS>(const typename KeyRuns::Run& run) {
        Blocked<NB>(run.end - run.begin, [&]<int N>(int64_t i) {
          const int64_t j = run.begin + i;
          QkLanesBf16<RS, N>(qp + run.lo * W * 2, d / 2, rp, kb + j * ks, ks,
                             st + j * rp + run.lo * W);
        });
      });
    }
#endif
    if (!dot) {
      const float* kb;
      int64_t kstride;
      // bf16 or i8 (its integers; the scales go into the logits): widen
      // the tile once, row blocks reuse it.
      if (p.KvDType() != DType::kF32) {
        float* kw = ws + L.k_tile;
        for (int64_t j = 0; j < nt; ++j)
          LoadRow(a.k, a.k.Offset(job.batch, job.kv_head, j0 + j, 0), 1, d,
                  kw + j * d);
        kb = kw;
        kstride = d;
      } else {
        kb = a.k.As<float>() + a.k.Offset(job.batch, job.kv_head, j0, 0);
        kstride = ks;
      }
      const float* qt = ws + L.queries;
      ForRuns<RV>(runs, [&]<int RS>(const typename KeyRuns::Run& run) {
        Blocked<NB>(run.end - run.begin, [&]<int N>(int64_t i) {
          const int64_t j = run.begin + i;
          QkLanes<RS, N>(qt + run.lo * W, d, rp, kb + j * kstride, kstride,
                         st + j * rp + run.lo * W);
        });
      });
    }
  }

  // The online softmax over the tile, lane-wise over rows: scale to log2
  // units (unless Q^T already is), mask (`masked`: some row does not see some
  // key, or a bias), raise the running max (lazily), P = exp2(S - m) in place,
  // l = l*alpha + rowsum(P), O *= alpha when some row's max moved. An i8 K/V:
  // key j's scale joins the logit's constant (S holds the integer dots) and,
  // once l has the sum of P, V row j's scale multiplies P[j] (P.V then
  // accumulates the integer rows).
  template <int RV>
  ATTNKIT_SIMD_STEP static void SoftmaxTile(const BlockJob& job,
                                            const Rows& rows, float* ws,
                                            const WorkspaceLayout& L,
                                            int64_t j0, int64_t nt,
                                            bool masked) {
    const int64_t d = job.problem->head_dim, rp = RV * W;
    float* st = ws + L.scores;
    float* ot = ws + L.out;
    float* m = ws + L.row_max;
    float* l = ws + L.row_sum;
    const AttentionArgs& a = *job.args;
    const bool i8 = job.problem->quantized_kv();
    const float* ks = nullptr;
    const float* vs = nullptr;
    if (i8) {
      ks = a.k_scale.As<float>() +
           a.k_scale.Offset(job.batch, job.kv_head, j0, 0);
      vs = a.v_scale.As<float>() +
           a.v_scale.Offset(job.batch, job.kv_head, j0, 0);
    }
    // An f32 Q^T holds q * scale * log2(e) (LoadQueries): only an i8 K's
    // scales remain to be applied. The bf16 pairs of the vdpbf16ps and AMX
    // paths are q as given (scaling would round them again).
    const bool q_scaled = !UsesBf16Pairs(*job.problem);
    if (!q_scaled || i8) {
      for (int64_t j = 0; j < nt; ++j) {
        const V c =
            X::Set((q_scaled ? 1.0f : job.scale_log2e) * (i8 ? ks[j] : 1.0f));
        for (int rv = 0; rv < RV; ++rv)
          X::Store(st + j * rp + rv * W, X::Load(st + j * rp + rv * W) * c);
      }
    }
    // A mask without a bias goes lane-wise into the max pass: each lane's
    // visible keys [lo, hi) of the tile (MaskRow's scalar stores, a column of
    // S^T per row, took ~1% of a causal prefill).
    const bool lane_mask = masked && job.problem->mask != MaskKind::kBias;
    if (masked && !lane_mask) {
      for (int64_t r = 0; r < rows.count; ++r)
        MaskRow<RV * W>(rows, r, j0, nt, job.args->bias.strides[3], st + r);
    }
    // The tile's max per row vector: 2 x RV independent chains, RV in a
    // masked tile (one chain per vector waited out vmaxps' latency key
    // after key: ~3% of a prefill's time on a 2-FMA-port core).
    V tmax[RV], tmax2[RV];
    for (int rv = 0; rv < RV; ++rv) tmax[rv] = tmax2[rv] = X::Set(kNegInf);
    if (lane_mask) {
      V lov[RV], hiv[RV];
      for (int rv = 0; rv < RV; ++rv) {
        alignas(64) float lo[W], hi[W];
        for (int i = 0; i < W; ++i) {
          const int64_t r = rv * W + i;
          lo[i] = 0.0f;  // padded rows: unmasked, as MaskRow leaves them
          hi[i] = static_cast<float>(nt);
          if (r < rows.count) {
            // Tile-relative and clamped to [0, nt]: exact in f32 (an empty
            // range stays empty: lo >= hi).
            lo[i] = static_cast<float>(
                std::clamp<int64_t>(rows.key_begin[r] - j0, 0, nt));
            hi[i] = static_cast<float>(
                std::clamp<int64_t>(rows.key_end[r] - j0, 0, nt));
          }
        }
        lov[rv] = X::Load(lo);
        hiv[rv] = X::Load(hi);
      }
      for (int64_t j = 0; j < nt; ++j) {
        const V jv = X::Set(static_cast<float>(j));
        for (int rv = 0; rv < RV; ++rv) {
          const V s =
              X::KeepIn(X::Load(st + j * rp + rv * W), jv, lov[rv], hiv[rv]);
          X::Store(st + j * rp + rv * W, s);
          tmax[rv] = X::Max(tmax[rv], s);
        }
      }
    } else {
      int64_t j = 0;
      for (; j + 2 <= nt; j += 2)
        for (int rv = 0; rv < RV; ++rv) {
          tmax[rv] = X::Max(tmax[rv], X::Load(st + j * rp + rv * W));
          tmax2[rv] = X::Max(tmax2[rv], X::Load(st + (j + 1) * rp + rv * W));
        }
      if (j < nt)
        for (int rv = 0; rv < RV; ++rv)
          tmax[rv] = X::Max(tmax[rv], X::Load(st + j * rp + rv * W));
    }
    bool rescale = false;
    // P = exp2(S - m) with the row vectors inner: RV independent exp2
    // chains per key rather than one vector's chain key after key (S 2048
    // bench rows 0.97-0.99x the time; a direct driver saw no difference:
    // simd/README.md, "Softmax exp2 with the row vectors inner").
    V m_new[RV], m_use[RV], sum[RV];
    for (int rv = 0; rv < RV; ++rv) {
      m_new[rv] = X::NewMax(X::Load(m + rv * W), X::Max(tmax[rv], tmax2[rv]));
      m_use[rv] = X::UsableMax(m_new[rv]);
      sum[rv] = X::Zero();
    }
    for (int64_t j = 0; j < nt; ++j)
      for (int rv = 0; rv < RV; ++rv) {
        const V pj = X::Exp2(X::Load(st + j * rp + rv * W) - m_use[rv]);
        X::Store(st + j * rp + rv * W, pj);
        sum[rv] = sum[rv] + pj;
      }
    for (int rv = 0; rv < RV; ++rv) {
      const V m_old = X::Load(m + rv * W);
      if (!X::AllEqual(m_new[rv], m_old)) {
        rescale = true;
        const V alpha = X::Exp2(m_old - m_use[rv]);
        X::Store(ws + L.rescale + rv * W, alpha);
        X::Store(l + rv * W, X::Load(l + rv * W) * alpha + sum[rv]);
      } else {
        X::Store(ws + L.rescale + rv * W, X::Set(1.0f));
        X::Store(l + rv * W, X::Load(l + rv * W) + sum[rv]);
      }
      X::Store(m + rv * W, m_new[rv]);
    }
    if (i8) {
      for (int64_t j = 0; j < nt; ++j) {
        const V sv = X::Set(vs[j]);
        for (int rv = 0; rv < RV; ++rv)
          X::Store(st + j * rp + rv * W, X::Load(st + j * rp + rv * W) * sv);
      }
    }
    if (rescale) {
      V alpha[RV];
      for (int rv = 0; rv < RV; ++rv)
        alpha[rv] = X::Load(ws + L.rescale + rv * W);
      for (int64_t e = 0; e < d; ++e)
        for (int rv = 0; rv < RV; ++rv)
          X::Store(ot + e * rp + rv * W,
                   X::Load(ot + e * rp + rv * W) * alpha[rv]);
    }
  }

  // O^T += V^T P^T for the keys [j0, j0 + nt), each run's row vectors only
  // (the others' P of the run is 0).
  template <int RV>
  ATTNKIT_SIMD_STEP static void PvTile(const BlockJob& job, float* ws,
                                       const WorkspaceLayout& L, int64_t j0,
                                       int64_t nt, const KeyRuns& runs) {
    constexpr int NB = kBlock<RV>;
    const AttentionProblem& p = *job.problem;
    const AttentionArgs& a = *job.args;
    const int64_t d = p.head_dim, rp = RV * W;
    const float* st = ws + L.scores;
    float* ot = ws + L.out;
    const float* vb;
    int64_t sj, sd;
    if (p.KvDType() != DType::kF32) {  // widen in the stored orientation
      float* vw = ws + L.v_tile;
      if (p.layout == KvLayout::kTransposedV) {
        for (int64_t e = 0; e < d; ++e)
          LoadRow(a.v, a.v.Offset(job.batch, job.kv_head, j0, e), 1, nt,
                  vw + e * kMaxPrefillTileKeys);
        sj = 1;
        sd = kMaxPrefillTileKeys;
      } else {
        for (int64_t j = 0; j < nt; ++j)
          LoadRow(a.v, a.v.Offset(job.batch, job.kv_head, j0 + j, 0), 1, d,
                  vw + j * d);
        sj = d;
        sd = 1;
      }
      vb = vw;
    } else {
      vb = a.v.As<float>() + a.v.Offset(job.batch, job.kv_head, j0, 0);
      sj = a.v.strides[2];
      sd = a.v.strides[3];
    }
    ForRuns<RV>(runs, [&]<int RS>(const typename KeyRuns::Run& run) {
      const int64_t j = run.begin;
      Blocked<NB>(d, [&]<int N>(int64_t e) {
        PvLanes<RS, N>(st + j * rp + run.lo * W, rp, run.end - j,
                       vb + j * sj + e * sd, sj, sd, ot + e * rp + run.lo * W);
      });
    });
  }

  // One KV tile of the keys [j0, j0 + nt): QK^T, softmax, P.V (flatten:
  // see ATTNKIT_SIMD_STEP in isa.h).
  template <int RV>
  [[gnu::flatten]] static void RunTile(const BlockJob& job, const Rows& rows,
                                       float* ws, const WorkspaceLayout& L,
                                       int64_t j0, int64_t nt, bool masked) {
    const KeyRuns runs = RunsOf<RV>(rows, j0, nt, masked);
    QkTile<RV>(job, ws, L, j0, nt, runs);
    SoftmaxTile<RV>(job, rows, ws, L, j0, nt, masked);
    PvTile<RV>(job, ws, L, j0, nt, runs);
  }

  // One work item of rows.count <= RV * W rows (one kv head) over its keys.
  template <int RV>
  static void Run(const BlockJob& job, const Rows& rows, float* ws,
                  const WorkspaceLayout& L) {
    const AttentionProblem& p = *job.problem;
    const int64_t d = p.head_dim, rp = RV * W;
    const AmxTiles tiles(UsesAmx(p), W);
    LoadQueries<RV>(job, rows, ws, L);
    float* ot = ws + L.out;
    ZeroFloats(ot, d * rp);
    for (int64_t r = 0; r < rp; ++r) {
      ws[L.row_max + r] = kNegInf;
      ws[L.row_sum + r] = 0.0f;
    }
    const bool has_bias = p.mask == MaskKind::kBias;
    const int64_t end = rows.keys_end;
    const int64_t tile = job.prefill_tile;
    for (int64_t j0 = rows.keys_begin; j0 < end; j0 += tile) {
      const int64_t nt = end - j0 < tile ? end - j0 : tile;
      const TileCoverage cover = CoverTile(rows, j0, nt, has_bias);
      if (cover.empty) continue;  // fully masked tile (causal / window)
      RunTile<RV>(job, rows, ws, L, j0, nt, !cover.full);
    }
    WriteOut<RV>(job, rows, ws, L);
  }
};

}  // namespace
}  // namespace attnkit::simd::internal::ATTNKIT_SIMD_NS

#endif  // ATTNKIT_SIMD_PREFILL_KERNEL_H_
