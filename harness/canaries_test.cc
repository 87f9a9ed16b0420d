#include "harness/canaries.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include "decode/report.h"
#include "harness/campaign.h"
#include "harness/runner.h"
#include "reference/reference.h"
#include "runtime/enum_table_testing.h"

namespace attnkit::harness {
namespace {

// Each planted bug is caught by the campaign of its tier (CatchingTier) in
// no more cases than that campaign runs (DefaultCases, seed 1); the line
// printed is the gate's reach: cases and seconds (this canary and the oracle)
// to the first catch. One test per bug: each has the whole test timeout (a
// sanitizer build runs the 65536-key cases 20-50x slower).
class CanaryCatchTest : public ::testing::TestWithParam<Bug> {};

TEST_P(CanaryCatchTest, IsCaughtByItsTier) {
  const Bug bug = GetParam();
  auto canary = MakeCanary(bug);
  Backend* one[] = {canary.get()};
  const Tier tier = CatchingTier(bug);
  const int64_t cases = DefaultCases(tier);
  int64_t caught_at = -1;
  std::string how;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < cases && caught_at < 0; ++i) {
    const Case c = GenerateCase(tier, 1, static_cast<uint64_t>(i));
    auto r = RunCase(c, one);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    if ((*r)[0].failed()) {
      caught_at = i;
      how = std::string(OutcomeName((*r)[0].outcome));
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  std::printf("%-22s %-8s %6lld cases %8.2f s  %s\n",
              std::string(BugName(bug)).c_str(),
              std::string(TierName(tier)).c_str(),
              static_cast<long long>(caught_at + 1), seconds, how.c_str());
  EXPECT_GE(caught_at, 0) << BugName(bug) << " was never caught";
}

INSTANTIATE_TEST_SUITE_P(EveryPlantedBug, CanaryCatchTest,
                         ::testing::ValuesIn(AllBugs()),
                         [](const ::testing::TestParamInfo<Bug>& info) {
                           return std::string(BugName(info.param));
                         });

// The correct twin of the canaries -- a different algorithm (tiled online
// softmax, different summation order) -- and the reference run a second time
// must pass everything: the tester does not cry wolf.
TEST(CanaryTest, CorrectImplementationsPass) {
  auto flash = MakeCanary(Bug::kNone);
  auto ref = reference::MakeReferenceBackend();
  Backend* both[] = {flash.get(), ref.get()};
  double worst = 0;
  for (uint64_t seed : {1, 2, 3}) {
    for (int64_t i = 0; i < DefaultCases(Tier::kSmoke); ++i) {
      const Case c = GenerateCase(Tier::kSmoke, seed, i);
      auto r = RunCase(c, both);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      for (const CheckResult& x : *r) {
        EXPECT_FALSE(x.failed()) << x.backend << " " << c.ToString() << " "
                                 << OutcomeName(x.outcome) << " " << x.ratio;
      }
      worst = std::max(worst, (*r)[0].ratio);
    }
  }
  std::printf("independent flash implementation: worst error/bound %.3f\n",
              worst);
}

// The report audits the cache after every append, as the check's decode
// loops do: appends that the byte count alone lets through -- the next
// slot written, new_lens ignored, transposed V written row-major, sequence
// 0's position for all -- fail it, in the ragged cache-contract
// configurations when the table's single sequence cannot show them.
TEST(CanaryTest, AppendBugsFailTheDecodeReportsCacheAudit) {
  for (Bug bug : {Bug::kAppendSpill, Bug::kAppendIgnoresLens,
                  Bug::kAppendVRowMajor, Bug::kAppendFirstPosition}) {
    decode::DecodeReportOptions o;
    o.config.q_heads = 4;
    o.config.kv_heads = 2;
    o.config.head_dim = 16;
    o.config.steps = 3;
    o.start_lens = {20};
    o.backends = {{std::string(BugName(bug)),
                   {},
                   [bug]() -> StatusOr<std::unique_ptr<Backend>> {
                     return MakeCanary(bug);
                   }}};
    auto report = decode::RunDecodeReport(o, nullptr);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    ASSERT_FALSE(report->failures.empty()) << BugName(bug);
    bool audited = false;
    for (const std::string& f : report->failures) {
      audited =
          audited || f.find("in_place: KV cache: layer 0") != std::string::npos;
    }
    EXPECT_TRUE(audited) << BugName(bug) << ": " << report->failures.front();
  }
  // The canaries' correct twin passes the same audit (it allocates its row
  // buffers per call, which the allocation gate reports: not a cache fault).
  decode::DecodeReportOptions o;
  o.start_lens = {20};
  o.config.q_heads = 4;
  o.config.kv_heads = 2;
  o.config.head_dim = 16;
  o.config.steps = 3;
  o.backends = {{"canary_none", {}, []() -> StatusOr<std::unique_ptr<Backend>> {
                   return MakeCanary(Bug::kNone);
                 }}};
  auto report = decode::RunDecodeReport(o, nullptr);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  for (const std::string& f : report->failures) {
    EXPECT_EQ(f.find("KV cache"), std::string::npos) << f;
    EXPECT_EQ(f.find("differs"), std::string::npos) << f;
  }
  EXPECT_EQ(report->contract_checked, 3);
}

TEST(CanaryTest, TableRoundTripsAndAllBugsIsEveryBugButNone) {
  attnkit::testing::ExpectRoundTrip(kBugNames, "Bug");
  EXPECT_EQ(AllBugs().size(), kBugNames.size() - 1);
}

}  // namespace
}  // namespace attnkit::harness
