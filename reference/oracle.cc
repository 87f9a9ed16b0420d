#include "reference/oracle.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace attnkit::reference {

void WidenRows(const TensorView& t, int64_t b, int64_t h, int64_t n,
               std::vector<float>& out, const TensorView& scales) {
  const int64_t d = t.shape[3];
  out.resize(static_cast<size_t>(n * d));
  if (n == 0 || d == 0) return;
  const int64_t s2 = t.strides[2], s3 = t.strides[3];
  const int64_t base = t.Offset(b, h, 0, 0);
  float* o = out.data();
  if (t.dtype == DType::kF32) {
    const float* p = t.As<float>() + base;
    for (int64_t j = 0; j < n; ++j)
      for (int64_t e = 0; e < d; ++e) o[j * d + e] = p[j * s2 + e * s3];
    return;
  }
  if (t.dtype == DType::kI8) {
    const int8_t* p = static_cast<const int8_t*>(t.data) + base;
    for (int64_t j = 0; j < n; ++j) {
      const float s = scales.is_null() ? 1.0f : scales.Load(b, h, j, 0);
      for (int64_t e = 0; e < d; ++e) {
        o[j * d + e] = static_cast<float>(p[j * s2 + e * s3]) * s;
      }
    }
    return;
  }
  const auto* p = static_cast<const uint16_t*>(t.data) + base;
  for (int64_t j = 0; j < n; ++j)
    for (int64_t e = 0; e < d; ++e) {
      const uint32_t bits = static_cast<uint32_t>(p[j * s2 + e * s3]) << 16;
      std::memcpy(&o[j * d + e], &bits, sizeof(float));
    }
}

void WidenScales(const TensorView& scales, int64_t b, int64_t h, int64_t n,
                 std::vector<double>& out) {
  out.assign(static_cast<size_t>(n), 1.0);
  if (scales.is_null()) return;
  for (int64_t j = 0; j < n; ++j) out[j] = scales.Load(b, h, j, 0);
}

double DotF64(const float* a, const float* b, int64_t n) {
  double s[4] = {0, 0, 0, 0};
  int64_t e = 0;
  for (; e + 4 <= n; e += 4)
    for (int k = 0; k < 4; ++k) {
      s[k] += static_cast<double>(a[e + k]) * static_cast<double>(b[e + k]);
    }
  for (; e < n; ++e) s[0] += static_cast<double>(a[e]) * b[e];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

Status OracleAttention(const AttentionProblem& p, const AttentionArgs& args,
                       std::vector<double>* out) {
  ATTNKIT_RETURN_IF_ERROR(ValidateArgs(p, args));
  ATTNKIT_RETURN_IF_ERROR(CheckKvScaleValues(p, args.k_scale, args.v_scale));
  const int64_t mq = p.max_q_len(), d = p.head_dim;
  out->assign(static_cast<size_t>(p.batch * p.q_heads * mq * d), 0.0);
  const double scale = static_cast<double>(p.EffectiveScale());
  const double ninf = -std::numeric_limits<double>::infinity();
  std::vector<double> logits;
  std::vector<float> k, v, q;
  std::vector<double> k_scale, v_scale;  // 1 unless K/V are i8
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t kl = p.kv_lens[b], ql = p.q_lens[b];
    if (ql == 0) continue;
    logits.resize(static_cast<size_t>(kl));
    for (int64_t kh = 0; kh < p.kv_heads; ++kh) {
      // K and V of this kv head, read once for its group of query heads.
      WidenRows(args.k, b, kh, kl, k);
      WidenRows(args.v, b, kh, kl, v);
      WidenScales(args.k_scale, b, kh, kl, k_scale);
      WidenScales(args.v_scale, b, kh, kl, v_scale);
      for (int64_t g = 0; g < p.group_size(); ++g) {
        const int64_t h = kh * p.group_size() + g;
        WidenRows(args.q, b, h, ql, q);
        for (int64_t i = 0; i < ql; ++i) {
          const KeyRange r = VisibleKeys(p, b, i);
          double m = ninf;
          for (int64_t j = 0; j < kl; ++j) {
            double x = ninf;
            if (j >= r.begin && j < r.end) {
              x = scale * k_scale[j] * DotF64(&q[i * d], &k[j * d], d);
              if (p.mask == MaskKind::kBias) {
                x += args.bias.Load(b, args.bias.shape[1] == 1 ? 0 : h, i, j);
              }
            }
            logits[j] = x;
            if (x > m || std::isnan(x)) m = std::isnan(m) ? m : x;
          }
          double* o = out->data() + ((b * p.q_heads + h) * mq + i) * d;
          if (m == ninf) continue;  // fully masked row: zeros
          double sum = 0;
          for (int64_t j = 0; j < kl; ++j) {
            logits[j] = std::exp(logits[j] - m);
            sum += logits[j];
          }
          for (int64_t j = 0; j < kl; ++j) {
            const double w = logits[j] / sum * v_scale[j];
            if (w == 0.0) continue;
            const float* vj = &v[j * d];
            for (int64_t e = 0; e < d; ++e) {
              o[e] += w * static_cast<double>(vj[e]);
            }
          }
        }
      }
    }
  }
  return Status::Ok();
}

}  // namespace attnkit::reference
