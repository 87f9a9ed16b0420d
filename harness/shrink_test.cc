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
