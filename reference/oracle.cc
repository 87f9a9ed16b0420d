#include "reference/oracle.h"

#include <cmath>
#include <limits>

namespace attnkit::reference {

Status OracleAttention(const AttentionProblem& p, const AttentionArgs& args,
                       std::vector<double>* out) {
  ATTNKIT_RETURN_IF_ERROR(ValidateArgs(p, args));
  const int64_t mq = p.max_q_len(), d = p.head_dim;
  out->assign(static_cast<size_t>(p.batch * p.q_heads * mq * d), 0.0);
  const double scale = static_cast<double>(p.EffectiveScale());
  const double ninf = -std::numeric_limits<double>::infinity();
  std::vector<double> logits;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t kl = p.kv_lens[b];
    logits.resize(static_cast<size_t>(kl));
    for (int64_t h = 0; h < p.q_heads; ++h) {
      const int64_t kh = p.KvHeadOf(h);
      for (int64_t i = 0; i < p.q_lens[b]; ++i) {
        const KeyRange r = VisibleKeys(p, b, i);
        double m = ninf;
        for (int64_t j = 0; j < kl; ++j) {
          double x = ninf;
          if (j >= r.begin && j < r.end) {
            double dot = 0;
            for (int64_t e = 0; e < d; ++e) {
              dot += static_cast<double>(args.q.Load(b, h, i, e)) *
                     static_cast<double>(args.k.Load(b, kh, j, e));
            }
            x = scale * dot;
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
          const double w = logits[j] / sum;
          if (w == 0.0) continue;
          for (int64_t e = 0; e < d; ++e) {
            o[e] += w * static_cast<double>(args.v.Load(b, kh, j, e));
          }
        }
      }
    }
  }
  return Status::Ok();
}

}  // namespace attnkit::reference
