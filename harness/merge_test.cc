#include "harness/merge.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "harness/canaries.h"
#include "reference/reference.h"
#include "runtime/limits.h"

namespace attnkit::harness {
namespace {

// One campaign (smoke, seed 1, 60 cases) of the reference and a canary that
// fails often, run whole or as `count` shards; each written as a check's
// JSON would be and read back.
struct ShardRun {
  CampaignResult result;
  std::string json;
};
ShardRun RunShard(int64_t index, int64_t count) {
  static auto ref = reference::MakeReferenceBackend();
  static auto canary = MakeCanary(Bug::kCausalShifted);
  Backend* both[] = {ref.get(), canary.get()};
  CampaignOptions o;
  o.tier = Tier::kSmoke;
  o.cases = 60;
  o.shard_index = index;
  o.shard_count = count;
  o.shrink_per_backend = 1;
  ShardRun run{RunCampaign(o, both), ""};
  JsonContext ctx;
  ctx.tier = "smoke";
  ctx.seed = 1;
  ctx.shard = std::to_string(index) + "/" + std::to_string(count);
  ctx.named_backends = {"canary_causal_shifted"};
  ctx.decode.ran = true;
  ctx.decode.compared = 3;
  run.json = CampaignJson(run.result, ctx);
  return run;
}

CampaignReport Parsed(const ShardRun& run, const std::string& source) {
  auto r = ParseCheckJson(run.json, source);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return std::move(*r);
}

std::vector<std::string> FailingCases(const CampaignResult& r) {
  std::vector<std::string> out;
  for (const FailureReport& f : r.reports) {
    out.push_back(f.backend + " " + f.original.ToString());
  }
  return out;
}

TEST(MergeTest, MergedShardsEqualTheUnshardedRun) {
  const ShardRun whole = RunShard(0, 1);
  ASSERT_GT(whole.result.failures, 0);
  std::vector<CampaignReport> shards;
  for (int64_t i : {2, 0, 1}) {  // any order
    shards.push_back(Parsed(RunShard(i, 3), "s" + std::to_string(i)));
  }
  auto merged = MergeShards(std::move(shards));
  ASSERT_TRUE(merged.ok()) << merged.status().ToString();
  const CampaignResult& m = merged->result;
  EXPECT_EQ(m.cases, whole.result.cases);
  EXPECT_EQ(m.failures, whole.result.failures);
  ASSERT_EQ(m.backends.size(), whole.result.backends.size());
  for (size_t i = 0; i < m.backends.size(); ++i) {
    const BackendSummary &a = m.backends[i], &b = whole.result.backends[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.cases, b.cases);
    EXPECT_EQ(a.failures, b.failures);
    EXPECT_EQ(a.skipped, b.skipped);
    EXPECT_EQ(a.worst_ratio, b.worst_ratio);
  }
  // The same failing (backend, case) pairs in the unsharded run's order.
  EXPECT_EQ(FailingCases(m), FailingCases(whole.result));
  EXPECT_EQ(merged->context.shard, "all/3");
  // One verdict, the unsharded one's.
  JsonContext ctx = merged->context;
  EXPECT_EQ(CheckVerdict(m, ctx, nullptr), kExitFinding);
  // The merged JSON reads back as the same campaign.
  auto again = ParseCheckJson(CampaignJson(m, merged->context), "merged");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->result.cases, m.cases);
  EXPECT_EQ(FailingCases(again->result), FailingCases(m));
  // ... but is no shard to merge again.
  std::vector<CampaignReport> twice;
  twice.push_back(std::move(*again));
  auto remerged = MergeShards(std::move(twice));
  ASSERT_FALSE(remerged.ok());
  EXPECT_NE(remerged.status().message().find("merged is a merged report"),
            std::string::npos)
      << remerged.status().message();
}

TEST(MergeTest, AFailureReadBackPrintsAsItWasWritten) {
  const ShardRun whole = RunShard(0, 1);
  const CampaignReport back = Parsed(whole, "whole");
  ASSERT_EQ(back.result.reports.size(), whole.result.reports.size());
  for (size_t i = 0; i < back.result.reports.size(); ++i) {
    EXPECT_EQ(FormatFailure(back.result.reports[i]),
              FormatFailure(whole.result.reports[i]));
  }
}

TEST(MergeTest, ShardsThatAreNotOneCampaignAreRefusedByName) {
  const ShardRun s0 = RunShard(0, 2), s1 = RunShard(1, 2);
  auto merge = [](std::vector<CampaignReport> v) {
    return MergeShards(std::move(v));
  };
  auto missing = merge({Parsed(s0, "a.json")});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("missing shard(s) 1/2 of 2"),
            std::string::npos)
      << missing.status().message();
  auto twice = merge({Parsed(s0, "a.json"), Parsed(s0, "b.json")});
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find(
                "shard 0/2 is given twice: a.json and b.json"),
            std::string::npos)
      << twice.status().message();
  CampaignReport other_seed = Parsed(s1, "c.json");
  other_seed.context.seed = 7;
  auto seeds = merge({Parsed(s0, "a.json"), std::move(other_seed)});
  ASSERT_FALSE(seeds.ok());
  EXPECT_NE(seeds.status().message().find("seed=7 but seed=1"),
            std::string::npos)
      << seeds.status().message();
  CampaignReport other_count = Parsed(RunShard(1, 3), "d.json");
  auto counts = merge({Parsed(s0, "a.json"), std::move(other_count)});
  ASSERT_FALSE(counts.ok());
  EXPECT_NE(counts.status().message().find("different shard counts"),
            std::string::npos);
  EXPECT_FALSE(merge({}).ok());
}

TEST(MergeTest, BadReportsNameTheFileAndField) {
  for (const auto& [text, want] :
       std::vector<std::pair<std::string, std::string>>{
           {"not json", "x.json: not a JSON object"},
           {"{\"schema_version\": 2}",
            "x.json: schema_version=2, this "
            "attnkit reads 3"},
           {"{\"schema_version\": 3, \"tool\": \"attnkit check\"}",
            "x.json: [json.exception.out_of_range.403] key 'tier' not "
            "found"}}) {
    auto r = ParseCheckJson(text, "x.json");
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.status().message().find(want), std::string::npos)
        << r.status().message();
  }
  // A shard string that is not i/n with i < n.
  std::string json = RunShard(0, 1).json;
  json.replace(json.find("\"0/1\""), 5, "\"3/2\"");
  auto r = ParseCheckJson(json, "y.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("shard=3/2 is not i/n"),
            std::string::npos);
}

}  // namespace
}  // namespace attnkit::harness
