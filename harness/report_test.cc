#include "harness/report.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "harness/canaries.h"
#include "reference/reference.h"

namespace attnkit::harness {
namespace {

CampaignResult FailingCampaign() {
  static auto ref = reference::MakeReferenceBackend();
  static auto canary = MakeCanary(Bug::kWrongScale);
  Backend* both[] = {ref.get(), canary.get()};
  CampaignOptions o;
  o.tier = Tier::kSmoke;
  o.cases = 40;
  o.shrink_per_backend = 1;
  return RunCampaign(o, both);
}

TEST(ReportTest, JsonIsValidAndHasTheSchemaFields) {
  const CampaignResult r = FailingCampaign();
  ASSERT_GT(r.failures, 0);
  const std::string plugins[] = {"/tmp/it's.so"};
  const std::string text =
      CampaignJson(r, {"smoke", 1, "0/1", std::span(plugins), "", {}, {}});
  // parse() is strict RFC 8259 (no NaN, no trailing commas): the report must
  // load in any consumer.
  auto json = nlohmann::json::parse(text, nullptr, false);
  ASSERT_FALSE(json.is_discarded()) << text;
  EXPECT_EQ(json["schema_version"], kJsonSchemaVersion);
  EXPECT_EQ(json["tool"], "attnkit check");
  EXPECT_EQ(json["tier"], "smoke");
  EXPECT_EQ(json["seed"], 1);
  EXPECT_EQ(json["shard"], "0/1");
  EXPECT_EQ(json["summary"]["cases"], 40);
  EXPECT_EQ(json["summary"]["failures"], r.failures);
  EXPECT_TRUE(json["summary"]["fatal"].is_null());
  ASSERT_EQ(json["backends"].size(), 2u);
  EXPECT_EQ(json["backends"][1]["name"], "canary_wrong_scale");
  // One object per failing case, with its reproducer.
  ASSERT_EQ(static_cast<int64_t>(json["failures"].size()), r.failures);
  auto& f = json["failures"][0];
  EXPECT_EQ(f["outcome"], "mismatch");
  EXPECT_EQ(f["max_abs_index"].size(), 4u);
  const std::string repro = f["reproducer"];
  EXPECT_EQ(repro.rfind("./attnkit check --repro 'seed=1,", 0), 0u) << repro;
  EXPECT_NE(repro.find("--plugin '/tmp/it'\\''s.so'"), std::string::npos)
      << repro;
  // Keys in schema order: what a person reading the file sees first.
  EXPECT_LT(text.find("\"schema_version\""), text.find("\"summary\""));
  EXPECT_LT(text.find("\"summary\""), text.find("\"backends\""));
}

// JSON has no NaN or Inf: a non-finite figure (the infinite error/bound ratio
// of a NaN output, a NaN error) is written as null.
TEST(ReportTest, JsonWritesNonFiniteNumbersAsNull) {
  CampaignResult r;
  BackendSummary b;
  b.name = "nan_backend";
  b.worst_ratio = std::numeric_limits<double>::infinity();
  r.backends.push_back(b);
  FailureReport f;
  f.backend = "nan_backend";
  f.result.outcome = Outcome::kNonFinite;
  f.result.error.max_abs = std::nan("");
  f.result.error.mean_abs = std::nan("");
  r.reports.push_back(f);
  r.failures = 1;
  r.fatal = true;
  r.fatal_message = "case \"x\" did not validate";
  const std::string text = CampaignJson(r, {"smoke", 1, "0/1", {}, "", {}, {}});
  auto json = nlohmann::json::parse(text, nullptr, false);
  ASSERT_FALSE(json.is_discarded()) << text;
  EXPECT_TRUE(json["backends"][0]["worst_ratio"].is_null()) << text;
  EXPECT_TRUE(json["failures"][0]["max_abs_err"].is_null()) << text;
  EXPECT_TRUE(json["failures"][0]["mean_abs_err"].is_null()) << text;
  EXPECT_EQ(json["failures"][0]["outcome"], "nonfinite");
  EXPECT_EQ(json["summary"]["fatal"], "case \"x\" did not validate");
}

TEST(ReportTest, FailureTextIsTorchStyleWithAReproducer) {
  const CampaignResult r = FailingCampaign();
  ASSERT_FALSE(r.reports.empty());
  const std::string text = FormatFailure(r.reports[0]);
  for (const char* want :
       {"FAIL [canary_wrong_scale] mismatch: Tensor-likes are not close!",
        "Mismatched elements: ", "Failed bound: max |err| ",
        "Greatest absolute difference: ", " at index (",
        "Greatest relative difference: ", "Mean absolute difference: ",
        "Seed 1, case ", "Shrunk from ",
        "Reproduce: ./attnkit check --repro 'seed=1,index=",
        "--backends canary_wrong_scale"}) {
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  }
  // The reproducer's case string parses back to the shrunk case.
  const size_t a = text.find("--repro '") + 9;
  const std::string repro = text.substr(a, text.find('\'', a) - a);
  auto c = ParseCase(repro);
  ASSERT_TRUE(c.ok()) << repro;
  EXPECT_EQ(c->ToString(), r.reports[0].shrunk.ToString());
}

// A failure of the mean bound alone has no element over the max bound:
// the report says which bound failed, with both numbers.
TEST(ReportTest, AMeanBoundFailureIsNamed) {
  FailureReport f;
  f.backend = "b";
  f.original = f.shrunk = GenerateCase(Tier::kSmoke, 1, 0);
  f.result.backend = "b";
  f.result.outcome = Outcome::kMismatch;
  f.result.error.count = 1;
  f.result.error.max_abs = 2e-6;
  f.result.error.mean_abs = 2e-6;
  f.result.bounds.max_abs = 5.8e-6;
  f.result.bounds.mean_abs = 1.5e-6;
  const std::string text = FormatFailure(f);
  EXPECT_NE(text.find("Failed bound: mean |err| 2e-06 > 1.5e-06 allowed; "
                      "every element is within the max bound (max |err| "
                      "2e-06 <= 5.8e-06)"),
            std::string::npos)
      << text;
}

TEST(ReportTest, SummaryHasOneRowPerBackend) {
  const CampaignResult r = FailingCampaign();
  const std::string s = FormatSummary(r);
  EXPECT_NE(s.find("worst err/bound"), std::string::npos);
  EXPECT_NE(s.find("reference "), std::string::npos);
  EXPECT_NE(s.find("canary_wrong_scale "), std::string::npos);
  EXPECT_NE(s.find("40 cases in "), std::string::npos);
}

TEST(ReportTest, ShellQuoteSurvivesApostrophes) {
  EXPECT_EQ(ShellQuote("a b"), "'a b'");
  EXPECT_EQ(ShellQuote("it's"), "'it'\\''s'");
}

}  // namespace
}  // namespace attnkit::harness
