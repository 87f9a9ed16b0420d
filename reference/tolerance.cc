#include "reference/tolerance.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "reference/oracle.h"
#include "reference/reference.h"

namespace attnkit::reference {

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

double ValueScale(const AttentionProblem& p, const TensorView& v,
                  const TensorView& v_scale) {
  double m = 0;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.kv_heads; ++h)
      for (int64_t j = 0; j < p.kv_lens[b]; ++j)
        for (int64_t e = 0; e < p.head_dim; ++e) {
          const double s = v.dtype == DType::kI8 && !v_scale.is_null()
                               ? v_scale.Load(b, h, j, 0)
                               : 1.0;
          const double x =
              std::fabs(static_cast<double>(v.Load(b, h, j, e)) * s);
          if (std::isfinite(x)) m = std::max(m, x);
        }
  return m;
}

double FloorMax(DType) { return 32 * kEpsF32; }
double FloorMean(DType) { return 8 * kEpsF32; }

LogitSensitivity MeasureLogitSensitivity(const AttentionProblem& p,
                                         const AttentionArgs& args,
                                         const std::vector<double>& truth) {
  LogitSensitivity out;
  const int64_t mq = p.max_q_len(), d = p.head_dim;
  const double scale = static_cast<double>(p.EffectiveScale());
  const double ninf = -std::numeric_limits<double>::infinity();
  std::vector<double> weight, mag, sens(static_cast<size_t>(d));
  std::vector<float> q, k, v;
  double sum_all = 0;
  int64_t count = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t kl = p.kv_lens[b], ql = p.q_lens[b];
    if (ql == 0) continue;
    weight.resize(kl);
    mag.resize(kl);
    for (int64_t kh = 0; kh < p.kv_heads; ++kh) {
      WidenRows(args.k, b, kh, kl, k, args.k_scale);
      WidenRows(args.v, b, kh, kl, v, args.v_scale);
      for (int64_t g = 0; g < p.group_size(); ++g) {
        const int64_t h = kh * p.group_size() + g;
        WidenRows(args.q, b, h, ql, q);
        for (int64_t i = 0; i < ql; ++i) {
          const KeyRange r = VisibleKeys(p, b, i);
          const float* qi = &q[i * d];
          double m = ninf;
          for (int64_t j = r.begin; j < r.end; ++j) {
            const float* kj = &k[j * d];
            double abs_dot = 0;
            for (int64_t e = 0; e < d; ++e) {
              abs_dot += std::fabs(static_cast<double>(qi[e]) * kj[e]);
            }
            double s = scale * DotF64(qi, kj, d);
            double a = std::fabs(scale) * abs_dot;
            if (p.mask == MaskKind::kBias) {
              const double bias =
                  args.bias.Load(b, args.bias.shape[1] == 1 ? 0 : h, i, j);
              s += bias;
              a += std::isfinite(bias) ? std::fabs(bias) : 0;
            }
            weight[j] = s;
            mag[j] = a;
            m = std::max(m, s);
          }
          count += d;
          if (m == ninf) continue;  // no visible key: exact zeros
          double z = 0;
          for (int64_t j = r.begin; j < r.end; ++j) {
            weight[j] = std::exp(weight[j] - m);
            z += weight[j];
          }
          const double* o = truth.data() + ((b * p.q_heads + h) * mq + i) * d;
          std::fill(sens.begin(), sens.end(), 0.0);
          for (int64_t j = r.begin; j < r.end; ++j) {
            const double w = weight[j] / z;
            if (w < 1e-30) continue;  // moves nothing an f32 can hold
            const double c = w * mag[j];
            const float* vj = &v[j * d];
            for (int64_t e = 0; e < d; ++e) {
              sens[e] += c * std::fabs(static_cast<double>(vj[e]) - o[e]);
            }
          }
          for (int64_t e = 0; e < d; ++e) {
            out.max = std::max(out.max, sens[e]);
            sum_all += sens[e];
          }
        }
      }
    }
  }
  out.mean = count > 0 ? sum_all / static_cast<double>(count) : 0;
  return out;
}

Bounds ToleranceFor(const AttentionProblem& p, const ErrorStats& naive,
                    double value_scale, const LogitSensitivity& sensitivity) {
  return {
      kMaxErrorFactor * naive.max_abs + FloorMax(p.dtype) * value_scale +
          kLogitErrorUlps * kEpsF32 * sensitivity.max + kFlushToZeroAllowance,
      kMeanErrorFactor * naive.mean_abs + FloorMean(p.dtype) * value_scale +
          kLogitErrorUlps * kEpsF32 * sensitivity.mean + kFlushToZeroAllowance};
}

double ErrorRatio(const ErrorStats& e, const Bounds& b) {
  if (e.nonfinite > 0) return std::numeric_limits<double>::infinity();
  return std::max(e.max_abs / b.max_abs, e.mean_abs / b.mean_abs);
}

bool WithinTolerance(const ErrorStats& e, const Bounds& b) {
  return e.nonfinite == 0 && e.max_abs <= b.max_abs && e.mean_abs <= b.mean_abs;
}

StatusOr<Truth> ComputeTruth(const AttentionProblem& p,
                             const AttentionArgs& args) {
  Truth t;
  ATTNKIT_RETURN_IF_ERROR(OracleAttention(p, args, &t.oracle));
  // NaN first: an element the reference leaves unwritten counts as
  // non-finite below instead of passing on stale values.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.q_heads; ++h)
      for (int64_t i = 0; i < p.q_lens[b]; ++i)
        for (int64_t e = 0; e < p.head_dim; ++e)
          args.out.Store(b, h, i, e, nan);
  ATTNKIT_RETURN_IF_ERROR(Attention(p, args));
  const ErrorStats naive = MeasureError(p, t.oracle, args.out);
  if (naive.nonfinite > 0) {
    return Status::Internal("the naive reference produced NaN/Inf on " +
                            p.ToString());
  }
  t.bounds = ToleranceFor(p, naive, ValueScale(p, args.v, args.v_scale),
                          MeasureLogitSensitivity(p, args, t.oracle));
  return t;
}

}  // namespace attnkit::reference
