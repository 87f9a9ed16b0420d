#include "reference/attention_block.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "reference/reference.h"
#include "runtime/random.h"

namespace attnkit::reference {
namespace {

AttentionBlockProblem Block(std::string_view text) {
  StatusOr<AttentionBlockProblem> p = ParseAttentionBlockProblem(text);
  EXPECT_TRUE(p.ok()) << p.status().message();
  return p.value();
}

// Every shape family the block has: GQA prefill, decode after a context,
// ragged batches with an empty sequence, every mask, every cache layout,
// bf16 weights, q/k/v biases, the output projection, odd sizes.
const char* const kBlocks[] = {
    "b=1,hq=4,hkv=2,d=8,q=5,kv=5,mask=causal,dtype=f32,layout=bhsd,"
    "hidden=24,w=f32,qkv_bias=0,wo=0",
    "b=2,hq=4,hkv=1,d=16,q=1:1,kv=37:9,mask=window:4,dtype=f32,layout=bshd,"
    "hidden=33,w=bf16,qkv_bias=1,wo=1",
    "b=3,hq=2,hkv=2,d=5,q=3:0:7,kv=6:4:7,mask=bias,dtype=f32,layout=tv,"
    "hidden=17,w=f32,qkv_bias=1,wo=0",
    "b=1,hq=6,hkv=3,d=12,q=9,kv=20,mask=none,dtype=f32,layout=bhsd,"
    "hidden=40,w=bf16,qkv_bias=0,wo=1",
};

struct Prepared {
  AttentionBlockData data;
  BlockOracle oracle;
};

Prepared Prepare(const AttentionBlockProblem& p, uint64_t seed) {
  StatusOr<AttentionBlockData> d = AttentionBlockData::Create(p);
  EXPECT_TRUE(d.ok()) << d.status().message();
  Prepared r{std::move(d).value(), {}};
  Rng rng(seed);
  r.data.Fill(p, rng);
  EXPECT_TRUE(OracleAttentionBlock(p, r.data.args(), &r.oracle).ok());
  return r;
}

// max |out - oracle| / (1 + |oracle|) over the rows the block writes.
double OutputError(const AttentionBlockProblem& p, const AttentionBlockArgs& a,
                   const BlockOracle& o) {
  const AttentionProblem& at = p.attention;
  double worst = 0;
  for (int64_t b = 0; b < at.batch; ++b)
    for (int64_t t = 0; t < at.q_lens[b]; ++t)
      for (int64_t c = 0; c < p.out_width(); ++c) {
        const double want = o.out[(b * at.max_q_len() + t) * p.out_width() + c];
        const double got = a.out.Load(b, 0, t, c);
        worst = std::max(worst, std::fabs(got - want) / (1 + std::fabs(want)));
        if (std::isnan(got)) return INFINITY;
      }
  return worst;
}

// The f32 naive block against the f64 oracle: f32 rounding over a hidden-
// long dot product, then the attention's own (~1e-6 relative each): 1e-4
// leaves ample headroom and is far below any semantic error (O(0.1)).
TEST(AttentionBlockTest, ReferenceAgreesWithOracle) {
  for (const char* text : kBlocks) {
    const AttentionBlockProblem p = Block(text);
    Prepared r = Prepare(p, 7);
    ASSERT_TRUE(AttentionBlock(p, r.data.args()).ok()) << text;
    EXPECT_LT(OutputError(p, r.data.args(), r.oracle), 1e-4) << text;
  }
}

// The block writes the new tokens' K/V into the cache slots [kv - q, kv)
// (equal to the oracle's projections up to f32 rounding) and nothing else:
// the context is untouched and every slot past kv_len is still poison.
TEST(AttentionBlockTest, WritesOnlyTheNewTokensCacheSlots) {
  for (const char* text : kBlocks) {
    const AttentionBlockProblem p = Block(text);
    const AttentionProblem& at = p.attention;
    Prepared r = Prepare(p, 11);
    const TensorView &k = r.data.args().k_cache, &v = r.data.args().v_cache;
    std::vector<float> before_k, before_v;
    for (int64_t b = 0; b < at.batch; ++b)
      for (int64_t h = 0; h < at.kv_heads; ++h)
        for (int64_t s = 0; s < k.shape[2]; ++s)
          for (int64_t e = 0; e < at.head_dim; ++e) {
            before_k.push_back(k.Load(b, h, s, e));
            before_v.push_back(v.Load(b, h, s, e));
          }
    ASSERT_TRUE(AttentionBlock(p, r.data.args()).ok()) << text;
    size_t idx = 0;
    for (int64_t b = 0; b < at.batch; ++b) {
      const int64_t p0 = at.kv_lens[b] - at.q_lens[b];
      for (int64_t h = 0; h < at.kv_heads; ++h)
        for (int64_t s = 0; s < k.shape[2]; ++s)
          for (int64_t e = 0; e < at.head_dim; ++e, ++idx) {
            const float gk = k.Load(b, h, s, e), gv = v.Load(b, h, s, e);
            if (s < p0 || s >= at.kv_lens[b]) {
              // Bit for bit what was there (NaN stays NaN).
              EXPECT_EQ(std::isnan(gk), std::isnan(before_k[idx])) << text;
              if (!std::isnan(gk)) {
                EXPECT_EQ(gk, before_k[idx]) << text;
              }
              if (!std::isnan(gv)) {
                EXPECT_EQ(gv, before_v[idx]) << text;
              }
              continue;
            }
            const size_t o = static_cast<size_t>(
                ((b * at.max_q_len()) + s - p0) * p.kv_width() +
                h * at.head_dim + e);
            EXPECT_NEAR(gk, r.oracle.k[o],
                        1e-4 * (1 + std::fabs(r.oracle.k[o])))
                << text << " k " << b << "," << h << "," << s << "," << e;
            EXPECT_NEAR(gv, r.oracle.v[o],
                        1e-4 * (1 + std::fabs(r.oracle.v[o])))
                << text;
          }
    }
  }
}

// The oracle sees the bugs a fused block kernel makes: K projected with Wv,
// a head's weight slice shifted by one column, Wo's rows of the wrong head.
// Each is O(0.1) off, three orders of magnitude past the reference's error.
TEST(AttentionBlockTest, PlantedBugsAreFarOutsideTheReferencesError) {
  const AttentionBlockProblem p = Block(kBlocks[3]);
  {
    Prepared r = Prepare(p, 3);
    AttentionBlockArgs bug = r.data.args();
    bug.wk = bug.wv;
    ASSERT_TRUE(AttentionBlock(p, bug).ok());
    EXPECT_GT(OutputError(p, r.data.args(), r.oracle), 1e-2);
  }
  {
    // Wq's columns read one to the right: head h's slice starts at its
    // dim 1 and ends in the next head's dim 0 (f32 weights: kBlocks[0]).
    const AttentionBlockProblem f32 = Block(kBlocks[0]);
    Prepared r = Prepare(f32, 3);
    AttentionBlockArgs bug = r.data.args();
    const TensorView& wq = bug.wq;
    std::vector<float> shifted(static_cast<size_t>(wq.shape[2] * wq.shape[3]));
    for (int64_t h = 0; h < wq.shape[2]; ++h)
      for (int64_t c = 0; c < wq.shape[3]; ++c)
        shifted[h * wq.shape[3] + c] = wq.Load(0, 0, h, (c + 1) % wq.shape[3]);
    bug.wq.data = shifted.data();
    ASSERT_TRUE(AttentionBlock(f32, bug).ok());
    EXPECT_GT(OutputError(f32, r.data.args(), r.oracle), 1e-2);
  }
  {
    // Wo's rows of head h used for head h + 1 (a row-split off by a head).
    Prepared r = Prepare(p, 3);
    AttentionBlockArgs bug = r.data.args();
    const TensorView& wo = bug.wo;
    const int64_t rows = wo.shape[2], cols = wo.shape[3];
    const int64_t d = p.attention.head_dim, bytes = DTypeSize(wo.dtype);
    std::vector<char> rolled(static_cast<size_t>(rows * cols * bytes));
    for (int64_t row = 0; row < rows; ++row)
      std::memcpy(
          rolled.data() + row * cols * bytes,
          static_cast<const char*>(wo.data) + ((row + d) % rows) * cols * bytes,
          static_cast<size_t>(cols * bytes));
    bug.wo.data = rolled.data();
    ASSERT_TRUE(AttentionBlock(p, bug).ok());
    EXPECT_GT(OutputError(p, r.data.args(), r.oracle), 1e-2);
  }
}

TEST(AttentionBlockTest, BadArgumentsAreAStatusNamingTheTensor) {
  const AttentionBlockProblem p = Block(kBlocks[0]);
  Prepared r = Prepare(p, 1);
  AttentionBlockArgs a = r.data.args();
  a.wv.shape[3] = 3;
  EXPECT_THAT(AttentionBlock(p, a).message(), ::testing::HasSubstr("wv: "));
  BlockOracle o;
  EXPECT_THAT(OracleAttentionBlock(p, a, &o).message(),
              ::testing::HasSubstr("wv: "));
}

// The reference backend answers the block through the Backend interface;
// a backend without a block says so (UNIMPLEMENTED, never an OK that did
// nothing).
TEST(AttentionBlockTest, BackendInterface) {
  const AttentionBlockProblem p = Block(kBlocks[1]);
  Prepared r = Prepare(p, 5);
  std::unique_ptr<Backend> ref = MakeReferenceBackend();
  EXPECT_TRUE(ref->SupportsBlock(p).ok());
  ASSERT_TRUE(ref->AttentionBlock(p, r.data.args()).ok());
  EXPECT_LT(OutputError(p, r.data.args(), r.oracle), 1e-4);

  struct NoBlock final : Backend {
    std::string_view name() const override { return "noblock"; }
    Status Attention(const AttentionProblem&, const AttentionArgs&) override {
      return Status::Ok();
    }
  } none;
  EXPECT_EQ(none.SupportsBlock(p).code(), StatusCode::kUnimplemented);
  EXPECT_EQ(none.AttentionBlock(p, r.data.args()).code(),
            StatusCode::kUnimplemented);
  EXPECT_THAT(none.AttentionBlock(p, r.data.args()).message(),
              ::testing::HasSubstr("noblock: no attention block"));
}

}  // namespace
}  // namespace attnkit::reference
