// The kernels' building blocks as TileSteps (kernel.h), for
// simd/microkernel_test.cc: each step of a path run alone on one tile, its
// workspace filled and read back in plain [row][key] / [row][d] order.
//
// Include ONLY from tile_steps_<isa>.cc after defining ATTNKIT_SIMD_NS (see
// simd/isa.h). Those are translation units of their own so that these extra
// callers of the steps leave the inlining in flash_<isa>.cc as it was.
#ifndef ATTNKIT_SIMD_NS
#error "define ATTNKIT_SIMD_NS before including simd/tile_steps.h"
#endif

#include <cstdint>

#include "simd/block.h"
#include "simd/decode_kernel.h"
#include "simd/kernel.h"
#include "simd/prefill_kernel.h"

namespace attnkit::simd::internal::ATTNKIT_SIMD_NS {
namespace {

template <class X>
struct Steps {
  static constexpr int W = X::W;
  using Prefill = PrefillKernel<X>;
  using Decode = DecodeKernel<X>;

  // S as QkTile leaves it: q . k times job.scale_log2e for an f32 Q^T
  // (LoadQueries scales it), the bare dots on the vdpbf16ps path.
  static void PrefillQk(const BlockJob& job, int64_t j0, int64_t nt, float* ws,
                        float* scores) {
    const WorkspaceLayout L = ComputeLayout(job.problem->head_dim);
    const Rows rows = MakeRows(job);
    Prefill::WithRowVectors(rows.count, [&](auto rv) {
      constexpr int RV = decltype(rv)::value;
      constexpr int64_t rp = RV * W;
      Prefill::template LoadQueries<RV>(job, rows, ws, L);
      const AmxTiles tiles(Prefill::UsesAmx(*job.problem), W);
      Prefill::template QkTile<RV>(job, ws, L, j0, nt,
                                   Prefill::template WholeTile<RV>(nt));
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
    Prefill::WithRowVectors(rows.count, [&](auto rv) {
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
      Prefill::template PvTile<RV>(job, ws, L, j0, nt,
                                   Prefill::template WholeTile<RV>(nt));
      for (int64_t r = 0; r < rows.count; ++r)
        for (int64_t e = 0; e < d; ++e) out[r * d + e] = ot[e * rp + r];
    });
  }
  static void DecodeQk(const BlockJob& job, int64_t j0, int64_t nt, float* ws,
                       float* scores) {
    const WorkspaceLayout L = ComputeLayout(job.problem->head_dim);
    const Rows rows = MakeRows(job);
    const typename Decode::Item it(job, rows, ws, L);
    const AmxTiles tiles(it.amx, it.Rh);
    Decode::LoadQueries(it);
    Decode::QkTile(it, {j0, nt, (nt + W - 1) / W * W});
    for (int64_t r = 0; r < rows.count; ++r)
      for (int64_t j = 0; j < nt; ++j)
        scores[r * nt + j] = it.sm[r * it.tile + j];
  }
  static void DecodePv(const BlockJob& job, int64_t j0, int64_t nt,
                       const float* probs, float* ws, float* out) {
    const WorkspaceLayout L = ComputeLayout(job.problem->head_dim);
    const Rows rows = MakeRows(job);
    const typename Decode::Item it(job, rows, ws, L);
    const int64_t d = it.d, De = it.De, ntp = (nt + W - 1) / W * W;
    for (int64_t r = 0; r < rows.count; ++r) {
      for (int64_t j = 0; j < ntp; ++j)
        it.sm[r * it.tile + j] = j < nt ? probs[r * nt + j] : 0.0f;
      for (int64_t e = 0; e < De; ++e)
        it.o[r * De + e] = e < d ? out[r * d + e] : 0.0f;
    }
    Decode::PvTile(it, {j0, nt, ntp});
    for (int64_t r = 0; r < rows.count; ++r)
      for (int64_t e = 0; e < d; ++e) out[r * d + e] = it.o[r * De + e];
  }
  static void Exp2(const float* x, int64_t n, float* out) {
    for (int64_t i = 0; i < n; i += W) {
      alignas(64) float in[W], res[W];
      for (int64_t k = 0; k < W; ++k) in[k] = i + k < n ? x[i + k] : 0.0f;
      X::Store(res, X::Exp2(X::Load(in)));
      for (int64_t k = 0; k < W && i + k < n; ++k) out[i + k] = res[k];
    }
  }
};

template <class X>
const KernelSteps& MakeSteps(Isa isa) {
  static const KernelSteps steps{isa,
                                 {&Steps<X>::PrefillQk, &Steps<X>::PrefillPv},
                                 {&Steps<X>::DecodeQk, &Steps<X>::DecodePv},
                                 &Steps<X>::Exp2};
  return steps;
}

}  // namespace
}  // namespace attnkit::simd::internal::ATTNKIT_SIMD_NS
