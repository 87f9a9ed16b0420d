#include "harness/canaries.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

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
                   const AttentionArgs& args) override {
    ATTNKIT_RETURN_IF_ERROR(ValidateArgs(p, args));
    const float scale = bug_ == Bug::kWrongScale
                            ? 1.0f / std::sqrt(static_cast<float>(p.head_dim))
                            : p.EffectiveScale();
    const float ninf = -std::numeric_limits<float>::infinity();
    const int64_t d = p.head_dim;
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
                dot += q[e] * args.k.Load(b, kh, j, e);
              }
              float s = scale * dot;
              if (p.mask == MaskKind::kBias) {
                s += args.bias.Load(b, args.bias.shape[1] == 1 ? 0 : h, i, j);
              }
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
              for (int64_t e = 0; e < d; ++e) {
                acc[e] += wv * args.v.Load(b, kh, j, e);
              }
            }
            m = m_new;
          }
          for (int64_t e = 0; e < d; ++e) {
            args.out.Store(b, h, i, e, l > 0 ? acc[e] / l : 0.0f);
          }
        }
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

  Status AppendKv(const KvAppendArgs& a) override {
    ATTNKIT_RETURN_IF_ERROR(ValidateAppend(a));
    AppendKvStrided(a);
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

 private:
  Bug bug_;
  std::string name_;
};

}  // namespace

std::vector<Bug> AllBugs() {
  std::vector<Bug> bugs;
  for (const auto& e : kBugNames) {
    if (e.value != Bug::kNone) bugs.push_back(e.value);
  }
  return bugs;
}

std::unique_ptr<Backend> MakeCanary(Bug bug) {
  return std::make_unique<CanaryBackend>(bug);
}

}  // namespace attnkit::harness
