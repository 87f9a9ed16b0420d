#include "simd/attention_block.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "harness/test_support.h"
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
// The unfused form as a backend, so the runner can check it too.
class Unfused final : public Backend {
 public:
  explicit Unfused(Backend& simd) : simd_(simd) {}
  std::string_view name() const override { return "simd_unfused"; }
  Status Attention(const AttentionProblem& p, const AttentionArgs& a) override {
    return simd_.Attention(p, a);
  }
  Status SupportsBlock(const AttentionBlockProblem& p) const override {
    return p.Validate();
  }
  Status AttentionBlock(const AttentionBlockProblem& p,
                        const AttentionBlockArgs& a) override {
    return UnfusedAttentionBlock(simd_, ws_, 2, p, a);
  }

 private:
  Backend& simd_;
  BlockWorkspace ws_;
};

// Both forms through the runner: output, new cache slots and every other
// cache byte against the f64 oracle with the project's block tolerance;
// each case twice (the second call reuses warm workspaces).
TEST(SimdAttentionBlockTest, BothFormsMatchTheOracle) {
  std::unique_ptr<Backend> simd = MakeSimdBackend();
  Unfused unfused(*simd);
  Backend* both[] = {simd.get(), &unfused, simd.get(), &unfused};
  for (const char* text : kBlocks) {
    SCOPED_TRACE(text);
    harness::testing::ExpectBlockMatchesOracle(both, Block(text), 17);
  }
}

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
  harness::testing::ExpectBlockDecodeStepsAllocateAndCopyNothing(*simd, last, a,
                                                                 8);
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
