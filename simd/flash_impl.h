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
//   simd/amx.h             AMX tiles for bf16 QK^T (the avx512amx kernels)
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

  static void RunBlock(const BlockJob& job, float* ws) {
    const WorkspaceLayout L = ComputeLayout(job.problem->head_dim);
    const Rows rows = MakeRows(job);
    assert(rows.count <= kMaxRows);
    // The prefill path takes one kv head's rows (kv_heads > 1 only for few
    // rows).
    if (job.queries * job.group_heads >= W) {
      assert(job.kv_heads == 1);
      switch ((rows.count + W - 1) / W) {
        case 1:
          return Prefill::template Run<1>(job, rows, ws, L);
        case 2:
          return Prefill::template Run<2>(job, rows, ws, L);
        case 3:
          return Prefill::template Run<3>(job, rows, ws, L);
        case 4:
          return Prefill::template Run<4>(job, rows, ws, L);
        default:
          break;
      }
      assert(false && "more rows than KernelOps::max_rows");
      return;
    }
    Decode::Run(job, rows, ws, L);
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
