// Statistics of the regression gate: the Mann-Whitney U test (rank-sum, no
// normality assumption: benchmark times are skewed and heavy-tailed, so a
// t-test would be wrong). The median it pairs with is runtime/stats.h's.
#ifndef ATTNKIT_BENCH_STATS_H_
#define ATTNKIT_BENCH_STATS_H_

#include <span>

#include "runtime/status.h"

namespace attnkit::bench {

struct MannWhitneyResult {
  double u = 0;  // U of the first sample: pairs (x, y) with x > y, ties 1/2
  double p = 1;  // two-sided p-value
  bool exact = true;  // exact permutation distribution, else normal approx.
};

// Samples up to this size (each) without ties get the exact distribution;
// larger or tied samples use the normal approximation with tie correction and
// continuity correction (as LNT and scipy do). At n = 20 + 20 the normal
// approximation is within ~1e-3 of the exact p in the tails we gate on.
inline constexpr int kMannWhitneyExactMax = 20;

// Two-sided Mann-Whitney U test of x against y. INVALID_ARGUMENT when a
// sample is empty or holds a NaN.
StatusOr<MannWhitneyResult> MannWhitneyU(std::span<const double> x,
                                         std::span<const double> y);

}  // namespace attnkit::bench

#endif  // ATTNKIT_BENCH_STATS_H_
