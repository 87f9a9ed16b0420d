#include "bench/output_check.h"

#include <gtest/gtest.h>

#include <cmath>

#include "reference/reference.h"
#include "runtime/random.h"

namespace attnkit::bench {
namespace {

struct Case {
  AttentionProblem p;
  AttentionData data;
};

Case Make(int64_t s, MaskKind mask, DType dtype, int64_t hq = 4,
          int64_t hkv = 2) {
  AttentionProblem p;
  p.batch = 2;
  p.q_heads = hq;
  p.kv_heads = hkv;
  p.head_dim = 64;
  p.q_lens = {s, s};
  p.kv_lens = {s + 16, s + 16};  // queries aligned to the end of the context
  p.mask = mask;
  p.dtype = dtype;
  auto d = AttentionData::Create(p);
  EXPECT_TRUE(d.ok());
  const AttentionArgs& a = d->args();
  FillFromPool(a.q, 1);
  FillFromPool(a.k, 2);
  FillFromPool(a.v, 3);
  EXPECT_TRUE(reference::Attention(p, a).ok());
  return {p, std::move(*d)};
}

// Small problems are checked whole, large ones on the first and last rows.
// A correct output must pass both ways (this is what catches a wrong
// sub-problem: a slice with the wrong key prefix disagrees with the
// reference), and one corrupted element in a checked row must fail, naming
// its index.
TEST(OutputCheckTest, CorrectOutputPassesWholeAndSliced) {
  for (MaskKind mask : {MaskKind::kNone, MaskKind::kCausal}) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
      Case small = Make(8, mask, dt);
      EXPECT_TRUE(CheckAgainstOracle(small.p, small.data.args()).ok());
      // With no whole-check budget: the first and last 4 of 40 rows.
      Case big = Make(40, mask, dt);
      const Status s = CheckAgainstOracle(big.p, big.data.args(), 4, 0);
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
  }
}

TEST(OutputCheckTest, CanaryCorruptedElementFails) {
  Case small = Make(8, MaskKind::kCausal, DType::kF32);
  const TensorView& out = small.data.args().out;
  out.Store(1, 3, 5, 7, out.Load(1, 3, 5, 7) + 0.05f);
  Status s = CheckAgainstOracle(small.p, small.data.args());
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("[b=1,h=3,i=5,d=7]"), std::string::npos)
      << s.ToString();

  // An error a rounding model cannot explain, far below any fixed 1e-3-ish
  // threshold: the tolerance model's bound here is a few 1e-7.
  Case slight = Make(8, MaskKind::kNone, DType::kF32);
  const TensorView& so = slight.data.args().out;
  so.Store(0, 1, 2, 3, so.Load(0, 1, 2, 3) + 2e-5f);
  s = CheckAgainstOracle(slight.p, slight.data.args());
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("[b=0,h=1,i=2,d=3]"), std::string::npos)
      << s.ToString();

  Case big = Make(40, MaskKind::kCausal, DType::kF32);
  const TensorView& bo = big.data.args().out;
  for (const int64_t row : {int64_t{1}, int64_t{38}}) {  // first and last 4
    const float keep = bo.Load(0, 3, row, 63);
    bo.Store(0, 3, row, 63, NAN);  // a NaN always fails
    s = CheckAgainstOracle(big.p, big.data.args(), 4, 0);
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("[b=0,h=3,i=" + std::to_string(row) + ",d=63]"),
              std::string::npos)
        << s.ToString();
    bo.Store(0, 3, row, 63, keep);
  }
  EXPECT_TRUE(CheckAgainstOracle(big.p, big.data.args(), 4, 0).ok());
}

// A cache keeps the oracle's result per problem and slice, never a verdict:
// a later check of the same problem against a wrong output still fails,
// naming the element, and a right one passes.
TEST(OutputCheckTest, TruthCacheKeepsTheOracleNotTheVerdict) {
  TruthCache cache;
  Case small = Make(8, MaskKind::kCausal, DType::kF32);
  ASSERT_TRUE(
      CheckAgainstOracle(small.p, small.data.args(), 4, kFullCheckWork, &cache)
          .ok());
  EXPECT_EQ(cache.size(), 1u);  // checked whole
  const TensorView& out = small.data.args().out;
  const float keep = out.Load(1, 3, 5, 7);
  out.Store(1, 3, 5, 7, keep + 0.05f);
  Status s =
      CheckAgainstOracle(small.p, small.data.args(), 4, kFullCheckWork, &cache);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("[b=1,h=3,i=5,d=7]"), std::string::npos)
      << s.ToString();
  EXPECT_EQ(cache.size(), 1u);  // a hit
  out.Store(1, 3, 5, 7, keep);
  EXPECT_TRUE(
      CheckAgainstOracle(small.p, small.data.args(), 4, kFullCheckWork, &cache)
          .ok());

  // Sliced: the first and last rows are two entries (same sub-problem shape
  // without a mask, different rows), and a corrupted last row is found
  // through the cache.
  Case big = Make(40, MaskKind::kNone, DType::kF32);
  ASSERT_TRUE(CheckAgainstOracle(big.p, big.data.args(), 4, 0, &cache).ok());
  EXPECT_EQ(cache.size(), 3u);
  const TensorView& bo = big.data.args().out;
  bo.Store(0, 3, 38, 63, bo.Load(0, 3, 38, 63) + 0.05f);
  s = CheckAgainstOracle(big.p, big.data.args(), 4, 0, &cache);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("[b=0,h=3,i=38,d=63]"), std::string::npos)
      << s.ToString();
  EXPECT_EQ(cache.size(), 3u);

  // Another problem is another key, not the first one's truth.
  Case other = Make(8, MaskKind::kNone, DType::kF32);
  EXPECT_TRUE(
      CheckAgainstOracle(other.p, other.data.args(), 4, kFullCheckWork, &cache)
          .ok());
  EXPECT_EQ(cache.size(), 4u);
}

TEST(OutputCheckTest, FillFromPoolIsReproducibleAndSalted) {
  Tensor a = Tensor::Contiguous(DType::kF32, {1, 2, 3, 64});
  Tensor b = Tensor::Contiguous(DType::kF32, {1, 2, 3, 64});
  Tensor c = Tensor::Contiguous(DType::kF32, {1, 2, 3, 64});
  FillFromPool(a.view, 5);
  FillFromPool(b.view, 5);
  FillFromPool(c.view, 6);
  EXPECT_EQ(a.view.Load(0, 1, 2, 63), b.view.Load(0, 1, 2, 63));
  EXPECT_NE(a.view.Load(0, 1, 2, 63), c.view.Load(0, 1, 2, 63));
  EXPECT_NE(a.view.Load(0, 0, 0, 0), a.view.Load(0, 0, 1, 0));  // rows differ
}

}  // namespace
}  // namespace attnkit::bench
