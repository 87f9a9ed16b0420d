#include "harness/tolerance.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace attnkit::harness {

ErrorStats MeasureError(const AttentionProblem& p,
                        const std::vector<double>& truth, const TensorView& out,
                        double mismatch_threshold) {
  ErrorStats s;
  const int64_t mq = p.max_q_len(), d = p.head_dim;
  double sum = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.q_heads; ++h) {
      for (int64_t i = 0; i < p.q_lens[b]; ++i) {
        const double* want = truth.data() + ((b * p.q_heads + h) * mq + i) * d;
        for (int64_t e = 0; e < d; ++e) {
          const double w = want[e];
          const double g = out.Load(b, h, i, e);
          if (!std::isfinite(w)) continue;  // nothing to hold a backend to
          ++s.count;
          if (!std::isfinite(g)) {
            if (s.nonfinite++ == 0) s.first_nonfinite_index = {b, h, i, e};
            ++s.mismatched;
            continue;
          }
          const double err = std::fabs(g - w);
          sum += err;
          if (err > mismatch_threshold) ++s.mismatched;
          if (err > s.max_abs) {
            s.max_abs = err;
            s.max_abs_index = {b, h, i, e};
            s.max_abs_got = g;
            s.max_abs_want = w;
          }
          if (w != 0 && err / std::fabs(w) > s.max_rel) {
            s.max_rel = err / std::fabs(w);
            s.max_rel_index = {b, h, i, e};
          }
        }
      }
    }
  }
  const int64_t finite = s.count - s.nonfinite;
  s.mean_abs = finite > 0 ? sum / static_cast<double>(finite) : 0;
  return s;
}

double ValueScale(const AttentionProblem& p, const TensorView& v) {
  double m = 0;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.kv_heads; ++h)
      for (int64_t j = 0; j < p.kv_lens[b]; ++j)
        for (int64_t e = 0; e < p.head_dim; ++e) {
          const double x = std::fabs(static_cast<double>(v.Load(b, h, j, e)));
          if (std::isfinite(x)) m = std::max(m, x);
        }
  return m;
}

double FloorMax(DType) { return 32 * kEpsF32; }
double FloorMean(DType) { return 8 * kEpsF32; }

Bounds ToleranceFor(const AttentionProblem& p, const ErrorStats& naive,
                    double value_scale) {
  return {kMaxErrorFactor * naive.max_abs + FloorMax(p.dtype) * value_scale +
              kFlushToZeroAllowance,
          kMeanErrorFactor * naive.mean_abs + FloorMean(p.dtype) * value_scale +
              kFlushToZeroAllowance};
}

double ErrorRatio(const ErrorStats& e, const Bounds& b) {
  if (e.nonfinite > 0) return std::numeric_limits<double>::infinity();
  return std::max(e.max_abs / b.max_abs, e.mean_abs / b.mean_abs);
}

bool WithinTolerance(const ErrorStats& e, const Bounds& b) {
  return e.nonfinite == 0 && e.max_abs <= b.max_abs && e.mean_abs <= b.mean_abs;
}

}  // namespace attnkit::harness
