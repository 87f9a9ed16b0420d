#include "harness/shrink.h"

#include <gtest/gtest.h>

#include "harness/canaries.h"
#include "harness/test_support.h"

namespace attnkit::harness {
namespace {

using testing::CaseFrom;
using testing::RunOne;

TEST(ShrinkCandidatesTest, AreValidAndCheaper) {
  for (uint64_t i = 0; i < 200; ++i) {
    const Case c = GenerateCase(Tier::kDefault, 4, i);
    for (const Case& t : ShrinkCandidates(c)) {
      EXPECT_TRUE(ValidateCase(t).ok()) << t.ToString();
      EXPECT_LT(t.Cost(), c.Cost()) << t.ToString();
    }
  }
}

TEST(ShrinkTest, WrongGqaMappingShrinksToTwoHeadsAndOneKey) {
  auto canary = MakeCanary(Bug::kWrongGqaMapping);
  const Case big = CaseFrom(
      "seed=1,index=7,values=dominant_key,pad=5,b=3,hq=8,hkv=2,d=96,"
      "q=9:3:0,kv=40:17:8,mask=window:13,scale=0.25,dtype=bf16,layout=bshd");
  const CheckResult fail = RunOne(big, *canary);
  ASSERT_TRUE(fail.failed());
  const ShrinkResult s = ShrinkOnBackend(big, fail, *canary);
  const AttentionProblem& p = s.smallest.problem;
  // The bug needs two kv heads and a group: hq=4,hkv=2 (h=1 reads kv head
  // 1 instead of 0). Everything else simplifies away.
  EXPECT_EQ(p.batch, 1);
  EXPECT_EQ(p.kv_heads, 2);
  EXPECT_EQ(p.q_heads, 4);
  EXPECT_EQ(p.head_dim, 1);
  EXPECT_EQ(p.q_lens, (std::vector<int64_t>{1}));
  EXPECT_EQ(p.kv_lens, (std::vector<int64_t>{1}));
  EXPECT_EQ(p.mask, MaskKind::kNone);
  EXPECT_EQ(p.dtype, DType::kF32);
  EXPECT_EQ(p.layout, KvLayout::kBHSD);
  EXPECT_FALSE(p.scale.has_value());
  EXPECT_EQ(s.smallest.profile, ValueProfile::kNormal);
  EXPECT_EQ(s.smallest.kv_pad, 0);
  EXPECT_EQ(s.failure.outcome, Outcome::kMismatch);
  EXPECT_GT(s.accepted, 5);
}

TEST(ShrinkTest, TailOffByOneKeepsAPartialTile) {
  auto canary = MakeCanary(Bug::kTailOffByOne);
  const Case big =
      CaseFrom("seed=2,index=1,b=2,hq=2,hkv=1,d=33,q=5:2,kv=77:40,mask=causal");
  const CheckResult fail = RunOne(big, *canary);
  ASSERT_TRUE(fail.failed());
  const ShrinkResult s = ShrinkOnBackend(big, fail, *canary);
  const AttentionProblem& p = s.smallest.problem;
  EXPECT_EQ(p.batch, 1);
  EXPECT_EQ(p.q_heads, 1);
  // The dropped key is the last of a partial tile of 16; one key alone is
  // the smallest such tile (dropping it leaves zeros instead of v).
  EXPECT_EQ(p.kv_lens[0], 1);
  EXPECT_EQ(p.q_lens[0], 1);
}

TEST(ShrinkTest, TheShrunkCaseReplaysTheSameFailureFromItsString) {
  auto canary = MakeCanary(Bug::kCausalShifted);
  const Case big = CaseFrom(
      "seed=5,index=11,values=constant_rows,b=2,hq=3,hkv=1,d=20,q=6:4,"
      "kv=30:9,mask=causal,dtype=bf16");
  const CheckResult fail = RunOne(big, *canary);
  ASSERT_TRUE(fail.failed());
  const ShrinkResult s = ShrinkOnBackend(big, fail, *canary);
  auto replayed = ParseCase(s.smallest.ToString());
  ASSERT_TRUE(replayed.ok());
  const CheckResult again = RunOne(*replayed, *canary);
  EXPECT_EQ(again.outcome, s.failure.outcome);
  EXPECT_EQ(again.error.max_abs, s.failure.error.max_abs);  // bit for bit
  EXPECT_EQ(again.error.max_abs_index, s.failure.error.max_abs_index);
  EXPECT_EQ(again.error.mismatched, s.failure.error.mismatched);
  EXPECT_LT(s.smallest.Cost(), big.Cost() / 50);
}

// A failure that needs a context past an edge shrinks to the edge: the
// 12-bit key index fails from key 4096 on, so the smallest failing context
// is 4097 keys -- reached in a few hundred candidates from 5000, not one key
// at a time.
TEST(ShrinkTest, ALengthEdgeShrinksToTheEdge) {
  auto canary = MakeCanary(Bug::kKeyIndexWraps4096);
  const Case big = CaseFrom(
      "seed=2,index=7,b=2,hq=2,hkv=1,d=16,q=1:1,kv=5000:300,mask=none");
  const CheckResult fail = RunOne(big, *canary);
  ASSERT_TRUE(fail.failed());
  const ShrinkResult s = ShrinkOnBackend(big, fail, *canary);
  EXPECT_EQ(s.smallest.problem.batch, 1) << s.smallest.ToString();
  EXPECT_EQ(s.smallest.problem.kv_lens[0], 4097) << s.smallest.ToString();
  EXPECT_LT(s.attempts, 400);
}

// A smaller case sees the original's inputs at every coordinate it keeps:
// shorter contexts, fewer heads, a dropped sequence (its neighbours keep
// theirs through from=), a narrower head -- so a value-dependent failure
// survives shrinking, and the shrunk string replays it exactly.
TEST(ShrinkTest, CandidatesSliceTheOriginalInputs) {
  const Case c = *ParseCase(
      "seed=5,index=3,values=normal,pad=0,steps=0,b=3,hq=4,hkv=2,d=16,"
      "q=3:2:4,kv=9:7:8,mask=none,dtype=f32,layout=bshd");
  auto data_of = [](const Case& x) {
    AttentionData d = AttentionData::Create(x.problem, 0, x.io).value();
    Rng rng = ValueRng(x);
    d.Fill(x.problem, rng, x.profile, x.origins);
    return d;
  };
  const AttentionData full = data_of(c);
  int64_t checked = 0;
  for (const Case& t : ShrinkCandidates(c)) {
    if (t.profile != c.profile || t.problem.dtype != c.problem.dtype) {
      continue;
    }
    const AttentionData small = data_of(t);
    const AttentionProblem& p = t.problem;
    for (int64_t b = 0; b < p.batch; ++b) {
      const int64_t ob = t.origins.empty() ? b : t.origins[b];
      for (int64_t h = 0; h < p.kv_heads; ++h)
        for (int64_t j = 0; j < p.kv_lens[b]; ++j)
          for (int64_t e = 0; e < p.head_dim; ++e) {
            ASSERT_EQ(small.args().k.Load(b, h, j, e),
                      full.args().k.Load(ob, h, j, e))
                << t.ToString();
            ASSERT_EQ(small.args().v.Load(b, h, j, e),
                      full.args().v.Load(ob, h, j, e));
          }
      for (int64_t h = 0; h < p.q_heads; ++h)
        for (int64_t i = 0; i < p.q_lens[b]; ++i)
          for (int64_t e = 0; e < p.head_dim; ++e) {
            ASSERT_EQ(small.args().q.Load(b, h, i, e),
                      full.args().q.Load(ob, h, i, e));
          }
    }
    ++checked;
  }
  EXPECT_GT(checked, 20);
  // Dropping the first sequence keeps the others' values, named in from=.
  bool dropped_first = false;
  for (const Case& t : ShrinkCandidates(c)) {
    if (t.origins == std::vector<int64_t>{1, 2}) {
      dropped_first = true;
      EXPECT_NE(t.ToString().find(",from=1:2,"), std::string::npos);
      EXPECT_EQ(ParseCase(t.ToString())->origins, t.origins);
    }
  }
  EXPECT_TRUE(dropped_first);
}

TEST(ShrinkTest, StopsAtTheAttemptBudget) {
  auto canary = MakeCanary(Bug::kOneElementOff);
  const Case big = CaseFrom(
      "seed=1,index=1,b=4,hq=4,hkv=4,d=64,q=8:8:8:8,"
      "kv=64:64:64:64");
  const CheckResult fail = RunOne(big, *canary);
  ASSERT_TRUE(fail.failed());
  const ShrinkResult s = ShrinkOnBackend(big, fail, *canary, 3);
  EXPECT_EQ(s.attempts, 3);
}

}  // namespace
}  // namespace attnkit::harness
