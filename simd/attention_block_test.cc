#include "simd/attention_block.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "reference/attention_block.h"
#include "runtime/accounting.h"
#include "runtime/random.h"
#include "simd/simd_backend.h"

namespace attnkit::simd {
namespace {

// The projection kernel against a plain loop: every row count around the
// 4-row block, columns around the 4-vector block and the vector width,
// hidden lengths around the panel size, strided x and w, accumulation.
TEST(ProjectRowsTest, MatchesAPlainLoopOnEveryTail) {
  Rng rng(3);
  for (int64_t rows : {1, 3, 4, 5, 9})
    for (int64_t cols : {1, 15, 16, 17, 64, 65, 130})
      for (int64_t hidden : {1, 7, 33})
        for (bool accumulate : {false, true}) {
          const int64_t xs = hidden + 3, ws = cols + 5;
          std::vector<float> x(static_cast<size_t>(rows * xs)),
              w(static_cast<size_t>(hidden * ws)),
              y(static_cast<size_t>(rows * cols));
          for (float& v : x) v = rng.Uniform(-0.5f, 0.5f);
          for (float& v : w) v = rng.Uniform(-0.5f, 0.5f);
          for (float& v : y) v = rng.Uniform(0.0f, 1.0f);
          std::vector<float> want = y;
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c) {
              double acc = accumulate ? want[r * cols + c] : 0.0;
              for (int64_t h = 0; h < hidden; ++h)
                acc += static_cast<double>(x[r * xs + h]) * w[h * ws + c];
              want[r * cols + c] = static_cast<float>(acc);
            }
          ProjectRows(x.data(), xs, rows, w.data(), ws, hidden, cols, y.data(),
                      accumulate);
          for (size_t i = 0; i < y.size(); ++i)
            ASSERT_NEAR(y[i], want[i], 1e-5)
                << rows << "x" << cols << " hidden " << hidden << " at " << i;
        }
}

AttentionBlockProblem Block(std::string_view text) {
  StatusOr<AttentionBlockProblem> p = ParseAttentionBlockProblem(text);
  EXPECT_TRUE(p.ok()) << p.status().message();
  return p.value();
}

// GQA prefill past the 64-token chunk and the 256-row hidden panel, decode
// after a context (bf16 weights, biases, Wo past the 256-column chunk),
// ragged with an empty sequence in the transposed-V layout, MQA.
const char* const kBlocks[] = {
    "b=1,hq=8,hkv=2,d=32,q=70,kv=70,mask=causal,dtype=f32,layout=bhsd,"
    "hidden=300,w=f32,qkv_bias=0,wo=0",
    "b=2,hq=4,hkv=1,d=16,q=1:1,kv=37:9,mask=window:4,dtype=f32,layout=bshd,"
    "hidden=33,w=bf16,qkv_bias=1,wo=1",
    "b=3,hq=2,hkv=2,d=5,q=3:0:7,kv=6:4:7,mask=bias,dtype=f32,layout=tv,"
    "hidden=17,w=f32,qkv_bias=1,wo=0",
    "b=1,hq=6,hkv=1,d=24,q=9,kv=20,mask=none,dtype=f32,layout=bhsd,"
    "hidden=270,w=bf16,qkv_bias=0,wo=1",
};

// The simd block against the f64 oracle (as the reference block is held in
// reference/attention_block_test.cc: 1e-4 of 1 + |oracle|), its new cache
// slots too, and nothing else of the cache written.
// Both forms: the fused block through the backend, and the unfused one
// (whole projections, append, attention) on the same backend.
enum class Form { kFused, kUnfused };

Status RunForm(Form form, Backend& simd, BlockWorkspace& ws,
               const AttentionBlockProblem& p, const AttentionBlockArgs& a) {
  if (form == Form::kFused) return simd.AttentionBlock(p, a);
  return UnfusedAttentionBlock(simd, ws, 2, p, a);
}

class SimdBlockFormTest : public ::testing::TestWithParam<Form> {};

TEST_P(SimdBlockFormTest, AgreesWithTheOracle) {
  std::unique_ptr<Backend> simd = MakeSimdBackend();
  BlockWorkspace ws;
  for (const char* text : kBlocks) {
    const AttentionBlockProblem p = Block(text);
    const AttentionProblem& at = p.attention;
    StatusOr<AttentionBlockData> d = AttentionBlockData::Create(p);
    ASSERT_TRUE(d.ok()) << d.status().message();
    Rng rng(17);
    d.value().Fill(p, rng);
    const AttentionBlockArgs& a = d.value().args();
    reference::BlockOracle o;
    ASSERT_TRUE(reference::OracleAttentionBlock(p, a, &o).ok());
    ASSERT_TRUE(simd->SupportsBlock(p).ok());
    // Twice: the second call reuses the workspaces and must agree.
    for (int call = 0; call < 2; ++call) {
      ASSERT_TRUE(RunForm(GetParam(), *simd, ws, p, a).ok()) << text;
      for (int64_t b = 0; b < at.batch; ++b)
        for (int64_t t = 0; t < at.q_lens[b]; ++t)
          for (int64_t c = 0; c < p.out_width(); ++c) {
            const double want =
                o.out[(b * at.max_q_len() + t) * p.out_width() + c];
            ASSERT_NEAR(a.out.Load(b, 0, t, c), want,
                        1e-4 * (1 + std::fabs(want)))
                << text << " out " << b << "," << t << "," << c;
          }
      for (int64_t b = 0; b < at.batch; ++b) {
        const int64_t p0 = at.kv_lens[b] - at.q_lens[b];
        for (int64_t h = 0; h < at.kv_heads; ++h)
          for (int64_t s = p0; s < a.k_cache.shape[2]; ++s)
            for (int64_t e = 0; e < at.head_dim; ++e) {
              const float k = a.k_cache.Load(b, h, s, e);
              if (s >= at.kv_lens[b]) {  // past the context: still poison
                ASSERT_TRUE(std::isnan(k)) << text;
                continue;
              }
              const size_t i = static_cast<size_t>(
                  (b * at.max_q_len() + s - p0) * p.kv_width() +
                  h * at.head_dim + e);
              ASSERT_NEAR(k, o.k[i], 1e-4 * (1 + std::fabs(o.k[i]))) << text;
              ASSERT_NEAR(a.v_cache.Load(b, h, s, e), o.v[i],
                          1e-4 * (1 + std::fabs(o.v[i])))
                  << text;
            }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(BothForms, SimdBlockFormTest,
                         ::testing::Values(Form::kFused, Form::kUnfused),
                         [](const auto& info) {
                           return info.param == Form::kFused ? "fused"
                                                             : "unfused";
                         });

TEST(SimdAttentionBlockTest, BadArgumentsAreNamed) {
  std::unique_ptr<Backend> simd = MakeSimdBackend();
  const AttentionBlockProblem p = Block(kBlocks[2]);
  StatusOr<AttentionBlockData> d = AttentionBlockData::Create(p);
  ASSERT_TRUE(d.ok());
  AttentionBlockArgs a = d.value().args();
  a.bk = TensorView();
  const Status s = simd->AttentionBlock(p, a);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("bk: "), std::string::npos) << s.message();
}

// Decode with the block: each step projects one new token per sequence
// straight into its cache slot and attends over the grown prefix. Once warm
// (workspaces reserved for the longest context), a step allocates nothing
// and copies nothing: the only bytes it writes besides out are the K/V
// projections' own stores into the slots.
TEST(SimdAttentionBlockTest, DecodeStepsAllocateAndCopyNothingOnceWarm) {
  std::unique_ptr<Backend> simd = MakeSimdBackend();
  AttentionBlockProblem last = Block(
      "b=2,hq=8,hkv=2,d=64,q=1:1,kv=48:40,mask=causal,dtype=f32,layout=bhsd,"
      "hidden=256,w=bf16,qkv_bias=1,wo=1");
  StatusOr<AttentionBlockData> d = AttentionBlockData::Create(last);
  ASSERT_TRUE(d.ok());
  Rng rng(5);
  d.value().Fill(last, rng);
  const AttentionBlockArgs& a = d.value().args();
  ASSERT_TRUE(simd->ReserveWorkspace(last.attention).ok());
  ASSERT_TRUE(simd->AttentionBlock(last, a).ok());  // warm: sizes everything
  {  // the meter counts in this binary (the hooks are linked)
    accounting::Meter meter;
    auto* probe = new std::vector<float>(1000);
    EXPECT_GE(meter.Read().allocs, 1);
    delete probe;
  }
  for (int64_t step = 8; step >= 0; --step) {
    AttentionBlockProblem p = last;
    p.attention.kv_lens = {48 - step, 40 - step};
    accounting::Meter meter;
    ASSERT_TRUE(simd->AttentionBlock(p, a).ok());
    const accounting::Counts c = meter.Read();
    EXPECT_EQ(c.allocs, 0) << "step " << step;
    EXPECT_EQ(c.bytes_copied, 0) << "step " << step;
  }
  // The unfused form, warm too, allocates nothing either, but its K/V go
  // through a transient buffer: the append copies them, and the meter sees
  // exactly those bytes (2 sequences x 1 token x K and V x hkv*d f32).
  BlockWorkspace ws;
  ASSERT_TRUE(UnfusedAttentionBlock(*simd, ws, 2, last, a).ok());
  accounting::Meter meter;
  ASSERT_TRUE(UnfusedAttentionBlock(*simd, ws, 2, last, a).ok());
  const accounting::Counts c = meter.Read();
  EXPECT_EQ(c.allocs, 0);
  EXPECT_EQ(c.bytes_copied, 2 * 1 * 2 * last.kv_width() * 4);
}

}  // namespace
}  // namespace attnkit::simd
