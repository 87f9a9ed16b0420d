// The tolerance model: a backend's output is compared with the f64 oracle,
// and the allowed error is derived from what the naive same-dtype reference
// (reference::Attention, f32 math) gets wrong on the same inputs:
//
//   max |err|  <= 2   * naive max |err|  + floor_max(dtype)  * value_scale
//   mean |err| <= 1.5 * naive mean |err| + floor_mean(dtype) * value_scale
//   (each + the logits' rounding sensitivity, see kLogitErrorUlps, and
//   the smallest normal f32, see kFlushToZeroAllowance)
//
// plus: any NaN/Inf where the oracle is finite fails, whatever its size.
// The multipliers are FlashAttention's rule (a fused kernel may be up to 2x
// as wrong as a naive one in the worst element, and only a little worse on
// average); the floor covers problems where the naive reference happens to
// be exact (one key, a one-hot softmax) but a correct kernel that sums in
// another order or uses a polynomial exp is a few ulps off.
#ifndef ATTNKIT_REFERENCE_TOLERANCE_H_
#define ATTNKIT_REFERENCE_TOLERANCE_H_

#include <array>
#include <cstdint>
#include <vector>

#include "runtime/problem.h"
#include "runtime/status.h"
#include "runtime/tensor.h"

namespace attnkit::reference {

// Error of one output against the oracle, over rows i < q_lens[b] only.
struct ErrorStats {
  int64_t count = 0;  // compared elements
  double max_abs = 0;
  std::array<int64_t, 4> max_abs_index{};  // [b, h, i, e]
  double max_abs_got = 0, max_abs_want = 0;
  double max_rel = 0;  // |err| / |oracle| where the oracle is non-zero
  std::array<int64_t, 4> max_rel_index{};
  double mean_abs = 0;
  int64_t nonfinite = 0;  // NaN/Inf where the oracle is finite
  std::array<int64_t, 4> first_nonfinite_index{};
  int64_t mismatched = 0;  // elements with |err| above the threshold given
};

// `truth` is the oracle's dense [batch, q_heads, max_q_len, head_dim] output.
// Elements whose error exceeds `mismatch_threshold` are counted.
ErrorStats MeasureError(const AttentionProblem& p,
                        const std::vector<double>& truth, const TensorView& out,
                        double mismatch_threshold = 0);

// The magnitude errors scale with: the largest finite |v| within the lengths
// (every output is a convex combination of V rows).
// (`v_scale`: an i8 V's scales, which the values are multiplied by.)
double ValueScale(const AttentionProblem& p, const TensorView& v,
                  const TensorView& v_scale = {});

// How much a correct f32 kernel's output may move because its logits are
// rounded differently: to first order, output element (i, e) moves by
//   sum_j p_ij |v_je - o_ie| |ds_ij|,   |ds_ij| ~ eps * a_ij,
//   a_ij = |scale| sum_e |q_ie k_je| + |bias_ij|
// (a_ij is the magnitude of what is summed into logit s_ij; its f32 rounding
// error is eps * a_ij for a recursive sum of random terms, and any
// summation order -- pairwise, SIMD lanes, tiles -- is within a small
// multiple of it). This is the softmax's condition: ~0 for one-hot rows
// (v_j - o ~ 0), large where |logits| ~ 1e3 split the weight between keys.
// Returns sum_j p_ij |v_je - o_ie| a_ij, its max and mean over elements.
struct LogitSensitivity {
  double max = 0;
  double mean = 0;
};
LogitSensitivity MeasureLogitSensitivity(const AttentionProblem& p,
                                         const AttentionArgs& args,
                                         const std::vector<double>& truth);

struct Bounds {
  double max_abs = 0;
  double mean_abs = 0;
};

// Multipliers on the naive reference's error.
inline constexpr double kMaxErrorFactor = 2.0;
inline constexpr double kMeanErrorFactor = 1.5;

// The floor, in units of value_scale. Math is f32 for every storage dtype
// (bf16 inputs widen exactly, i8 K/V are their integers times their scales
// in the oracle too, so the oracle sees the same numbers), hence
// the same unit: eps_f32 = 2^-24. A correct kernel's extra error where the
// naive one is exact is its exp approximation (Cephes-style polynomials in
// xsimd/MLIR's math dialect: <= 2-3 ulp), the rescale by exp(m_old - m_new)
// (1 ulp per tile) and a different summation order of the sum (log2 of the
// tiles, ~8 at 32k keys / 128 per tile); 32 ulp covers those with margin
// and is still 30x below a 1e-3 relative bug (a bf16-rounded P or a
// dropped key).
inline constexpr double kEpsF32 = 1.0 / 16777216.0;
double FloorMax(DType dtype);   // 32 eps
double FloorMean(DType dtype);  // 8 eps
// An absolute allowance of the smallest normal f32 (1.2e-38) on both
// bounds: a kernel running with denormals flushed to zero (DAZ/FTZ, common
// in SIMD code for speed: a denormal operand costs ~100 cycles on x86)
// reads the `tiny` profile's denormal keys and values as 0, which moves
// an output by ~1e-39 at most: not an attention bug. NaN/Inf are still caught
// there.
inline constexpr double kFlushToZeroAllowance = 1.1754943508222875e-38;

// Units of eps * LogitSensitivity allowed on top: the naive reference's own
// error on a handful of rows is a noisy estimate of what f32 rounding of the
// logits can do (with |logit| ~ 1e3 one rounding shifts the weights by
// ~1e-4, and the naive kernel may happen to round the decisive logits
// exactly), so the bound never drops below 4 such roundings' effect. With
// O(1) logits this term is ~eps * |v|, under the floor above.
inline constexpr double kLogitErrorUlps = 4.0;

Bounds ToleranceFor(const AttentionProblem& p, const ErrorStats& naive,
                    double value_scale,
                    const LogitSensitivity& sensitivity = {});

// Worst of max/bound and mean/bound (<= 1 passes). Non-finite errors are
// reported separately and fail regardless.
double ErrorRatio(const ErrorStats& e, const Bounds& b);
bool WithinTolerance(const ErrorStats& e, const Bounds& b);

// What one attention call is held to: the f64 oracle's dense output
// ([batch, q_heads, max_q_len, head_dim]) and the bounds derived from the
// naive reference's error on the same inputs.
struct Truth {
  std::vector<double> oracle;
  Bounds bounds;
};
// Runs the oracle and the naive reference on (p, args). args.out is scratch:
// it holds the naive reference's output afterwards. INTERNAL when the naive
// reference leaves an element unwritten or produces NaN/Inf (the inputs or
// the reference are broken, not the backend under test).
StatusOr<Truth> ComputeTruth(const AttentionProblem& p,
                             const AttentionArgs& args);

}  // namespace attnkit::reference

#endif  // ATTNKIT_REFERENCE_TOLERANCE_H_
