#include "harness/report.h"

#include <gtest/gtest.h>

#include <cctype>

#include "harness/canaries.h"
#include "reference/reference.h"

namespace attnkit::harness {
namespace {

// A strict JSON validator (RFC 8259 grammar, no extensions): the report
// must load in any consumer.
class JsonChecker {
 public:
  explicit JsonChecker(std::string_view s) : s_(s) {}
  bool Valid() {
    Ws();
    if (!Value()) return false;
    Ws();
    return i_ == s_.size();
  }

 private:
  void Ws() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_])))
      ++i_;
  }
  bool Lit(std::string_view w) {
    if (s_.substr(i_, w.size()) != w) return false;
    i_ += w.size();
    return true;
  }
  bool String() {
    if (!Lit("\"")) return false;
    while (i_ < s_.size() && s_[i_] != '"') {
      if (static_cast<unsigned char>(s_[i_]) < 0x20) return false;
      if (s_[i_] == '\\') ++i_;
      ++i_;
    }
    return Lit("\"");
  }
  bool Number() {
    const size_t start = i_;
    if (i_ < s_.size() && s_[i_] == '-') ++i_;
    while (i_ < s_.size() &&
           (std::isdigit(static_cast<unsigned char>(s_[i_])) || s_[i_] == '.' ||
            s_[i_] == 'e' || s_[i_] == 'E' || s_[i_] == '+' || s_[i_] == '-'))
      ++i_;
    return i_ > start && std::isdigit(static_cast<unsigned char>(s_[i_ - 1]));
  }
  bool Value() {
    Ws();
    if (i_ >= s_.size()) return false;
    const char c = s_[i_];
    if (c == '{') return Container('}', true);
    if (c == '[') return Container(']', false);
    if (c == '"') return String();
    if (c == 't') return Lit("true");
    if (c == 'f') return Lit("false");
    if (c == 'n') return Lit("null");
    return Number();
  }
  bool Container(char close, bool object) {
    ++i_;
    Ws();
    if (i_ < s_.size() && s_[i_] == close) return ++i_, true;
    while (true) {
      Ws();
      if (object) {
        if (!String()) return false;
        Ws();
        if (!Lit(":")) return false;
      }
      if (!Value()) return false;
      Ws();
      if (i_ < s_.size() && s_[i_] == close) return ++i_, true;
      if (!Lit(",")) return false;
    }
  }
  std::string_view s_;
  size_t i_ = 0;
};

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
  const std::string json =
      CampaignJson(r, {"smoke", 1, "0/1", std::span(plugins)});
  EXPECT_TRUE(JsonChecker(json).Valid()) << json;
  EXPECT_NE(json.find("\"schema_version\": 1"), std::string::npos);
  EXPECT_NE(json.find("\"summary\": {\"cases\": 40, \"failures\": " +
                      std::to_string(r.failures)),
            std::string::npos);
  EXPECT_NE(json.find("\"reproducer\": \"./attnkit check --repro 'seed=1,"),
            std::string::npos);
  EXPECT_NE(json.find("--plugin '/tmp/it'\\\\''s.so'"), std::string::npos)
      << json;
  // One object per failing case.
  size_t n = 0;
  for (size_t p = json.find("\"outcome\""); p != std::string::npos;
       p = json.find("\"outcome\"", p + 1))
    ++n;
  EXPECT_EQ(static_cast<int64_t>(n), r.failures);
}

TEST(ReportTest, FailureTextIsTorchStyleWithAReproducer) {
  const CampaignResult r = FailingCampaign();
  ASSERT_FALSE(r.reports.empty());
  const std::string text = FormatFailure(r.reports[0]);
  for (const char* want :
       {"FAIL [canary_wrong_scale] mismatch: Tensor-likes are not close!",
        "Mismatched elements: ", "Greatest absolute difference: ",
        " at index (", "Greatest relative difference: ",
        "Mean absolute difference: ", "Seed 1, case ", "Shrunk from ",
        "Reproduce: ./attnkit check --repro 'seed=1,index=",
        "--backends canary_wrong_scale"}) {
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  }
  // The reproducer's case string parses back to the shrunk case.
  const size_t a = text.find("--repro '") + 9;
  const std::string repro = text.substr(a, text.find('\'', a) - a);
  auto c = ParseTestCase(repro);
  ASSERT_TRUE(c.ok()) << repro;
  EXPECT_EQ(c->ToString(), r.reports[0].shrunk.ToString());
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
