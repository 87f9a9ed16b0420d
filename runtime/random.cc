#include "runtime/random.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <new>
#include <numbers>
#include <string>

#include "runtime/limits.h"

namespace attnkit {
namespace {

uint64_t SplitMix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

template <typename F>
void ForEach(const TensorView& t, F&& f) {
  // An empty tensor may still have huge outer extents (2^40 heads, 0 rows).
  if (t.NumElements() == 0) return;
  for (int64_t a = 0; a < t.shape[0]; ++a)
    for (int64_t b = 0; b < t.shape[1]; ++b)
      for (int64_t c = 0; c < t.shape[2]; ++c)
        for (int64_t d = 0; d < t.shape[3]; ++d) f(a, b, c, d);
}

}  // namespace

Rng::Rng(uint64_t seed) : Rng(seed, 0) {}

Rng::Rng(uint64_t seed, uint64_t stream) {
  uint64_t x = seed ^ (stream * 0xd1342543de82ef95ull);
  for (uint64_t& s : s_) s = SplitMix64(x);
}

uint64_t Rng::Next() {
  const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

uint64_t Rng::Below(uint64_t n) {
  // Lemire's multiply-shift; the bias is < n / 2^64, irrelevant here.
  __extension__ using U128 = unsigned __int128;
  return static_cast<uint64_t>((static_cast<U128>(Next()) * n) >> 64);
}

int64_t Rng::Range(int64_t lo, int64_t hi) {
  return lo + static_cast<int64_t>(Below(static_cast<uint64_t>(hi - lo) + 1));
}

float Rng::Uniform01() {
  return static_cast<float>(Next() >> 40) * (1.0f / 16777216.0f);
}

float Rng::Normal() {
  const float u1 = std::max(Uniform01(), 1e-7f);
  const float u2 = Uniform01();
  return std::sqrt(-2.0f * std::log(u1)) *
         std::cos(2.0f * std::numbers::pi_v<float> * u2);
}

void FillNormal(const TensorView& t, Rng& rng, float stddev) {
  ForEach(t, [&](int64_t a, int64_t b, int64_t c, int64_t d) {
    t.Store(a, b, c, d, stddev * rng.Normal());
  });
}

StatusOr<AttentionData> AttentionData::Create(const AttentionProblem& p,
                                              int64_t kv_capacity) {
  ATTNKIT_RETURN_IF_ERROR(p.Validate());
  AttentionData d;
  const int64_t mq = p.max_q_len();
  const int64_t mkv = std::max(p.max_kv_len(), kv_capacity);
  // Validate() bounds the lengths' sizes; a larger capacity is checked here.
  if (!CheckedProduct({p.batch, p.kv_heads, mkv, p.head_dim, 4}) ||
      !CheckedProduct({p.batch, p.q_heads, mq, mkv, 4})) {
    return Status::ResourceExhausted(
        "attention data: kv_capacity=" + std::to_string(kv_capacity) +
        " overflows int64 bytes for " + p.ToString());
  }
  const std::array<int64_t, 4> qshape{p.batch, p.q_heads, mq, p.head_dim};
  const std::array<int64_t, 4> kvshape{p.batch, p.kv_heads, mkv, p.head_dim};
  try {
    d.q_ = Tensor::Contiguous(p.dtype, qshape);
    d.out_ = Tensor::Contiguous(DType::kF32, qshape);
    d.k_ =
        Tensor::Allocate(p.dtype, kvshape, KvStrides(p.layout, false, kvshape));
    d.v_ =
        Tensor::Allocate(p.dtype, kvshape, KvStrides(p.layout, true, kvshape));
    if (p.mask == MaskKind::kBias) {
      d.bias_ = Tensor::Contiguous(DType::kF32, {p.batch, p.q_heads, mq, mkv});
    }
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted(
        "attention data: cannot allocate q, k, v, out" +
        std::string(p.mask == MaskKind::kBias ? ", bias" : "") + " of " +
        p.ToString() + " with kv_capacity=" + std::to_string(mkv));
  }
  d.args_ = {d.q_.view, d.k_.view, d.v_.view, d.bias_.view, d.out_.view};
  return d;
}

void AttentionData::ZeroOutput() {
  ForEach(out_.view, [&](int64_t a, int64_t b, int64_t c, int64_t e) {
    out_.view.Store(a, b, c, e, 0.0f);
  });
}

void AttentionData::Fill(const AttentionProblem& p, Rng& rng,
                         ValueProfile profile) {
  const TensorView &q = q_.view, &k = k_.view, &v = v_.view;
  switch (profile) {
    case ValueProfile::kNormal:
      FillNormal(q, rng);
      FillNormal(k, rng);
      FillNormal(v, rng);
      break;
    case ValueProfile::kHugeLogits: {
      // logit = scale * q.k ~ scale * s^2 * sqrt(d) * N(0,1); pick s so the
      // logits' standard deviation is ~1000.
      const double target =
          1000.0 / (std::fabs(p.EffectiveScale()) *
                    std::sqrt(static_cast<double>(p.head_dim)));
      const float s = static_cast<float>(std::sqrt(target));
      FillNormal(q, rng, s);
      FillNormal(k, rng, s);
      FillNormal(v, rng);
      break;
    }
    case ValueProfile::kConstantRows:
      FillNormal(q, rng);
      FillNormal(v, rng);
      for (int64_t a = 0; a < k.shape[0]; ++a)
        for (int64_t b = 0; b < k.shape[1]; ++b)
          for (int64_t e = 0; e < k.shape[3]; ++e) {
            const float val = rng.Normal();
            for (int64_t c = 0; c < k.shape[2]; ++c) k.Store(a, b, c, e, val);
          }
      break;
    case ValueProfile::kTiny: {
      const float tiny = std::numeric_limits<float>::denorm_min() * 4096.0f;
      FillNormal(q, rng);
      ForEach(k, [&](int64_t a, int64_t b, int64_t c, int64_t e) {
        k.Store(a, b, c, e, tiny * rng.Normal());
      });
      ForEach(v, [&](int64_t a, int64_t b, int64_t c, int64_t e) {
        v.Store(a, b, c, e, tiny * rng.Normal());
      });
      break;
    }
    case ValueProfile::kDominantKey: {
      // All queries point along +1s; one key per (b, h) does too, scaled so
      // its logit exceeds the others by ~60 (e^-60 ~ 1e-26 for the rest).
      ForEach(q, [&](int64_t a, int64_t b, int64_t c, int64_t e) {
        q.Store(a, b, c, e, 1.0f);
      });
      FillNormal(k, rng, 0.1f);
      FillNormal(v, rng);
      const float boost = 60.0f / (std::fabs(p.EffectiveScale()) *
                                   static_cast<float>(p.head_dim));
      for (int64_t a = 0; a < k.shape[0]; ++a) {
        if (p.kv_lens[a] == 0) continue;
        const int64_t j = rng.Range(0, p.kv_lens[a] - 1);
        for (int64_t b = 0; b < k.shape[1]; ++b)
          for (int64_t e = 0; e < k.shape[3]; ++e)
            k.Store(a, b, j, e, p.EffectiveScale() > 0 ? boost : -boost);
      }
      break;
    }
  }
  if (p.mask == MaskKind::kBias) {
    const TensorView& bias = bias_.view;
    const float ninf = -std::numeric_limits<float>::infinity();
    ForEach(bias, [&](int64_t a, int64_t b, int64_t c, int64_t e) {
      bias.Store(a, b, c, e, rng.Bernoulli(0.1) ? ninf : rng.Normal());
    });
    for (int64_t a = 0; a < p.batch; ++a) {
      if (p.q_lens[a] == 0) continue;
      const int64_t row = rng.Range(0, p.q_lens[a] - 1);
      for (int64_t b = 0; b < bias.shape[1]; ++b)
        for (int64_t e = 0; e < bias.shape[3]; ++e)
          bias.Store(a, b, row, e, ninf);
    }
  }
  ZeroOutput();
}

}  // namespace attnkit
