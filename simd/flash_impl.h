// The flash-attention kernel's entry, written once over a vector abstraction
// and instantiated per ISA: the ops table (MakeOps) and run_block, which cuts
// a work item into rows and hands it to the prefill or the decode path.
// Include ONLY from flash_<isa>.cc after defining ATTNKIT_SIMD_NS: everything
// here and in the headers it includes lives in that per-ISA namespace, so no
// inline function compiled with one ISA's flags can be picked by the linker
// for another's (an ODR trap of multi-ISA builds). For the same reason these
// headers avoid out-of-line std:: algorithms.
//
//   simd/isa.h             the vector layer (XVec, SVec), exp2, row loads
//   simd/block.h           a work item's rows, tile coverage, mask, write-out
//   simd/prefill_kernel.h  the prefill path (lanes = rows)
//   simd/decode_microkernels.h, simd/decode_kernel.h
//                          the decode path (lanes = d or keys, few rows)
// Measurements behind the tile sizes and loop orders: simd/README.md.
//
// Algorithm (FlashAttention-2 on a CPU). One work item = rows R (queries x the
// query heads of one KV head) and a key range. For each KV tile:
//   S = Q K^T (log2 units: scale*log2(e) folded into one constant c, so the
//   softmax needs exp2, whose range reduction is a plain round + exponent
//   insert), mask, running max m, P = exp2(S - m), l = l*alpha + rowsum(P),
//   O = O*alpha + P V.     out = O / l at the end (zeros when l == 0).
// No S x S buffer exists: S lives for one tile.
//
// Two paths, one per kernel family, chosen by R: prefill (R >= vector width:
// lanes = rows) and decode (R < vector width: lanes = d or keys, so no lane
// is wasted on a 4-row GQA group). Each path's header says how it lays out
// its tiles.
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
#include <cstdint>
#include <type_traits>

#include "simd/block.h"
#include "simd/decode_kernel.h"
#include "simd/isa.h"
#include "simd/kernel.h"
#include "simd/prefill_kernel.h"

namespace attnkit::simd::internal::ATTNKIT_SIMD_NS {
namespace {

template <class X>
struct Flash {
  static constexpr int W = X::W;
  using Prefill = PrefillKernel<X>;
  using Decode = DecodeKernel<X>;

  // f(std::integral_constant<int, RV>) for the RV = ceil(rows / W) row
  // vectors of the prefill path (1..4).
  template <class F>
  static void WithRowVectors(int64_t rows, F&& f) {
    switch ((rows + W - 1) / W) {
      case 1:
        return f(std::integral_constant<int, 1>{});
      case 2:
        return f(std::integral_constant<int, 2>{});
      case 3:
        return f(std::integral_constant<int, 3>{});
      case 4:
        return f(std::integral_constant<int, 4>{});
      default:
        break;
    }
    assert(false && "more rows than KernelOps::max_rows");
  }

  static void RunBlock(const BlockJob& job, float* ws) {
    const WorkspaceLayout L = ComputeLayout(job.problem->head_dim);
    const Rows rows = MakeRows(job);
    assert(rows.count <= kMaxRows);
    // The prefill path takes one kv head's rows (kv_heads > 1 only for few
    // rows).
    if (job.queries * job.group_heads >= W) {
      assert(job.kv_heads == 1);
      WithRowVectors(rows.count, [&](auto rv) {
        Prefill::template Run<decltype(rv)::value>(job, rows, ws, L);
      });
      return;
    }
    Decode::Run(job, rows, ws, L);
  }

  // ---- TileSteps (kernel.h), for simd/microkernel_test.cc
  static void PrefillQk(const BlockJob& job, int64_t j0, int64_t nt, float* ws,
                        float* scores) {
    const WorkspaceLayout L = ComputeLayout(job.problem->head_dim);
    const Rows rows = MakeRows(job);
    WithRowVectors(rows.count, [&](auto rv) {
      constexpr int RV = decltype(rv)::value;
      constexpr int64_t rp = RV * W;
      Prefill::template LoadQueries<RV>(job, rows, ws, L);
      Prefill::template QkTile<RV>(job, ws, L, j0, nt);
      const float* st = ws + L.scores;
      for (int64_t r = 0; r < rows.count; ++r)
        for (int64_t j = 0; j < nt; ++j) scores[r * nt + j] = st[j * rp + r];
    });
  }
  static void PrefillPv(const BlockJob& job, int64_t j0, int64_t nt,
                        const float* probs, float* ws, float* out) {
    const int64_t d = job.problem->head_dim;
    const WorkspaceLayout L = ComputeLayout(d);
    const Rows rows = MakeRows(job);
    WithRowVectors(rows.count, [&](auto rv) {
      constexpr int RV = decltype(rv)::value;
      constexpr int64_t rp = RV * W;
      float* st = ws + L.scores;
      float* ot = ws + L.out;
      for (int64_t r = 0; r < rp; ++r) {
        const bool row = r < rows.count;
        for (int64_t j = 0; j < nt; ++j)
          st[j * rp + r] = row ? probs[r * nt + j] : 0.0f;
        for (int64_t e = 0; e < d; ++e)
          ot[e * rp + r] = row ? out[r * d + e] : 0.0f;
      }
      Prefill::template PvTile<RV>(job, ws, L, j0, nt);
      for (int64_t r = 0; r < rows.count; ++r)
        for (int64_t e = 0; e < d; ++e) out[r * d + e] = ot[e * rp + r];
    });
  }
  static void DecodeQk(const BlockJob& job, int64_t j0, int64_t nt, float* ws,
                       float* scores) {
    const WorkspaceLayout L = ComputeLayout(job.problem->head_dim);
    const Rows rows = MakeRows(job);
    const typename Decode::Item it(job, rows, ws, L);
    Decode::LoadQueries(it);
    Decode::QkTile(it, {j0, nt, (nt + W - 1) / W * W});
    for (int64_t r = 0; r < rows.count; ++r)
      for (int64_t j = 0; j < nt; ++j)
        scores[r * nt + j] = it.sm[r * kDecodeTileKeys + j];
  }
  static void DecodePv(const BlockJob& job, int64_t j0, int64_t nt,
                       const float* probs, float* ws, float* out) {
    const WorkspaceLayout L = ComputeLayout(job.problem->head_dim);
    const Rows rows = MakeRows(job);
    const typename Decode::Item it(job, rows, ws, L);
    const int64_t d = it.d, De = it.De, ntp = (nt + W - 1) / W * W;
    for (int64_t r = 0; r < rows.count; ++r) {
      for (int64_t j = 0; j < ntp; ++j)
        it.sm[r * kDecodeTileKeys + j] = j < nt ? probs[r * nt + j] : 0.0f;
      for (int64_t e = 0; e < De; ++e)
        it.o[r * De + e] = e < d ? out[r * d + e] : 0.0f;
    }
    Decode::PvTile(it, {j0, nt, ntp});
    for (int64_t r = 0; r < rows.count; ++r)
      for (int64_t e = 0; e < d; ++e) out[r * d + e] = it.o[r * De + e];
  }
};

// The ops table of this translation unit's ISA.
template <class X>
const KernelOps& MakeOps(Isa isa) {
  static const KernelOps ops{isa,
                             X::W,
                             4 * X::W < kMaxRows ? 4 * X::W : kMaxRows,
                             &Flash<X>::RunBlock,
                             {&Flash<X>::PrefillQk, &Flash<X>::PrefillPv},
                             {&Flash<X>::DecodeQk, &Flash<X>::DecodePv}};
  return ops;
}

}  // namespace
}  // namespace attnkit::simd::internal::ATTNKIT_SIMD_NS
