#include "reference/oracle.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "reference/reference.h"
#include "runtime/random.h"

namespace attnkit::reference {
namespace {

TEST(OracleTest, HandComputedTwoByTwoInDouble) {
  AttentionProblem p;
  p.head_dim = 2;
  p.q_lens = {1};
  p.kv_lens = {2};
  p.scale = 1.0f;
  auto d = AttentionData::Create(p);
  ASSERT_TRUE(d.ok());
  const AttentionArgs& a = d->args();
  a.q.Store(0, 0, 0, 0, 2.0f);
  a.k.Store(0, 0, 0, 0, 1.0f);  // logits [2, 0]
  a.v.Store(0, 0, 0, 0, 1.0f);
  a.v.Store(0, 0, 1, 1, 1.0f);
  std::vector<double> out;
  ASSERT_TRUE(OracleAttention(p, a, &out).ok());
  const double e2 = std::exp(2.0);
  EXPECT_DOUBLE_EQ(out[0], e2 / (e2 + 1));
  EXPECT_DOUBLE_EQ(out[1], 1 / (e2 + 1));
}

// The f32 reference's error against the oracle stays within what f32
// rounding allows: ~1e-6 relative per operation, accumulated over
// O(log kv_len + head_dim) terms; 1e-4 * max(1, |x|) leaves 10x headroom
// while still catching any real semantic difference (which is O(1)).
TEST(OracleTest, ReferenceAgreesWithOracleOnASweep) {
  Rng shapes(2024);
  int cases = 0;
  for (MaskKind mask : {MaskKind::kNone, MaskKind::kCausal, MaskKind::kWindow,
                        MaskKind::kBias}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      for (KvLayout layout :
           {KvLayout::kBHSD, KvLayout::kBSHD, KvLayout::kTransposedV}) {
        AttentionProblem p;
        p.batch = shapes.Range(1, 3);
        p.kv_heads = shapes.Range(1, 2);
        p.q_heads = p.kv_heads * (int64_t{1} << shapes.Range(0, 2));
        p.head_dim = std::vector<int64_t>{1, 7, 16, 33, 64}[shapes.Below(5)];
        p.mask = mask;
        p.dtype = dtype;
        p.layout = layout;
        if (mask == MaskKind::kWindow) p.window = shapes.Range(1, 9);
        p.q_lens.clear();
        p.kv_lens.clear();
        for (int64_t b = 0; b < p.batch; ++b) {
          const int64_t kv = shapes.Range(0, 70);
          p.kv_lens.push_back(kv);
          p.q_lens.push_back(shapes.Range(0, kv));
        }
        auto d = AttentionData::Create(p);
        ASSERT_TRUE(d.ok()) << d.status().ToString();
        Rng values(cases);
        d->Fill(p, values);
        ASSERT_TRUE(Attention(p, d->args()).ok());
        std::vector<double> truth;
        ASSERT_TRUE(OracleAttention(p, d->args(), &truth).ok());
        const TensorView& o = d->args().out;
        for (int64_t b = 0; b < p.batch; ++b)
          for (int64_t h = 0; h < p.q_heads; ++h)
            for (int64_t i = 0; i < p.q_lens[b]; ++i)
              for (int64_t e = 0; e < p.head_dim; ++e) {
                const double t =
                    truth[((b * p.q_heads + h) * p.max_q_len() + i) *
                              p.head_dim +
                          e];
                const double got = o.Load(b, h, i, e);
                ASSERT_FALSE(std::isnan(got)) << p.ToString();
                ASSERT_NEAR(got, t, 1e-4 * std::max(1.0, std::fabs(t)))
                    << p.ToString() << " at b=" << b << " h=" << h << " i=" << i
                    << " e=" << e;
              }
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 24);
}

}  // namespace
}  // namespace attnkit::reference
