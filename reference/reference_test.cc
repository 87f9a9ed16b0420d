#include "reference/reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "reference/oracle.h"
#include "runtime/backend.h"
#include "runtime/random.h"

namespace attnkit::reference {
namespace {

AttentionProblem Tiny(int64_t q_len, int64_t kv_len, int64_t d) {
  AttentionProblem p;
  p.head_dim = d;
  p.q_lens = {q_len};
  p.kv_lens = {kv_len};
  return p;
}

AttentionData MakeData(const AttentionProblem& p) {
  auto d = AttentionData::Create(p);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return std::move(d).value();
}

TEST(ReferenceTest, HandComputedTwoByTwo) {
  AttentionProblem p = Tiny(2, 2, 2);
  p.scale = 1.0f;
  AttentionData d = MakeData(p);
  const AttentionArgs& a = d.args();
  const float q[2][2] = {{1, 0}, {0, 1}}, v[2][2] = {{1, 2}, {3, 4}};
  for (int i = 0; i < 2; ++i)
    for (int e = 0; e < 2; ++e) {
      a.q.Store(0, 0, i, e, q[i][e]);
      a.k.Store(0, 0, i, e, q[i][e]);  // K = I, so S = I
      a.v.Store(0, 0, i, e, v[i][e]);
    }
  ASSERT_TRUE(Attention(p, a).ok());
  // Row 0: softmax([1, 0]) = [e, 1] / (e + 1).
  const float e = std::exp(1.0f);
  EXPECT_NEAR(a.out.Load(0, 0, 0, 0), (e * 1 + 3) / (e + 1), 1e-6);
  EXPECT_NEAR(a.out.Load(0, 0, 0, 1), (e * 2 + 4) / (e + 1), 1e-6);
  EXPECT_NEAR(a.out.Load(0, 0, 1, 0), (1 + e * 3) / (e + 1), 1e-6);
  EXPECT_NEAR(a.out.Load(0, 0, 1, 1), (2 + e * 4) / (e + 1), 1e-6);
}

TEST(ReferenceTest, DecodeCausalQuerySeesWholeContextPrefillDoesNot) {
  // V[j] = j, all logits equal: the output is the mean of visible positions.
  AttentionProblem p = Tiny(3, 5, 1);
  p.mask = MaskKind::kCausal;
  AttentionData d = MakeData(p);
  const AttentionArgs& a = d.args();
  for (int j = 0; j < 5; ++j) a.v.Store(0, 0, j, 0, static_cast<float>(j));
  ASSERT_TRUE(Attention(p, a).ok());
  // Query i sees keys j <= 5 - 3 + i: means of {0..2}, {0..3}, {0..4}.
  EXPECT_FLOAT_EQ(a.out.Load(0, 0, 0, 0), 1.0f);
  EXPECT_FLOAT_EQ(a.out.Load(0, 0, 1, 0), 1.5f);
  EXPECT_FLOAT_EQ(a.out.Load(0, 0, 2, 0), 2.0f);

  p.mask = MaskKind::kWindow;
  p.window = 2;
  ASSERT_TRUE(Attention(p, a).ok());
  EXPECT_FLOAT_EQ(a.out.Load(0, 0, 0, 0), 1.5f);  // keys {1, 2}
  EXPECT_FLOAT_EQ(a.out.Load(0, 0, 2, 0), 3.5f);  // keys {3, 4}
}

TEST(ReferenceTest, FullyMaskedRowsAndEmptySequencesGiveZeros) {
  AttentionProblem p;
  p.batch = 2;
  p.head_dim = 4;
  p.q_lens = {2, 3};
  p.kv_lens = {0, 4};
  p.mask = MaskKind::kBias;
  AttentionData d = MakeData(p);
  Rng rng(1);
  d.Fill(p, rng);
  const AttentionArgs& a = d.args();
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int j = 0; j < 4; ++j) a.bias.Store(1, 0, 1, j, ninf);
  for (int j = 0; j < 4; ++j) a.bias.Store(1, 0, 0, j, 0.0f);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t e = 0; e < 4; ++e) a.out.Store(b, 0, i, e, 99.0f);
  ASSERT_TRUE(Attention(p, a).ok());
  for (int64_t e = 0; e < 4; ++e) {
    EXPECT_EQ(a.out.Load(0, 0, 0, e), 0.0f);  // empty context
    EXPECT_EQ(a.out.Load(0, 0, 1, e), 0.0f);
    EXPECT_EQ(a.out.Load(1, 0, 1, e), 0.0f);  // all -inf bias row
    EXPECT_FALSE(std::isnan(a.out.Load(1, 0, 0, e)));
    EXPECT_NE(a.out.Load(1, 0, 0, e), 0.0f);
  }
}

TEST(ReferenceTest, HugeLogitsDoNotOverflow) {
  AttentionProblem p = Tiny(4, 33, 16);
  AttentionData d = MakeData(p);
  Rng rng(2);
  d.Fill(p, rng, ValueProfile::kHugeLogits);
  ASSERT_TRUE(Attention(p, d.args()).ok());
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t e = 0; e < 16; ++e)
      EXPECT_TRUE(std::isfinite(d.args().out.Load(0, 0, i, e)));
}

// Runs the reference on `p` and returns the output as a vector.
std::vector<float> RunReference(const AttentionProblem& p, uint64_t seed) {
  AttentionData d = MakeData(p);
  Rng rng(seed);
  d.Fill(p, rng);
  EXPECT_TRUE(Attention(p, d.args()).ok());
  std::vector<float> out;
  const TensorView& o = d.args().out;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.q_heads; ++h)
      for (int64_t i = 0; i < p.q_lens[b]; ++i)
        for (int64_t e = 0; e < p.head_dim; ++e)
          out.push_back(o.Load(b, h, i, e));
  return out;
}

TEST(ReferenceTest, LayoutsAreEquivalent) {
  AttentionProblem p;
  p.batch = 2;
  p.q_heads = 4;
  p.kv_heads = 2;
  p.head_dim = 8;
  p.q_lens = {3, 2};
  p.kv_lens = {7, 4};
  p.mask = MaskKind::kCausal;
  // Same seed, same logical values: FillNormal walks logical indices.
  const std::vector<float> bhsd = RunReference(p, 4);
  p.layout = KvLayout::kBSHD;
  EXPECT_EQ(RunReference(p, 4), bhsd);
  p.layout = KvLayout::kTransposedV;
  EXPECT_EQ(RunReference(p, 4), bhsd);
}

TEST(ReferenceTest, GqaEqualsRepeatedKvHeads) {
  AttentionProblem gqa;
  gqa.q_heads = 4;
  gqa.kv_heads = 1;
  gqa.head_dim = 8;
  gqa.q_lens = {3};
  gqa.kv_lens = {6};
  AttentionData d = MakeData(gqa);
  Rng rng(8);
  d.Fill(gqa, rng);
  ASSERT_TRUE(Attention(gqa, d.args()).ok());
  // MHA with the single KV head copied four times must match.
  AttentionProblem mha = gqa;
  mha.kv_heads = 4;
  AttentionData m = MakeData(mha);
  const AttentionArgs &g = d.args(), &a = m.args();
  for (int64_t h = 0; h < 4; ++h) {
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t e = 0; e < 8; ++e)
        a.q.Store(0, h, i, e, g.q.Load(0, h, i, e));
    for (int64_t j = 0; j < 6; ++j)
      for (int64_t e = 0; e < 8; ++e) {
        a.k.Store(0, h, j, e, g.k.Load(0, 0, j, e));
        a.v.Store(0, h, j, e, g.v.Load(0, 0, j, e));
      }
  }
  ASSERT_TRUE(Attention(mha, a).ok());
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t e = 0; e < 8; ++e)
        EXPECT_EQ(a.out.Load(0, h, i, e), g.out.Load(0, h, i, e));
}

TEST(ReferenceTest, InvalidInputIsAStatusNotACrash) {
  AttentionProblem p = Tiny(2, 2, 4);
  AttentionData d = MakeData(p);
  AttentionArgs a = d.args();
  a.k.shape[3] = 3;
  EXPECT_EQ(Attention(p, a).code(), StatusCode::kInvalidArgument);
  p.kv_heads = 0;
  EXPECT_EQ(Attention(p, d.args()).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace attnkit::reference
