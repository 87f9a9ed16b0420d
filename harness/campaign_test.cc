#include "harness/campaign.h"

#include <gtest/gtest.h>

#include <set>

#include "harness/canaries.h"
#include "reference/reference.h"

namespace attnkit::harness {
namespace {

TEST(ShardTest, ShardsPartitionTheCampaign) {
  for (int64_t n : {1, 2, 3, 7}) {
    std::multiset<uint64_t> all;
    for (int64_t i = 0; i < n; ++i) {
      for (uint64_t idx : ShardIndices(100, i, n)) all.insert(idx);
    }
    ASSERT_EQ(all.size(), 100u) << n;
    for (uint64_t idx = 0; idx < 100; ++idx) EXPECT_EQ(all.count(idx), 1u);
  }
}

TEST(CampaignTest, ShardedRunsFindExactlyTheUnshardedFailures) {
  auto canary = MakeCanary(Bug::kCausalShifted);
  Backend* one[] = {canary.get()};
  CampaignOptions o;
  o.tier = Tier::kSmoke;
  o.cases = 60;
  o.shrink_per_backend = 0;  // compare the original cases
  const CampaignResult whole = RunCampaign(o, one);
  ASSERT_GT(whole.failures, 0);
  std::set<std::string> want, got;
  for (const FailureReport& f : whole.reports)
    want.insert(f.original.ToString());
  int64_t cases = 0;
  for (int64_t i = 0; i < 3; ++i) {
    o.shard_index = i;
    o.shard_count = 3;
    const CampaignResult part = RunCampaign(o, one);
    cases += part.cases;
    for (const FailureReport& f : part.reports) {
      EXPECT_TRUE(got.insert(f.original.ToString()).second);  // disjoint
    }
  }
  EXPECT_EQ(cases, 60);
  EXPECT_EQ(got, want);
}

TEST(CampaignTest, SummarizesPerBackendAndShrinksFailures) {
  auto ref = reference::MakeReferenceBackend();
  auto canary = MakeCanary(Bug::kOneElementOff);
  Backend* both[] = {ref.get(), canary.get()};
  CampaignOptions o;
  o.tier = Tier::kSmoke;
  o.cases = 20;
  o.shrink_per_backend = 1;
  int seen = 0;
  const CampaignResult r =
      RunCampaign(o, both, [&](const FailureReport&) { ++seen; });
  EXPECT_EQ(r.cases, 20);
  ASSERT_EQ(r.backends.size(), 2u);
  EXPECT_EQ(r.backends[0].failures, 0);
  EXPECT_EQ(r.backends[0].cases, 20);
  EXPECT_GT(r.backends[1].failures, 0);
  EXPECT_EQ(r.failures, r.backends[1].failures);
  EXPECT_EQ(seen, r.failures);
  ASSERT_FALSE(r.reports.empty());
  EXPECT_TRUE(r.reports[0].was_shrunk);
  EXPECT_FALSE(r.reports.back().was_shrunk || r.reports.size() == 1);
  EXPECT_LE(r.reports[0].shrunk.Cost(), r.reports[0].original.Cost());
}

TEST(CampaignTest, ATimeBudgetBoundsTheRun) {
  auto ref = reference::MakeReferenceBackend();
  Backend* one[] = {ref.get()};
  CampaignOptions o;
  o.tier = Tier::kSmoke;
  o.time_budget_s = 0.3;
  const CampaignResult r = RunCampaign(o, one);
  EXPECT_GT(r.cases, 0);
  EXPECT_LT(r.seconds, 3.0);
}

TEST(CampaignTest, ReplayRejectsABadCaseString) {
  auto ref = reference::MakeReferenceBackend();
  Backend* one[] = {ref.get()};
  auto r = ReplayCase("seed=1,index=2,b=1,q=1,kv=1,mask=sideways", one);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("mask=sideways"), std::string::npos);
}

}  // namespace
}  // namespace attnkit::harness
