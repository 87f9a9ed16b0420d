#include "reference/attention_block.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "reference/reference.h"

namespace attnkit::reference {
namespace {

using RowMatrix =
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Strided = Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>;

// The [shape[2], shape[3]] matrix of a weight, bias or x row block at
// (a, b), widened to f32 (the naive way: a copy).
RowMatrix Matrix(const TensorView& t, int64_t a, int64_t rows) {
  RowMatrix m(rows, t.shape[3]);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < t.shape[3]; ++c) m(r, c) = t.Load(a, 0, r, c);
  return m;
}

// A whole [tokens, width] projection: x · w (+ bias row).
RowMatrix Project(const RowMatrix& x, const TensorView& w,
                  const TensorView& bias) {
  RowMatrix y = x * Matrix(w, 0, w.shape[2]);
  if (!bias.is_null()) y.rowwise() += Matrix(bias, 0, 1).row(0);
  return y;
}

}  // namespace

Status AttentionBlock(const AttentionBlockProblem& p,
                      const AttentionBlockArgs& args) {
  ATTNKIT_RETURN_IF_ERROR(ValidateBlockArgs(p, args));
  const AttentionProblem& at = p.attention;
  const int64_t mq = at.max_q_len(), d = at.head_dim;
  std::vector<float> q(static_cast<size_t>(at.batch * mq * p.q_width()));
  std::vector<float> attn(q.size());
  // The projections of every token, whole (Q, K and V exist as tensors).
  for (int64_t b = 0; b < at.batch; ++b) {
    const int64_t n = at.q_lens[b], p0 = at.kv_lens[b] - n;
    if (n == 0) continue;
    const RowMatrix x = Matrix(args.x, b, n);
    const RowMatrix qb = Project(x, args.wq, args.bq);
    std::copy(qb.data(), qb.data() + qb.size(),
              q.begin() + b * mq * p.q_width());
    const RowMatrix kb = Project(x, args.wk, args.bk);
    const RowMatrix vb = Project(x, args.wv, args.bv);
    for (int64_t h = 0; h < at.kv_heads; ++h)
      for (int64_t t = 0; t < n; ++t)
        for (int64_t e = 0; e < d; ++e) {
          args.k_cache.Store(b, h, p0 + t, e, kb(t, h * d + e));
          args.v_cache.Store(b, h, p0 + t, e, vb(t, h * d + e));
        }
  }
  AttentionArgs a;
  a.q = HeadsOfRows(q.data(), at.batch, at.q_heads, mq, d, mq * p.q_width(),
                    p.q_width());
  a.out = HeadsOfRows(attn.data(), at.batch, at.q_heads, mq, d,
                      mq * p.q_width(), p.q_width());
  a.k = args.k_cache;
  a.v = args.v_cache;
  a.bias = args.bias;
  ATTNKIT_RETURN_IF_ERROR(Attention(at, a));
  for (int64_t b = 0; b < at.batch; ++b) {
    const int64_t n = at.q_lens[b];
    if (n == 0) continue;
    const Eigen::Map<const RowMatrix> ab(attn.data() + b * mq * p.q_width(), n,
                                         p.q_width());
    const RowMatrix ob = p.output_projection
                             ? RowMatrix(ab * Matrix(args.wo, 0, p.q_width()))
                             : RowMatrix(ab);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t c = 0; c < p.out_width(); ++c)
        args.out.Store(b, 0, t, c, ob(t, c));
  }
  return Status::Ok();
}

namespace {

// y[t][c] = sum_h x[t][h] * w[h][c] (+ bias[c]) for t < n, in f64.
std::vector<double> ProjectF64(const std::vector<double>& x, int64_t n,
                               int64_t hidden, const TensorView& w,
                               const TensorView& bias) {
  const int64_t width = w.shape[3];
  std::vector<double> y(static_cast<size_t>(n * width), 0.0);
  for (int64_t h = 0; h < hidden; ++h)
    for (int64_t c = 0; c < width; ++c) {
      const double wv = w.Load(0, 0, h, c);
      for (int64_t t = 0; t < n; ++t)
        y[t * width + c] += x[t * hidden + h] * wv;
    }
  if (!bias.is_null())
    for (int64_t t = 0; t < n; ++t)
      for (int64_t c = 0; c < width; ++c)
        y[t * width + c] += bias.Load(0, 0, 0, c);
  return y;
}

// One query row of the attention in f64: keys j < p0 from the cache as
// stored, the rest from the new tokens' own K/V.
void AttendRowF64(const AttentionBlockProblem& p,
                  const AttentionBlockArgs& args, int64_t b, int64_t h,
                  int64_t i, const double* q, const std::vector<double>& knew,
                  const std::vector<double>& vnew, double* out) {
  const AttentionProblem& at = p.attention;
  const int64_t d = at.head_dim, kvh = at.KvHeadOf(h);
  const int64_t p0 = at.kv_lens[b] - at.q_lens[b];
  const KeyRange r = VisibleKeys(at, b, i);
  auto key = [&](int64_t j, int64_t e) {
    return j < p0 ? static_cast<double>(args.k_cache.Load(b, kvh, j, e))
                  : knew[(j - p0) * p.kv_width() + kvh * d + e];
  };
  auto value = [&](int64_t j, int64_t e) {
    return j < p0 ? static_cast<double>(args.v_cache.Load(b, kvh, j, e))
                  : vnew[(j - p0) * p.kv_width() + kvh * d + e];
  };
  std::vector<double> s(
      static_cast<size_t>(std::max<int64_t>(r.end - r.begin, 0)));
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t j = r.begin; j < r.end; ++j) {
    double dot = 0;
    for (int64_t e = 0; e < d; ++e) dot += q[e] * key(j, e);
    double x = static_cast<double>(at.EffectiveScale()) * dot;
    if (at.mask == MaskKind::kBias)
      x += args.bias.Load(b, args.bias.shape[1] == 1 ? 0 : h, i, j);
    s[j - r.begin] = x;
    m = std::max(m, x);
  }
  std::fill(out, out + d, 0.0);
  if (m == -std::numeric_limits<double>::infinity()) return;  // fully masked
  double sum = 0;
  for (double& x : s) sum += (x = std::exp(x - m));
  for (int64_t j = r.begin; j < r.end; ++j)
    for (int64_t e = 0; e < d; ++e)
      out[e] += s[j - r.begin] / sum * value(j, e);
}

}  // namespace

Status OracleAttentionBlock(const AttentionBlockProblem& p,
                            const AttentionBlockArgs& args, BlockOracle* out) {
  ATTNKIT_RETURN_IF_ERROR(ValidateBlockArgs(p, args));
  const AttentionProblem& at = p.attention;
  const int64_t mq = at.max_q_len(), d = at.head_dim;
  out->out.assign(static_cast<size_t>(at.batch * mq * p.out_width()), 0.0);
  out->k.assign(static_cast<size_t>(at.batch * mq * p.kv_width()), 0.0);
  out->v.assign(out->k.size(), 0.0);
  for (int64_t b = 0; b < at.batch; ++b) {
    const int64_t n = at.q_lens[b];
    if (n == 0) continue;
    std::vector<double> x(static_cast<size_t>(n * p.hidden));
    for (int64_t t = 0; t < n; ++t)
      for (int64_t h = 0; h < p.hidden; ++h)
        x[t * p.hidden + h] = args.x.Load(b, 0, t, h);
    const std::vector<double> q = ProjectF64(x, n, p.hidden, args.wq, args.bq);
    const std::vector<double> k = ProjectF64(x, n, p.hidden, args.wk, args.bk);
    const std::vector<double> v = ProjectF64(x, n, p.hidden, args.wv, args.bv);
    std::copy(k.begin(), k.end(), out->k.begin() + b * mq * p.kv_width());
    std::copy(v.begin(), v.end(), out->v.begin() + b * mq * p.kv_width());
    std::vector<double> attn(static_cast<size_t>(n * p.q_width()));
    for (int64_t h = 0; h < at.q_heads; ++h)
      for (int64_t i = 0; i < n; ++i)
        AttendRowF64(p, args, b, h, i, &q[i * p.q_width() + h * d], k, v,
                     &attn[i * p.q_width() + h * d]);
    double* ob = out->out.data() + b * mq * p.out_width();
    if (!p.output_projection) {
      std::copy(attn.begin(), attn.end(), ob);
      continue;
    }
    for (int64_t c = 0; c < p.q_width(); ++c)
      for (int64_t o = 0; o < p.hidden; ++o) {
        const double w = args.wo.Load(0, 0, c, o);
        for (int64_t t = 0; t < n; ++t)
          ob[t * p.hidden + o] += attn[t * p.q_width() + c] * w;
      }
  }
  return Status::Ok();
}

AttentionProblem BlockOutputShape(const AttentionBlockProblem& p) {
  AttentionProblem shape;
  shape.batch = p.attention.batch;
  shape.q_heads = shape.kv_heads = 1;
  shape.head_dim = p.out_width();
  shape.q_lens = shape.kv_lens = p.attention.q_lens;
  return shape;
}

namespace {

// sum_h |x_h w_hc| + |bias_c| for every new token and K/V column, in the
// layout of BlockOracle::k: the magnitude the cache bound scales with.
std::vector<double> AbsProjection(const AttentionBlockProblem& p,
                                  const AttentionBlockArgs& a,
                                  const TensorView& w, const TensorView& bias) {
  const AttentionProblem& at = p.attention;
  const int64_t mq = at.max_q_len(), width = w.shape[3];
  std::vector<double> out(static_cast<size_t>(at.batch * mq * width), 0.0);
  for (int64_t b = 0; b < at.batch; ++b)
    for (int64_t t = 0; t < at.q_lens[b]; ++t) {
      double* row = out.data() + (b * mq + t) * width;
      for (int64_t h = 0; h < p.hidden; ++h) {
        const double x = std::fabs(a.x.Load(b, 0, t, h));
        for (int64_t c = 0; c < width; ++c)
          row[c] += x * std::fabs(w.Load(0, 0, h, c));
      }
      if (!bias.is_null())
        for (int64_t c = 0; c < width; ++c)
          row[c] += std::fabs(bias.Load(0, 0, 0, c));
    }
  return out;
}

}  // namespace

StatusOr<BlockTruth> ComputeBlockTruth(const AttentionBlockProblem& p,
                                       const AttentionBlockArgs& args) {
  BlockTruth t;
  ATTNKIT_RETURN_IF_ERROR(OracleAttentionBlock(p, args, &t.oracle));
  ATTNKIT_RETURN_IF_ERROR(AttentionBlock(p, args));
  const AttentionProblem shape = BlockOutputShape(p);
  t.naive = MeasureError(shape, t.oracle.out, args.out);
  if (t.naive.nonfinite > 0) {
    return Status::Internal("the naive block produced NaN/Inf for " +
                            p.ToString());
  }
  double scale = 1;
  for (double v : t.oracle.out) scale = std::max(scale, std::fabs(v));
  const double sums = std::sqrt(static_cast<double>(p.hidden + p.q_width()));
  t.out.max_abs = kMaxErrorFactor * t.naive.max_abs +
                  32 * kEpsF32 * scale * sums + kFlushToZeroAllowance;
  t.out.mean_abs = kMeanErrorFactor * t.naive.mean_abs +
                   8 * kEpsF32 * scale * sums + kFlushToZeroAllowance;
  const double gamma = static_cast<double>(p.hidden + 2) * kEpsF32;
  t.k_bound = AbsProjection(p, args, args.wk, args.bk);
  t.v_bound = AbsProjection(p, args, args.wv, args.bv);
  for (std::vector<double>* bound : {&t.k_bound, &t.v_bound})
    for (double& b : *bound) b *= gamma;
  return t;
}

}  // namespace attnkit::reference
