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
  FillByCoordinates(t, rng.Next(), 0, stddev);
}

std::array<int64_t, 4> RowStrides(const RowLayout& layout,
                                  const std::array<int64_t, 4>& shape) {
  const int64_t heads = shape[1], seq = shape[2], dim = shape[3];
  if (layout.token_major) {
    const int64_t token = heads * dim + layout.pad;
    return {seq * token, dim, token, 1};
  }
  const int64_t row = dim + layout.pad;
  return {heads * seq * row, seq * row, row, 1};
}

Tensor AllocateRows(DType dtype, const std::array<int64_t, 4>& shape,
                    const RowLayout& layout) {
  const int64_t lead = layout.pad / 2;
  return Tensor::Allocate(dtype, shape, RowStrides(layout, shape), lead,
                          layout.pad - lead);
}

StatusOr<AttentionData> AttentionData::Create(const AttentionProblem& p,
                                              int64_t kv_capacity,
                                              const ArgLayout& layout) {
  ATTNKIT_RETURN_IF_ERROR(p.Validate());
  for (const auto& [name, row] :
       {std::pair{"q", layout.q}, std::pair{"out", layout.out}}) {
    if (row.pad < 0 || row.pad > (int64_t{1} << 20)) {
      return Status::InvalidArgument(std::string(name) +
                                     " pad=" + std::to_string(row.pad) +
                                     " is not in [0, 1048576]");
    }
  }
  AttentionData d;
  const int64_t mq = p.max_q_len();
  const int64_t mkv = std::max(p.max_kv_len(), kv_capacity);
  const int64_t bias_heads = layout.shared_bias ? 1 : p.q_heads;
  // Validate() bounds the lengths' sizes; a larger capacity or padding is
  // checked here.
  if (!CheckedProduct({p.batch, p.kv_heads, mkv, p.head_dim, 4}) ||
      !CheckedProduct({p.batch, bias_heads, mq, mkv, 4}) ||
      !CheckedProduct({p.batch, mq,
                       p.q_heads * p.head_dim + layout.q.pad + layout.out.pad +
                           2 * p.head_dim,
                       4})) {
    return Status::ResourceExhausted(
        "attention data: kv_capacity=" + std::to_string(kv_capacity) +
        " overflows int64 bytes for " + p.ToString());
  }
  const std::array<int64_t, 4> qshape{p.batch, p.q_heads, mq, p.head_dim};
  const std::array<int64_t, 4> kvshape{p.batch, p.kv_heads, mkv, p.head_dim};
  try {
    d.q_ = AllocateRows(p.dtype, qshape, layout.q);
    d.out_ = AllocateRows(DType::kF32, qshape, layout.out);
    d.k_ = Tensor::Allocate(p.KvDType(), kvshape,
                            KvStrides(p.layout, false, kvshape));
    d.v_ = Tensor::Allocate(p.KvDType(), kvshape,
                            KvStrides(p.layout, true, kvshape));
    if (p.quantized_kv()) {
      const std::array<int64_t, 4> sshape{p.batch, p.kv_heads, mkv, 1};
      d.k_scale_ =
          Tensor::Allocate(DType::kF32, sshape, KvScaleStrides(sshape));
      d.v_scale_ =
          Tensor::Allocate(DType::kF32, sshape, KvScaleStrides(sshape));
    }
    if (p.mask == MaskKind::kBias) {
      d.bias_ = Tensor::Contiguous(DType::kF32, {p.batch, bias_heads, mq, mkv});
    }
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted(
        "attention data: cannot allocate q, k, v, out" +
        std::string(p.mask == MaskKind::kBias ? ", bias" : "") + " of " +
        p.ToString() + " with kv_capacity=" + std::to_string(mkv));
  }
  d.args_ = {d.q_.view,   d.k_.view,       d.v_.view,      d.bias_.view,
             d.out_.view, d.k_scale_.view, d.v_scale_.view};
  return d;
}

void AttentionData::ZeroOutput() {
  ForEach(out_.view, [&](int64_t a, int64_t b, int64_t c, int64_t e) {
    out_.view.Store(a, b, c, e, 0.0f);
  });
}

namespace {

// The value stream of AttentionData::Fill: each element hashed from its
// coordinates (splitmix64's finalizer as the mixing function).
uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;

uint64_t RowKey(uint64_t key, uint64_t tag, int64_t a, int64_t b, int64_t c) {
  uint64_t x = Mix(key ^ (tag * kGolden));
  x = Mix(x + static_cast<uint64_t>(a) * kGolden);
  x = Mix(x + static_cast<uint64_t>(b) * kGolden);
  return Mix(x + static_cast<uint64_t>(c) * kGolden);
}

uint64_t ElementBits(uint64_t row, int64_t e) {
  return Mix(row + static_cast<uint64_t>(e + 1) * kGolden);
}

// An approximately standard normal value from 64 bits: the sum of four
// 16-bit uniforms (Irwin-Hall, variance 4/12), centred and scaled to
// variance 1. Tails are cut at 2*sqrt(3) = 3.46, which no test relies on;
// it costs ~2 ns where Box-Muller's log and cos cost ~25.
float NormalOf(uint64_t x) {
  const uint64_t sum =
      (x & 0xffff) + ((x >> 16) & 0xffff) + ((x >> 32) & 0xffff) + (x >> 48);
  constexpr float kScale = 1.7320508f / 65536.0f;  // sqrt(3) / 2^16
  return (static_cast<float>(sum) - 4 * 32767.5f) * kScale;
}

// Tags of the tensors (and of the per-sequence choices) in the hash.
enum : uint64_t {
  kTagQ = 1,
  kTagK,
  kTagV,
  kTagBias,
  kTagBiasMasked,
  kTagBiasRow,
  kTagDominant,
  // The attention block's tensors.
  kTagX = 100,
  kTagWq,
  kTagWk,
  kTagWv,
  kTagBq,
  kTagBk,
  kTagBv,
  kTagWo,
  kTagKCache,
  kTagVCache,
};

// Calls f(a, b, c, e, row_key) for every element; row_key is the hash of
// (key, tag, origin of a, b, c), or of (..., b, 0) when `constant_rows`.
template <typename F>
void ForEachKeyed(const TensorView& t, uint64_t key, uint64_t tag,
                  std::span<const int64_t> origins, bool constant_rows, F&& f) {
  if (t.NumElements() == 0) return;
  for (int64_t a = 0; a < t.shape[0]; ++a) {
    const int64_t seq =
        a < static_cast<int64_t>(origins.size()) ? origins[a] : a;
    for (int64_t b = 0; b < t.shape[1]; ++b)
      for (int64_t c = 0; c < t.shape[2]; ++c) {
        const uint64_t row = RowKey(key, tag, seq, b, constant_rows ? 0 : c);
        for (int64_t e = 0; e < t.shape[3]; ++e) f(a, b, c, e, row);
      }
  }
}

}  // namespace

void FillByCoordinates(const TensorView& t, uint64_t key, uint64_t tag,
                       float stddev, std::span<const int64_t> origins) {
  ForEachKeyed(t, key, tag, origins, false,
               [&](int64_t a, int64_t b, int64_t c, int64_t e, uint64_t row) {
                 t.Store(a, b, c, e, stddev * NormalOf(ElementBits(row, e)));
               });
}

void AttentionData::Fill(const AttentionProblem& p, Rng& rng,
                         ValueProfile profile,
                         std::span<const int64_t> origins) {
  const uint64_t key = rng.Next();
  // i8 K/V: the profile's values are drawn in f32 and quantized below.
  Tensor k_values, v_values;
  if (p.quantized_kv()) {
    k_values = Tensor::Contiguous(DType::kF32, k_.view.shape);
    v_values = Tensor::Contiguous(DType::kF32, v_.view.shape);
  }
  const TensorView& q = q_.view;
  const TensorView& k = p.quantized_kv() ? k_values.view : k_.view;
  const TensorView& v = p.quantized_kv() ? v_values.view : v_.view;
  auto fill = [&](const TensorView& t, uint64_t tag, float stddev) {
    FillByCoordinates(t, key, tag, stddev, origins);
  };
  auto origin = [&](int64_t a) {
    return a < static_cast<int64_t>(origins.size()) ? origins[a] : a;
  };
  switch (profile) {
    case ValueProfile::kNormal:
      fill(q, kTagQ, 1.0f);
      fill(k, kTagK, 1.0f);
      fill(v, kTagV, 1.0f);
      break;
    case ValueProfile::kHugeLogits: {
      // logit = scale * q.k ~ scale * s^2 * sqrt(d) * N(0,1); pick s so the
      // logits' standard deviation is ~1000.
      const double target =
          1000.0 / (std::fabs(p.EffectiveScale()) *
                    std::sqrt(static_cast<double>(p.head_dim)));
      const float s = static_cast<float>(std::sqrt(target));
      fill(q, kTagQ, s);
      fill(k, kTagK, s);
      fill(v, kTagV, 1.0f);
      break;
    }
    case ValueProfile::kConstantRows:
      fill(q, kTagQ, 1.0f);
      fill(v, kTagV, 1.0f);
      // Every key of a (sequence, head) equal: the row hash ignores the
      // position.
      ForEachKeyed(
          k, key, kTagK, origins, true,
          [&](int64_t a, int64_t b, int64_t c, int64_t e, uint64_t row) {
            k.Store(a, b, c, e, NormalOf(ElementBits(row, e)));
          });
      break;
    case ValueProfile::kTiny: {
      // Denormal keys (logits ~0: a near-uniform softmax) and half the
      // values denormal, the other half O(1): the outputs stay O(1), so a
      // kernel's other bugs still show in these cases (with every value
      // denormal, every output sat below the flush-to-zero allowance and
      // any kernel passed), while a kernel that flushes denormals to zero
      // is off by ~1e-39 only, which the allowance forgives.
      const float tiny = std::numeric_limits<float>::denorm_min() * 4096.0f;
      fill(q, kTagQ, 1.0f);
      fill(k, kTagK, tiny);
      ForEachKeyed(
          v, key, kTagV, origins, false,
          [&](int64_t a, int64_t b, int64_t c, int64_t e, uint64_t row) {
            const uint64_t x = ElementBits(row, e);
            v.Store(a, b, c, e,
                    (Mix(x) & 1) ? tiny * NormalOf(x) : NormalOf(x));
          });
      break;
    }
    case ValueProfile::kDominantKey: {
      // All queries point along +1s; one key per (b, h) does too, scaled so
      // its logit exceeds the others by ~60 (e^-60 ~ 1e-26 for the rest).
      ForEach(q, [&](int64_t a, int64_t b, int64_t c, int64_t e) {
        q.Store(a, b, c, e, 1.0f);
      });
      fill(k, kTagK, 0.1f);
      fill(v, kTagV, 1.0f);
      const float boost = 60.0f / (std::fabs(p.EffectiveScale()) *
                                   static_cast<float>(p.head_dim));
      for (int64_t a = 0; a < k.shape[0]; ++a) {
        if (p.kv_lens[a] == 0) continue;
        const int64_t j =
            static_cast<int64_t>(RowKey(key, kTagDominant, origin(a), 0, 0) %
                                 static_cast<uint64_t>(p.kv_lens[a]));
        for (int64_t b = 0; b < k.shape[1]; ++b)
          for (int64_t e = 0; e < k.shape[3]; ++e)
            k.Store(a, b, j, e, p.EffectiveScale() > 0 ? boost : -boost);
      }
      break;
    }
  }
  if (p.quantized_kv()) {
    QuantizeRows(k, k_.view, k_scale_.view);
    QuantizeRows(v, v_.view, v_scale_.view);
  }
  if (p.mask == MaskKind::kBias) {
    const TensorView& bias = bias_.view;
    const float ninf = -std::numeric_limits<float>::infinity();
    ForEachKeyed(bias, key, kTagBias, origins, false,
                 [&](int64_t a, int64_t b, int64_t c, int64_t e, uint64_t row) {
                   const uint64_t x = ElementBits(row, e);
                   // ~10% of the entries -inf (the top bits, independent of the
                   // value's 64 after one more mix).
                   const bool masked = (Mix(x ^ kTagBiasMasked) >> 54) < 103;
                   bias.Store(a, b, c, e, masked ? ninf : NormalOf(x));
                 });
    for (int64_t a = 0; a < p.batch; ++a) {
      if (p.q_lens[a] == 0) continue;
      const int64_t row =
          static_cast<int64_t>(RowKey(key, kTagBiasRow, origin(a), 0, 0) %
                               static_cast<uint64_t>(p.q_lens[a]));
      for (int64_t b = 0; b < bias.shape[1]; ++b)
        for (int64_t e = 0; e < bias.shape[3]; ++e)
          bias.Store(a, b, row, e, ninf);
    }
  }
  ZeroOutput();
}

StatusOr<AttentionBlockData> AttentionBlockData::Create(
    const AttentionBlockProblem& p) {
  ATTNKIT_RETURN_IF_ERROR(p.Validate());
  const AttentionProblem& at = p.attention;
  const int64_t mq = at.max_q_len(), mkv = at.max_kv_len();
  if (!CheckedProduct({at.batch, mq, std::max(p.hidden, p.out_width()), 4}) ||
      !CheckedProduct({p.hidden, p.q_width() + 2 * p.kv_width(), 4}) ||
      !CheckedProduct({at.batch, at.kv_heads, mkv, at.head_dim, 4}) ||
      !CheckedProduct({at.batch, at.q_heads, mq, mkv, 4})) {
    return Status::ResourceExhausted(
        "attention block data overflows int64 "
        "bytes for " +
        p.ToString());
  }
  AttentionBlockData d;
  const DType w = p.weight_dtype;
  const std::array<int64_t, 4> kvshape{at.batch, at.kv_heads, mkv, at.head_dim};
  try {
    d.x_ = Tensor::Contiguous(DType::kF32, {at.batch, 1, mq, p.hidden});
    d.wq_ = Tensor::Contiguous(w, {1, 1, p.hidden, p.q_width()});
    d.wk_ = Tensor::Contiguous(w, {1, 1, p.hidden, p.kv_width()});
    d.wv_ = Tensor::Contiguous(w, {1, 1, p.hidden, p.kv_width()});
    if (p.qkv_bias) {
      d.bq_ = Tensor::Contiguous(DType::kF32, {1, 1, 1, p.q_width()});
      d.bk_ = Tensor::Contiguous(DType::kF32, {1, 1, 1, p.kv_width()});
      d.bv_ = Tensor::Contiguous(DType::kF32, {1, 1, 1, p.kv_width()});
    }
    if (p.output_projection) {
      d.wo_ = Tensor::Contiguous(w, {1, 1, p.q_width(), p.hidden});
    }
    if (at.mask == MaskKind::kBias) {
      d.bias_ =
          Tensor::Contiguous(DType::kF32, {at.batch, at.q_heads, mq, mkv});
    }
    d.k_ = Tensor::Allocate(at.dtype, kvshape,
                            KvStrides(at.layout, false, kvshape));
    d.v_ = Tensor::Allocate(at.dtype, kvshape,
                            KvStrides(at.layout, true, kvshape));
    d.out_ = Tensor::Contiguous(DType::kF32, {at.batch, 1, mq, p.out_width()});
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted(
        "attention block data: out of memory for " + p.ToString());
  }
  d.args_ = {d.x_.view,    d.wq_.view, d.wk_.view, d.wv_.view,
             d.bq_.view,   d.bk_.view, d.bv_.view, d.wo_.view,
             d.bias_.view, d.k_.view,  d.v_.view,  d.out_.view};
  return d;
}

void AttentionBlockData::Fill(const AttentionBlockProblem& p, Rng& rng) {
  const uint64_t key = rng.Next();
  const AttentionProblem& at = p.attention;
  auto fan_in = [](int64_t n) {
    return static_cast<float>(1.0 / std::sqrt(static_cast<double>(n)));
  };
  FillByCoordinates(x_.view, key, kTagX, 1.0f);
  FillByCoordinates(wq_.view, key, kTagWq, fan_in(p.hidden));
  FillByCoordinates(wk_.view, key, kTagWk, fan_in(p.hidden));
  FillByCoordinates(wv_.view, key, kTagWv, fan_in(p.hidden));
  if (p.qkv_bias) {
    FillByCoordinates(bq_.view, key, kTagBq, 0.1f);
    FillByCoordinates(bk_.view, key, kTagBk, 0.1f);
    FillByCoordinates(bv_.view, key, kTagBv, 0.1f);
  }
  if (p.output_projection) {
    FillByCoordinates(wo_.view, key, kTagWo, fan_in(p.q_width()));
  }
  if (at.mask == MaskKind::kBias) {
    FillByCoordinates(bias_.view, key, kTagBias, 1.0f);
  }
  FillByCoordinates(k_.view, key, kTagKCache, 1.0f);
  FillByCoordinates(v_.view, key, kTagVCache, 1.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const TensorView* cache : {&k_.view, &v_.view}) {
    ForEach(*cache, [&](int64_t b, int64_t h, int64_t s, int64_t e) {
      if (s >= at.kv_lens[b] - at.q_lens[b]) cache->Store(b, h, s, e, nan);
    });
  }
  ForEach(out_.view, [&](int64_t a, int64_t b, int64_t c, int64_t e) {
    out_.view.Store(a, b, c, e, 0.0f);
  });
}

}  // namespace attnkit
