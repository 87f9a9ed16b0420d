#include "runtime/attention_block.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

namespace attnkit {
namespace {

using ::testing::HasSubstr;

AttentionBlockProblem Block() {
  AttentionBlockProblem p;
  p.attention.batch = 2;
  p.attention.q_heads = 4;
  p.attention.kv_heads = 2;
  p.attention.head_dim = 8;
  p.attention.q_lens = {3, 1};
  p.attention.kv_lens = {3, 7};
  p.attention.mask = MaskKind::kCausal;
  p.hidden = 20;
  return p;
}

TEST(AttentionBlockProblemTest, ValidNamesAndWidths) {
  AttentionBlockProblem p = Block();
  EXPECT_TRUE(p.Validate().ok()) << p.Validate().message();
  EXPECT_EQ(p.q_width(), 32);
  EXPECT_EQ(p.kv_width(), 16);
  EXPECT_EQ(p.out_width(), 32);
  p.output_projection = true;
  EXPECT_EQ(p.out_width(), 20);
}

TEST(AttentionBlockProblemTest, BadFieldsAreNamed) {
  AttentionBlockProblem p = Block();
  p.hidden = 0;
  EXPECT_THAT(p.Validate().message(), HasSubstr("hidden=0"));
  p = Block();
  p.hidden = kMaxHidden + 1;
  EXPECT_THAT(p.Validate().message(), HasSubstr("hidden=65537"));
  p = Block();
  p.attention.mask = MaskKind::kNone;  // causal would refuse it itself
  p.attention.kv_lens = {2, 7};
  EXPECT_THAT(p.Validate().message(),
              HasSubstr("kv_lens[0]=2 is shorter than q_lens[0]=3"));
  p = Block();
  p.attention.dtype = DType::kBF16;
  EXPECT_THAT(p.Validate().message(), HasSubstr("dtype=bf16"));
  p = Block();
  p.attention.kv_heads = 3;  // the attention's own checks come first
  EXPECT_THAT(p.Validate().message(), HasSubstr("kv_heads=3"));
}

TEST(AttentionBlockProblemTest, StringRoundTrips) {
  AttentionBlockProblem p = Block();
  p.weight_dtype = DType::kBF16;
  p.qkv_bias = true;
  p.output_projection = true;
  const std::string s = p.ToString();
  EXPECT_THAT(s, HasSubstr(",hidden=20,w=bf16,qkv_bias=1,wo=1"));
  StatusOr<AttentionBlockProblem> back = ParseAttentionBlockProblem(s);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back.value().ToString(), s);
  EXPECT_THAT(ParseAttentionBlockProblem("b=1,q=1,kv=1").status().message(),
              HasSubstr("missing hidden="));
  EXPECT_THAT(ParseAttentionBlockProblem("b=1,q=1,kv=1,hidden=4,wo=2")
                  .status()
                  .message(),
              HasSubstr("wo=2 is not 0 or 1"));
  EXPECT_THAT(ParseAttentionBlockProblem("b=1,q=1,kv=1,hidden=4,w=i4")
                  .status()
                  .message(),
              HasSubstr("w=i4"));
}

TEST(AttentionBlockProblemTest, FlopsCountProjectionsAndAttention) {
  AttentionBlockProblem p = Block();
  const double projections = 2.0 * 4 * 20 * (32 + 2 * 16);  // 4 tokens
  EXPECT_DOUBLE_EQ(p.Flops(), projections + p.attention.Flops());
  p.output_projection = true;
  EXPECT_DOUBLE_EQ(p.Flops(),
                   projections + 2.0 * 4 * 32 * 20 + p.attention.Flops());
}

struct Buffers {
  std::vector<float> x, wq, wk, wv, k, v, out;
  AttentionBlockArgs args;
};

TensorView View(std::vector<float>& buf, std::array<int64_t, 4> shape) {
  buf.assign(static_cast<size_t>(shape[0] * shape[1] * shape[2] * shape[3]),
             0.0f);
  TensorView t;
  t.data = buf.data();
  t.shape = shape;
  t.strides = ContiguousStrides(shape);
  return t;
}

void MakeArgs(const AttentionBlockProblem& p, Buffers& b) {
  const AttentionProblem& at = p.attention;
  b.args.x = View(b.x, {at.batch, 1, at.max_q_len(), p.hidden});
  b.args.wq = View(b.wq, {1, 1, p.hidden, p.q_width()});
  b.args.wk = View(b.wk, {1, 1, p.hidden, p.kv_width()});
  b.args.wv = View(b.wv, {1, 1, p.hidden, p.kv_width()});
  const std::array<int64_t, 4> kv{at.batch, at.kv_heads, at.max_kv_len(),
                                  at.head_dim};
  b.args.k_cache = View(b.k, kv);
  b.args.v_cache = View(b.v, kv);
  b.args.out = View(b.out, {at.batch, 1, at.max_q_len(), p.out_width()});
}

TEST(ValidateBlockArgsTest, NamesTheBadTensor) {
  const AttentionBlockProblem p = Block();
  Buffers b;
  MakeArgs(p, b);
  EXPECT_TRUE(ValidateBlockArgs(p, b.args).ok())
      << ValidateBlockArgs(p, b.args).message();

  AttentionBlockArgs a = b.args;
  a.wq.shape[3] = 31;
  EXPECT_THAT(ValidateBlockArgs(p, a).message(),
              HasSubstr("wq: shape[3]=31, expected 32"));
  a = b.args;
  a.bq = a.wq;
  EXPECT_THAT(ValidateBlockArgs(p, a).message(),
              HasSubstr("bq: given but qkv_bias=0"));
  a = b.args;
  a.k_cache.dtype = DType::kBF16;
  EXPECT_THAT(ValidateBlockArgs(p, a).message(),
              HasSubstr("k_cache: dtype=bf16, expected f32"));
  a = b.args;
  a.v_cache.shape[2] = 6;
  EXPECT_THAT(ValidateBlockArgs(p, a).message(),
              HasSubstr("v_cache: shape[2]=6 is shorter"));
  a = b.args;
  a.x.strides[3] = 2;
  EXPECT_THAT(ValidateBlockArgs(p, a).message(),
              HasSubstr("x: strides[3]=2 must be 1"));

  AttentionBlockProblem with_wo = p;
  with_wo.output_projection = true;
  EXPECT_THAT(ValidateBlockArgs(with_wo, b.args).message(), HasSubstr("wo: "));
}

}  // namespace
}  // namespace attnkit
