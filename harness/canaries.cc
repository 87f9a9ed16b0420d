#include "harness/canaries.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

namespace attnkit::harness {
namespace {

// Keys per tile of the flash-style loop: small, so even smoke-tier contexts
// span several tiles and exercise the rescale and the partial tail.
constexpr int64_t kTile = 16;

class CanaryBackend final : public Backend {
 public:
  explicit CanaryBackend(Bug bug)
      : bug_(bug), name_("canary_" + std::string(BugName(bug))) {}
  std::string_view name() const override { return name_; }

  Status Attention(const AttentionProblem& p,
                   const AttentionArgs& in) override {
    ATTNKIT_RETURN_IF_ERROR(ValidateArgs(p, in));
    float scale = bug_ == Bug::kWrongScale
                      ? 1.0f / std::sqrt(static_cast<float>(p.head_dim))
                      : p.EffectiveScale();
    AttentionArgs args = in;
    if (bug_ == Bug::kIgnoresRowStrides) {
      // In bounds: a dense view of an injective layout spans no more.
      args.q.strides = ContiguousStrides(args.q.shape);
      args.out.strides = ContiguousStrides(args.out.shape);
    }
    if (bug_ == Bug::kScalesQInPlace) {
      for (int64_t b = 0; b < p.batch; ++b)
        for (int64_t h = 0; h < p.q_heads; ++h)
          for (int64_t i = 0; i < p.q_lens[b]; ++i)
            for (int64_t e = 0; e < p.head_dim; ++e)
              args.q.Store(b, h, i, e, scale * args.q.Load(b, h, i, e));
      scale = 1.0f;
    }
    const float ninf = -std::numeric_limits<float>::infinity();
    // A 256-float row buffer drops the dimensions past it.
    const int64_t d = bug_ == Bug::kHeadDimOver256
                          ? std::min<int64_t>(p.head_dim, 256)
                          : p.head_dim;
    // The key index as a narrow integer keeps only its low bits.
    const int64_t key_mask = bug_ == Bug::kKeyIndexWraps4096    ? 4095
                             : bug_ == Bug::kKeyIndexWraps65536 ? 65535
                                                                : -1;
    std::vector<float> q(d), acc(d), logits(kTile);
    for (int64_t b = 0; b < p.batch; ++b) {
      for (int64_t h = 0; h < p.q_heads; ++h) {
        const int64_t kh =
            bug_ == Bug::kWrongGqaMapping ? h % p.kv_heads : p.KvHeadOf(h);
        for (int64_t i = 0; i < p.q_lens[b]; ++i) {
          KeyRange r = VisibleKeys(p, b, i);
          if (bug_ == Bug::kCausalShifted &&
              (p.mask == MaskKind::kCausal || p.mask == MaskKind::kWindow)) {
            const int64_t pos = p.kv_lens[b] - p.q_lens[b] + i + 1;
            r.end = std::min(pos + 1, p.kv_lens[b]);
            if (p.mask == MaskKind::kWindow) {
              r.begin = std::max<int64_t>(0, pos - p.window + 1);
            }
          }
          for (int64_t e = 0; e < d; ++e) q[e] = args.q.Load(b, h, i, e);
          std::fill(acc.begin(), acc.end(), 0.0f);
          float m = ninf, l = 0;
          for (int64_t t0 = r.begin; t0 < r.end; t0 += kTile) {
            int64_t t1 = std::min(t0 + kTile, r.end);
            if (bug_ == Bug::kTailOffByOne && t1 - t0 < kTile) --t1;
            float tile_max = ninf;
            for (int64_t j = t0; j < t1; ++j) {
              float dot = 0;
              for (int64_t e = 0; e < d; ++e) {
                dot += q[e] * args.k.Load(b, kh, j & key_mask, e);
              }
              float s = scale * dot * KScale(p, args, b, kh, j & key_mask);
              if (p.mask == MaskKind::kBias) s += Bias(args.bias, b, h, i, j);
              logits[j - t0] = s;
              tile_max = std::max(tile_max, s);
            }
            if (tile_max == ninf) continue;  // every key here masked
            const float m_new = std::max(m, tile_max);
            const float alpha = std::exp(m - m_new);  // 0 on the first tile
            if (bug_ != Bug::kMissingRescale) {
              for (float& a : acc) a *= alpha;
            }
            l *= alpha;
            for (int64_t j = t0; j < t1; ++j) {
              const float w = std::exp(logits[j - t0] - m_new);
              l += w;
              const float wv = bug_ == Bug::kBf16Probabilities
                                   ? bf16::FromFloat(w).ToFloat()
                                   : w;
              const float wvs = wv * VScale(p, args, b, kh, j & key_mask);
              for (int64_t e = 0; e < d; ++e) {
                acc[e] += wvs * args.v.Load(b, kh, j & key_mask, e);
              }
            }
            m = m_new;
          }
          for (int64_t e = 0; e < p.head_dim; ++e) {
            args.out.Store(b, h, i, e, l > 0 && e < d ? acc[e] / l : 0.0f);
          }
        }
      }
    }
    if (bug_ == Bug::kZeroesKvPastLen) {
      for (int64_t b = 0; b < p.batch; ++b)
        for (int64_t h = 0; h < p.kv_heads; ++h)
          for (int64_t j = p.kv_lens[b]; j < args.k.shape[2]; ++j)
            for (int64_t e = 0; e < p.head_dim; ++e) {
              args.k.Store(b, h, j, e, 0.0f);
              args.v.Store(b, h, j, e, 0.0f);
            }
    }
    if (bug_ == Bug::kOneElementOff) {
      for (int64_t b = p.batch - 1; b >= 0; --b) {
        if (p.q_lens[b] == 0) continue;
        const int64_t h = p.q_heads - 1, i = p.q_lens[b] - 1, e = d - 1;
        const float x = args.out.Load(b, h, i, e);
        args.out.Store(b, h, i, e, x + 1e-3f * (1.0f + std::fabs(x)));
        break;
      }
    }
    return Status::Ok();
  }

  Status AppendKv(const KvAppendArgs& in) override {
    ATTNKIT_RETURN_IF_ERROR(ValidateAppend(in));
    KvAppendArgs a = in;
    if (bug_ == Bug::kAppendFirstPosition) {
      // Sequence 0's position for every sequence (clamped into the cache:
      // a canary stays memory-safe).
      positions_.assign(in.positions.begin(), in.positions.end());
      for (size_t b = 0; b < positions_.size(); ++b) {
        positions_[b] =
            std::min(positions_[0], in.k_cache.shape[2] - in.new_lens[b]);
      }
      a.positions = positions_;
    }
    if (bug_ == Bug::kAppendIgnoresLens) {
      // The batch's longest count for every sequence (clamped into the
      // cache and the staging rows).
      int64_t most = 0;
      for (int64_t n : in.new_lens) most = std::max(most, n);
      lens_.assign(in.new_lens.begin(), in.new_lens.end());
      for (size_t b = 0; b < lens_.size(); ++b) {
        lens_[b] = std::min(
            {most, in.new_k.shape[2], in.k_cache.shape[2] - in.positions[b]});
      }
      a.new_lens = lens_;
    }
    if (bug_ == Bug::kAppendVRowMajor) {
      // Both caches are dense over the same shape: in bounds, wrong place.
      a.v_cache.strides = a.k_cache.strides;
    }
    AppendKvStrided(a);
    if (bug_ == Bug::kI8AppendTruncates && a.k_cache.dtype == DType::kI8) {
      TruncateAppended(a);
    }
    if (bug_ != Bug::kAppendSpill) return Status::Ok();
    // A vector store that runs one token past the end: the last new token
    // is written again one position further, when there is room.
    const TensorView* pairs[2][2] = {{&a.k_cache, &a.new_k},
                                     {&a.v_cache, &a.new_v}};
    for (int64_t b = 0; b < a.k_cache.shape[0]; ++b) {
      const int64_t n = a.new_lens[b], end = a.positions[b] + n;
      if (n == 0 || end >= a.k_cache.shape[2]) continue;
      for (auto& [cache, src] : pairs) {
        for (int64_t h = 0; h < cache->shape[1]; ++h)
          for (int64_t e = 0; e < cache->shape[3]; ++e) {
            cache->Store(b, h, end, e, src->Load(b, h, n - 1, e));
          }
      }
    }
    return Status::Ok();
  }

  Status SupportsBlock(const AttentionBlockProblem& p) const override {
    return p.Validate();
  }

  // Plain-loop projections (K/V into the cache slots, Q token-major), this
  // canary's attention over the cache, then Wo -- with the block bugs.
  Status AttentionBlock(const AttentionBlockProblem& p,
                        const AttentionBlockArgs& a) override {
    ATTNKIT_RETURN_IF_ERROR(ValidateBlockArgs(p, a));
    const AttentionProblem& at = p.attention;
    const int64_t mq = at.max_q_len(), d = at.head_dim, qw = p.q_width();
    std::vector<float> q(static_cast<size_t>(at.batch * mq * qw)),
        attn(q.size());
    auto project = [&](const TensorView& w, const TensorView& bias, int64_t b,
                       int64_t t, int64_t c, int64_t col) {
      float acc = bias.is_null() ? 0.0f : bias.Load(0, 0, 0, c);
      for (int64_t h = 0; h < p.hidden; ++h) {
        const float wv =
            bug_ == Bug::kBlockTransposedWeight && &w == &a.wq
                ? w.Load(0, 0, (col * p.hidden + h) / qw % p.hidden,
                         (col * p.hidden + h) % qw)
                : w.Load(0, 0, h, col);
        acc += a.x.Load(b, 0, t, h) * wv;
      }
      return acc;
    };
    for (int64_t b = 0; b < at.batch; ++b) {
      const int64_t p0 = at.kv_lens[b] - at.q_lens[b];
      for (int64_t t = 0; t < at.q_lens[b]; ++t) {
        for (int64_t c = 0; c < qw; ++c) {
          const int64_t col =
              bug_ == Bug::kBlockSliceOffByOne ? (c + 1) % qw : c;
          q[(b * mq + t) * qw + c] = project(a.wq, a.bq, b, t, c, col);
        }
        for (int64_t c = 0; c < p.kv_width(); ++c) {
          const TensorView& wk = bug_ == Bug::kBlockKWithWv ? a.wv : a.wk;
          a.k_cache.Store(b, c / d, p0 + t, c % d,
                          project(wk, a.bk, b, t, c, c));
          a.v_cache.Store(b, c / d, p0 + t, c % d,
                          project(a.wv, a.bv, b, t, c, c));
        }
      }
    }
    auto heads = [&](std::vector<float>& buf) {
      return HeadsOfRows(buf.data(), at.batch, at.q_heads, mq, d, mq * qw, qw);
    };
    AttentionArgs args{heads(q),    a.k_cache, a.v_cache, a.bias,
                       heads(attn), {},        {}};
    ATTNKIT_RETURN_IF_ERROR(Attention(at, args));
    for (int64_t b = 0; b < at.batch; ++b)
      for (int64_t t = 0; t < at.q_lens[b]; ++t)
        for (int64_t o = 0; o < p.out_width(); ++o) {
          const float* row = attn.data() + (b * mq + t) * qw;
          if (!p.output_projection) {
            a.out.Store(b, 0, t, o, row[o]);
            continue;
          }
          float acc = 0;
          for (int64_t c = 0; c < qw; ++c) {
            const int64_t r = bug_ == Bug::kBlockWoWrongHead ? (c + d) % qw : c;
            acc += row[c] * a.wo.Load(0, 0, r, o);
          }
          a.out.Store(b, 0, t, o, acc);
        }
    return Status::Ok();
  }

 private:
  // The scale of an i8 key / value row (1 when K/V are not i8), with the
  // scale bugs.
  float KScale(const AttentionProblem& p, const AttentionArgs& a, int64_t b,
               int64_t kh, int64_t j) const {
    if (!p.quantized_kv()) return 1.0f;
    if (bug_ == Bug::kI8ScaleWrongToken && j + 1 < p.kv_lens[b]) ++j;
    return a.k_scale.Load(b, kh, j, 0);
  }
  float VScale(const AttentionProblem& p, const AttentionArgs& a, int64_t b,
               int64_t kh, int64_t j) const {
    if (!p.quantized_kv()) return 1.0f;
    if (bug_ == Bug::kI8ScaleWrongHead) kh = (kh + 1) % p.kv_heads;
    return a.v_scale.Load(b, kh, j, 0);
  }
  // The new rows of an i8 append quantized again with truncation toward
  // zero instead of rounding to nearest (same scale): a quantizer written
  // with a plain float-to-int cast.
  static void TruncateAppended(const KvAppendArgs& a) {
    for (const auto& [src, dst, scales] :
         {std::tuple{&a.new_k, &a.k_cache, &a.k_scale},
          std::tuple{&a.new_v, &a.v_cache, &a.v_scale}}) {
      for (int64_t b = 0; b < dst->shape[0]; ++b)
        for (int64_t h = 0; h < dst->shape[1]; ++h)
          for (int64_t t = 0; t < a.new_lens[b]; ++t) {
            const int64_t pos = a.positions[b] + t;
            const float scale = scales->Load(b, h, pos, 0);
            for (int64_t e = 0; e < dst->shape[3]; ++e) {
              static_cast<int8_t*>(dst->data)[dst->Offset(b, h, pos, e)] =
                  static_cast<int8_t>(src->Load(b, h, t, e) / scale);
            }
          }
    }
  }

  // bias[b, h|0, i, j]; the kSharedBiasByHead bug indexes a shared bias by
  // h anyway (wrapped into the buffer: another sequence's rows).
  float Bias(const TensorView& bias, int64_t b, int64_t h, int64_t i,
             int64_t j) const {
    if (bias.shape[1] != 1) return bias.Load(b, h, i, j);
    if (bug_ != Bug::kSharedBiasByHead) return bias.Load(b, 0, i, j);
    const int64_t row = bias.shape[2] * bias.strides[2];
    const int64_t at = (b * bias.strides[0] + h * row + i * bias.strides[2] +
                        j * bias.strides[3]) %
                       (bias.shape[0] * bias.strides[0]);
    return bias.As<float>()[at];
  }

  Bug bug_;
  std::string name_;
  std::vector<int64_t> positions_, lens_;
};

}  // namespace

std::vector<Bug> AllBugs() {
  std::vector<Bug> bugs;
  for (const auto& e : kBugNames) {
    if (e.value != Bug::kNone) bugs.push_back(e.value);
  }
  return bugs;
}

Tier CatchingTier(Bug bug) {
  return bug < Bug::kSharedBiasByHead ? Tier::kSmoke : Tier::kDefault;
}

std::unique_ptr<Backend> MakeCanary(Bug bug) {
  return std::make_unique<CanaryBackend>(bug);
}

}  // namespace attnkit::harness
