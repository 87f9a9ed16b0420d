#include "bench/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

namespace attnkit::bench {
namespace {

// Number of arrangements of m x-values and n y-values with U = u, for every
// u in [0, m n]: f(u; m, n) = f(u - n; m - 1, n) + f(u; m, n - 1) (the largest
// value is either an x, beating all n y's, or a y). Doubles: C(40, 20) ~ 1.4e11
// is exact in a double's 53-bit mantissa.
std::vector<double> UDistribution(int m, int n) {
  // prev[j] holds the distribution for (i - 1, j); cur for (i, j).
  std::vector<std::vector<double>> prev(n + 1), cur(n + 1);
  for (int j = 0; j <= n; ++j) prev[j] = {1.0};  // i = 0: U is always 0
  for (int i = 1; i <= m; ++i) {
    cur[0] = {1.0};  // j = 0: U is always 0
    for (int j = 1; j <= n; ++j) {
      std::vector<double> f(static_cast<size_t>(i) * j + 1, 0.0);
      for (size_t u = 0; u < prev[j].size(); ++u) f[u + j] += prev[j][u];
      for (size_t u = 0; u < cur[j - 1].size(); ++u) f[u] += cur[j - 1][u];
      cur[j] = std::move(f);
    }
    std::swap(prev, cur);
  }
  return prev[n];
}

}  // namespace

StatusOr<MannWhitneyResult> MannWhitneyU(std::span<const double> x,
                                         std::span<const double> y) {
  if (x.empty() || y.empty()) {
    return Status::InvalidArgument(
        "mann_whitney: sample sizes n1=" + std::to_string(x.size()) +
        " n2=" + std::to_string(y.size()) + " (both must be >= 1)");
  }
  struct Obs {
    double v;
    int group;
  };
  std::vector<Obs> all;
  all.reserve(x.size() + y.size());
  for (double v : x) all.push_back({v, 0});
  for (double v : y) all.push_back({v, 1});
  for (const Obs& o : all) {
    if (std::isnan(o.v)) {
      return Status::InvalidArgument("mann_whitney: sample " +
                                     std::to_string(o.group + 1) +
                                     " holds a NaN");
    }
  }
  std::sort(all.begin(), all.end(),
            [](const Obs& a, const Obs& b) { return a.v < b.v; });

  // Mid-ranks; tie_term accumulates sum(t^3 - t) over tie groups.
  const double n1 = static_cast<double>(x.size());
  const double n2 = static_cast<double>(y.size());
  const double n = n1 + n2;
  double rank_sum_x = 0, tie_term = 0;
  bool ties = false;
  for (size_t i = 0; i < all.size();) {
    size_t j = i;
    while (j < all.size() && all[j].v == all[i].v) ++j;
    const double t = static_cast<double>(j - i);
    const double mid_rank = 0.5 * (static_cast<double>(i + 1 + j));
    for (size_t k = i; k < j; ++k) {
      if (all[k].group == 0) rank_sum_x += mid_rank;
    }
    if (t > 1) {
      ties = true;
      tie_term += t * t * t - t;
    }
    i = j;
  }

  MannWhitneyResult r;
  r.u = rank_sum_x - n1 * (n1 + 1) / 2;
  const double mean_u = n1 * n2 / 2;
  if (!ties && x.size() <= kMannWhitneyExactMax &&
      y.size() <= kMannWhitneyExactMax) {
    const std::vector<double> f =
        UDistribution(static_cast<int>(x.size()), static_cast<int>(y.size()));
    const double total = std::accumulate(f.begin(), f.end(), 0.0);
    // U is an integer without ties; the distribution is symmetric about mean_u
    // so the two-sided p is twice the smaller tail.
    const auto u = static_cast<size_t>(std::llround(r.u));
    double lower = 0, upper = 0;
    for (size_t k = 0; k <= u; ++k) lower += f[k];
    for (size_t k = u; k < f.size(); ++k) upper += f[k];
    r.p = std::min(1.0, 2 * std::min(lower, upper) / total);
    r.exact = true;
    return r;
  }
  r.exact = false;
  const double var = n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1)));
  if (var <= 0) {  // every observation equal: no evidence of a difference
    r.p = 1;
    return r;
  }
  const double dev = std::max(0.0, std::fabs(r.u - mean_u) - 0.5);
  const double z = dev / std::sqrt(var);
  r.p = std::min(1.0, std::erfc(z / std::sqrt(2.0)));
  return r;
}

}  // namespace attnkit::bench
